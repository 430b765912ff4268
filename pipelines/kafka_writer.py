"""A Kafka producer that never drops silently: produce, then ``flush()``
raises if any message was not acknowledged. No Beam here."""

from __future__ import annotations


class KafkaDeliveryError(RuntimeError):
    """Messages the broker did not acknowledge."""


class KafkaWriter:
    def __init__(self, bootstrap: str, topic: str, config: dict | None = None):
        from confluent_kafka import Producer

        self.topic = topic
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(config or {})})
        self.failed: list[str] = []
        self.delivered = 0

    def _report(self, err, msg):
        if err is None:
            self.delivered += 1
        elif len(self.failed) < 10:
            self.failed.append(f"topic {msg.topic()!r} partition {msg.partition()}: {err}")

    def produce(self, value: bytes, key: bytes | None = None) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value=value, key=key, on_delivery=self._report)
                return
            except BufferError:  # local queue full: serve delivery reports, retry
                self.producer.poll(0.05)

    def flush(self, timeout: float = 60.0) -> None:
        """Wait for every message; KafkaDeliveryError if any was not delivered."""
        left = self.producer.flush(timeout)
        if self.failed or left:
            detail = self.failed[0] if self.failed else f"{left} messages still queued after {timeout:.0f} s"
            self.failed = []
            raise KafkaDeliveryError(f"Kafka delivery failed: {detail}")
