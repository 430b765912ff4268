"""What ``scinol-mix`` costs and gains, each figure beside its same-run baselines.

Cost: the compiled batch kernels of scinol2 and scinol-mix on the same rows
(the kernel benchmark's dense toy rows and sparse 2^20-dimensional rows,
logistic loss), best of ``--repeats``, JIT warmed up.

Gain: one pass over the shuffled training set of each data set (the order
of run r is :func:`pipelines.bench.multi_epoch.epoch_order` (r, 0), the same
for every contender), progressive log loss and error, mean over ``--runs``:
ScInOL2, scinol-mix (default: ScInOL2, centred ScInOL2, wide ScInOL2, zero),
with all seven experts, without the wide one, with ScInOL2 and zero only, the zero model
(ln 2, ln K), and with ``--competitors`` the untuned VW and River contenders
of the accuracy benchmark (pipelines/bench/contenders.py).

    python -m pipelines.bench.mixture [--paper-data DIR] [--competitors] [--runs 5]
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from learners import kernels as K
from learners import make_algorithm, make_learner
from learners.datasets import toy_examples
from learners.losses import LOGISTIC
from pipelines.bench.kernel_speed import batches, sparse_examples
from pipelines.bench.metrics import capped, score_losses, score_predictions
from pipelines.bench.multi_epoch import epoch_order, load_dataset

ALL = {"kt": 1.0, "scinol1": 1.0, "kotlowski1": 1.0, "center": 1.0, "wide": 1.0}
OURS = (("ScInOL2", "scinol2", {}), ("scinol-mix", "scinol-mix", {}),
        ("scinol-mix all 7", "scinol-mix", ALL), ("scinol-mix without wide", "scinol-mix", {"wide": 0.0}),
        ("scinol-mix ScInOL2+zero", "scinol-mix", {"center": 0.0, "wide": 0.0}))
MIXES = [(label, params) for label, algo, params in OURS if algo == "scinol-mix"]
OURS += (("scinol-mix average=1", "scinol-mix", {"average": 1.0}),)  # same online run: test loss only differs
COMPETITORS = (("VW default", "vw", "default"), ("VW --coin", "vw", "coin"), ("River default", "river", "default"),
               ("River StandardScaler", "river", "scaled"))


def _kernel_seconds(name, parts, y, n_coords, params=None) -> float:
    algo = make_algorithm(name, **(params or {}))
    state = algo.init_state(n_coords, 1)
    scores, losses = np.empty((len(y), 1)), np.empty(len(y))
    none_i, none_w = np.empty(0, dtype=np.int64), np.empty(0)
    if name == "scinol-mix":
        from learners import mixture as MX

        kernel, prm, glob = MX.learn_rows, algo._prm, np.zeros(len(MX.GLOBALS))
    else:
        kernel, prm = K.LEARN_ROWS[algo.spec.code], np.array(list(algo.params.values()))
        glob = np.zeros(len(algo.spec.globals))
    P, Q = state.arrays["P"], state.arrays["Q"]
    t0 = time.perf_counter()
    for a, b, Xb in parts:
        if isinstance(Xb, tuple):
            kernel(prm, glob, P, Q, *Xb, False, True, y[a:b], none_w, LOGISTIC, 0.0, scores[a:b], losses[a:b])
        else:
            indptr = np.arange(b - a + 1, dtype=np.int64) * Xb.shape[1]
            kernel(prm, glob, P, Q, indptr, none_i, Xb.reshape(-1), True, True, y[a:b], none_w, LOGISTIC, 0.0,
                   scores[a:b], losses[a:b])
    return time.perf_counter() - t0


def cost(rows: int, sparse_rows: int, repeats: int) -> list[tuple]:
    """(data, rows, scinol2 seconds, {mixture label: seconds}); the runs
    interleave, best of ``repeats`` each, so a busy machine slows all alike."""
    Xd, yd = toy_examples(rows, seed=0)
    Xs, ys = sparse_examples(sparse_rows)
    out = []
    for kind, X, y, n_coords, n in (("dense", Xd, yd, Xd.shape[1] + 1, rows),
                                    ("sparse", Xs, ys, 2**20 + 1, sparse_rows)):
        parts = batches(X, n)
        runs = [("scinol2", "scinol2", None)] + [(label, "scinol-mix", params) for label, params in MIXES]
        warm = min(1000, n)
        for _, name, params in runs:  # compile or load
            _kernel_seconds(name, batches(X, warm)[:1], y[:warm], n_coords, params)
        best = {label: math.inf for label, _, _ in runs}
        for _ in range(repeats):
            for label, name, params in runs:
                best[label] = min(best[label], _kernel_seconds(name, parts, y, n_coords, params))
        out.append((kind, n, best.pop("scinol2"), best))
    return out


def _ours(name, params, data, order):
    binary = data.n_classes == 2
    y = data.y_train[order]
    model = (make_learner(name, "logistic", **params) if binary
             else make_learner(name, "softmax", n_classes=data.n_classes, **params))
    scores = model.learn(data.X_train[order], np.where(y == 1, 1.0, -1.0) if binary else y)
    test = model.decision_function(data.X_test)
    return (float(capped(score_losses(scores, y)).mean()), float(np.mean(score_predictions(scores) != y)),
            float(capped(score_losses(test, data.y_test)).mean()))


def _competitor(tool, method, data, order):
    from pipelines.bench.contenders import Family, make_contender

    contender = make_contender(Family(method, tool, method), None, data)
    losses, right = contender.learn_epoch(data, order)
    return float(losses.mean()), 1.0 - float(right.mean()), contender.evaluate(data)[0]


def gains(refs, runs: int, competitors: bool, log) -> list[tuple]:
    rows = []
    for ref in refs:
        data = load_dataset(ref)
        name = ref[-1]
        log(f"{name}: {len(data.y_train)} rows, {data.n_features} features, {data.n_classes} classes")
        orders = [epoch_order(len(data.y_train), r, 0) for r in range(runs)]
        result = {label: np.mean([_ours(algo, params, data, o) for o in orders], axis=0)
                  for label, algo, params in OURS}
        if competitors:
            for label, tool, method in COMPETITORS:
                result[label] = np.mean([_competitor(tool, method, data, o) for o in orders], axis=0)
        result["zero model"] = (math.log(data.n_classes), math.nan, math.log(data.n_classes))
        rows.append((name, data.n_classes, result))
    return rows


def held_out(refs, runs: int, passes: int) -> list[tuple]:
    """(data set, learner, held-out accuracy, test log loss) after ``passes``
    passes over the training split (orders as the accuracy benchmark's
    multi-pass runs), mean of ``runs`` orders: ScInOL2 and scinol-mix, plain
    and with iterate averaging."""
    from pipelines.bench.contenders import Family
    from pipelines.bench.multi_epoch import Task, run_task

    rows = []
    for ref in refs:
        for label in ("scinol2", "scinol-mix", "scinol-mix:average=1"):
            family = Family(label, "scinol-stream", label, free=True)
            done = [run_task(Task(ref, family, None, r, passes)) for r in range(runs)]
            rows.append((ref[-1], label, float(np.mean([d.test_acc[-1] for d in done])),
                         float(np.mean([d.test_loss[-1] for d in done]))))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipelines.bench.mixture", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="dense rows for the cost (default 1,000,000)")
    p.add_argument("--sparse-rows", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--runs", type=int, default=5, help="orders per data set (default 5)")
    p.add_argument("--datasets", default="breast-cancer,wine,iris,digits,phishing,bananas,image-segments")
    p.add_argument("--paper-data", help="directory of the paper's data sets (madelon, bank, adult, ...)")
    p.add_argument("--paper-sets", default="madelon,bank,adult,shuttle")
    p.add_argument("--competitors", action="store_true", help="also VW and River, untuned")
    p.add_argument("--skip-cost", action="store_true")
    p.add_argument("--passes", type=int, default=0,
                   help="instead of the one-pass gains: held-out accuracy after this many passes")
    args = p.parse_args(argv)
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    t0 = time.perf_counter()
    if not args.skip_cost:
        print("| data | rows | kernel | ns/row | × scinol2 |\n|---|---|---|---|---|")
        for kind, n, s2, mixes in cost(args.rows, args.sparse_rows, args.repeats):
            print(f"| {kind} | {n:,} | scinol2 | {s2 * 1e9 / n:.0f} | 1.00 |")
            for label, sec in mixes.items():
                print(f"| {kind} | {n:,} | {label} | {sec * 1e9 / n:.0f} | {sec / s2:.2f} |")
        print()
    refs = [("bundled", n) for n in args.datasets.split(",") if n]
    if args.paper_data:
        refs += [("paper", args.paper_data, n) for n in args.paper_sets.split(",") if n]
    if args.passes > 0:
        print(f"| data set | learner | held-out accuracy after {args.passes} passes | test log loss |\n|---|---|---|---|")
        for name, label, acc, loss in held_out(refs, args.runs, args.passes):
            print(f"| {name} | {label} | {acc:.3f} | {loss:.4f} |")
        print(f"\nmean of {args.runs} orders; {time.perf_counter() - t0:.0f} s")
        return 0
    rows = gains(refs, args.runs, args.competitors, say)
    labels = list(rows[0][2]) if rows else []
    print("| data set | K | " + " | ".join(labels) + " |\n|---|---|" + "---|" * len(labels))
    for name, k, result in rows:
        cells = [f"{v[0]:.4f}" + ("" if math.isnan(v[1]) else f" / {100 * v[1]:.1f}%")
                 + ("" if math.isnan(v[2]) else f" / {v[2]:.4f}") for v in result.values()]
        print(f"| {name} | {k} | " + " | ".join(cells) + " |")
    print(f"\nprogressive log loss / progressive error / test log loss after the pass (ours), one pass, mean of "
          f"{args.runs} orders; {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
