"""Kempka, Kotłowski, Warmuth 2019, "Adaptive Scale-Invariant Online Algorithms for
Learning Linear Models", §4.1, the illustrative experiment (Figure 1).

21 features on scales 2^-10..2^10, 5,000 training and 100,000 test examples
per random training set (``learners.datasets``), logistic loss, one online
pass; the average test cross-entropy every 50 iterations, averaged over the
training sets. ScInOL1/2 have nothing to tune; SGD, AdaGrad, Adam and NAG
run at every learning rate of the paper's grid, and every one is shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from learners import make_learner
from learners.datasets import toy_comparator, toy_dataset

from pipelines.bench.metrics import binary_score_losses

SEED_GRID = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
FREE = ("scinol1", "scinol2")
TUNED = ("sgd", "adagrad", "adam", "nag")
LABELS = {"scinol1": "ScInOL1", "scinol2": "ScInOL2", "sgd": "SGD", "adagrad": "AdaGrad", "adam": "Adam",
          "nag": "NAG"}
# Their test prediction is the plain dot product w·x: the weights do not
# depend on the row being predicted (ScInOL and NAG use max(M, |x|) of the
# row), so all checkpoints are scored at once by one matrix product.
# run_toy_task checks that claim against decision_function on every run.
DOT_PRODUCT_AT_TEST = ("sgd", "adagrad", "adam")


@lru_cache(maxsize=1)  # tasks come run by run: one 100,000-row test set per run, made once
def _toy_data(n_train: int, n_test: int, run: int):
    return toy_dataset(n_train, n_test, run)


@dataclass(frozen=True)
class ToyTask:
    algo: str
    lr: float | None
    run: int
    n_train: int
    n_test: int
    every: int


def run_toy_task(task: ToyTask) -> tuple[np.ndarray, float]:
    """(test loss at every checkpoint, progressive loss) for one training set."""
    X, y, X_test, y_test = _toy_data(task.n_train, task.n_test, task.run)
    model = make_learner(task.algo, "logistic", **({} if task.lr is None else {"lr": task.lr}))
    labels_test = (y_test > 0).astype(np.int64)
    curve, weights, total = [], [], 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, task.n_train, task.every):
            stop = min(start + task.every, task.n_train)
            _, losses = model.learn(X[start:stop], y[start:stop], return_losses=True)
            total += losses.sum()
            if task.algo in DOT_PRODUCT_AT_TEST:
                weights.append(model.weights()[:, 0].copy())
            else:
                curve.append(binary_score_losses(model.decision_function(X_test), labels_test).mean())
        if task.algo in DOT_PRODUCT_AT_TEST:
            W = np.array(weights)  # (checkpoints, 1 + 21): bias first
            scores = X_test @ W[:, 1:].T + W[:, 0]
            curve = binary_score_losses(scores, labels_test[:, None]).mean(axis=0)
            exact = model.decision_function(X_test[:1000])
            if not np.allclose(scores[:1000, -1], exact, rtol=1e-9, atol=1e-9, equal_nan=True):
                raise AssertionError(f"{task.algo}: test scores are not w·x; drop it from DOT_PRODUCT_AT_TEST")
    return np.asarray(curve, dtype=np.float64), total / task.n_train


@dataclass
class ToyResult:
    iterations: np.ndarray                 # the checkpoints: 50, 100, ..., n_train
    curves: dict                           # (algo, lr) → (runs, checkpoints) test losses
    progressive: dict                      # (algo, lr) → (runs,) progressive losses
    optimal: float                         # test loss of the comparator u, mean over runs
    zero: float                            # test loss of w = 0: ln 2
    runs: int
    n_train: int
    n_test: int
    grid: tuple


def run_toy(runner, runs=10, grid=SEED_GRID, n_train=5000, n_test=100_000, every=50) -> ToyResult:
    configs = [(a, None) for a in FREE] + [(a, lr) for a in TUNED for lr in grid]
    tasks = [ToyTask(a, lr, r, n_train, n_test, every) for r in range(runs) for a, lr in configs]
    done = dict(zip(tasks, runner.map(run_toy_task, tasks)))
    curves = {c: np.array([done[ToyTask(*c, r, n_train, n_test, every)][0] for r in range(runs)]) for c in configs}
    progressive = {c: np.array([done[ToyTask(*c, r, n_train, n_test, every)][1] for r in range(runs)])
                   for c in configs}
    optimal = []
    for r in range(runs):
        _, _, X_test, y_test = _toy_data(n_train, n_test, r)
        optimal.append(binary_score_losses(X_test @ toy_comparator(r), (y_test > 0).astype(np.int64)).mean())
    iterations = np.minimum(np.arange(1, -(-n_train // every) + 1) * every, n_train)
    return ToyResult(iterations, curves, progressive, float(np.mean(optimal)), float(np.log(2)), runs, n_train,
                     n_test, tuple(grid))
