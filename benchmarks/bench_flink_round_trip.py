#!/usr/bin/env python
"""Sharded mode's feedback loop on embedded Flink, Apache Kafka in and out:
the time between consecutive predictions at staleness 0 (one round trip per
event: source, three keyed steps, the feedback topic and back), with
Flink's bundle and network-buffer defaults and with the ones a sharded run
now gets (``pipelines.runners.options.low_latency_flink_args``; the Kafka
read's calls last no longer than a bundle), taking turns in one run on the
same broker.

Usage: python benchmarks/bench_flink_round_trip.py [--n 40] [--repeats 2] [--staleness 0]
Needs the provisioned Flink job server and Apache Kafka
(``scinol provision kafka flink``); about a minute per run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from learners.datasets import toy_examples
from pipelines.config import RunConfig
from pipelines.kafka.apache_broker import ApacheKafkaBroker
from pipelines.launch import run
from pipelines.provision.flink import provision_flink_job_server
from pipelines.records.events import dense_events
from pipelines.records.topics import produce_events
from pipelines.runners.options import flink_default_latency_args, job_server_args


def variants(work: Path) -> dict[str, list[str]]:
    """Flag sets to compare (Flink's buffer timeout written in ``work``)."""
    defaults = flink_default_latency_args(work / "flink-defaults")
    return {"Flink's defaults (1 s bundles, 100 ms buffer timeout)": defaults,
            "short bundles only (20 ms)": ["--max_bundle_time_mills=20", *defaults[1:]],
            "sharded run's defaults (20 ms bundles, 1 ms buffer timeout)": []}


def broker_timestamps(bootstrap: str, topic: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rt-{time.time_ns()}",
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    stamps = []
    try:
        while True:
            msg = consumer.poll(10)
            if msg is None or msg.error():
                return stamps
            stamps.append(msg.timestamp()[1])
    finally:
        consumer.close()


def one_run(bootstrap: str, jar: str, flags: list[str], n: int, staleness: int, work: Path) -> dict:
    X, y = toy_examples(n, 0)
    topic = f"round-trip-{time.time_ns()}"
    produce_events(bootstrap, topic, list(dense_events(X, y, "e-")), partitions=1, progress=False)
    cfg = RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=True,
                    checkpoint_dir=str(work / topic), progress_seconds=None, shards=2, max_staleness=staleness,
                    beam_args=["--runner=FlinkRunner", "--flink_master=[local]", *job_server_args(jar),
                               "--environment_type=LOOPBACK", *flags])
    started = time.time()
    run(cfg)
    wall = time.time() - started
    stamps = broker_timestamps(bootstrap, cfg.predictions_topic)
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return {"predictions": len(stamps), "wall": wall, "median": statistics.median(gaps),
            "mean": statistics.mean(gaps), "first to last": (stamps[-1] - stamps[0]) / 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=40, help="events per run")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--staleness", type=int, default=0)
    args = ap.parse_args()
    jar = provision_flink_job_server()
    work = Path(tempfile.mkdtemp(prefix="round-trip-"))
    rows = []
    with ApacheKafkaBroker() as broker:
        for repeat in range(args.repeats):
            for name, flags in variants(work).items():
                got = one_run(broker.bootstrap, jar, flags, args.n, args.staleness, work)
                rows.append((name, repeat + 1, got))
                print(f"{name}, run {repeat + 1}: {got}", flush=True)
    print(f"\nK = 2, staleness {args.staleness}, {args.n} toy events, embedded Flink, Apache Kafka\n")
    print("| flags | run | predictions | ms between predictions, median | mean | first to last s | "
          "events/s, first to last | whole run s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, repeat, got in rows:
        rate = (got["predictions"] - 1) / max(got["first to last"], 1e-3)
        print(f"| {name} | {repeat} | {got['predictions']} | {got['median']:,.0f} | {got['mean']:,.0f} | "
              f"{got['first to last']:.1f} | {rate:,.0f} | {got['wall']:.1f} |")


if __name__ == "__main__":
    main()
