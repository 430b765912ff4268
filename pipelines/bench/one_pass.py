"""``scinol bench accuracy --one-pass``: the evidence for a learner that needs
no tuning. One online pass over each data set, no parameter chosen, for this
project's learners (by registry name), the zero model, and the untuned
competitors (VW default, VW ``--coin``, River's LogisticRegression default and
behind its StandardScaler); beside them the best of the tuned methods with its
learning rate chosen on the test set (a bias in its favour, marked as such).

Each data set is run over ``runs`` shuffles of its training set (the orders of
:func:`pipelines.bench.multi_epoch.epoch_order`, the same for every method).
Reported: progressive loss and error (each prediction made before learning
from its example, over the pass) and the final model's test loss and error;
mean ± std over the shuffles. The targets the ratios are checked against:

- progressive loss ≤ the best untuned competitor's × 1.02 on every data set;
- progressive loss ≤ the zero model's (ln K) × 1.01 on every data set;
- multiclass: progressive error ≤ VW's default (``--oaa K``) progressive error.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np

from pipelines.bench import report
from pipelines.bench.contenders import (LR_GRID, ONE_PASS_LEARNERS, UNTUNED_COMPETITORS, ZERO, make_contender,
                                        one_pass_families, param_text)
from pipelines.bench.multi_epoch import FamilyResult, evaluate_families, load_dataset

COMPETITOR_MARGIN = 1.02
ZERO_MARGIN = 1.01
VW_MULTICLASS = "VW default"  # with K > 2 classes VW's default is --oaa K


@dataclass
class OnePassSettings:
    runs: int = 3                   # shuffles per data set
    tune_runs: int = 1              # shuffles each grid value of the test-tuned best runs on before one is chosen
    lr_grid: tuple = LR_GRID        # for the test-tuned best
    datasets: tuple | None = None   # None: every bundled set
    learners: tuple = ONE_PASS_LEARNERS


QUICK_ONE_PASS = OnePassSettings(runs=2, tune_runs=1, lr_grid=(0.01, 1.0), datasets=("breast-cancer", "wine"))


@dataclass
class DataResult:
    data: object
    untuned: list[FamilyResult]
    best_tuned: FamilyResult | None  # the tuned method with the lowest test loss, its rate chosen on test
    seconds: float
    notes: list[str]                 # learners of ours left out on this set, and why

    def get(self, label: str) -> FamilyResult | None:
        return next((r for r in self.untuned if r.family.label == label), None)

    @property
    def ours(self) -> list[FamilyResult]:
        return [r for r in self.untuned if r.family.tool == "scinol-stream"]


def runnable(families, data) -> tuple[list, list[str]]:
    """(the families that can learn this data set, notes on the others): one
    of ours whose loss (logistic, or softmax for K > 2) it lacks is left out."""
    out, notes = [], []
    for f in families:
        try:
            make_contender(f, None, data)
        except ValueError as exc:
            notes.append(f"{f.label} left out: {exc}")
            continue
        out.append(f)
    return out, notes


def evaluate(ref, s: OnePassSettings, untuned, tuned, runner, log) -> DataResult:
    t0 = time.perf_counter()
    data = load_dataset(ref)
    ours, notes = runnable([f for f in untuned if f.tool == "scinol-stream"], data)
    for n in notes:
        log(n)
    untuned = ours + [f for f in untuned if f.tool != "scinol-stream"]
    results = evaluate_families(ref, untuned + tuned, s.runs, s.tune_runs, 1, runner, log=log)
    rest = results[len(untuned):]
    best = min(rest, key=lambda r: r.stat("test_loss")[0]) if rest else None
    return DataResult(data, results[:len(untuned)], best, time.perf_counter() - t0, notes)


@dataclass
class Verdict:
    data: str
    learner: str
    progressive: float
    competitor: str | None     # the best untuned competitor by progressive loss
    vs_competitor: float       # progressive loss / the competitor's (nan: none ran)
    vs_zero: float
    error: float
    vw_error: float            # VW --oaa default's progressive error (nan: binary, or no VW)

    @property
    def failures(self) -> list[str]:
        out = []
        if self.vs_competitor > COMPETITOR_MARGIN:
            out.append(f"loss > {self.competitor} + {COMPETITOR_MARGIN - 1:.0%}")
        if self.vs_zero > ZERO_MARGIN:
            out.append(f"loss > zero model + {ZERO_MARGIN - 1:.0%}")
        if self.error > self.vw_error:
            out.append("error > VW --oaa")
        return out


def verdicts(dr: DataResult) -> list[Verdict]:
    """Each of our learners on one data set against the targets, from the table's own numbers."""
    prog = {r.family.label: r.stat("progressive")[0] for r in dr.untuned}
    err = {r.family.label: r.stat("progressive_err")[0] for r in dr.untuned}
    rivals = [lb for lb in UNTUNED_COMPETITORS if lb in prog]
    best = min(rivals, key=prog.get) if rivals else None
    vw_err = err.get(VW_MULTICLASS, np.nan) if dr.data.n_classes > 2 else np.nan
    return [Verdict(dr.data.name, r.family.label, prog[r.family.label], best,
                    prog[r.family.label] / prog[best] if best else np.nan, prog[r.family.label] / prog[ZERO],
                    err[r.family.label], vw_err) for r in dr.ours]


