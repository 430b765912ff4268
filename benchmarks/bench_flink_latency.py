#!/usr/bin/env python
"""Exact mode on embedded Flink, Apache Kafka in and out, unbounded: the
latency of predictions at a paced load, and the whole run over a backlog,
with Flink's bundle, network-buffer and read-call defaults and with the ones
an unbounded run now gets (``pipelines.runners.options.low_latency_flink_args``;
the Kafka read's calls last no longer than a bundle), taking turns in one
run on the same broker, each job in a process of its own (Beam's LOOPBACK
harness leaves threads of a cancelled job behind, which slowed the jobs
after it in the same process). The CPU time of that process is measured
too: short bundles cost a share of a core at any load.

Usage: python benchmarks/bench_flink_latency.py [--rate 1000] [--seconds 20] [--backlog 600000] [--repeats 1]
       [--bundle-ms 5 ...]
Needs the provisioned Flink job server and Apache Kafka
(``scinol provision kafka flink``); about a minute per variant and run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pipelines.bench.delayed_labels import toy_events
from pipelines.bench.load_latency import WARM, paced_producer
from pipelines.config import RunConfig
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.apache_broker import ApacheKafkaBroker
from pipelines.kafka.consumer import read_topic
from pipelines.launch import start
from pipelines.records.topics import produce_events, read_records
from pipelines.runners.options import RunnerOptions, flink_args, flink_default_latency_args


def variants(work: Path, bundle_ms: list[int]) -> dict[str, list[str]]:
    """Flag sets to compare (Flink's buffer timeout written in ``work``),
    and an unbounded run's defaults with each of ``bundle_ms`` as the bundle time."""
    made = {"Flink's defaults (1 s bundles, 100 ms buffer timeout; 1 s read calls)":
            flink_default_latency_args(work / "flink-defaults"),
            "an unbounded run's defaults (20 ms bundles, 1 ms buffer timeout; 20 ms read calls)": []}
    for ms in bundle_ms:
        made[f"{ms} ms bundles and read calls, 1 ms buffer timeout"] = [f"--max_bundle_time_mills={ms}"]
    return made


def _config(bootstrap: str, topic: str, work: Path, flags: list[str]) -> RunConfig:
    made = flink_args(RunnerOptions("flink", bounded=False, state_dir=str(work / f"state-{topic}")))
    return RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=False,
                     checkpoint_dir=str(work / topic), progress_seconds=None, max_batch=2000,
                     beam_args=[*made, *flags])


def _until(bootstrap: str, topic: str, n: int) -> float:
    """Wall-clock time when the ``n``-th record of ``topic`` has been read."""
    for _ in read_topic(bootstrap, topic, limit=n, idle_timeout=None, timeout=600):
        pass
    return time.time()


def latency_run(bootstrap: str, work: Path, flags: list[str], rate: float, seconds: float) -> dict:
    """p50/p99/max of ``latency_ms`` over ``rate`` × ``seconds`` paced toy
    events, after :data:`pipelines.bench.load_latency.WARM` warm-up events, and the
    CPU seconds this process spent per second of the paced load."""
    n = int(rate * seconds)
    topic = f"flink-latency-{time.time_ns()}"
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1)])
    cfg = _config(bootstrap, topic, work, flags)
    producer = multiprocessing.get_context("spawn").Process(target=paced_producer, args=(bootstrap, topic, rate, n))
    result = start(cfg)
    producer.start()
    try:
        _until(bootstrap, cfg.predictions_topic, WARM)
        cpu, wall = time.process_time(), time.time()
        _until(bootstrap, cfg.predictions_topic, WARM + n)
        cores = (time.process_time() - cpu) / (time.time() - wall)
    finally:
        result.cancel()
        producer.join(60)
    lat = np.array([p["latency_ms"] for p in read_records(bootstrap, cfg.predictions_topic, WARM + n)
                    if p["event_id"].startswith("lat-")])
    return {"events": lat.size, "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "max": float(lat.max()), "cores": cores}


def backlog_run(bootstrap: str, work: Path, flags: list[str], n: int) -> float:
    """Seconds from the start of the run to the last of ``n`` toy events' predictions (start-up included)."""
    topic = f"flink-backlog-{time.time_ns()}"
    produce_events(bootstrap, topic, toy_events(n)[1], partitions=1, total=n, progress=False)
    cfg = _config(bootstrap, topic, work, flags)
    started = time.time()
    result = start(cfg)
    try:
        return _until(bootstrap, cfg.predictions_topic, n) - started
    finally:
        result.cancel()


def _in_a_new_process(*args) -> dict | float:
    """One measurement (``--one KIND BOOTSTRAP WORK FLAGS-JSON A B``) in a process of its own."""
    done = subprocess.run([sys.executable, __file__, "--one", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"measurement {args[0]} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one(kind: str, bootstrap: str, work: str, flags: str, a: str, b: str) -> None:
    got = (latency_run(bootstrap, Path(work), json.loads(flags), float(a), float(b)) if kind == "latency"
           else backlog_run(bootstrap, Path(work), json.loads(flags), int(a)))
    print(json.dumps(got), flush=True)


def main() -> None:
    if sys.argv[1:2] == ["--one"]:
        one(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="offered events/s of the latency runs")
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the paced load")
    ap.add_argument("--backlog", type=int, default=600_000, help="events already in the topic of the backlog runs")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--bundle-ms", type=int, action="append", default=[],
                    help="also an unbounded run's defaults with bundles (and read calls) this long (repeatable)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="flink-latency-"))
    rows = []
    with ApacheKafkaBroker() as broker:
        for repeat in range(args.repeats):
            for name, flags in variants(work, args.bundle_ms).items():
                common = (broker.bootstrap, work, json.dumps(flags))
                got = _in_a_new_process("latency", *common, args.rate, args.seconds)
                got["backlog s"] = _in_a_new_process("backlog", *common, args.backlog, 0)
                rows.append((name, repeat + 1, got))
                print(f"{name}, run {repeat + 1}: {got}", flush=True)
    print(f"\nexact mode, unbounded, embedded Flink, Apache Kafka, one partition; {args.rate:,.0f} events/s "
          f"offered for {args.seconds:g} s after {WARM:,} warm-up events; backlog {args.backlog:,} events\n")
    print(f"| flags | run | paced events | p50 ms | p99 ms | max ms | cores of the job's Python process (paced) | "
          f"{args.backlog:,} backlog events, start to last prediction s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, repeat, got in rows:
        print(f"| {name} | {repeat} | {got['events']:,} | {got['p50']:.1f} | {got['p99']:.1f} | {got['max']:.1f} | "
              f"{got['cores']:.2f} | {got['backlog s']:.1f} |")


if __name__ == "__main__":
    main()
