"""``scinol learn`` and ``scinol generate``: VW-like learning from files."""

from __future__ import annotations

import sys

import numpy as np

from learners import OnlineLearner, make_learner
from learners.losses import BINARY_LOSSES, LabelError

from pipelines.cli.main import UsageError
from pipelines.records.datafiles import DataError, open_reader

_HEADER = (
    "average  since         example        example  current  current  current\n"
    "loss     last          counter         weight    label  predict features"
)


class ProgressTable:
    """VW's progress table: a line at every power of two examples."""

    def __init__(self, out=sys.stderr, enabled: bool = True):
        self.out, self.enabled = out, enabled
        self.count = 0
        self.total = 0.0
        self.since_count = 0
        self.since_total = 0.0
        self.next_report = 1
        if enabled:
            print(_HEADER, file=out)

    def add(self, losses: np.ndarray, labels: np.ndarray, scores: np.ndarray, n_features: np.ndarray) -> None:
        cum = np.cumsum(losses)
        base_total, base_count = self.total, self.count
        while self.enabled and self.next_report <= base_count + losses.shape[0]:
            i = self.next_report - base_count - 1
            total = base_total + cum[i]
            since = total - self.since_total
            n_since = self.next_report - self.since_count
            print(f"{total / self.next_report:<8.6f} {since / n_since:<8.6f} {self.next_report:>12d} "
                  f"{float(self.next_report):>14.1f} {labels[i]:>8.4f} {scores[i]:>8.4f} {n_features[i]:>8d}",
                  file=self.out)
            self.since_total, self.since_count = total, self.next_report
            self.next_report *= 2
        self.total = base_total + (cum[-1] if cum.size else 0.0)
        self.count = base_count + losses.shape[0]


def _build_learner(args, reader) -> OnlineLearner:
    if args.load:
        model = OnlineLearner.load(args.load)
        for option, value in (("--learner", args.learner), ("--loss", args.loss)):
            have = model.algorithm.name if option == "--learner" else model.loss
            if value is not None and value != have:
                raise UsageError(f"{option} {value} conflicts with the loaded model ({have})")
        if args.no_bias and model.bias:
            raise UsageError("--no-bias conflicts with the loaded model, which has a bias")
        return model
    loss = args.loss or "logistic"
    params = parse_params(args.param)
    n_classes = args.n_classes
    if loss == "softmax" and n_classes is None:
        n_classes = _count_classes(reader)
    try:
        return make_learner(args.learner or "scinol2", loss, n_classes=n_classes, bias=not args.no_bias,
                            loss_param=args.loss_param, **params)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_params(items: list[str]) -> dict[str, float]:
    """``["lr=0.1", "beta1=0.9"]`` → ``{"lr": 0.1, "beta1": 0.9}``."""
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--param {item!r}: expected NAME=VALUE")
        try:
            params[name.strip()] = float(value)
        except ValueError:
            raise UsageError(f"--param {item!r}: {value!r} is not a number") from None
    return params


def run_learners(args) -> int:
    from learners.registry import describe_learners

    rows = describe_learners()
    print(f"{'learner':<12} {'free':<5} {'inv':<5} {'shard':<6} {'parameters':<46} description")
    for r in rows:
        params = ", ".join(f"{k}={v:g}" for k, v in r["params"].items()) or "-"
        flags = ["yes" if r[f] else "no" for f in ("parameter_free", "scale_invariant", "shardable")]
        print(f"{r['name']:<12} {flags[0]:<5} {flags[1]:<5} {flags[2]:<6} {params:<46} {r['summary']}")
    print("\nfree: no learning rate to tune; inv: predictions invariant to rescaling each feature; "
          "shard: coordinate-separable (runs over feature shards)")
    return 0


def _count_classes(reader) -> int:
    """Softmax without --n-classes: largest integer label + 1, from a pre-scan."""
    top = -1.0
    for batch in reader.batches():
        if batch.y.size:
            top = max(top, float(batch.y.max()))
    if top < 1:
        raise UsageError(f"{reader.path}: softmax needs labels 0..K-1 with K >= 2; pass --n-classes")
    return int(top) + 1


def _label_column(reader) -> str:
    name = reader.label_name  # CSV only
    return "" if name is None else f" (label column {name!r})"


def run_learn(args) -> int:
    if args.passes < 1:
        raise UsageError(f"--passes must be at least 1, not {args.passes}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, not {args.batch_size}")
    reader = open_reader(args.data, args.format, label=args.label, header=args.header, delimiter=args.delimiter)
    model = _build_learner(args, reader)
    log = sys.stderr
    if not args.quiet:
        print(f"learner = {model.algorithm.name} {model.algorithm.params}, loss = {model.loss}, "
              f"bias = {model.bias}, data = {args.data}", file=log)
    table = ProgressTable(log, enabled=not args.quiet)
    pred_out = open(args.predictions, "w") if args.predictions else None
    total_features = 0
    try:
        for _ in range(args.passes):
            for batch in reader.batches(args.batch_size):
                try:
                    scores, losses = model.learn((batch.indptr, batch.indices, batch.data), batch.y, return_losses=True)
                except LabelError as exc:
                    line = int(batch.lines[exc.position])
                    raise DataError(args.data, line, 0, f"label {exc.detail}{_label_column(reader)}") from None
                n_features = np.diff(batch.indptr) + model.bias
                total_features += int(n_features.sum())
                first = scores if scores.ndim == 1 else scores[:, 0]
                table.add(losses, batch.y, first, n_features)
                if pred_out is not None:
                    np.savetxt(pred_out, scores.reshape(scores.shape[0], -1), fmt="%.17g")
    finally:
        if pred_out is not None:
            pred_out.close()
    if args.save:
        model.save(args.save)
    if not args.quiet:
        avg = table.total / table.count if table.count else float("nan")
        print(f"\nfinished run\nnumber of examples = {table.count}\nweighted example sum = {float(table.count)}\n"
              f"average loss = {avg:.6f}\ntotal feature number = {total_features}", file=log)
        if args.save:
            print(f"model saved to {args.save}", file=log)
    return 0


def run_generate(args) -> int:
    from learners.datasets import toy_examples

    if args.n < 1:
        raise UsageError(f"--n must be at least 1, not {args.n}")
    X, y = toy_examples(args.n, args.seed)
    with open(args.output, "w") as out:
        if args.format == "csv":
            out.write(",".join([f"x{i}" for i in range(1, X.shape[1] + 1)] + ["y"]) + "\n")
            np.savetxt(out, np.column_stack([X, y]), delimiter=",", fmt="%.17g")
        else:
            for row, label in zip(X, y):
                feats = " ".join(f"{j + 1}:{v:.17g}" for j, v in enumerate(row) if v != 0.0)
                out.write(f"{label:g} {feats}\n")
    print(f"wrote {args.n} examples to {args.output}", file=sys.stderr)
    return 0


__all__ = ["run_learn", "run_generate", "BINARY_LOSSES"]
