"""The load benchmark's first part (``python -m pipelines.bench.load
--produce``): ``scinol produce FILE`` as a user runs it vs a raw
confluent-kafka loop producing the same encoded bytes to the same broker."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time

from pipelines.bench import report
from pipelines.bench.throughput import say, scinol_command, write_learn_files


def data_files(folder: str, rows: int) -> dict[str, tuple[str, list[str]]]:
    """label -> (path, extra ``scinol produce`` arguments): the toy data as
    CSV and as VW text, the sparse set as libsvm, ``rows`` rows each."""
    from learners.datasets import toy_examples

    from pipelines.bench.kernel_speed import sparse_examples

    dense = write_learn_files(folder, "dense", *toy_examples(rows, 0))
    sparse = write_learn_files(folder, "sparse", *sparse_examples(rows))
    return {"toy CSV (21 dense)": (dense["csv"], ["--label", "y"]),
            "toy VW text (21 named)": (dense["vw"], []),
            "sparse libsvm (50 of 2^20)": (sparse["libsvm"], [])}


def encoded_values(path: str, extra: list[str]) -> list[bytes]:
    """The Avro values ``scinol produce`` writes for ``path`` (made the same
    way, before the clock starts)."""
    from pipelines.files.datafiles import open_reader
    from pipelines.records.events import file_events
    from schemas.codec import Codec

    label = extra[extra.index("--label") + 1] if "--label" in extra else None
    codec = Codec()
    return [codec.encode("scinol.Event", e) for e in file_events(open_reader(path, None, label=label))]


def raw_produce(bootstrap: str, topic: str, values: list[bytes], config: dict | None = None) -> float:
    """Events/s of a bare confluent-kafka loop: produce, poll every 1,000,
    flush; the same producer settings as ``scinol produce`` (idempotence,
    linger.ms 20)."""
    from confluent_kafka import Producer

    from pipelines.kafka.admin import KafkaAdmin, TopicSpec

    KafkaAdmin(bootstrap, config).ensure_topics([TopicSpec(topic, 1)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                         **(config or {})})
    t0 = time.perf_counter()
    for k, value in enumerate(values):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if k % 1000 == 0:
            producer.poll(0)
    left = producer.flush(60)
    seconds = time.perf_counter() - t0
    if left:
        raise RuntimeError(f"raw producer: {left} messages not delivered")
    return len(values) / seconds


def cli_produce(bootstrap: str, topic: str, path: str, extra: list[str]) -> tuple[float, float]:
    """(events/s ``scinol produce`` reports, seconds of the whole process
    including interpreter start-up and imports)."""
    cmd = scinol_command() + ["produce", path, "--bootstrap", bootstrap, "--topic", topic, "--quiet", *extra]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    found = re.search(r"produced ([\d,]+) events to \S+ \(([\d,]+) events/s\)", done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()[-500:]}")
    return float(found.group(2).replace(",", "")), wall


def produce_cases(brokers: dict[str, str], rows: int, repeats: int) -> list[dict]:
    """Per broker and data file: best of ``repeats`` of the raw loop, of
    ``scinol produce`` on the file and of it on the file's first 10 rows
    (its start-up: interpreter, imports, the compiled kernels' loading, the
    first connection), taking turns so a busy machine slows all alike."""
    out = []
    with tempfile.TemporaryDirectory(prefix="bench_load_") as folder:
        for data, (path, extra) in data_files(folder, rows).items():
            values = encoded_values(path, extra)
            head = os.path.join(folder, "head-" + os.path.basename(path))
            with open(path) as src, open(head, "w") as dst:
                dst.writelines(line for _, line in zip(range(11 if path.endswith(".csv") else 10), src))
            for kind, bootstrap in brokers.items():
                say(f"produce: {data}, {rows:,} rows, {kind}, best of {repeats}")
                raw = cli = 0.0
                wall = start = float("inf")
                for k in range(repeats):
                    tag = f"bench.load.{time.time_ns()}"
                    raw = max(raw, raw_produce(bootstrap, tag + ".raw", values))
                    got, seconds = cli_produce(bootstrap, tag + ".cli", path, extra)
                    cli, wall = max(cli, got), min(wall, seconds)
                    start = min(start, cli_produce(bootstrap, tag + ".head", head, extra)[1])
                # start-up varies by a second on a shared machine: no rate from a difference smaller than that
                after = rows / (wall - start) if wall - start > max(1.0, wall / 4) else float("nan")
                out.append({"broker": kind, "data": data, "rows": rows, "raw": raw, "cli": cli, "wall": wall,
                            "startup": start, "after": after})
    return out


def produce_table(rows: list[dict]) -> str:
    return report.table(
        ["broker", "data", "events", "raw loop events/s", "scinol produce events/s (printed)",
         "ratio (target ≥ 0.70)", "whole process s", "of which start-up s", "events/s after start-up",
         "ratio after start-up"],
        [[r["broker"], r["data"], f"{r['rows']:,}", f"{r['raw']:,.0f}", f"{r['cli']:,.0f}",
          f"**{r['cli'] / r['raw']:.2f}x**", f"{r['wall']:.2f}", f"{r['startup']:.2f}",
          *((f"{r['after']:,.0f}", f"{r['after'] / r['raw']:.2f}x") if r["after"] == r["after"] else ("—", "—"))]
         for r in rows])


PRODUCE_NOTE = ("`scinol produce FILE --quiet` as a new process; printed = the rate it prints (from before its "
                "first event is read to the last acknowledgement, so it includes loading the compiled kernels, "
                "about 0.5 s for numba's first call in a process); whole process = its wall time; start-up = the "
                "wall time of the same command on the file's first 10 rows; after start-up = events / (whole − "
                "start-up), shown only where that difference is over a second and a quarter of the whole. Raw loop: confluent-kafka `Producer.produce` of the same Avro values, encoded "
                "beforehand, same settings (idempotence, linger.ms 20), poll every 1,000, flush at the end. "
                "Best of the repeats, run in turn.")