def _num(x: float, fmt: str) -> str:
    return "n/a" if not np.isfinite(x) else format(x, fmt)


def verdict_rows(per: list[DataResult]) -> list[list[str]]:
    rows = []
    for dr in per:
        zero = dr.get(ZERO).stat("progressive")[0]
        for v in verdicts(dr):
            rival = f"{v.competitor} {v.progressive / v.vs_competitor:.4f}" if v.competitor else "n/a"
            rows.append([v.data, str(dr.data.n_classes), v.learner, f"{v.progressive:.4f}", rival,
                         _num(v.vs_competitor, ".3f"), f"{zero:.4f}", f"{v.vs_zero:.3f}", f"{v.error:.1%}",
                         _num(v.vw_error, ".1%"), "pass" if not v.failures else "FAIL: " + "; ".join(v.failures)])
    return rows


VERDICT_HEADER = ["data set", "K", "learner", "progressive loss", "best untuned competitor (its loss)",
                  f"ratio (≤ {COMPETITOR_MARGIN})", "zero model", f"ratio (≤ {ZERO_MARGIN})",
                  "progressive error", "VW --oaa error", "targets"]


def summary(per: list[DataResult]) -> list[str]:
    by_learner: dict = {}
    for dr in per:
        for v in verdicts(dr):
            by_learner.setdefault(v.learner, []).append(v)
    lines = []
    for learner, vs in by_learner.items():
        failed = [f"{v.data} ({'; '.join(v.failures)})" for v in vs if v.failures]
        lines.append(f"{learner} meets every target on {len(vs) - len(failed)} of {len(vs)} data sets"
                     + (f"; misses on {', '.join(failed)}." if failed else "."))
    return lines


def detail_rows(dr: DataResult) -> list[list[str]]:
    def row(label, r):
        return [label, report.pm(*r.stat("progressive")), report.pm(*r.stat("progressive_err"), digits=3),
                report.pm(*r.stat("test_loss")), _error_pm(r)]

    rows = [row(r.family.label, r) for r in dr.untuned]
    if dr.best_tuned is not None:
        b = dr.best_tuned
        name = b.family.label.replace(" (best lr)", "").replace(" best -l", "").replace(" best optimizer", "")
        rows.append(row(f"† test-tuned best: {name} {param_text(b.family, b.param)}", b))
    return rows


def _error_pm(r: FamilyResult) -> str:
    mean, std = r.stat("test_acc")
    return report.pm(1.0 - mean, std, digits=3)


