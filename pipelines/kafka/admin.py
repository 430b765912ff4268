"""The one Kafka admin helper: topics, their partitions, the cluster id,
and waiting for a broker to answer. No Beam here."""

from __future__ import annotations

import time
from typing import NamedTuple

from confluent_kafka.admin import AdminClient, NewTopic

from .consumer import topic_partitions


class TopicSpec(NamedTuple):
    """A topic the project creates when it is missing."""
    name: str
    partitions: int = 1
    replication: int = 1
    config: dict = {}


class KafkaAdmin:
    def __init__(self, bootstrap: str, config: dict | None = None):
        self.bootstrap = bootstrap
        self.client = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})

    def partitions(self, topic: str, timeout: float = 10.0) -> list[int]:
        """The topic's partitions (TopicMissing if it has none)."""
        return topic_partitions(self.client, topic, self.bootstrap, timeout)

    def topics(self, timeout: float = 10.0) -> dict[str, int]:
        """Every topic and its partition count."""
        md = self.client.list_topics(timeout=timeout)
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def cluster_id(self, timeout: float = 10.0) -> str:
        return self.client.list_topics(timeout=timeout).cluster_id

    def ensure_topics(self, specs: list[TopicSpec], timeout: float = 15.0) -> dict[str, int]:
        """Create the missing topics; returns each topic's partition count
        (an existing topic keeps its own). A topic created meanwhile by
        someone else is fine."""
        existing = self.topics()
        missing = [NewTopic(s.name, s.partitions, s.replication, config=dict(s.config))
                   for s in specs if s.name not in existing]
        if missing:
            for name, future in self.client.create_topics(missing).items():
                try:
                    future.result(timeout)
                except Exception as exc:
                    if "TOPIC_ALREADY_EXISTS" not in str(exc):
                        raise
        return {s.name: existing.get(s.name, s.partitions) for s in specs}

    def wait_until_ready(self, timeout: float = 30.0) -> None:
        """Block until the broker answers a metadata request (TimeoutError if not)."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                self.client.list_topics(timeout=1.0)
                return
            except Exception as exc:  # KafkaException while the port is not yet open
                last = exc
                time.sleep(0.1)
        raise TimeoutError(f"broker at {self.bootstrap} did not answer within {timeout:.0f} s ({last})")
