"""End-to-end throughput of the exact-mode pipeline on the embedded broker,
beside a plain confluent-kafka + fastavro loop that decodes, learns and
produces the same predictions without Beam (the ceiling). Used by
``benchmarks/bench_pipeline.py`` and ``scinol bench throughput``.

``python -m pipelines.bench.pipeline_speed`` prints what late labels (a
labels topic) and ``-q`` crosses cost the same pipeline, each beside its
same-run baseline (:func:`late_label_cases`); with ``--encode`` what encoding
each batch's predictions in one compiled call gives, dense and sparse, beside
the per-record encoding and the plain loop, all in the same run
(:func:`encode_cases`)."""

from __future__ import annotations

import os
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


def encode_cases(broker, n: int, repeats: int) -> list[dict]:
    """Per data kind (toy dense, sparse): events/s of the plain loop and of
    bounded exact-mode runs encoding predictions record by record and by
    batch (RunConfig.columnar_encode), whole-run wall time, best of
    ``repeats``; the three take turns, so a busy machine slows all alike."""
    from learners.datasets import toy_examples

    from pipelines.config import LearnerConfig, RunConfig
    from pipelines.records.events import dense_events
    from pipelines.records.topics import produce_events

    X, y = toy_examples(n, 0)
    rows = []
    for kind, events in (("dense", dense_events(X, y, "t-")), ("sparse", sparse_events(n))):
        topic = f"bench.encode.{kind}"
        produce_events(broker.bootstrap, topic, events, partitions=1, total=n, progress=False)
        best = {"plain loop": 0.0, "per-record encode": 0.0, "columnar encode": 0.0}
        for k in range(repeats):
            best["plain loop"] = max(best["plain loop"], plain_loop(broker.bootstrap, topic, n))
            for what, columnar in (("per-record encode", False), ("columnar encode", True)):
                cfg = RunConfig(bootstrap=broker.bootstrap, topic=topic, predictions_topic=f"{topic}.{k}.{columnar}",
                                bounded=True, learner=LearnerConfig("scinol2", "logistic", hash_bits=20),
                                progress_seconds=None, max_batch=5000, columnar_encode=columnar)
                seconds, written = _run_timed(cfg)
                if written != n:
                    raise RuntimeError(f"the run wrote {written} predictions for {n} events")
                best[what] = max(best[what], n / seconds)
        rows += [{"data": kind, "what": what, "events_per_s": rate, "vs_plain": rate / best["plain loop"]}
                 for what, rate in best.items()]
    return rows


# -- what late labels and -q cost the pipeline (exact mode, Kafka in and out)

def _run_timed(cfg) -> tuple[float, int]:
    """(seconds of ``run(cfg)``, prediction records written)."""
    from pipelines.launch import run

    t0 = time.perf_counter()
    run(cfg)
    elapsed = time.perf_counter() - t0
    return elapsed, count_records(cfg.bootstrap, cfg.predictions_topic)


def count_records(bootstrap: str, topic: str, quiet_seconds: float = 3.0) -> int:
    """The records of partition 0 of ``topic``, counted by reading them until
    none come for ``quiet_seconds`` (the embedded broker's end offset was
    seen a few hundred to a few thousand below the records it serves)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.time_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    count, quiet_since = 0, time.monotonic()
    try:
        while time.monotonic() - quiet_since < quiet_seconds:
            got = [m for m in consumer.consume(10_000, timeout=0.5) if not m.error()]
            if got:
                count, quiet_since = count + len(got), time.monotonic()
    finally:
        consumer.close()
    return count


def label_arrival(n: int, delay: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(due, arrival order): the label of event i arrives after event
    due[i] = i + U{0..delay} (as in :mod:`pipelines.bench.delayed_labels`)."""
    due = np.arange(n) + np.random.default_rng(seed).integers(0, delay + 1, size=n)
    return due, np.argsort(due, kind="stable")


def produce_labels(bootstrap: str, topic: str, events: list[dict], labels: np.ndarray, due: np.ndarray,
                   order: np.ndarray) -> None:
    """Label records, keyed by event id, in arrival order, stamped with the
    event time of the event they come after (event i is stamped T0 + i)."""
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec
    from pipelines.kafka.producer import KafkaWriter
    from schemas.codec import Codec

    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1)])
    codec, writer = Codec(), KafkaWriter(bootstrap, topic, {"linger.ms": 20})
    t0 = events[0]["timestamp"]
    for i in order.tolist():
        event = events[i]
        writer.produce(codec.encode("scinol.Label", {"event_id": event["id"], "model": event["model"],
                                                     "label": float(labels[i]), "timestamp": t0 + int(due[i])},
                                    topic), key=event["id"].encode())
    writer.close()


