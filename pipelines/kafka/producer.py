"""The one Kafka producer of the project: produce, then ``flush()`` raises
if any message was not acknowledged. No Beam here; the Beam sink, the
pipelines' prediction and feedback writers, ``scinol produce`` and the demo
all write through :class:`KafkaWriter`.

* Idempotent by default (``enable.idempotence=true``): librdkafka's retries
  after a lost acknowledgement never write a message twice, and the order
  within a partition is kept.
* A broker that is down or paused is ridden out, not failed on: librdkafka
  keeps the messages queued and retries with back-off for up to
  ``message.timeout.ms`` (default 300 s; raise it with ``--kafka-config`` to
  ride out longer outages), and ``flush()`` waits that long, logging a
  warning every ``report_every`` seconds while messages are unacknowledged.
  Only a message librdkafka gave up on raises :class:`KafkaDeliveryError`;
  the pipeline then stops and a restart resumes from the last checkpoint,
  which was written only after everything it covers had been acknowledged.
* ``close()`` flushes and destroys the client, so nothing of it is left to
  complain ("Connection refused") when the broker goes away afterwards.
"""

from __future__ import annotations

import logging
import time
from typing import Iterable, NamedTuple, Optional, Sequence

from confluent_kafka import KafkaException, Producer

from .health import with_error_reporting

log = logging.getLogger(__name__)


class KafkaDeliveryError(RuntimeError):
    """Messages the broker did not acknowledge."""


class OutgoingMessage(NamedTuple):
    """A message with more than a value and a key: headers (``[(str,
    bytes | None), ...]``) and a timestamp (ms; None: the producer's clock)."""

    value: bytes
    key: Optional[bytes] = None
    headers: Optional[list] = None
    timestamp_ms: Optional[int] = None


