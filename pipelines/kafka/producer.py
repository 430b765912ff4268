"""A Kafka producer that never drops silently: produce, then ``flush()``
raises if any message was not acknowledged. No Beam here.

A broker that is down or paused is ridden out, not failed on: librdkafka
keeps the messages queued and retries with back-off for up to
``message.timeout.ms`` (default 300 s; raise it with ``--kafka-config`` to
ride out longer outages), and ``flush()`` waits that long, logging a warning
every ``report_every`` seconds while messages are still unacknowledged. Only
a message librdkafka gave up on raises :class:`KafkaDeliveryError`; the
pipeline then stops and a restart resumes from the last checkpoint, which
was written only after everything it covers had been acknowledged.
"""

from __future__ import annotations

import logging
import time

from pipelines.kafka.health import with_error_reporting

log = logging.getLogger(__name__)


class KafkaDeliveryError(RuntimeError):
    """Messages the broker did not acknowledge."""


class KafkaWriter:
    report_every = 10.0  # seconds between "still waiting" warnings in flush()

    def __init__(self, bootstrap: str, topic: str, config: dict | None = None):
        from confluent_kafka import Producer

        self.topic = topic
        conf, self.reporter = with_error_reporting({"bootstrap.servers": bootstrap, "linger.ms": 5, **(config or {})},
                                                   f"producer for {topic!r}")
        self.producer = Producer(conf)
        self.failed: list[str] = []
        self.delivered = 0

    def _report(self, err, msg):
        if err is None:
            self.delivered += 1
            if self.reporter is not None and self.reporter.in_trouble:
                self.reporter.recovered()
        elif len(self.failed) < 10:
            self.failed.append(f"topic {msg.topic()!r} partition {msg.partition()}: {err}")

    def produce(self, value: bytes, key: bytes | None = None) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, on_delivery=self._report)
                return
            except BufferError:  # local queue full: serve delivery reports, retry
                self.producer.poll(0.05)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for every message (at most ``timeout`` seconds; None: until
        librdkafka delivers or gives up on each); KafkaDeliveryError if any
        was not delivered."""
        start = time.monotonic()
        next_report = start + self.report_every
        left = self.producer.flush(min(1.0, timeout) if timeout is not None else 1.0)
        while left and not self.failed:
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                break
            if now >= next_report:
                next_report = now + self.report_every
                log.warning("Kafka has not acknowledged %d messages to %r for %.0f s; waiting (librdkafka retries "
                            "with back-off until message.timeout.ms)", left, self.topic, now - start)
            left = self.producer.flush(1.0)
        if self.failed or left:
            detail = self.failed[0] if self.failed else f"{left} messages still queued after {timeout:.0f} s"
            self.failed = []
            raise KafkaDeliveryError(f"Kafka delivery failed: {detail}")
