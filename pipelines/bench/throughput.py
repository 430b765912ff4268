"""``scinol bench throughput``: examples per second beside the alternatives,
as ratios.

1. Kernels: ScInOL's compiled learner on in-memory rows vs VW's own driver
   reading the same rows as a VW text file, dense and sparse
   (:mod:`.kernel_speed`).
2. Command line, end to end: ``scinol learn FILE.csv`` vs VW's command-line
   driver on the same rows in VW format, both as fresh processes, so both
   pay interpreter start-up, parsing and learning; the start-up share is
   measured on a 10-row file and shown apart.
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

from pipelines.bench import report
from pipelines.bench.kernel_speed import SPARSE_BITS, VW_NOTE, measure, vw_command, write_vw
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


def learn_vs_vw(rows: int, repeats: int, with_vw: bool) -> list[dict]:
    """`scinol learn` on a CSV of the toy rows vs VW's driver on the same rows."""
    from learners.datasets import toy_examples

    tmp = tempfile.mkdtemp(prefix="bench_learn_")
    out = []
    try:
        for n, tag in ((rows, "full"), (10, "startup")):
            csv = os.path.join(tmp, f"{tag}.csv")
            scinol = scinol_command()
            subprocess.run(scinol + ["generate", "toy", "-o", csv, "--n", str(n)], check=True, capture_output=True)
            runs = {"scinol learn (CSV)": scinol + ["learn", csv, "--label", "y"]}
            if with_vw:
                vw_file = os.path.join(tmp, f"{tag}.vw")
                write_vw(vw_file, *toy_examples(n, 0))  # the rows `scinol generate toy --seed 0` wrote
                prefix, _ = vw_command()
                runs["VW driver (VW text)"] = prefix + ["-d", vw_file, "--loss_function", "logistic", "--no_stdin"]
            for label, cmd in runs.items():
                timings = [_timed(cmd) for _ in range(repeats)]
                out.append({"what": label, "rows": n, "tag": tag, "seconds": min(t for t, _ in timings),
                            "avg_loss": timings[0][1]})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


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


def learn_section(rows: list[dict], with_vw: bool, repeats: int) -> list[str]:
    full = {r["what"]: r for r in rows if r["tag"] == "full"}
    start = {r["what"]: r for r in rows if r["tag"] == "startup"}
    table_rows = []
    for what, r in full.items():
        s0 = start[what]["seconds"]
        table_rows.append([what, f"{r['rows']:,}", f"{r['seconds']:.2f}", f"{s0:.2f}",
                           f"{r['rows'] / r['seconds']:,.0f}", f"{r['rows'] / max(r['seconds'] - s0, 1e-9):,.0f}",
                           f"{r['avg_loss']:.4f}"])
    how = vw_command()[1] if with_vw else ""
    lines = ["### `scinol learn` vs VW's command-line driver, end to end", "",
             f"The toy rows (`scinol generate toy`), as CSV for `scinol learn FILE --label y` and as VW text for "
             f"VW's driver (`{how} -d FILE --loss_function logistic`: the vowpalwabbit wheel ships no `vw` binary, "
             f"its `python -m vowpalwabbit` hands the arguments to the same C++ driver). Both are new processes; "
             f"best of {repeats}. Start-up = the same command on a 10-row file.", "",
             report.table(["command", "rows", "seconds", "of which start-up", "examples/s", "examples/s after start-up",
                           "progressive loss"], table_rows), ""]
    if with_vw and "VW driver (VW text)" in full:
        ours, vw = full["scinol learn (CSV)"], full["VW driver (VW text)"]
        s_ours, s_vw = start["scinol learn (CSV)"]["seconds"], start["VW driver (VW text)"]["seconds"]
        lines += [f"- ratio scinol/VW, examples/s end to end: **{vw['seconds'] / ours['seconds']:.2f}x**; "
                  f"after start-up: **{(vw['seconds'] - s_vw) / max(ours['seconds'] - s_ours, 1e-9):.2f}x**", ""]
    return lines


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
    say(f"scinol learn vs VW's driver: {args.learn_rows:,} rows")
    learn_rows = learn_vs_vw(args.learn_rows, args.repeats, with_vw)
    pipe_rows = [] if args.no_pipeline else pipeline_vs_plain(args.pipeline_events, args.pipeline_sparse_events)
    seconds = time.perf_counter() - started
    import platform

    body = ["## Throughput", "",
            f"_Reproduce: `{command}` — {time.strftime('%Y-%m-%d')}, {platform.system()} {platform.machine()}, "
            f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}; wall time {seconds:.0f} s; "
            f"{', '.join(tool_versions(with_vw, True)[:2])}._", ""]
    body += [f"- {n}" for n in notes] + ([""] if notes else [])
    body += kernel_section(got, args.repeats, with_vw) + learn_section(learn_rows, with_vw, args.repeats)
    body += pipeline_section(pipe_rows) if pipe_rows else ["_Pipeline figures skipped (--no-pipeline)._", ""]
    text = "\n".join(body)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "benchmarks.md")
    report.update_section(path, "throughput", text)
    say(f"done in {seconds:.0f} s; wrote {path}")
    return 0
