"""Events into Kafka: data files and generated data as Avro ``Event`` records.

Used by ``scinol produce`` and ``scinol demo``. Event ids are stable (the
same file gives the same ids), so predictions can be joined back to rows.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable, Iterator

import numpy as np

from learners.datasets import toy_examples


def dense_events(X: np.ndarray, y, id_prefix: str, model: str = "default",
                 start_ms: int | None = None) -> Iterator[dict]:
    """One Event per row of X (labels y; NaN = unlabelled)."""
    start_ms = int(time.time() * 1000) if start_ms is None else start_ms
    for i, (row, label) in enumerate(zip(np.asarray(X, dtype=float).tolist(), np.asarray(y, dtype=float).tolist())):
        yield {"id": f"{id_prefix}{i}", "timestamp": start_ms + i, "model": model,
               "features": {"values": row}, "label": None if label != label else label, "weight": None}


def file_events(reader, model: str = "default", passes: int = 1) -> Iterator[dict]:
    """Events from a :mod:`pipelines.records.datafiles` reader: CSV rows as dense
    features, libsvm rows as sparse ones; ids ``<file>:<line>``."""
    name = os.path.basename(reader.path)
    dense = reader.n_features is not None
    for p in range(passes):
        suffix = f"#{p}" if passes > 1 else ""
        for batch in reader.batches():
            now = int(time.time() * 1000)
            for i in range(batch.y.shape[0]):
                lo, hi = batch.indptr[i], batch.indptr[i + 1]
                idx, val = batch.indices[lo:hi], batch.data[lo:hi]
                if dense:
                    row = np.zeros(reader.n_features)
                    row[idx] = val
                    features = {"values": row.tolist()}
                else:
                    features = {"indices": idx.tolist(), "values": val.tolist()}
                yield {"id": f"{name}:{int(batch.lines[i])}{suffix}", "timestamp": now, "model": model,
                       "features": features, "label": float(batch.y[i]), "weight": None}


def generated_events(name: str, n: int, seed: int, model: str = "default") -> Iterator[dict]:
    if name != "toy":
        raise ValueError(f"unknown generator {name!r}; available: toy")
    X, y = toy_examples(n, seed)
    return dense_events(X, y, f"toy-{seed}-", model)


def ensure_topic(bootstrap: str, topic: str, partitions: int | None, config: dict | None = None) -> int:
    """Create ``topic`` with ``partitions`` (default 1) if missing; returns its partition count."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
    meta = admin.list_topics(timeout=10)
    if topic in meta.topics and not meta.topics[topic].error:
        return len(meta.topics[topic].partitions)
    future = admin.create_topics([NewTopic(topic, num_partitions=partitions or 1, replication_factor=1)])[topic]
    try:
        future.result(15)
    except Exception as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    return partitions or 1


class Progress:
    """A one-line progress bar with events/s on stderr."""

    def __init__(self, total: int | None, enabled: bool = True, out=sys.stderr):
        self.total, self.enabled, self.out = total, enabled, out
        self.count = 0
        self.start = self.last = time.monotonic()

    def add(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if self.enabled and now - self.last >= 0.5:
            self.last = now
            self._draw(now)

    def _draw(self, now: float) -> None:
        rate = self.count / max(now - self.start, 1e-9)
        if self.total:
            done = min(self.count / self.total, 1.0)
            bar = "#" * int(30 * done) + "-" * (30 - int(30 * done))
            print(f"\r[{bar}] {self.count:,}/{self.total:,} events  {rate:,.0f} events/s", end="", file=self.out,
                  flush=True)
        else:
            print(f"\r{self.count:,} events  {rate:,.0f} events/s", end="", file=self.out, flush=True)

    def close(self) -> float:
        now = time.monotonic()
        if self.enabled:
            self._draw(now)
            print(file=self.out)
        return self.count / max(now - self.start, 1e-9)


def produce_events(bootstrap: str, topic: str, events: Iterable[dict], *, partitions: int | None = None,
                   rate: float | None = None, total: int | None = None, kafka_config: dict | None = None,
                   progress: bool = True, registry_url: str | None = None) -> tuple[int, float]:
    """Encode and produce; events go round-robin over the partitions (in
    order within each). Returns (count, events/s). Delivery failures raise."""
    from confluent_kafka import KafkaException, Producer

    from schemas.codec import Codec

    n_partitions = ensure_topic(bootstrap, topic, partitions, kafka_config)
    codec = Codec(registry_url)
    errors: list[str] = []

    def delivered(err, msg):
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **(kafka_config or {})})
    bar = Progress(total, progress)
    start = time.monotonic()
    for i, event in enumerate(events):
        if rate:  # pace to `rate` events/s
            ahead = i / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        value = codec.encode("scinol.Event", event)
        while True:
            try:
                producer.produce(topic, value=value, partition=i % n_partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        bar.add()
        if errors:
            raise KafkaException(f"delivery failed: {errors[0]}")
    remaining = producer.flush(60)
    if errors or remaining:
        raise KafkaException(f"delivery failed: {errors[0] if errors else f'{remaining} messages undelivered'}")
    return bar.count, bar.close()
