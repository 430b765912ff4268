"""``scinol learn``: VW-like online learning from a data file."""

from __future__ import annotations

import sys

import numpy as np

from .errors import UsageError
from .options import add_interaction_options, add_learner_options, interactions_of, parse_params

_HEADER = (
    "average  since         example        example  current  current  current\n"
    "loss     last          counter         weight    label  predict features"
)


class ProgressTable:
    """VW's progress table: a line at every power of two examples. As VW's,
    the averages are weighted: Σ h ℓ / Σ h over the labelled examples, h the
    importance weight; "example weight" is Σ h over all examples so far."""

    def __init__(self, out=sys.stderr, enabled: bool = True):
        self.out, self.enabled = out, enabled
        self.count = 0
        self.weight_sum = 0.0
        self.total = 0.0
        self.labelled = 0.0
        self.since_labelled = 0.0
        self.since_total = 0.0
        self.next_report = 1
        if enabled:
            print(_HEADER, file=out)

    def add(self, losses: np.ndarray, labels: np.ndarray, scores: np.ndarray, n_features: np.ndarray,
            weights: np.ndarray | None = None) -> None:
        """Losses of unlabelled examples are NaN: they count as examples, not in the averages."""
        labelled = ~np.isnan(losses)
        h = np.ones(losses.shape[0]) if weights is None else weights
        cum = np.cumsum(np.where(labelled, h * losses, 0.0))
        cum_labelled = np.cumsum(np.where(labelled, h, 0.0))
        cum_weight = np.cumsum(h)
        base_total, base_count, base_labelled, base_weight = self.total, self.count, self.labelled, self.weight_sum
        while self.enabled and self.next_report <= base_count + losses.shape[0]:
            i = self.next_report - base_count - 1
            total, seen = base_total + cum[i], base_labelled + cum_labelled[i]
            since = total - self.since_total
            n_since = seen - self.since_labelled
            print(f"{total / (seen or 1):<8.6f} {since / (n_since or 1):<8.6f} {self.next_report:>12d} "
                  f"{base_weight + cum_weight[i]:>14.1f} {labels[i]:>8.4f} {scores[i]:>8.4f} {n_features[i]:>8d}",
                  file=self.out)
            self.since_total, self.since_labelled = total, seen
            self.next_report *= 2
        self.total = base_total + (cum[-1] if cum.size else 0.0)
        self.count = base_count + losses.shape[0]
        self.labelled = base_labelled + (float(cum_labelled[-1]) if cum.size else 0.0)
        self.weight_sum = base_weight + (float(cum_weight[-1]) if cum.size else 0.0)


def _build_learner(args, reader) -> OnlineLearner:
    from learners import OnlineLearner, make_learner

    interactions = interactions_of(args)
    if args.load:
        model = OnlineLearner.load(args.load)
        for option, value in (("--learner", args.learner), ("--loss", args.loss)):
            have = model.algorithm.name if option == "--learner" else model.loss
            if value is not None and value != have:
                raise UsageError(f"{option} {value} conflicts with the loaded model ({have})")
        if args.no_bias and model.bias:
            raise UsageError("--no-bias conflicts with the loaded model, which has a bias")
        if interactions and interactions != model.interactions:
            raise UsageError(f"-q/--cubic {' '.join(interactions)} conflict with the loaded model's "
                             f"interactions ({' '.join(model.interactions) or 'none'})")
        if args.hash_bits is not None and args.hash_bits != model.hasher.bits:
            raise UsageError(f"--hash-bits {args.hash_bits} conflicts with the loaded model ({model.hasher.bits})")
        return model
    loss = args.loss or "logistic"
    params = parse_params(args.param)
    n_classes = args.n_classes
    if loss == "softmax" and n_classes is None:
        n_classes = _count_classes(reader)
    try:
        return make_learner(args.learner or "scinol2", loss, n_classes=n_classes, bias=not args.no_bias,
                            loss_param=args.loss_param, interactions=interactions,
                            hash_bits=18 if args.hash_bits is None else args.hash_bits, **params)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


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


def _write_predictions(out, scores, tags) -> None:
    """One line per example: the score(s), then the VW tag if it has one."""
    rows = scores.reshape(scores.shape[0], -1)
    if tags is None:
        np.savetxt(out, rows, fmt="%.17g")
        return
    for row, tag in zip(rows.tolist(), tags):
        text = " ".join(f"{v:.17g}" for v in row)
        out.write(f"{text} {tag}\n" if tag is not None else text + "\n")


