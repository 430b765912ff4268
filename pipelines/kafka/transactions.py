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

With a ``journal`` topic, each transaction also appends which inputs it
answered, so the order of the commits is on record with them:
:meth:`TransactionalOutput.committed_order` reads it back for a writer
whose state restarts behind what was committed, which then re-applies its
inputs in that order (a model reading several partitions otherwise meets
them in another order after a restore, and its later outputs would not
follow from the ones committed).

Needs a broker with transactions (Apache Kafka); the one stand-in broker
that lacks them fails :meth:`TransactionalOutput.__init__` with one clear line.
No Beam here.
"""

from __future__ import annotations

import json
import logging
import time
import warnings

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from .consumer import consumer_settings
from .group_offsets import committed_offsets
from .producer import KafkaDeliveryError, KafkaWriter


log = logging.getLogger("pipelines.kafka")
_STUCK = "the call did not return within its timeout"
_UNREACHABLE = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


def _within(timeout: float, call, *args):
    """``call(*args)`` in a thread, given ``timeout`` + 5 s to return:
    librdkafka's send_offsets_to_transaction can block past its own timeout
    when the group coordinator went down (confluentinc/librdkafka#5456), and
    a blocked call must not hang the pipeline. A call that does not return
    raises a _TIMED_OUT KafkaException and is left running (daemon)."""
    import threading

    outcome: dict = {}

    def target():
        try:
            outcome["value"] = call(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="scinol-txn-call", daemon=True)
    thread.start()
    thread.join(timeout + 5.0)
    if thread.is_alive():
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, _STUCK))
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class TransactionsUnsupported(RuntimeError):
    """The broker refused to start a transactional producer."""


class TransactionalOutput:
    """Writes one output topic in transactions, one per :meth:`commit`;
    ``name`` identifies the writer across restarts (its ``transactional.id``
    and its consumer group, ``scinol-eos-<name>``)."""

    STUCK_AFTER = 20.0
    """Seconds a transaction may make no progress before its producer is
    replaced (see :meth:`commit`)."""

    ASK_FOR = 15.0
    """Seconds one ask of the group's committed offsets may take before it is asked another way."""

    def __init__(self, bootstrap: str, topic: str, name: str, config: dict | None = None, timeout: float = 60.0,
                 ride_out: float = 180.0, journal: str | None = None):
        self.group = f"scinol-eos-{name}"
        self.journal = journal
        """Topic (one partition) each commit also records its inputs on; None: none."""
        self.admin = None
        self.bootstrap, self.config = bootstrap, dict(config or {})
        self.timeout, self.ride_out = timeout, ride_out
        self.dead = False
        self.groups = self._group_consumer()
        self.writer = KafkaWriter(bootstrap, topic, {**self.config, "transactional.id": self.group})
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
            found = self._group_offsets([TopicPartition(topic, partition)], time.monotonic() + self.timeout)[0]
            self.covered[key] = max(found.offset, 0)
        return self.covered[key]

    def commit(self, messages: list[tuple[bytes, bytes | None]], inputs: dict[tuple[str, int], int]) -> None:
        """Write ``messages`` ((value, key) pairs) and mark ``inputs`` (next
        offset per (topic, partition)) as answered, atomically. A broker
        outage is ridden out for up to ``ride_out`` seconds (a transaction
        the broker aborted meanwhile is written again); then, or at once
        when fenced, KafkaDeliveryError: the runner retries the bundle from
        its last snapshot with a new writer.

        A transaction open across an Apache Kafka crash and restart was seen
        never to complete (the producer waits on it for good). After
        :attr:`STUCK_AFTER` seconds without success the producer is replaced
        by a new one with the same ``transactional.id``, whose start aborts
        or completes the old transaction; the group's committed position
        then tells whether it committed (all or nothing), and the batch is
        written again only if it did not."""
        positions = {**self.covered}
        for (topic, partition), offset in inputs.items():
            positions[(topic, partition)] = max(self._covered(topic, partition), offset)
        deadline = time.monotonic() + self.ride_out
        while True:
            attempt_ends = min(deadline, time.monotonic() + self.STUCK_AFTER)
            try:
                self._transaction(messages, positions, attempt_ends, inputs)
                break
            except KafkaException as exc:
                error = exc.args[0]
                if error.fatal() or time.monotonic() >= deadline:  # fenced by a newer writer, or out of time
                    self.dead = self.dead or error.fatal()
                    raise KafkaDeliveryError(f"transaction on topic {self.writer.topic!r} failed: "
                                             f"{error.str()}") from None
                if error.txn_requires_abort():
                    self._retrying(self.writer.producer.abort_transaction, deadline)
                    continue
                stuck = error.code() == KafkaError._TIMED_OUT and error.str() == _STUCK
                log.warning("Kafka transaction on %r made no progress for %.0f s (%s); starting a new "
                            "transactional producer, which ends it", self.writer.topic, self.STUCK_AFTER, error.str())
                self._replace_producer(deadline, close_old=not stuck)
                if self._committed(positions, deadline):
                    break  # the stuck transaction had committed: nothing to write again
        # A committed transaction had every message delivered (librdkafka
        # fails the commit otherwise): failures on record are those of
        # aborted attempts, whose messages this one wrote again.
        self.writer.producer.poll(0)
        dropped = self.writer.forget_failures()
        if dropped:
            log.info("%d deliveries of aborted transactions on %r failed; written again since", dropped,
                     self.writer.topic)
        self.covered = positions

    def _replace_producer(self, deadline: float, close_old: bool) -> None:
        """A new transactional producer in place of a stuck one (same
        ``transactional.id``: starting it ends the old transaction). One
        still blocked in a call (``close_old`` False) is left to its thread,
        which the new producer's fencing releases."""
        old = self.writer
        old.producer, stuck = None, old.producer
        if close_old:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:  # nothing of it is kept: the new producer aborts or finishes its transaction
                    stuck.close() if hasattr(stuck, "close") else None
                except KafkaException:
                    pass
        self.writer = KafkaWriter(self.bootstrap, old.topic, {**self.config, "transactional.id": self.group})
        self._retrying(self.writer.producer.init_transactions, deadline)

    def _group_consumer(self, stable: bool = True) -> Consumer:
        """A consumer that asks the group's committed positions and names
        the group to transactions (it joins no group). ``stable``: it asks
        as a read_committed consumer does, so the broker answers only once
        no open transaction holds offsets for the group."""
        isolation = "read_committed" if stable else "read_uncommitted"
        return Consumer({"bootstrap.servers": self.bootstrap, **self.config, "group.id": self.group,
                         "enable.auto.commit": False, "isolation.level": isolation})

    def _committed(self, positions: dict, deadline: float) -> bool:
        """Whether the group already holds ``positions`` (the transaction
        that carried them committed)."""
        found = self._group_offsets([TopicPartition(t, p) for (t, p) in positions], deadline)
        return all(tp.offset >= positions[(tp.topic, tp.partition)] for tp in found)

    def _group_offsets(self, wanted: list, deadline: float) -> list:
        """The group's committed offsets of ``wanted``, asked again until
        ``deadline`` while no answer comes.

        A stable ask gets no answer while a transaction holds offsets for
        the group: librdkafka retries UNSTABLE_OFFSET_COMMIT until its
        timeout. After an Apache Kafka crash and restart such offsets were
        seen to stay pending for minutes. Every ask here follows this
        writer's ``init_transactions``, which ends (commits or aborts) any
        earlier transaction of its ``transactional.id``; pending offsets
        then belong to no transaction that can still commit. So when the
        stable ask times out, the committed offsets are asked without
        waiting for stability. The stable consumer is replaced too: one
        made before a crash was also seen never to answer, and a new one
        looks the group coordinator up afresh."""
        while True:
            ask = max(1.0, min(self.timeout, self.ASK_FOR, deadline - time.monotonic()))
            try:
                return committed_offsets(self.groups, wanted, ask)
            except KafkaException as exc:
                if exc.args[0].code() not in _UNREACHABLE or time.monotonic() >= deadline:
                    raise
            old, self.groups = self.groups, self._group_consumer()
            old.close()
            unstable = self._group_consumer(stable=False)
            try:
                found = committed_offsets(unstable, wanted, ask)
                log.warning("Kafka group %r gave no stable answer in %.0f s (a transaction's offsets still "
                            "pending, or the coordinator unreachable); its committed offsets were read without "
                            "waiting", self.group, ask)
                return found
            except KafkaException as exc:
                if exc.args[0].code() not in _UNREACHABLE or time.monotonic() >= deadline:
                    raise
            finally:
                unstable.close()
            time.sleep(0.5)

    def _transaction(self, messages, positions: dict, deadline: float, inputs: dict) -> None:
        producer = self.writer.producer
        self._retrying(lambda _timeout: producer.begin_transaction(), deadline)
        for value, key in messages:  # a refusal raises KafkaException: commit() aborts or replaces
            self.writer.queue(value, key)
        if self.journal is not None:
            entry = {"inputs": [[t, p, o] for (t, p), o in inputs.items()]}
            producer.produce(self.journal, json.dumps(entry).encode(), self.group.encode())
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        group = self.groups.consumer_group_metadata()
        self._retrying(lambda timeout: _within(timeout, producer.send_offsets_to_transaction, offsets, group,
                                               timeout), deadline)
        self._retrying(producer.commit_transaction, deadline)

    def committed_order(self, applied: dict[tuple[str, int], int], topics: set[str],
                        since_ms: float | None) -> list[tuple[tuple[str, int], int]]:
        """The order in which this writer committed its inputs past
        ``applied`` (next offset per (topic, partition) a restored state
        covers), as runs ((topic, partition), up to offset), read from the
        journal from ``since_ms`` (when the state was made; None: from the
        start). Only inputs of ``topics`` count. Call it after this writer
        started (its start fenced every earlier one, so nothing more
        commits behind it). A journal that ends before the committed
        positions gives what it has, with a warning."""
        wanted = {s: o for s, o in self._group_positions().items() if s[0] in topics and o > applied.get(s, -1)}
        if self.journal is None or not wanted:
            return []
        consumer = Consumer(consumer_settings(self.bootstrap, self.group + "-order",
                                              {**self.config, "isolation.level": "read_committed"}))
        try:
            return self._runs(consumer, wanted, dict(applied), since_ms)
        finally:
            consumer.close()

    def _runs(self, consumer: Consumer, wanted: dict, reach: dict, since_ms: float | None) -> list:
        journal = TopicPartition(self.journal, 0, -2)  # from the beginning
        if since_ms is not None:  # entries bear the broker's append time; ten minutes for clocks apart
            found = consumer.offsets_for_times([TopicPartition(self.journal, 0, int(since_ms) - 600_000)],
                                               self.timeout)[0]
            journal = found if found.offset >= 0 else TopicPartition(self.journal, 0, -1)
        consumer.assign([journal])
        runs, mine = [], self.group.encode()
        deadline = time.monotonic() + self.timeout + 30.0  # another writer's open transaction may hold the end back
        while any(reach.get(s, -1) < o for s, o in wanted.items()):
            batch = consumer.consume(1000, 0.5)
            ended = any(m.error() is not None and m.error().code() == KafkaError._PARTITION_EOF
                        and m.offset() >= self._journal_end() for m in batch)
            for msg in batch:
                if msg.error() is None and msg.key() == mine:
                    for topic, partition, end in json.loads(msg.value())["inputs"]:
                        _extend(runs, reach, (topic, partition), end)
            if (ended or time.monotonic() > deadline) and any(reach.get(s, -1) < o for s, o in wanted.items()):
                log.warning("the order journal %r ends before the inputs %r committed (%s); what follows goes in "
                            "the order it comes", self.journal, self.group, wanted)
                break
        return runs

    def _journal_end(self) -> int:
        """The journal's end offset, open transactions included."""
        from confluent_kafka import IsolationLevel
        from confluent_kafka.admin import OffsetSpec

        tp = TopicPartition(self.journal, 0)
        found = self._admin().list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                           request_timeout=self.timeout)
        return found[tp].result(self.timeout).offset

    def _group_positions(self) -> dict[tuple[str, int], int]:
        """Every input position the group holds."""
        from confluent_kafka import ConsumerGroupTopicPartitions

        found = self._admin().list_consumer_group_offsets([ConsumerGroupTopicPartitions(self.group)],
                                                          require_stable=True)
        result = found[self.group].result(self.timeout)
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or [] if tp.offset >= 0}

    def _admin(self):
        from confluent_kafka.admin import AdminClient

        if self.admin is None:
            self.admin = AdminClient({"bootstrap.servers": self.bootstrap, **self.config})
        return self.admin

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
                except (KafkaException, SystemError):
                    # The fatal error again (confluent-kafka sometimes raises it
                    # as a SystemError); the client is destroyed all the same.
                    pass
        else:
            self.writer.close()
        self.groups.close()


def _extend(runs: list, reach: dict, stream: tuple[str, int], end: int) -> None:
    """Add a journal entry (``stream`` answered up to ``end``) to ``runs``
    unless ``reach`` (how far each stream's runs go) covers it already
    (an entry a replay committed again, or one before the state)."""
    if end <= reach.get(stream, -1):
        return
    reach[stream] = end
    if runs and runs[-1][0] == stream:
        runs[-1] = (stream, end)
    else:
        runs.append((stream, end))
