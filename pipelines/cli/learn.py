"""``scinol learn``: VW-like online learning from a data file."""

from __future__ import annotations

import sys

import numpy as np

from learners import OnlineLearner, make_learner
from learners.losses import LabelError

from pipelines.records.datafiles import DataError, open_reader

from .errors import UsageError
from .options import add_learner_options, parse_params

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


def run(args) -> int:
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


def add_parser(sub) -> None:
    p = sub.add_parser("learn", help="learn online from a CSV or libsvm file, VW style",
                       description="One online pass (or --passes N) over DATA; prints the progressive "
                                   "average loss at every power of two examples.")
    p.add_argument("data", metavar="DATA", help="CSV or libsvm/svmlight file (.gz is fine)")
    p.add_argument("--format", choices=["csv", "libsvm"], help="file format (default: from the extension)")
    p.add_argument("--label", default=None, help="CSV label column: header name or 0-based index (default: first column)")
    p.add_argument("--header", choices=["auto", "yes", "no"], default="auto", help="CSV header line (default: auto)")
    p.add_argument("--delimiter", default=None, help="CSV delimiter (default: sniffed from , ; tab)")
    add_learner_options(p)
    p.add_argument("--n-classes", type=int, default=None, help="number of classes for softmax (default: largest label + 1)")
    p.add_argument("--passes", type=int, default=1, help="passes over the data (default 1)")
    p.add_argument("-p", "--predictions", metavar="FILE", help="write ŷ_t (made before learning from example t), one line per example")
    p.add_argument("--save", metavar="FILE", help="save the final model")
    p.add_argument("--load", metavar="FILE", help="start from a saved model (its learner, loss and bias are used)")
    p.add_argument("--batch-size", type=int, default=4096, help="examples per compiled-kernel call (no effect on results)")
    p.add_argument("--quiet", action="store_true", help="no progress table")
    p.set_defaults(func=run)
