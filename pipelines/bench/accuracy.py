"""``scinol bench accuracy``: the paper's experiments, side by side with VW and River.

1. The toy (Kempka et al. 2019 §4.1, Figure 1): :mod:`.toy`.
2. Every bundled real data set, several passes (Kempka et al. 2019 §4.2, Figure 2):
   :mod:`.multi_epoch` over the contenders of :mod:`.contenders`.
3. Opt-in, ``--paper-data DIR``: the paper's own data sets (:mod:`.paper_data`).

``--one-pass`` runs instead one untuned pass over the same data sets
(:mod:`.one_pass`), the evidence for a learner that needs no tuning.

Writes PNGs and the ``toy``, ``datasets`` and ``paper-data`` sections of
OUT/benchmarks.md, and prints the tables.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from pipelines.bench import report
from pipelines.bench.contenders import LR_GRID, families
from pipelines.bench.datasets import available
from pipelines.bench.executor import TaskRunner
from pipelines.bench.multi_epoch import evaluate_families, load_dataset
from pipelines.bench.optional import have, missing_message
from pipelines.bench.toy import SEED_GRID, run_toy


@dataclass
class Settings:
    runs: int = 10
    toy_runs: int = 10
    tune_runs: int = 3
    epochs: int | None = None       # None: each data set's default
    lr_grid: tuple = LR_GRID
    toy_grid: tuple = SEED_GRID
    toy_train: int = 5000
    toy_test: int = 100_000
    datasets: tuple | None = None   # None: every bundled set


QUICK = Settings(runs=2, toy_runs=2, tune_runs=2, epochs=2, lr_grid=(0.01, 1.0), toy_grid=(0.01, 1.0),
                 toy_train=1000, toy_test=10_000, datasets=("breast-cancer", "wine"))


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "?"


def provenance(command: str, seconds: float, tools: list[str], quick: bool) -> str:
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    lines = [f"_Reproduce: `{command}` — {time.strftime('%Y-%m-%d')}, {machine}; wall time {seconds:.0f} s; "
             f"{', '.join(tools)}._"]
    if quick:
        lines.append("\n**Quick mode (a smoke test): tiny grids, 2 runs, 2 passes. Not a result.**")
    return "\n".join(lines)


def tool_versions(with_vw: bool, with_river: bool) -> list[str]:
    """Versions of the tools that ran; "without VW/River" for those that did not."""
    out = [f"scinol-stream {_version('scinol-stream')}"]
    out.append(f"vowpalwabbit {_version('vowpalwabbit')}" if with_vw else "without VW")
    out.append(f"river {_version('river')}" if with_river else "without River")
    return out


def competitors(no_vw: bool, no_river: bool) -> tuple[bool, bool, list[str]]:
    """(with VW, with River, what to say about those left out)."""
    notes = []
    with_vw = not no_vw and have("vowpalwabbit")
    with_river = not no_river and have("river")
    if not no_vw and not with_vw:
        notes.append(missing_message("vowpalwabbit", "the VW columns"))
    if not no_river and not with_river:
        notes.append(missing_message("river", "the River columns and River's bundled data sets"))
    notes += [f"{tool} left out (--no-{flag})" for tool, flag, off in
              (("Vowpal Wabbit", "vw", no_vw), ("River", "river", no_river)) if off]
    for n in notes:
        say(n)
    return with_vw, with_river, notes


def run_toy_section(runner, s: Settings, out_dir: str, header) -> str:
    say(f"toy (Kempka et al. 2019 §4.1): {s.toy_runs} training sets x (2 + 4 x {len(s.toy_grid)}) configurations")
    t0 = time.perf_counter()
    result = run_toy(runner, runs=s.toy_runs, grid=s.toy_grid, n_train=s.toy_train, n_test=s.toy_test)
    from pipelines.bench.plots import toy_figure

    toy_figure(result, os.path.join(out_dir, "bench_toy.png"))
    rows = report.toy_rows(result)
    body = "\n".join([
        "## The paper's illustrative experiment (Kempka et al. 2019 §4.1, Figure 1)", "",
        header(time.perf_counter() - t0), "",
        f"21 features with scales 2^-10..2^10, labels from a logistic model; {result.n_train:,} training "
        f"examples (one online pass), {result.n_test:,} test examples, {result.runs} random training sets. "
        "Test cross-entropy every 50 iterations, averaged over the sets. Every learning rate of the paper's grid is "
        "shown for SGD (lr/√t), AdaGrad, Adam and NAG; ScInOL1 and ScInOL2 have none.", "",
        "![toy: test cross-entropy vs iteration](bench_toy.png)", "",
        report.toy_summary(result), "",
        report.table(["method", "lr", "final test loss", "progressive loss", "checkpoints above zero model"], rows),
    ])
    print("\ntoy (Kempka et al. 2019 §4.1):\n" + report.toy_summary(result))
    return body


def run_datasets(runner, refs, s: Settings, fams, label: str) -> list:
    per_dataset = []
    for ref in refs:
        data = load_dataset(ref)
        epochs = s.epochs or data.epochs
        say(f"{label}: {data.name} ({len(data.y_train):,} train / {len(data.y_test):,} test, "
            f"{data.n_features} features, K={data.n_classes}), {epochs} passes x {s.runs} runs")
        t0 = time.perf_counter()
        results = evaluate_families(ref, fams, s.runs, s.tune_runs, epochs, runner, log=say)
        per_dataset.append((data, results, epochs, time.perf_counter() - t0))
        print(f"\n{data.name}: {report.standing(results)}")
        print(report.table(report.DATASET_HEADER, report.dataset_rows(results)))
    return per_dataset


def datasets_body(title: str, per_dataset, png_stem: str, out_dir: str, header, s: Settings, notes) -> str:
    from pipelines.bench.plots import datasets_figure

    plots = [(d, r) for d, r, _, _ in per_dataset]
    datasets_figure(plots, os.path.join(out_dir, f"{png_stem}_loss.png"), "test_loss")
    datasets_figure(plots, os.path.join(out_dir, f"{png_stem}_accuracy.png"), "test_acc")
    grid = ", ".join(f"{v:g}" for v in s.lr_grid)
    tools = {f.tool for _, results, _, _ in per_dataset for f in (r.family for r in results)}
    tuned_by = "SGD, AdaGrad, Adam, NAG" + (" and VW `-l`" if "vw" in tools else "")
    river = " River tries SGD, AdaGrad and Adam, each at every one of those rates." if "river" in tools else ""
    tune_runs = min(s.tune_runs, s.runs)
    parts = [
        f"## {title}", "", header, "",
        "Features raw (no normalisation, for every tool). Each run makes several passes over the training set, "
        "each pass in a fresh random order that all tools share; test loss and accuracy after each pass. "
        f"Progressive loss: mean loss of the predictions made during the first pass, each before learning from "
        f"its example. {s.runs} runs; mean ± std over runs.", "",
        f"**Tuning is on the test set, as in the paper (a bias in favour of the tuned methods).** {tuned_by} "
        f"try every learning rate in {{{grid}}}.{river} Each grid value runs on the first {tune_runs} "
        f"run{'s' if tune_runs > 1 else ''}; the one with the lowest mean final test loss is reported over all "
        "runs. ScInOL1/2 and Alg1-K17 (Kotłowski 2017, Alg. 1) have nothing to tune"
        + ("; nor has VW `--coin`. VW default is `--loss_function logistic` (multiclass: `--oaa K "
           "--probabilities`)" if "vw" in tools else "")
        + ("; River default is `LogisticRegression()` (one-vs-rest for K > 2)" if "river" in tools else "")
        + ".", "",
        "Losses: exact cross-entropy from raw scores (ours, VW binary), -ln p from probabilities (River, VW "
        "one-against-all), every per-example loss capped at 34.5 = -ln 1e-15 so that a diverged model scores "
        "the same in every tool.", "",
        "Final test loss (mean over runs) at a glance; ScInOL2's rank among all methods:", "",
        report.overview(per_dataset), "",
        f"![test cross-entropy per pass]({png_stem}_loss.png)", "",
        f"![test accuracy per pass]({png_stem}_accuracy.png)", "",
    ]
    parts += [f"- {n}" for n in notes] + ([""] if notes else [])
    for data, results, epochs, seconds in per_dataset:
        parts += [f"### {data.name}", "",
                  f"{data.source}; {len(data.y_train):,} train / {len(data.y_test):,} test ({data.split}), "
                  f"{data.n_features} features, {data.n_classes} classes; {epochs} passes; {seconds:.0f} s.", "",
                  report.standing(results), "",
                  report.table(report.DATASET_HEADER, report.dataset_rows(results)), ""]
    return "\n".join(parts)


def run_accuracy(out_dir: str, s: Settings, quick: bool, with_toy: bool, paper_dir: str | None,
                 paper_sets, no_vw: bool, no_river: bool, jobs: int, command: str) -> int:
    os.makedirs(out_dir, exist_ok=True)
    md = os.path.join(out_dir, "benchmarks.md")
    with_vw, with_river, notes = competitors(no_vw, no_river)
    fams = families(s.lr_grid, with_vw, with_river)
    tools = tool_versions(with_vw, with_river)
    started = time.perf_counter()
    with TaskRunner(jobs) as runner:
        if with_toy:
            body = run_toy_section(runner, s, out_dir, lambda sec: provenance(command, sec, tools[:1], quick))
            report.update_section(md, "toy", body)
        names, skipped = available(s.datasets)
        for m in skipped:
            say(m)
        if names:
            t0 = time.perf_counter()
            per = run_datasets(runner, [("bundled", n) for n in names], s, fams, "data set")
            header = provenance(command, time.perf_counter() - t0, tools, quick)
            report.update_section(md, "datasets", datasets_body(
                "Real data sets bundled with scikit-learn and River (Kempka et al. 2019 §4.2, Figure 2 style)", per,
                "bench_datasets", out_dir, header, s, notes + skipped))
        if paper_dir:
            refs, missing = paper_refs(paper_dir, paper_sets)
            for m in missing:
                say(m)
            if refs:
                t0 = time.perf_counter()
                per = run_datasets(runner, refs, s, fams, "paper data")
                header = provenance(command, time.perf_counter() - t0, tools, quick)
                report.update_section(md, "paper-data", datasets_body(
                    "The paper's own data sets (opt-in: read in place from the folder given with "
                    "`--paper-data DIR`)", per,
                    "bench_paper", out_dir, header, s, notes + missing))
    say(f"done in {time.perf_counter() - started:.0f} s; wrote {md}")
    return 0


def run_accuracy_one_pass(out_dir: str, s, quick: bool, paper_dir: str | None, paper_sets, no_vw: bool,
                          no_river: bool, jobs: int, command: str) -> int:
    """``--one-pass``: :mod:`.one_pass` over the bundled sets and, with
    ``paper_dir``, the paper's; one section of OUT/benchmarks.md and a PNG."""
    from pipelines.bench import one_pass

    os.makedirs(out_dir, exist_ok=True)
    with_vw, with_river, notes = competitors(no_vw, no_river)
    names, skipped = available(s.datasets)
    refs = [("bundled", n) for n in names]
    if paper_dir:
        found, missing = paper_refs(paper_dir, paper_sets)
        refs, skipped = refs + found, skipped + missing
    for m in skipped:
        say(m)
    started = time.perf_counter()
    with TaskRunner(jobs) as runner:
        per, more = one_pass.run_one_pass(runner, refs, s, with_vw, with_river, say)
    seconds = time.perf_counter() - started
    if not per:
        say("no data set to run")
        return 0
    header = provenance(command, seconds, tool_versions(with_vw, with_river), False)
    if quick:
        header += "\n\n**Quick mode (a smoke test): 2 shuffles, 2 learning rates, 2 data sets. Not a result.**"
    one_pass.write(per, out_dir, header, s, notes + more + skipped)
    say(f"done in {seconds:.0f} s; wrote {os.path.join(out_dir, 'benchmarks.md')}")
    return 0


def paper_refs(root: str, names) -> tuple[list, list[str]]:
    from pipelines.bench.paper_data import LOADERS, NOT_HERE

    refs, missing = [], [f"{n}: not obtainable on these machines (see the data directory's MANIFEST.md), skipped"
                         for n in NOT_HERE]
    for name in (names or LOADERS):
        if name not in LOADERS:
            raise ValueError(f"unknown paper data set {name!r}; choose from {', '.join(LOADERS)}")
        try:
            load_dataset(("paper", root, name))
        except (FileNotFoundError, NotADirectoryError) as exc:
            missing.append(f"{name}: {exc.filename or exc} missing, skipped")
            continue
        refs.append(("paper", root, name))
    return refs, missing


__all__ = ["Settings", "QUICK", "run_accuracy", "run_accuracy_one_pass"]
