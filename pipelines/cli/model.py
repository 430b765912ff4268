"""``scinol model inspect|export``: look at a saved model or checkpoint."""

from __future__ import annotations

import json
import sys

import numpy as np

from .errors import UsageError


def _names(model: OnlineLearner, n: int) -> list[str]:
    offset = int(model.bias)
    return (["bias"] if model.bias else []) + [str(i - offset) for i in range(offset, n)]


def load_model(path: str) -> OnlineLearner:
    """A model file or checkpoint, or a sharded-mode checkpoint cut directory
    (its shard parts merged into one model); local, or a URL that Beam's
    FileSystems serve (as ``--checkpoint-dir`` may be)."""
    import os

    from learners import OnlineLearner
    from pipelines.state import store
    from pipelines.state.cuts import load_cut

    if not store.is_remote(path):
        return load_cut(path).merged_learner() if os.path.isdir(path) else OnlineLearner.load(path)
    try:
        store.check_location(path)
    except store.StoreLocationError as exc:
        raise UsageError(f"model: {exc}") from None
    if store.listdir(path):  # a cut folder: a file has nothing under it
        return load_cut(path).merged_learner()
    return OnlineLearner.load(store.read_bytes(path))


def inspect(path: str, top: int = 10, out=None) -> None:
    out = out or sys.stdout
    model = load_model(path)
    header = {k: v for k, v in model.loaded_header.items() if k not in ("fill",)}
    print(json.dumps(header, indent=1, sort_keys=True, default=str), file=out)
    w = model.weights()
    names = _names(model, w.shape[0])
    print(f"\n{model.algorithm.name}, {model.n_examples:,} examples learned, {w.shape[0]:,} coordinates "
          f"({int((w != 0).any(axis=1).sum()):,} non-zero), {w.shape[1]} output(s)", file=out)
    order = np.argsort(-np.abs(w).max(axis=1))[:top]
    print(f"top {len(order)} weights by magnitude (feature: weight per output; bias is the constant feature):",
          file=out)
    for j in order:
        print(f"  {names[j]:>10}: " + " ".join(f"{v:+.6g}" for v in w[j]), file=out)


def export(path: str, fmt: str, output: str | None) -> str:
    """Write the weights as a table: feature, output, weight."""
    model = load_model(path)
    w = model.weights()
    names = _names(model, w.shape[0])
    if output is None:  # beside a local model; in the current folder for a remote one
        from pipelines.state.store import basename, is_remote

        output = f"{basename(path) if is_remote(path) else path.rstrip('/')}.weights.{fmt}"
    rows_feature = np.repeat(names, w.shape[1])
    rows_output = np.tile(np.arange(w.shape[1]), w.shape[0])
    weights = w.reshape(-1)
    if fmt == "json":
        with open(output, "w") as f:
            json.dump({"learner": model.algorithm.name, "loss": model.loss, "bias": model.bias,
                       "features": names, "weights": w.tolist()}, f)
    elif fmt == "csv":
        with open(output, "w") as f:
            f.write("feature,output,weight\n")
            for name, k, v in zip(rows_feature.tolist(), rows_output.tolist(), weights.tolist()):
                f.write(f"{name},{k},{v!r}\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({"feature": rows_feature, "output": rows_output, "weight": weights})
        pq.write_table(table.replace_schema_metadata({"learner": model.algorithm.name, "loss": model.loss}), output)
    return output


def add_parser(sub) -> None:
    p = sub.add_parser("model", help="inspect or export a saved model or checkpoint")
    msub = p.add_subparsers(dest="model_command", required=True, parser_class=type(p))
    i = msub.add_parser("inspect", help="print the header and the largest weights")
    i.add_argument("path", metavar="PATH")
    i.add_argument("--top", type=int, default=10, help="how many weights (default 10)")
    e = msub.add_parser("export", help="write the weights as JSON, CSV or Parquet")
    e.add_argument("path", metavar="PATH")
    e.add_argument("--format", choices=["json", "csv", "parquet"], default="json")
    e.add_argument("-o", "--output", default=None, help="output file (default: PATH.weights.FORMAT)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.model_command == "inspect":
        inspect(args.path, args.top)
    else:
        print(f"wrote {export(args.path, args.format, args.output)}", file=sys.stderr)
    return 0