def late_label_cases(broker, n: int, delay: int = 10_000, repeats: int = 1) -> list[dict]:
    """Events/s of the exact-mode pipeline (bounded, one partition, toy
    events) with labels inline, with the labels on a labels topic arriving
    U{0..delay} events late, and with -q ab (beside the same named features
    without crosses); each variant beside its baseline, timed in turn, best
    of ``repeats``. Both topics are filled before the run; the source reads
    them side by side, so how late a label really comes depends on how the
    two reads interleave: ``written`` (prediction records) is the events
    plus those learned when their label came after them (a second record);
    the rest took a label that came first."""
    from pipelines.bench.delayed_labels import toy_events
    from pipelines.config import LearnerConfig, RunConfig
    from pipelines.records.topics import produce_events

    y, events = toy_events(n)
    _, named = toy_events(n, namespaces=True)
    due, order = label_arrival(n, delay)
    topics = {}
    for name, stream in (("inline", events), ("late", [{**e, "label": None} for e in events]), ("named", named)):
        topics[name] = f"bench.late.{name}.{time.time_ns()}"
        produce_events(broker.bootstrap, topics[name], stream, partitions=1, total=n, progress=False)
    produce_labels(broker.bootstrap, topics["late"] + ".labels", events, y, due, order)

    def cfg(name, learner=LearnerConfig("scinol2", "logistic"), **kw):
        return RunConfig(bootstrap=broker.bootstrap, topic=topics[name], bounded=True, learner=learner,
                         predictions_topic=f"{topics[name]}.pred.{time.time_ns()}", progress_seconds=None,
                         max_batch=2000, **kw)

    cases = {"labels inline": lambda: cfg("inline"),
             f"labels on a labels topic, U{{0..{delay:,}}} events late": lambda: cfg(
                 "late", labels_topic=topics["late"] + ".labels"),
             "named features, no crosses": lambda: cfg("named"),
             "named features, -q ab": lambda: cfg("named", learner=LearnerConfig("scinol2", "logistic",
                                                                                  interactions=("ab",)))}
    for make in cases.values():  # untimed: compiles the kernels each case uses, starts Beam once
        cfg_ = make()
        cfg_.stop_after = 1000
        _run_timed(cfg_)
    best: dict[str, tuple[float, int]] = {}
    for _ in range(repeats):
        for what, make in cases.items():
            seconds, written = _run_timed(make())
            if what not in best or seconds < best[what][0]:
                best[what] = (seconds, written)
    return [{"what": what, "events": n, "events_per_s": n / s, "written": written}
            for what, (s, written) in best.items()]


def main(argv=None) -> None:
    """``python -m pipelines.bench.pipeline_speed``: the late-label and -q
    cases on the embedded broker, each beside its same-run baseline."""
    import argparse
    import platform
    import sys

    from pipelines.kafka.broker import EmbeddedBroker

    ap = argparse.ArgumentParser(prog="python -m pipelines.bench.pipeline_speed", description=main.__doc__)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--delay", type=int, default=10_000, help="labels arrive U{0..DELAY} events late")
    ap.add_argument("--repeats", type=int, default=2, help="best of this many runs of each case")
    ap.add_argument("--encode", action="store_true",
                    help="instead: per-record vs columnar prediction encoding, dense and sparse, beside the plain loop")
    args = ap.parse_args(argv)
    if args.events < 1 or args.delay < 0 or args.repeats < 1:
        print("usage: --events and --repeats at least 1, --delay at least 0", file=sys.stderr)
        raise SystemExit(2)
    start = time.perf_counter()
    if args.encode:
        with EmbeddedBroker() as broker:
            rows = encode_cases(broker, args.events, args.repeats)
        print(f"exact-mode pipeline, embedded broker, {args.events:,} events, best of {args.repeats}; "
              f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
        print(f"{'data':<8}{'path':<20}{'events/s':>10}{'vs plain loop':>15}")
        for r in rows:
            print(f"{r['data']:<8}{r['what']:<20}{r['events_per_s']:>10,.0f}{r['vs_plain']:>14.2f}x")
        print(f"wall time {time.perf_counter() - start:.0f} s")
        return
    with EmbeddedBroker() as broker:
        rows = late_label_cases(broker, args.events, args.delay, args.repeats)
    base = {"labels inline": rows[0]["events_per_s"], "named features, no crosses": rows[2]["events_per_s"]}
    print(f"exact-mode pipeline, embedded broker, {args.events:,} toy events, best of {args.repeats}; "
          f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"{'case':<52}{'events/s':>10}{'vs baseline':>13}{'predictions written':>21}")
    for r, baseline in zip(rows, (base["labels inline"],) * 2 + (base["named features, no crosses"],) * 2):
        print(f"{r['what']:<52}{r['events_per_s']:>10,.0f}{r['events_per_s'] / baseline:>12.2f}x"
              f"{r['written']:>21,}")
    print("(a late label writes the event's prediction twice: when it arrives and when its label does)")
    print(f"wall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
