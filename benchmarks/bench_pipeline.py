#!/usr/bin/env python
"""End-to-end figures of the exact-mode pipeline on the embedded broker.

1. Throughput, bounded: N events already in a topic → `run` (ScInOL2,
   logistic) → predictions topic; events/s over the whole run, beside a plain
   confluent-kafka + fastavro loop that decodes, learns and produces the same
   predictions without Beam (the ceiling).
2. Latency, unbounded: a producer paced at --rate events/s while the pipeline
   runs; p50/p99 of (prediction time - event timestamp) from the Prediction
   records' ``latency_ms``.

The throughput part is :mod:`pipelines.bench.pipeline_speed` (also behind
``scinol bench throughput``).
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from learners.datasets import toy_examples
from pipelines.bench.pipeline_speed import sparse_events, throughput
from pipelines.kafka.broker import EmbeddedBroker
from pipelines.records.events import dense_events
from pipelines.records.topics import produce_events
from pipelines.config import RunConfig
from pipelines.launch import run
from pipelines.records.topics import read_records


def latency(broker, rate, seconds):
    topic, n = "bench.latency", int(rate * seconds)
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec

    KafkaAdmin(broker.bootstrap).ensure_topics([TopicSpec(topic, 1)])
    cfg = RunConfig(bootstrap=broker.bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=False,
                    stop_after=n, progress_seconds=None, max_batch=500)
    X, y = toy_examples(n, 3)

    def producer():
        time.sleep(3.0)  # let the pipeline start
        events = dense_events(X, y, "lat-", start_ms=0)
        stamped = ({**e, "timestamp": int(time.time() * 1000)} for e in events)
        produce_events(broker.bootstrap, topic, stamped, rate=rate, total=n, progress=False)

    thread = threading.Thread(target=producer)
    thread.start()
    run(cfg)
    thread.join()
    lat = np.array([p["latency_ms"] for p in read_records(broker.bootstrap, cfg.predictions_topic, n)])
    return np.percentile(lat, 50), np.percentile(lat, 99), len(lat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--sparse-n", type=int, default=50_000)
    ap.add_argument("--rate", type=float, default=5000)
    ap.add_argument("--seconds", type=float, default=20)
    args = ap.parse_args()
    with EmbeddedBroker() as broker:
        X, y = toy_examples(args.n, 0)
        rows = [("toy (21 dense)", *throughput(broker, "toy", dense_events(X, y, "t-"), args.n)),
                ("sparse (50 of 2^20)", *throughput(broker, "sparse", sparse_events(args.sparse_n), args.sparse_n))]
        print(f"{'data':<22}{'pipeline ev/s':>15}{'plain loop ev/s':>17}{'ratio':>8}")
        for name, pipe, plain in rows:
            print(f"{name:<22}{pipe:>15,.0f}{plain:>17,.0f}{pipe / plain:>8.2f}")
        p50, p99, n = latency(broker, args.rate, args.seconds)
        print(f"latency at {args.rate:,.0f} events/s, unbounded, {n:,} events: p50 {p50:.1f} ms, p99 {p99:.1f} ms")


if __name__ == "__main__":
    main()
