"""Exactly-once output with Kafka transactions: each batch of output
messages is committed in one transaction together with the input position
it answers, stored as the committed offsets of a consumer group of its own
(Kafka's consume-transform-produce pattern, ``send_offsets_to_transaction``).

A writer that restarts from an older state (a runner's snapshot, a
checkpoint file) recomputes the outputs after that state, but the outputs
whose input positions the group already covers were committed before the
crash: :meth:`TransactionalOutput.already_written` names them so they are
not written again, and a ``read_committed`` consumer sees each output once.
Starting a writer with the same ``transactional.id`` fences an older
instance still alive (a zombie from before a failover): its open
transaction is aborted and it can commit nothing more.

Needs a broker with transactions (Apache Kafka); the one stand-in broker
that lacks them fails :meth:`TransactionalOutput.__init__` with one clear line.
No Beam here.
"""

from __future__ import annotations

import warnings

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .group_offsets import committed_offsets
from .producer import KafkaDeliveryError, KafkaWriter


class TransactionsUnsupported(RuntimeError):
    """The broker refused to start a transactional producer."""


class TransactionalOutput:
    """Writes one output topic in transactions, one per :meth:`commit`;
    ``name`` identifies the writer across restarts (its ``transactional.id``
    and its consumer group, ``scinol-eos-<name>``)."""

    def __init__(self, bootstrap: str, topic: str, name: str, config: dict | None = None, timeout: float = 60.0):
        self.group = f"scinol-eos-{name}"
        self.timeout = timeout
        self.dead = False
        self.writer = KafkaWriter(bootstrap, topic, {**(config or {}), "transactional.id": self.group})
        self.groups = Consumer({"bootstrap.servers": bootstrap, **(config or {}), "group.id": self.group,
                                "enable.auto.commit": False, "isolation.level": "read_committed"})
        try:
            self.writer.producer.init_transactions(timeout)
        except KafkaException as exc:
            self.close()
            raise TransactionsUnsupported(f"the broker at {bootstrap} did not start a transactional producer "
                                          f"for topic {topic!r}: {exc.args[0].str()} (exactly-once output needs "
                                          f"a broker with Kafka transactions, e.g. Apache Kafka)") from None
        self.covered: dict[tuple[str, int], int] = {}
        """Next input offset per (topic, partition) whose output is not committed yet."""

    def already_written(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the output answering input ``offset`` was committed (by
        this writer's name, in this run or an earlier one)."""
        return offset < self._covered(topic, partition)

    def _covered(self, topic: str, partition: int) -> int:
        key = (topic, partition)
        if key not in self.covered:  # first sight of the partition: what earlier writers committed
            found = committed_offsets(self.groups, [TopicPartition(topic, partition)], self.timeout)[0]
            self.covered[key] = max(found.offset, 0)
        return self.covered[key]

    def commit(self, messages: list[tuple[bytes, bytes | None]], inputs: dict[tuple[str, int], int]) -> None:
        """Write ``messages`` ((value, key) pairs) and mark ``inputs`` (next
        offset per (topic, partition)) as answered, atomically."""
        producer = self.writer.producer
        positions = {**self.covered}
        for (topic, partition), offset in inputs.items():
            positions[(topic, partition)] = max(self._covered(topic, partition), offset)
        try:
            producer.begin_transaction()
            for value, key in messages:
                self.writer.produce(value, key)
            producer.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in positions.items()],
                                                 self.groups.consumer_group_metadata(), self.timeout)
            producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(self.timeout)
            else:  # fatal (e.g. fenced by a newer instance): the producer can do nothing more
                self.dead = True
            raise KafkaDeliveryError(f"transaction on topic {self.writer.topic!r} failed: {error.str()}") from None
        self.writer.check()
        self.covered = positions

    def close(self) -> None:
        if self.dead:  # nothing to flush, and flushing a fenced producer fails
            producer, self.writer.producer = self.writer.producer, None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "abort_transaction failed during close": it was fenced
                try:
                    producer.close()
                except KafkaException:
                    pass  # the fatal error again; the client is destroyed all the same
        else:
            self.writer.close()
        self.groups.close()
