"""``scinol bench throughput``: examples per second beside the alternatives,
as ratios.

1. Kernels: ScInOL's compiled learner on in-memory rows vs VW's own driver
   reading the same rows as a VW text file, dense and sparse
   (:mod:`.kernel_speed`).
2. Command line, end to end: ``scinol learn`` (libsvm, VW text, CSV) vs
   VW's command-line driver on the same rows and number text, dense and
   sparse, as fresh processes, so both pay interpreter start-up, parsing and
   learning; the start-up share is measured on a 10-row file and shown apart.
3. Pipeline: ``scinol run`` (Beam, bounded, embedded broker) vs a plain
   confluent-kafka loop doing the same decode/learn/produce
   (:mod:`.pipeline_speed`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from learners.jit import KERNELS_DIR_ENV

from pipelines.bench import report
from pipelines.bench.kernel_speed import SPARSE_BITS, VW_NOTE, measure, vw_command
from pipelines.bench.optional import have, missing_message


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def scinol_command() -> list[str]:
    exe = shutil.which("scinol", path=os.path.dirname(sys.executable)) or shutil.which("scinol")
    return [exe] if exe else [sys.executable, "-m", "pipelines.cli.main"]


def _timed(cmd: list[str]) -> tuple[float, float]:
    """(seconds, the 'average loss = ' it reports) of one process."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    found = re.search(r"average loss = ([-+.\deE]+|nan)", done.stderr + done.stdout)
    return seconds, float(found.group(1)) if found else float("nan")


def write_learn_files(folder: str, tag: str, X, y) -> dict[str, str]:
    """The same rows as libsvm, VW text (namespace f, the libsvm indices as
    names) and, when dense, CSV; every number written with %.9g in all of them."""
    if isinstance(X, tuple):
        indptr, indices, data = X
        rows = ((indices[indptr[i]:indptr[i + 1]] + 1, data[indptr[i]:indptr[i + 1]]) for i in range(len(y)))
    else:
        rows = ((np.flatnonzero(row) + 1, row[row != 0]) for row in X)
    paths = {fmt: os.path.join(folder, f"{tag}.{fmt}") for fmt in ("libsvm", "vw")}
    with open(paths["libsvm"], "w") as svm, open(paths["vw"], "w") as vw:
        for label, (cols, vals) in zip(y.tolist(), rows):
            feats = " ".join(f"{c}:{v:.9g}" for c, v in zip(cols.tolist(), vals.tolist()))
            svm.write(f"{label:g} {feats}\n")
            vw.write(f"{label:g} |f {feats}\n")
    if not isinstance(X, tuple):
        paths["csv"] = os.path.join(folder, f"{tag}.csv")
        with open(paths["csv"], "w") as f:
            f.write(",".join(["y"] + [f"x{j}" for j in range(1, X.shape[1] + 1)]) + "\n")
            f.writelines(",".join(f"{v:.9g}" for v in [label, *row]) + "\n" for label, row in zip(y.tolist(), X.tolist()))
    return paths


KERNELS = {"numba JIT": "jit", "compiled ahead": "aot"}
"""How `scinol learn` gets its kernels -> the subfolder of the benchmark's
temporary folder given as its SCINOL_KERNELS_DIR: empty for numba's JIT
(its on-disk cache warm), filled by `scinol compile` for the other."""


def learn_commands(paths: dict[str, str], bits: int, with_vw: bool, kernel_dirs: dict[str, str]) -> dict[str, list[str]]:
    runs = {}
    for how, folder in kernel_dirs.items():
        scinol = ["env", f"{KERNELS_DIR_ENV}={folder}", *scinol_command(), "learn"]
        runs[f"scinol learn (libsvm, {how})"] = scinol + [paths["libsvm"]]
        runs[f"scinol learn (VW text, {how})"] = scinol + [paths["vw"], "-b", str(bits)]
        if "csv" in paths:
            runs[f"scinol learn (CSV, {how})"] = scinol + [paths["csv"], "--label", "y"]
    if with_vw:
        runs["VW driver (VW text)"] = vw_command()[0] + ["-d", paths["vw"], "--loss_function", "logistic",
                                                          "--no_stdin", "-b", str(bits)]
    return runs