def run(args) -> int:
    # Imported here, not at the top: every scinol command builds this parser,
    # and the learners bring numba (about half a second) with them.
    from learners.interactions import NamespacedRows
    from learners.losses import LabelError
    from pipelines.files.datafiles import DataError, open_reader
    from pipelines.files.prefetch import prefetch

    if args.passes < 1:
        raise UsageError(f"--passes must be at least 1, not {args.passes}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, not {args.batch_size}")
    reader = open_reader(args.data, args.format, label=args.label, header=args.header, delimiter=args.delimiter,
                         weight=args.weight_column)
    if interactions_of(args) and not hasattr(reader, "hash_bits"):
        raise UsageError("-q/--cubic cross namespaces: they need a VW text file (--format vw)")
    model = _build_learner(args, reader)
    if hasattr(reader, "hash_bits"):  # VW text: names hashed as the model hashes them
        reader.hash_bits, reader.hash_seed = model.hasher.bits, model.hasher.seed
    log = sys.stderr
    if not args.quiet:
        print(f"learner = {model.algorithm.name} {model.algorithm.params}, loss = {model.loss}, "
              f"bias = {model.bias}, data = {args.data}", file=log)
    table = ProgressTable(log, enabled=not args.quiet)
    pred_out = open(args.predictions, "w") if args.predictions else None
    total_features = 0
    try:
        for _ in range(args.passes):
            for batch in prefetch(reader.batches(args.batch_size)):
                y = batch.y
                rows = ((batch.indptr, batch.indices, batch.data) if batch.namespaces is None
                        else NamespacedRows(batch.indptr, batch.indices, batch.data, batch.namespaces))
                try:
                    scores, losses = model.learn(rows, y, batch.weights, return_losses=True)
                except LabelError as exc:
                    line = int(batch.lines[exc.position])
                    raise DataError(args.data, line, 0, f"label {exc.detail}{_label_column(reader)}") from None
                except ValueError as exc:  # what the model cannot take, e.g. too many coordinates for kotlowski2
                    raise UsageError(f"{args.data}: {exc}") from None
                n_features = np.diff(batch.indptr) + model.bias
                total_features += int(n_features.sum())
                first = scores if scores.ndim == 1 else scores[:, 0]
                table.add(losses, batch.y, first, n_features, batch.weights)
                if pred_out is not None:
                    _write_predictions(pred_out, scores, batch.tags)
    finally:
        if pred_out is not None:
            pred_out.close()
    if args.save:
        model.save(args.save)
    if not args.quiet:
        avg = table.total / table.labelled if table.labelled else float("nan")
        print(f"\nfinished run\nnumber of examples = {table.count}\nweighted example sum = {table.weight_sum}\n"
              f"average loss = {avg:.6f}\ntotal feature number = {total_features}", file=log)
        if args.save:
            print(f"model saved to {args.save}", file=log)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("learn", help="learn online from a CSV, libsvm or VW text file, VW style",
                       description="One online pass (or --passes N) over DATA; prints the progressive "
                                   "average loss at every power of two examples.")
    p.add_argument("data", metavar="DATA", help="CSV, libsvm/svmlight or Vowpal Wabbit text file (.gz is fine)")
    p.add_argument("--format", choices=["csv", "libsvm", "vw"],
                   help="file format (default: from the extension: .csv .tsv, .libsvm .svm, .vw)")
    p.add_argument("--label", default=None, help="CSV label column: header name or 0-based index (default: first column)")
    p.add_argument("--header", choices=["auto", "yes", "no"], default="auto", help="CSV header line (default: auto)")
    p.add_argument("--delimiter", default=None, help="CSV delimiter (default: sniffed from , ; tab)")
    p.add_argument("--weight-column", metavar="NAME", default=None,
                   help="CSV column of importance weights >= 0: header name or 0-based index (libsvm files give "
                        "them as label:weight, VW files as 'label weight'; default: all 1)")
    add_learner_options(p)
    add_interaction_options(p)
    p.add_argument("-b", "--hash-bits", type=int, default=None,
                   help="hash space 2^B of named features, e.g. VW's (default 18)")
    p.add_argument("--n-classes", type=int, default=None, help="number of classes for softmax (default: largest label + 1)")
    p.add_argument("--passes", type=int, default=1, help="passes over the data (default 1)")
    p.add_argument("-p", "--predictions", metavar="FILE", help="write ŷ_t (made before learning from example t), one line per example")
    p.add_argument("--save", metavar="FILE", help="save the final model")
    p.add_argument("--load", metavar="FILE", help="start from a saved model (its learner, loss and bias are used)")
    p.add_argument("--batch-size", type=int, default=4096, help="examples per compiled-kernel call (no effect on results)")
    p.add_argument("--quiet", action="store_true", help="no progress table")
    p.set_defaults(func=run)
