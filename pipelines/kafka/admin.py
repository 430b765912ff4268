"""The one Kafka admin helper: topics, their ids and partitions, the
cluster id, end offsets, and waiting for a broker to answer. No Beam here."""

from __future__ import annotations

import logging
import time
from typing import NamedTuple, Optional

from confluent_kafka import Consumer, TopicCollection
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from .consumer import TopicMissing, consumer_settings, end_offsets_by_fetch, topic_partitions
from .errors import KafkaConnectionError, describe_kafka_error, is_decisive
from .health import quiet

log = logging.getLogger(__name__)


class BrokerUnavailable(RuntimeError):
    """No broker answered at the bootstrap address in the time allowed."""


class TopicInfo(NamedTuple):
    name: str
    topic_id: str  # changes when a topic is deleted and made again
    partitions: int


class TopicSpec(NamedTuple):
    """A topic the project creates when it is missing. ``replication``
    None: the broker's ``default.replication.factor``; ``config``: topic
    settings (``cleanup.policy``, ``retention.ms``, ``min.insync.replicas``...)."""
    name: str
    partitions: int = 1
    replication: Optional[int] = None
    config: dict = {}


class TopicSetupError(RuntimeError):
    """A topic could not be created as asked (e.g. a replication factor the
    cluster refuses); the message names the topic and the broker's reason."""


