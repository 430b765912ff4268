"""The load benchmark's latency part (``python -m pipelines.bench.load
--latency``): an unbounded exact-mode run fed by a producer paced at a fixed
offered rate; latency = each prediction's ``latency_ms``."""

from __future__ import annotations

import time

import numpy as np

from pipelines.bench import report
from pipelines.bench.throughput import say


WARM = 2000
"""Events the latency producer sends first, then waits for their
predictions: Beam's start-up and the kernels' compilation are not in the
latency figures."""


def paced_producer(bootstrap: str, topic: str, rate: float, n: int, seed: int = 3) -> None:
    """In a process of its own (the pipeline's Python is not slowed by it):
    ``WARM`` toy events, wait for their predictions, then ``n`` toy events
    paced at ``rate`` events/s, each stamped with the wall clock as it is
    encoded (as :func:`benchmarks.bench_sharded.latency` does). One producer
    for both, so its start (connection, idempotent producer id) is not in
    the paced events' latency."""
    from learners.datasets import toy_examples

    from pipelines.kafka.consumer import read_topic
    from pipelines.kafka.producer import KafkaWriter, produce_stream
    from pipelines.records.events import dense_events
    from schemas.codec import Codec

    codec, writer = Codec(), KafkaWriter(bootstrap, topic, {"linger.ms": 20})  # as produce_events sets it
    try:
        X, y = toy_examples(WARM, seed + 1)
        produce_stream(writer, (codec.encode("scinol.Event", e) for e in dense_events(X, y, "warm-")))
        for _ in read_topic(bootstrap, topic + ".pred", limit=WARM, idle_timeout=None, timeout=300):
            pass
        X, y = toy_examples(n, seed)
        stamped = (codec.encode("scinol.Event", {**e, "timestamp": int(time.time() * 1000)})
                   for e in dense_events(X, y, "lat-", start_ms=0))
        produce_stream(writer, stamped, rate=rate)
    finally:
        writer.close()


def latency_case(bootstrap: str, rate: float, seconds: float, max_batch: int = 2000) -> dict:
    """An unbounded exact-mode run (in this process, as ``scinol run`` runs
    it) fed by :func:`paced_producer`: p50/p99/max of the paced events'
    latency_ms, and the events/s they arrived at."""
    import multiprocessing

    from pipelines.config import RunConfig
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec
    from pipelines.launch import run
    from pipelines.records.topics import read_records

    n = int(rate * seconds)
    topic = f"bench.load.lat.{time.time_ns()}"
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1)])
    cfg = RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=False,
                    stop_after=WARM + n, progress_seconds=None, max_batch=max_batch)
    producer = multiprocessing.get_context("spawn").Process(target=paced_producer, args=(bootstrap, topic, rate, n))
    producer.start()
    try:
        run(cfg)
    finally:
        producer.join(60)
        if producer.is_alive():
            producer.terminate()
    preds = [p for p in read_records(bootstrap, cfg.predictions_topic, WARM + n) if p["event_id"].startswith("lat-")]
    if len(preds) != n:
        raise RuntimeError(f"{len(preds)} predictions for {n} paced events")
    lat = np.array([p["latency_ms"] for p in preds])
    ts = np.array([p["event_timestamp"] for p in preds])
    slow = (ts[lat > 50] - ts.min()) / 1000
    say(f"latency: {slow.size} events over 50 ms, arriving at (s) {np.unique(np.round(slow, 1)).tolist()[:30]}")
    later = lat[ts >= ts.min() + 2000]  # the resume after the idle warm-up wait left out
    return {"rate": rate, "events": n, "offered": n / max((ts.max() - ts.min()) / 1000, 1e-9),
            "max_batch": max_batch, "p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)),
            "max": float(lat.max()), "over": float(np.mean(lat > 50)),
            "p99_later": float(np.percentile(later, 99)) if later.size else float("nan")}


def latency_table(rows: list[dict]) -> str:
    return report.table(["offered events/s", "arrived events/s", "events", "max_batch", "p50 ms",
                         "p99 ms (target < 50)", "max ms", "share > 50 ms", "p99 ms after the first 2 s"],
                        [[f"{r['rate']:,.0f}", f"{r['offered']:,.0f}", f"{r['events']:,}", f"{r['max_batch']:,}",
                          f"{r['p50']:.1f}", f"**{r['p99']:.1f}**", f"{r['max']:.1f}", f"{r['over']:.1%}",
                          f"{r['p99_later']:.1f}"] for r in rows])


LATENCY_NOTE = ("Exact mode, unbounded, in one process on the embedded broker (Beam FnApiRunner, ScInOL2, one "
                "partition), fed by a producer in another process: {warm:,} warm-up events first (start-up and "
                "compilation not counted), then the toy data paced at the offered rate, each event stamped with "
                "the wall clock when encoded. Latency = the prediction's `latency_ms` (when it was made − the "
                "event's timestamp), so it includes the producer's linger (20 ms) and the broker's round trip; "
                "the prediction's own trip back through the broker is not in it.")
