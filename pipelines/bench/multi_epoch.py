"""The paper's §4.2 protocol (Figure 2): several passes over the shuffled
training set, test cross-entropy and accuracy after each pass, several runs.

Every contender sees the same example order: the order of pass e of run r is
a permutation drawn from (r, e) alone. Tuned methods are tuned on the test
set, as the paper does (a bias in their favour): each grid value runs on the
first ``tune_runs`` runs, the value with the lowest mean final test loss wins
and runs on the remaining runs too; reported figures are over all runs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from pipelines.bench.contenders import Family, make_contender


ORDER_STREAM = 42  # keeps these permutations apart from the other seeded streams (splits, toy data)


def epoch_order(n: int, run: int, epoch: int) -> np.ndarray:
    """The order of pass ``epoch`` of run ``run``: the same for every contender."""
    return np.random.default_rng([run, epoch, ORDER_STREAM]).permutation(n)


@dataclass(frozen=True)
class Task:
    dataset: tuple   # a reference :func:`load_dataset` understands (workers load it themselves)
    family: Family
    param: object
    run: int
    epochs: int


@dataclass
class RunResult:
    progressive: float      # mean loss of the predictions made during the first pass
    progressive_err: float  # and the fraction of them naming the wrong class
    test_loss: np.ndarray   # after each pass
    test_acc: np.ndarray
    seconds: float


_PAPER_SETS: dict = {}


def load_dataset(ref: tuple):
    """("bundled", name) or ("paper", directory, name) → Dataset, loaded once per process."""
    if ref[0] == "bundled":
        from pipelines.bench.datasets import load_bundled

        return load_bundled(ref[1])
    from pipelines.bench.paper_data import LOADERS

    if ref not in _PAPER_SETS:
        _PAPER_SETS[ref] = LOADERS[ref[2]](ref[1])
    return _PAPER_SETS[ref]


def run_task(task: Task) -> RunResult:
    data = load_dataset(task.dataset)
    t0 = time.perf_counter()
    contender = make_contender(task.family, task.param, data)
    losses, accs, progressive, err = np.empty(task.epochs), np.empty(task.epochs), np.nan, np.nan
    for e in range(task.epochs):
        step, right = contender.learn_epoch(data, epoch_order(len(data.y_train), task.run, e))
        if e == 0:
            progressive, err = float(step.mean()), 1.0 - float(right.mean())
        losses[e], accs[e] = contender.evaluate(data)
    return RunResult(progressive, err, losses, accs, time.perf_counter() - t0)


@dataclass
class FamilyResult:
    family: Family
    param: object                   # the chosen grid value (None if untuned)
    runs: list[RunResult]
    grid_losses: dict = field(default_factory=dict)  # grid value → mean final test loss on the tuning runs

    def stat(self, what: str) -> tuple[float, float]:
        values = np.array([getattr(r, what) if what.startswith("progressive") else getattr(r, what)[-1]
                           for r in self.runs])
        return float(values.mean()), float(values.std())

    def curve(self, what: str) -> tuple[np.ndarray, np.ndarray]:
        values = np.array([getattr(r, what) for r in self.runs])
        return values.mean(axis=0), values.std(axis=0)

    @property
    def seconds(self) -> float:
        return float(sum(r.seconds for r in self.runs))


def evaluate_families(ref: tuple, fams: list[Family], runs: int, tune_runs: int, epochs: int,
                      runner, log=None) -> list[FamilyResult]:
    """All families on one data set; tuned ones tuned as the module says."""
    tune_runs = min(tune_runs, runs)
    first = [Task(ref, f, p, r, epochs) for f in fams for p in f.grid
             for r in range(runs if not f.tuned else tune_runs)]
    done = dict(zip(first, runner.map(run_task, first)))
    chosen, grid_losses = {}, {}
    for f in fams:
        scores = {p: float(np.mean([done[Task(ref, f, p, r, epochs)].test_loss[-1] for r in range(tune_runs)]))
                  for p in f.grid} if f.tuned else {}
        grid_losses[f] = scores
        chosen[f] = min(scores, key=scores.get) if f.tuned else None
    rest = [Task(ref, f, chosen[f], r, epochs) for f in fams if f.tuned for r in range(tune_runs, runs)]
    done.update(zip(rest, runner.map(run_task, rest)))
    out = []
    for f in fams:
        results = [done[Task(ref, f, chosen[f], r, epochs)] for r in range(runs)]
        out.append(FamilyResult(f, chosen[f], results, grid_losses[f]))
        if log:
            log(f"  {f.label:<30} {out[-1].seconds:7.1f} s")
    return out
