#!/usr/bin/env python
"""End-to-end figures of the exact-mode pipeline on the embedded broker.

1. Throughput, bounded: N events already in a topic → `run` (ScInOL2,
   logistic) → predictions topic; events/s over the whole run, beside a plain
   confluent-kafka + fastavro loop that decodes, learns and produces the same
   predictions without Beam (the ceiling).
2. Latency, unbounded: a producer paced at --rate events/s while the pipeline
   runs; p50/p99 of (prediction time - event timestamp) from the Prediction
   records' ``latency_ms``.
"""

from __future__ import annotations

import argparse
import threading
import time

import numpy as np

from learners import make_learner
from learners.datasets import toy_examples
from pipelines.broker import EmbeddedBroker
from pipelines.events import event_rows
from pipelines.kafka_writer import KafkaWriter
from pipelines.produce import dense_events, produce_events
from pipelines.run_pipeline import RunConfig, run
from pipelines.tail import read_records
from pipelines.transforms import LearnerConfig
from schemas.codec import Codec


def sparse_events(n: int, seed: int = 0, nnz: int = 50, bits: int = 20):
    rng = np.random.default_rng(seed)
    u = rng.normal(size=1 << bits) * (rng.random(1 << bits) < 0.1)
    start = int(time.time() * 1000)
    for i in range(n):
        idx = np.sort(rng.choice(1 << bits, nnz, replace=False))
        val = rng.lognormal(size=nnz) * rng.choice([-1.0, 1.0], nnz)
        label = 1.0 if rng.random() < 1 / (1 + np.exp(-(u[idx] @ val) / 3)) else -1.0
        yield {"id": f"s{i}", "timestamp": start + i, "model": "default",
               "features": {"indices": idx.tolist(), "values": val.tolist()}, "label": label, "weight": None}




def plain_loop(bootstrap, topic, n):
    """The ceiling: consume, decode, learn, encode, produce; no Beam."""
    from confluent_kafka import Consumer, TopicPartition

    codec, model = Codec(), make_learner("scinol2", "logistic")
    writer = KafkaWriter(bootstrap, topic + ".plain")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"p{time.time_ns()}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    seen, t0 = 0, time.perf_counter()
    while seen < n:
        msgs = [m for m in c.consume(2000, timeout=0.5) if not m.error()]
        events = [codec.decode(m.value()) for m in msgs]
        if not events:
            continue
        indptr, indices, data, y = event_rows(events, model.hasher)
        scores = model.learn((indptr, indices, data), y)
        for e, s in zip(events, scores.tolist()):
            writer.produce(codec.encode("scinol.Prediction", {
                "event_id": e["id"], "model": "default", "model_version": 0, "score": s, "scores": [s],
                "probability": None, "predicted_class": None, "label": e["label"], "loss": None,
                "event_timestamp": e["timestamp"], "latency_ms": 0.0}))
        seen += len(events)
    writer.flush()
    c.close()
    return n / (time.perf_counter() - t0)


def throughput(broker, name, events, n):
    topic = f"bench.{name}"
    produce_events(broker.bootstrap, topic, events, partitions=1, total=n, progress=False)
    cfg = RunConfig(bootstrap=broker.bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=True,
                    learner=LearnerConfig("scinol2", "logistic", hash_bits=20), progress_seconds=None,
                    max_batch=5000)
    t0 = time.perf_counter()
    run(cfg)
    elapsed = time.perf_counter() - t0
    assert len(read_records(broker.bootstrap, cfg.predictions_topic, n)) == n
    return n / elapsed, plain_loop(broker.bootstrap, topic, n)


def latency(broker, rate, seconds):
    topic, n = "bench.latency", int(rate * seconds)
    from pipelines.produce import ensure_topic

    ensure_topic(broker.bootstrap, topic, 1)
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
