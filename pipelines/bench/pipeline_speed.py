"""End-to-end throughput of the exact-mode pipeline on the embedded broker,
beside a plain confluent-kafka + fastavro loop that decodes, learns and
produces the same predictions without Beam (the ceiling). Used by
``benchmarks/bench_pipeline.py`` and ``scinol bench throughput``."""

from __future__ import annotations

import time

import numpy as np

from learners import make_learner


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

    from schemas.codec import Codec

    from pipelines.records.events import event_rows
    from pipelines.kafka.producer import KafkaWriter

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
    """(pipeline events/s, plain-loop events/s) over the same n events in one partition."""
    from pipelines.records.topics import produce_events
    from pipelines.config import RunConfig
    from pipelines.launch import run
    from pipelines.records.topics import read_records
    from pipelines.config import LearnerConfig

    topic = f"bench.{name}"
    produce_events(broker.bootstrap, topic, events, partitions=1, total=n, progress=False)
    cfg = RunConfig(bootstrap=broker.bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=True,
                    learner=LearnerConfig("scinol2", "logistic", hash_bits=20), progress_seconds=None,
                    max_batch=5000)
    t0 = time.perf_counter()
    run(cfg)
    elapsed = time.perf_counter() - t0
    got = len(read_records(broker.bootstrap, cfg.predictions_topic, n))
    if got != n:
        raise RuntimeError(f"pipeline wrote {got} predictions for {n} events")
    return n / elapsed, plain_loop(broker.bootstrap, topic, n)