class KafkaAdmin:
    def __init__(self, bootstrap: str, config: dict | None = None):
        self.bootstrap = bootstrap
        self.config = dict(config or {})
        self.last_error: str | None = None  # the latest error the client reported (e.g. "Connection refused")
        self.refusal = None  # the first error retrying will not cure (a refused login, an untrusted certificate)
        settings = quiet({"bootstrap.servers": bootstrap, "error_cb": self._error, **self.config})
        self.client = AdminClient(settings)

    def _error(self, err) -> None:
        self.last_error = err.str()
        if self.refusal is None and is_decisive(err):
            self.refusal = err

    def partitions(self, topic: str, timeout: float = 10.0) -> list[int]:
        """The topic's partitions (TopicMissing if it has none)."""
        return topic_partitions(self.client, topic, self.bootstrap, timeout)

    def topics(self, timeout: float = 10.0) -> dict[str, int]:
        """Every topic and its partition count."""
        md = self.client.list_topics(timeout=timeout)
        return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}

    def cluster_id(self, timeout: float = 10.0) -> str:
        return self.client.describe_cluster(request_timeout=timeout).result(timeout).cluster_id

    def describe(self, topic: str, timeout: float = 10.0) -> TopicInfo:
        """The topic's id and partition count (TopicMissing if it does not exist)."""
        future = self.client.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic]
        try:
            description = future.result(timeout)
        except Exception as exc:  # KafkaException UNKNOWN_TOPIC_OR_PART
            raise TopicMissing(f"Kafka topic {topic!r} at {self.bootstrap} is not available: {exc}") from None
        return TopicInfo(topic, str(description.topic_id), len(description.partitions))

    def end_offsets(self, topic: str, timeout: float = 30.0) -> dict[int, int]:
        """Each partition's end offset (high watermark) as a fetch reports it."""
        consumer = Consumer(consumer_settings(self.bootstrap, None, {"fetch.wait.max.ms": 50, **self.config}))
        try:
            partitions = topic_partitions(consumer, topic, self.bootstrap, timeout)
            return end_offsets_by_fetch(consumer, topic, {p: 0 for p in partitions}, timeout, self.bootstrap)
        finally:
            consumer.close()

    def ensure_topics(self, specs: list[TopicSpec], timeout: float = 15.0) -> dict[str, int]:
        """Create the missing topics; returns each topic's partition count
        (an existing topic keeps its own). A topic created meanwhile by
        someone else is fine. An existing topic that differs from its spec
        (partitions, replication, settings) is left as it is, with a warning
        naming each difference (:meth:`differences`); a topic the cluster
        refuses to create raises :class:`TopicSetupError`."""
        existing = self.topics()
        missing = [s for s in specs if s.name not in existing]
        if missing:
            new = [NewTopic(s.name, s.partitions, -1 if s.replication is None else s.replication,
                            config={k: str(v) for k, v in s.config.items()}) for s in missing]
            for spec, (name, future) in zip(missing, self.client.create_topics(new).items()):
                try:
                    future.result(timeout)
                except Exception as exc:
                    if "TOPIC_ALREADY_EXISTS" not in str(exc):
                        rf = "the broker's default" if spec.replication is None else spec.replication
                        raise TopicSetupError(f"cannot create topic {name!r} ({spec.partitions} partitions, replication "
                                              f"factor {rf}) on {self.bootstrap}: {_kafka_reason(exc)}") from None
        for s in specs:
            if s.name in existing:
                for difference in self.differences(s, timeout):
                    log.warning("topic %r exists and differs from what this run would create: %s; left as it is",
                                s.name, difference)
        return {s.name: existing.get(s.name, s.partitions) for s in specs}

    def differences(self, spec: TopicSpec, timeout: float = 10.0) -> list[str]:
        """How the existing topic ``spec.name`` differs from ``spec``: its
        partition count, replication factor (when one is asked for) and each
        setting of ``spec.config``."""
        md = self.client.list_topics(spec.name, timeout=timeout).topics.get(spec.name)
        if md is None or md.error is not None:
            return []
        out = []
        if len(md.partitions) != spec.partitions:
            out.append(f"{len(md.partitions)} partitions, not {spec.partitions}")
        replicas = {len(p.replicas) for p in md.partitions.values()}
        if spec.replication is not None and replicas and replicas != {spec.replication}:
            out.append(f"replication factor {'/'.join(map(str, sorted(replicas)))}, not {spec.replication}")
        if spec.config:
            resource = ConfigResource(ResourceType.TOPIC, spec.name)
            try:
                actual = self.client.describe_configs([resource])[resource].result(timeout)
            except Exception as exc:  # noqa: BLE001 - a broker without DescribeConfigs: say so, go on
                return out + [f"its settings could not be read ({_kafka_reason(exc)})"]
            for key, wanted in spec.config.items():
                have = actual[key].value if key in actual else None
                if have != str(wanted):
                    out.append(f"{key}={have}, not {wanted}")
        return out

    def wait_until_ready(self, timeout: float = 30.0, say=None) -> None:
        """Block until the broker answers a metadata request, retrying with
        back-off; ``say(line)`` is told once when it does not answer at first.
        BrokerUnavailable after ``timeout`` seconds; KafkaConnectionError at
        once, naming the broker and the cause, when it refuses the login or
        its certificate is not trusted (waiting would not change that)."""
        deadline = time.monotonic() + timeout
        delay, last, told = 0.1, None, False
        while True:
            try:
                self.client.list_topics(timeout=min(1.0, max(deadline - time.monotonic(), 0.1)))
                return
            except Exception as exc:  # KafkaException while nothing answers at the address
                self.client.poll(0)  # serve the error callback: it names the cause ("Connection refused")
                last = self.last_error or _kafka_reason(exc)
            if self.refusal is not None:
                raise KafkaConnectionError(describe_kafka_error(self.refusal, self.bootstrap, self.config))
            if time.monotonic() + delay > deadline:
                raise BrokerUnavailable(f"no Kafka broker answers at {self.bootstrap} (tried for {timeout:.0f} s; "
                                        f"last error: {last})")
            if say is not None and not told:
                say(f"Kafka at {self.bootstrap} does not answer ({last}); retrying for up to {timeout:.0f} s")
                told = True
            time.sleep(delay)
            delay = min(delay * 2, 2.0)


def _kafka_reason(exc: Exception) -> str:
    """The broker's error name and message from a KafkaException, else its text."""
    err = exc.args[0] if exc.args else None
    if hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(exc)