class KafkaWriter:
    """A producer for one topic; see the module docstring."""

    report_every = 10.0  # seconds between "still waiting" warnings in flush()
    _MAX_ERRORS_KEPT = 10

    def __init__(self, bootstrap: str, topic: str, config: dict | None = None, *, error_counter=None,
                 count_delivered: bool = True):
        """``count_delivered=False``: librdkafka reports failed deliveries
        only (``delivery.report.only.error``), so no Python call is made per
        acknowledged message (about a tenth of a bulk load's producing time);
        :attr:`delivered` then stays 0 and failures still raise."""
        self.topic = topic
        conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                "on_delivery": self._report, **({} if count_delivered else {"delivery.report.only.error": True}),
                **(config or {})}
        conf, self.reporter = with_error_reporting(conf, f"producer for {topic!r}", error_counter)
        self.producer = Producer(conf)
        self.failed: list[str] = []
        self.n_failed = 0
        self.delivered = 0

    def _report(self, err, msg) -> None:
        # Called from poll()/flush() in the caller's thread.
        if err is None:
            self.delivered += 1
            if self.reporter is not None and self.reporter.in_trouble:
                self.reporter.recovered()
            return
        self.n_failed += 1
        if len(self.failed) < self._MAX_ERRORS_KEPT:
            partition = msg.partition()
            where = partition if partition is not None and partition >= 0 else "(unassigned)"
            self.failed.append(f"Kafka delivery to topic {msg.topic() or self.topic!r} partition {where} failed: {err}")

    def produce(self, value: bytes, key: bytes | None = None, partition: int | None = None, *,
                headers: list | None = None, timestamp_ms: int | None = None) -> None:
        """Queue one message (waits while the local queue is full)."""
        kwargs = {} if partition is None else {"partition": partition}
        if headers:
            kwargs["headers"] = headers
        if timestamp_ms is not None and timestamp_ms >= 0:
            kwargs["timestamp"] = timestamp_ms
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, **kwargs)
                return
            except BufferError:  # local queue full: serve delivery reports, retry
                self.producer.poll(0.05)
                self.check()
            except KafkaException as exc:
                raise KafkaDeliveryError(f"Kafka delivery to topic {self.topic!r} failed: {exc}") from exc

    def queue(self, value: bytes, key: bytes | None = None) -> None:
        """Queue one message, waiting while the local queue is full; unlike
        :meth:`produce`, a refusal (a KafkaException, e.g. a transaction in
        an error state) is raised as is and no failed delivery is checked:
        a transaction's owner decides (:mod:`.transactions`)."""
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key)
                return
            except BufferError:
                self.producer.poll(0.05)

    def forget_failures(self) -> int:
        """Drop the failed deliveries recorded so far (those of an aborted
        transaction, written again since); how many there were."""
        n, self.failed, self.n_failed = self.n_failed, [], 0
        return n

    def produce_values(self, values: Iterable[bytes], partitions: int | None = None, first: int = 0, *,
                       keys: Sequence[bytes | None] | None = None) -> None:
        """Queue a batch of values, the common cases without the general
        path's calls: unkeyed, value k (counting from ``first``) to partition
        k % ``partitions`` (None: the partitioner's choice); or with ``keys``
        (a sequence of ``values``' length), to the partitioner's choice by key."""
        produce, topic = self.producer.produce, self.topic
        if keys is not None:
            if len(values) != len(keys):  # checked before any is queued
                raise ValueError(f"{len(values)} values but {len(keys)} keys for topic {topic!r}")
            for value, key in zip(values, keys):
                try:
                    produce(topic, value, key)
                except (BufferError, KafkaException):
                    self.produce(value, key)  # not queued: the general path waits or raises
        elif partitions is None:
            for value in values:
                try:
                    produce(topic, value)
                except (BufferError, KafkaException):
                    self.produce(value)
        else:
            for k, value in enumerate(values, first):
                try:
                    produce(topic, value, partition=k % partitions)
                except (BufferError, KafkaException):
                    self.produce(value, partition=k % partitions)
        self.producer.poll(0)

    def produce_message(self, msg: OutgoingMessage) -> None:
        self.produce(msg.value, msg.key, headers=msg.headers, timestamp_ms=msg.timestamp_ms)

    def poll(self) -> None:
        """Serve delivery reports now; raise if any failed."""
        self.producer.poll(0)
        self.check()

    def check(self) -> None:
        """KafkaDeliveryError if any message failed since the last check."""
        if self.n_failed:
            detail, more = self.failed[0], self.n_failed - 1
            self.failed, self.n_failed = [], 0
            extra = f" (and {more} more messages failed)" if more else ""
            raise KafkaDeliveryError(f"{detail}{extra}")

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every message (at most ``timeout`` seconds; None: until
        librdkafka delivers or gives up on each); KafkaDeliveryError if any
        was not delivered."""
        start = time.monotonic()
        next_report = start + self.report_every
        left = self.producer.flush(min(1.0, timeout) if timeout is not None else 1.0)
        while left and not self.n_failed:
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                break
            if now >= next_report:
                next_report = now + self.report_every
                log.warning("Kafka has not acknowledged %d messages to %r for %.0f s; waiting (librdkafka retries "
                            "with back-off until message.timeout.ms)", left, self.topic, now - start)
            left = self.producer.flush(1.0)
        self.check()
        if not left and self.reporter is not None and self.reporter.in_trouble:
            self.reporter.recovered()  # all acknowledged (the only sign without success reports)
        if left:
            raise KafkaDeliveryError(f"Kafka delivery to topic {self.topic!r} failed: {left} messages still "
                                     f"queued after {timeout:.0f} s")

    def close(self, timeout: float = 5.0) -> None:
        """Flush (at most ``timeout`` seconds) and destroy the client."""
        producer, self.producer = self.producer, None
        if producer is None:
            return
        try:
            producer.flush(timeout)
        finally:
            producer.close() if hasattr(producer, "close") else None


def produce_stream(writer: KafkaWriter, values: Iterable[bytes], *, partitions: int = 1,
                   rate: Optional[float] = None, progress=None) -> int:
    """Write ``values`` round-robin over ``partitions`` (in order within
    each), paced to ``rate`` messages/s if given; ``progress.update(n)``
    (e.g. a tqdm bar) is told as it goes. Returns the count; raises on any
    failed delivery."""
    if not rate:
        return _produce_unpaced(writer, values, partitions, progress)
    start = time.monotonic()
    count = 0
    for count, value in enumerate(values, 1):
        if rate:
            ahead = (count - 1) / rate - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
        writer.produce(value, partition=(count - 1) % partitions)
        if count % 1000 == 0:
            writer.poll()
            if progress is not None:
                progress.update(1000)
    writer.flush(60)
    if progress is not None:
        progress.update(count % 1000)
    return count


def _produce_unpaced(writer: KafkaWriter, values: Iterable[bytes], partitions: int, progress) -> int:
    """:func:`produce_stream` as fast as the broker takes them: 1,000 values
    per :meth:`KafkaWriter.produce_values` call (one Python call a message
    less), delivery reports served and checked between the chunks."""
    from itertools import islice

    values, count = iter(values), 0
    while chunk := list(islice(values, 1000)):
        writer.produce_values(chunk, partitions, count)
        writer.check()
        count += len(chunk)
        if progress is not None:
            progress.update(len(chunk))
    writer.flush(60)
    return count
