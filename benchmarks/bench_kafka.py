"""Kafka throughput on the embedded broker: produce, Beam ReadFromKafka (FnApiRunner), plain consume.

A script, not a test:

    python benchmarks/bench_kafka.py                # 200,000 events of ~200 bytes, 4 partitions
    python benchmarks/bench_kafka.py -n 50000 --partitions 1

Starts an EmbeddedBroker (tansu, memory storage), produces N events (one
producer, measuring events/s including the final flush; and, for comparison,
the same N values through Beam's WriteToKafka to another topic), then reads
the first topic, bounded, three ways:

* Beam: ReadFromKafka on the FnApiRunner, a DoFn counting messages (into a
  Beam counter); timed from run() to finish, so it includes pipeline start-up
  and partition resolution (shown separately: a no-op pipeline, and the same
  read of an empty topic); "in-pipeline" is the span between the first and
  the last batch reaching the counting DoFn (a Beam distribution of arrival
  times), i.e. the steady read rate;
* plain: a confluent-kafka consume() loop over all partitions, counting;
* plain+tuples: the same loop also building the KafkaMessage tuples the Beam
  source emits (what the source cannot avoid doing per message).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import apache_beam as beam  # noqa: E402
from apache_beam.metrics import MetricsFilter  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from pipelines.kafka.broker import EmbeddedBroker  # noqa: E402
from pipelines.beam_io import KafkaMessage, ReadFromKafka, WriteToKafka


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(10)


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> float:
    """Produce n values of `size` bytes (a decimal id, padded); return seconds incl. flush."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    pad = os.urandom(size)
    values = [(b"%d:" % i + pad)[:size] for i in range(n)]
    t0 = time.perf_counter()
    for i, v in enumerate(values):
        while True:
            try:
                producer.produce(topic, value=v, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    elapsed = time.perf_counter() - t0
    if remaining:
        raise RuntimeError(f"{remaining} messages not delivered")
    return elapsed


class CountMessages(beam.DoFn):
    def __init__(self):
        self.messages = beam.metrics.Metrics.counter("bench", "messages")
        self.arrivals = beam.metrics.Metrics.distribution("bench", "arrival_us")

    def process(self, batch):
        self.messages.inc(len(batch))
        self.arrivals.update(int(time.time() * 1e6))


def beam_read(bootstrap: str, topic: str, max_batch: int) -> tuple[float, float, int]:
    """(wall seconds incl. start-up, seconds from first to last batch, messages counted)."""
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | ReadFromKafka(bootstrap, topic, max_batch=max_batch) | beam.ParDo(CountMessages())
    t0 = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    elapsed = time.perf_counter() - t0
    metrics = result.metrics().query(MetricsFilter().with_namespace("bench"))
    count = sum(c.committed for c in metrics["counters"])
    dists = [d.committed for d in metrics["distributions"]]
    span = (max(d.max for d in dists) - min(d.min for d in dists)) / 1e6 if dists and count else 0.0
    return elapsed, span, count


def beam_write(bootstrap: str, topic: str, n: int, size: int, batch: int) -> float:
    """WriteToKafka of n values (as lists of `batch`) on the FnApiRunner; wall seconds incl. start-up.

    The values are made inside the pipeline: beam.Create of 200k values would
    pickle and bz2-compress ~40 MB into the pipeline proto (seconds)."""
    pad = os.urandom(size)

    def make(lo):
        return [(b"%d:" % i + pad)[:size] for i in range(lo, min(n, lo + batch))]

    p = beam.Pipeline(runner=FnApiRunner())
    _ = (p | beam.Create(list(range(0, n, batch)), reshuffle=False) | beam.Map(make)
         | WriteToKafka(bootstrap, topic))
    t0 = time.perf_counter()
    p.run().wait_until_finish()
    return time.perf_counter() - t0


def noop_pipeline() -> float:
    t0 = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        _ = p | beam.Impulse() | beam.Map(lambda x: x)
    return time.perf_counter() - t0


def plain_read(bootstrap: str, topic: str, n: int, partitions: int, max_batch: int, tuples: bool) -> float:
    # fetch.queue.backoff.ms as ReadFromKafka sets it (librdkafka's 1000 ms default stalls slow loops)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-" + uuid.uuid4().hex,
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 10})
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count = 0
    while count < n:
        msgs = consumer.consume(max_batch, timeout=0.2)
        if tuples:
            batch = []
            for m in msgs:
                if m.error() is None:
                    batch.append(KafkaMessage(m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(),
                                              m.value()))
            count += len(batch)
        else:
            count += sum(1 for m in msgs if m.error() is None)
    elapsed = time.perf_counter() - t0
    consumer.close()
    if count != n:
        raise RuntimeError(f"plain consumer read {count}, expected {n}")
    return elapsed


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--events", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=200, help="value bytes")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--max-batch", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each read; the median is shown")
    args = ap.parse_args(argv)
    n, reps = args.events, args.repeats

    def median(xs):
        xs = sorted(xs)
        return xs[len(xs) // 2]

    with EmbeddedBroker() as broker:
        bs = broker.bootstrap
        topic, empty = "bench-" + uuid.uuid4().hex[:8], "bench-empty-" + uuid.uuid4().hex[:8]
        create_topic(bs, topic, args.partitions)
        create_topic(bs, empty, args.partitions)

        t_produce = produce(bs, topic, n, args.size, args.partitions)
        sink = "bench-sink-" + uuid.uuid4().hex[:8]
        create_topic(bs, sink, args.partitions)
        t_write = beam_write(bs, sink, n, args.size, args.max_batch)
        t_noop = median([noop_pipeline() for _ in range(reps)])
        t_empty = median([beam_read(bs, empty, args.max_batch)[0] for _ in range(reps)])
        beam_runs = [beam_read(bs, topic, args.max_batch) for _ in range(reps)]
        if any(got != n for _, _, got in beam_runs):
            raise RuntimeError(f"Beam read {[got for _, _, got in beam_runs]} messages, expected {n}")
        t_beam = median([t for t, _, _ in beam_runs])
        t_span = median([s for _, s, _ in beam_runs])
        plain = [plain_read(bs, topic, n, args.partitions, args.max_batch, tuples=False) for _ in range(reps)]
        tuples = [plain_read(bs, topic, n, args.partitions, args.max_batch, tuples=True) for _ in range(reps)]
        t_plain, t_tuples = median(plain), median(tuples)

    mb = n * args.size / 1e6
    rows = [
        ("produce (1 producer, incl. flush)", t_produce),
        ("Beam WriteToKafka, FnApiRunner, wall", t_write),
        ("Beam ReadFromKafka, FnApiRunner, wall", t_beam),
        ("Beam ReadFromKafka, in-pipeline", t_span),
        ("plain confluent-kafka consume loop", t_plain),
        ("plain loop + KafkaMessage tuples", t_tuples),
    ]
    print(f"\n{n:,} events x {args.size} B, {args.partitions} partitions, max_batch {args.max_batch}, "
          f"tansu (memory storage), median of {reps} runs per read; Python {sys.version.split()[0]}, "
          f"apache-beam {beam.__version__}")
    print(f"{'':42s} {'seconds':>8s} {'events/s':>12s} {'MB/s':>8s}")
    for name, t in rows:
        print(f"{name:42s} {t:8.3f} {n / t:12,.0f} {mb / t:8.1f}")
    print(f"{'FnApiRunner no-op pipeline':42s} {t_noop:8.3f}")
    print(f"{'Beam ReadFromKafka of an empty topic':42s} {t_empty:8.3f}")
    print(f"\nplain consume / Beam read, events/s: {t_beam / t_plain:.2f}x wall, "
          f"{t_span / t_plain:.2f}x in-pipeline; plain+tuples / Beam in-pipeline: {t_span / t_tuples:.2f}x")
    print(f"runs (s): Beam wall {[round(t, 3) for t, _, _ in beam_runs]}, "
          f"in-pipeline {[round(s, 3) for _, s, _ in beam_runs]}, plain {[round(t, 3) for t in plain]}, "
          f"plain+tuples {[round(t, 3) for t in tuples]}")


if __name__ == "__main__":
    main()
