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

import time
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

    def __init__(self, bootstrap: str, topic: str, name: str, config: dict | None = None, timeout: float = 60.0,
                 ride_out: float = 60.0):
        self.group = f"scinol-eos-{name}"
        self.timeout, self.ride_out = timeout, ride_out
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
        offset per (topic, partition)) as answered, atomically. A broker
        outage is ridden out for up to ``ride_out`` seconds (a transaction
        the broker aborted meanwhile is written again); then, or at once
        when fenced, KafkaDeliveryError: the runner retries the bundle from
        its last snapshot with a new writer. (A transaction open across an
        Apache Kafka restart was seen not to complete within 200 s here;
        a new writer, which aborts it, is the way out.)"""
        positions = {**self.covered}
        for (topic, partition), offset in inputs.items():
            positions[(topic, partition)] = max(self._covered(topic, partition), offset)
        deadline = time.monotonic() + self.ride_out
        while True:
            try:
                self._transaction(messages, positions, deadline)
                break
            except KafkaException as exc:
                error = exc.args[0]
                if not error.txn_requires_abort() or time.monotonic() >= deadline:
                    self.dead = self.dead or error.fatal()
                    raise KafkaDeliveryError(f"transaction on topic {self.writer.topic!r} failed: "
                                             f"{error.str()}") from None
                self._retrying(self.writer.producer.abort_transaction, deadline)
        self.writer.check()
        self.covered = positions

    def _transaction(self, messages, positions: dict, deadline: float) -> None:
        producer = self.writer.producer
        self._retrying(lambda _timeout: producer.begin_transaction(), deadline)
        for value, key in messages:
            self.writer.produce(value, key)
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        group = self.groups.consumer_group_metadata()
        self._retrying(lambda timeout: producer.send_offsets_to_transaction(offsets, group, timeout), deadline)
        self._retrying(producer.commit_transaction, deadline)

    def _retrying(self, call, deadline: float) -> None:
        """``call(timeout)``, again while it fails with a
        retriable error (broker unreachable, timed out) before ``deadline``:
        librdkafka resumes the same operation on the next call."""
        while True:
            try:
                return call(max(1.0, min(self.timeout, deadline - time.monotonic())))
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

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