def compile_kernels(folder: str) -> float:
    """Seconds `scinol compile --out FOLDER` takes (the kernels for the
    "compiled ahead" runs)."""
    t0 = time.perf_counter()
    done = subprocess.run([*scinol_command(), "compile", "--out", folder], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"scinol compile failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - t0


def learn_vs_vw(rows: int, sparse_rows: int, repeats: int, with_vw: bool) -> tuple[list[dict], float]:
    """`scinol learn` vs VW's driver, whole commands, on the same rows: the
    toy data (21 dense features) and the sparse set (50 of 2^20), with
    numba's JIT kernels and with kernels compiled ahead of time. The
    commands run in turn (A B C ... A B C ...), best of ``repeats`` each, so
    a machine's drift hits all alike; the same commands on 10-row files
    give the start-up share. Also returns the seconds `scinol compile` took."""
    from learners.datasets import toy_examples

    from pipelines.bench.kernel_speed import sparse_examples

    tmp = tempfile.mkdtemp(prefix="bench_learn_")
    kernel_dirs = {how: os.path.join(tmp, sub) for how, sub in KERNELS.items()}
    out = []
    try:
        os.makedirs(kernel_dirs["numba JIT"])
        say("scinol compile: the kernels compiled ahead of time")
        compiled = compile_kernels(kernel_dirs["compiled ahead"])
        for data, n, make, bits in (("dense", rows, lambda k: toy_examples(k, 0), 18),
                                    ("sparse", sparse_rows, sparse_examples, SPARSE_BITS)):
            for tag, k in (("full", n), ("startup", 10)):
                X, y = make(k)
                runs = learn_commands(write_learn_files(tmp, f"{data}-{tag}", X, y), bits, with_vw, kernel_dirs)
                say(f"scinol learn vs VW: {data}, {k:,} rows, {len(runs)} commands, best of {repeats}")
                timings: dict[str, list] = {label: [] for label in runs}
                for _ in range(repeats):
                    for label, cmd in runs.items():
                        timings[label].append(_timed(cmd))
                for label, got in timings.items():
                    out.append({"what": label, "data": data, "rows": k, "tag": tag,
                                "seconds": min(t for t, _ in got), "avg_loss": got[0][1]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out, compiled


def pipeline_vs_plain(events: int, sparse_events_n: int) -> list[dict]:
    from learners.datasets import toy_examples

    from pipelines.kafka.broker import EmbeddedBroker
    from pipelines.records.events import dense_events
    from pipelines.bench.pipeline_speed import sparse_events, throughput

    rows = []
    with EmbeddedBroker() as broker:
        X, y = toy_examples(events, 0)
        for name, gen, n in (("toy (21 dense)", dense_events(X, y, "t-"), events),
                             ("sparse (50 of 2^20)", sparse_events(sparse_events_n), sparse_events_n)):
            say(f"pipeline: {name}, {n:,} events")
            pipe, plain = throughput(broker, name.split()[0], gen, n)
            rows.append({"data": name, "events": n, "pipeline": pipe, "plain": plain})
    return rows


def kernel_section(got: dict, repeats: int, with_vw: bool) -> list[str]:
    rows = [[r["data"], r["path"], f"{r['rows']:,}", f"{r['nnz_per_row']:.0f}", f"{r['examples_per_s']:,.0f}",
             f"{r['ns_per_nnz']:.1f}", f"{r['progressive_logloss']:.4f}"] for r in got["table"]]
    lines = ["### Learner kernel vs VW's driver, same rows", "",
             f"Logistic loss, one pass, best of {repeats}; batches of 65,536 rows; dense = the toy data (21 "
             f"features + bias), sparse = 50 non-zeros of 2^{SPARSE_BITS}. ns/nnz counts the bias.", "",
             report.table(["data", "path", "rows", "nnz/row", "examples/s", "ns/nnz", "progressive loss"], rows), ""]
    if with_vw:
        lines += [f"- ratio ScInOL2 `learn()` / VW, {k}: **{v:.2f}x**" for k, v in got["ratios"].items()]
        lines += ["- " + VW_NOTE.format(how="vowpalwabbit `Workspace(-d FILE)`, the wheel ships no binary",
                                        bits=SPARSE_BITS), ""]
    return lines


def learn_section(rows: list[dict], with_vw: bool, repeats: int, compiled: float) -> list[str]:
    how = vw_command()[1] if with_vw else ""
    lines = ["### `scinol learn` vs VW's command-line driver, end to end", "",
             f"The same rows written with the same number text (%.9g): the toy data (21 dense features) and "
             f"the sparse set (50 non-zeros of 2^{SPARSE_BITS}), as libsvm, as VW text (`label |f index:value "
             f"...`) and, dense, as CSV. VW's driver: `{how} -d FILE --loss_function logistic -b BITS` (the "
             f"vowpalwabbit wheel ships no `vw` binary; `python -m vowpalwabbit` hands the arguments to the same "
             f"C++ driver). Whole commands, new processes, run in turn, best of {repeats}; start-up = the same "
             f"command on a 10-row file. VW parses in a thread of its own; `scinol learn` parses in a thread "
             f"beside the learner. `scinol learn` runs with numba's JIT (its on-disk cache warm: numba's import "
             f"and first cache load are most of its start-up) and with the kernels `scinol compile` built ahead "
             f"of time ({compiled:.0f} s, once), which it calls without importing numba.", ""]
    ratios = []
    for data in ("dense", "sparse"):
        full = {r["what"]: r for r in rows if r["data"] == data and r["tag"] == "full"}
        start = {r["what"]: r for r in rows if r["data"] == data and r["tag"] == "startup"}
        table_rows = []
        for what, r in full.items():
            s0 = start[what]["seconds"]
            after = f"{r['rows'] / (r['seconds'] - s0):,.0f}" if r["seconds"] - s0 > 0.05 else "—"
            table_rows.append([what, f"{r['rows']:,}", f"{r['seconds']:.2f}", f"{s0:.2f}",
                               f"{r['rows'] / r['seconds']:,.0f}", after, f"{r['avg_loss']:.4f}"])
        lines += [f"**{data}**", "", report.table(["command", "rows", "seconds", "of which start-up", "examples/s",
                                                   "examples/s after start-up", "progressive loss"], table_rows), ""]
        vw = full.get("VW driver (VW text)")
        for what, r in full.items():
            if vw is not None and what != vw["what"]:
                ours, theirs = r["seconds"] - start[what]["seconds"], vw["seconds"] - start[vw["what"]]["seconds"]
                after = f"**{theirs / ours:.2f}x** after start-up" if min(ours, theirs) > 0.05 else "start-up dominates"
                ratios.append(f"- {data}, {what} vs VW (VW's seconds / ours): **{vw['seconds'] / r['seconds']:.2f}x** "
                              f"end to end, {after}")
    return lines + ratios + ([""] if ratios else [])


def pipeline_section(rows: list[dict]) -> list[str]:
    table_rows = [[r["data"], f"{r['events']:,}", f"{r['pipeline']:,.0f}", f"{r['plain']:,.0f}",
                   f"**{r['pipeline'] / r['plain']:.2f}x**"] for r in rows]
    return ["### Pipeline vs a plain confluent-kafka loop", "",
            "Events already in a one-partition topic on the embedded broker (tansu, memory storage). Pipeline: "
            "`scinol run --bounded` in-process (Beam FnApiRunner, ScInOL2, Avro in and out), timed from start to "
            "finish including Beam's start-up. Plain loop: consume, decode, learn, encode, produce, no Beam (the "
            "ceiling).", "",
            report.table(["data", "events", "pipeline events/s", "plain loop events/s", "ratio"], table_rows), ""]


def run_throughput(args, command: str) -> int:
    from pipelines.bench.accuracy import tool_versions

    started = time.perf_counter()
    with_vw = not args.no_vw and have("vowpalwabbit")
    notes = [missing_message("vowpalwabbit", "the VW figures")] if not args.no_vw and not with_vw else []
    for n in notes:
        say(n)
    say(f"kernels: {args.rows:,} dense and {args.sparse_rows:,} sparse rows, best of {args.repeats}")
    got = measure(args.rows, args.sparse_rows, args.repeats, with_vw, log=say)
    learn_rows, compiled = learn_vs_vw(args.learn_rows, args.learn_sparse_rows, args.repeats, with_vw)
    pipe_rows = [] if args.no_pipeline else pipeline_vs_plain(args.pipeline_events, args.pipeline_sparse_events)
    seconds = time.perf_counter() - started
    import platform

    body = ["## Throughput", "",
            f"_Reproduce: `{command}` — {time.strftime('%Y-%m-%d')}, {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}; wall time {seconds:.0f} s; "
            f"{', '.join(tool_versions(with_vw, True)[:2])}._", ""]
    body += [f"- {n}" for n in notes] + ([""] if notes else [])
    body += kernel_section(got, args.repeats, with_vw) + learn_section(learn_rows, with_vw, args.repeats, compiled)
    body += pipeline_section(pipe_rows) if pipe_rows else ["_Pipeline figures skipped (--no-pipeline)._", ""]
    text = "\n".join(body)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "benchmarks.md")
    report.update_section(path, "throughput", text)
    say(f"done in {seconds:.0f} s; wrote {path}")
    return 0