DETAIL_HEADER = ["method", "progressive loss", "progressive error", "test loss", "test error"]


def _shuffles(n: int) -> str:
    return "shuffle" if n == 1 else f"{n} shuffles"


def body(per: list[DataResult], header: str, s: OnePassSettings, notes: list[str], png: str) -> str:
    grid = ", ".join(f"{v:g}" for v in s.lr_grid)
    parts = [
        "## One pass, untuned: progressive loss and error on every data set", "", header, "",
        f"One online pass over each training set, features raw, {s.runs} shuffles (mean ± std). Progressive: "
        "each prediction made before learning from its example, averaged over the pass; test: the model after the "
        "pass on the held-out split. Nothing is tuned except the row marked †, **the test-tuned best**: the best of "
        "SGD, AdaGrad, Adam, NAG, VW `-l` and River's optimizers over learning rates "
        f"{{{grid}}}, chosen by test loss after the pass on the first {_shuffles(min(s.tune_runs, s.runs))} and "
        "reported over all (a bias in its favour; not a competitor in the targets). "
        "VW default is `--loss_function logistic` (`--oaa K --probabilities` for K > 2 classes, where "
        "VW --coin is `--coin` with `--oaa`); River is `LogisticRegression()`, one-vs-rest for K > 2. "
        "Losses are capped at 34.5 per example, as in the multi-pass sections.", "",
        f"Targets, checked below from the numbers in the table: progressive loss ≤ {COMPETITOR_MARGIN} × the best "
        f"untuned competitor's (VW default, VW --coin, River default, River+StandardScaler) and ≤ {ZERO_MARGIN} × "
        "the zero model's (ln K); for K > 2, progressive error ≤ VW --oaa default's.", "",
        *[f"- {line}" for line in summary(per)], "",
        report.table(VERDICT_HEADER, verdict_rows(per)), "",
        f"![progressive loss ratios]({png})", "",
    ]
    parts += [f"- {n}" for n in notes] + ([""] if notes else [])
    for dr in per:
        d = dr.data
        parts += [f"### {d.name} (one pass)", "",
                  f"{d.source}; {len(d.y_train):,} train / {len(d.y_test):,} test ({d.split}), {d.n_features} "
                  f"features, {d.n_classes} classes; {dr.seconds:.0f} s.", "",
                  report.table(DETAIL_HEADER, detail_rows(dr)), "", *[f"- {n}" for n in dr.notes],
                  *([""] if dr.notes else [])]
    return "\n".join(parts)


def run_one_pass(runner, refs, s: OnePassSettings, with_vw: bool, with_river: bool, say) -> tuple[list, list]:
    """(per-data-set results, notes) for every reference in ``refs``."""
    untuned, tuned, notes = one_pass_families(s.learners, s.lr_grid, with_vw, with_river)
    for n in notes:
        say(n)
    per = []
    for ref in refs:
        data = load_dataset(ref)
        say(f"one pass: {data.name} ({len(data.y_train):,} train / {len(data.y_test):,} test, "
            f"{data.n_features} features, K={data.n_classes}), {s.runs} shuffles")
        per.append(evaluate(ref, s, untuned, tuned, runner, say))
        print(f"\n{data.name} (one pass):\n" + report.table(DETAIL_HEADER, detail_rows(per[-1])))
    if per:
        print("\n" + report.table(VERDICT_HEADER, verdict_rows(per)) + "\n" + "\n".join(summary(per)))
    return per, notes


def write(per, out_dir: str, header: str, s: OnePassSettings, notes: list[str]) -> None:
    from pipelines.bench.plots import ratio_figure

    png = "bench_one_pass.png"
    ratio_figure([v for dr in per for v in verdicts(dr)], os.path.join(out_dir, png),
                 COMPETITOR_MARGIN, ZERO_MARGIN)
    report.update_section(os.path.join(out_dir, "benchmarks.md"), "one-pass", body(per, header, s, notes, png))
