"""Reading Kafka without Beam: consumer settings, the offset ranges a read
covers, a reader of one partition, and reading a topic from its start.

Every consumer the project makes is configured by :func:`consumer_settings`:

* ``enable.auto.commit=false`` and ``enable.auto.offset.store=false``:
  offsets are committed only by the reader's owner (the Beam source commits
  from bundle finalizers, after the runner has durably committed the output);
* ``enable.partition.eof=true``: how the end of a partition is seen;
* ``session.timeout.ms=6000``; ``auto.offset.reset=earliest`` (only reached
  when a start offset is below the log start);
* ``fetch.queue.backoff.ms=10``: librdkafka backs a partition's fetcher off
  for this long once its local queue is full; its 1000 ms default drains the
  queue and stalls a reader slower than the fetcher (measured: ~1.2 s per
  200k messages);
* ``socket.timeout.ms=10000``: a paused or hung broker is noticed in 10 s,
  not librdkafka's 60;
* ``queued.min.messages=20000``: how far librdkafka reads ahead of a
  partition's consumer (ten batches of the pipeline's default 2,000); its
  100,000 default fills a lagging consumer's memory with a backlog it
  cannot use any sooner (measured: ``scinol run --bounded`` over 1,000,000
  toy events, peak RSS 426-437 MiB by default, 384-389 MiB with this, in
  the same time);
* ``fetch.wait.max.ms=20``: a consumer that has caught up sends fetches the
  broker may hold this long even when new data arrives (tansu does), so the
  500 ms default would be the floor of the pipeline's latency.

``config`` overrides all but the commit and EOF settings (TLS, SASL, fetch
sizes...). Consumers use ``assign`` (no group membership or rebalancing):
a group id is only an offset store.

End offsets are learnt from a fetch, not from ListOffsets LATEST: the
embedded tansu broker answers that request wrongly; the fetch answer is
right on tansu and on Apache Kafka alike.
"""

from __future__ import annotations

import logging
import sys
import time
import uuid
from typing import Iterator, NamedTuple, Optional

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, TopicPartition

from .group_offsets import committed_offsets
from .health import quiet, with_error_reporting

log = logging.getLogger(__name__)

UNBOUNDED_STOP = sys.maxsize
"""The ``stop`` of a range without an end."""


class KafkaMessage(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int  # -1 when the broker gave no timestamp
    key: Optional[bytes]
    value: bytes
    headers: Optional[list] = None  # [(str, bytes | None), ...] in order; None when it had none


class Position(NamedTuple):
    """Where an event came from: what a checkpoint's offsets refer to, and
    the message's key (what its prediction is keyed by)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None = None


class StopRule:
    """Ends the read of one partition on a condition of its content: a
    picklable prototype, copied once per partition per reader. ``observe``
    sees each batch after it was emitted; ``idle`` is asked when a poll
    found nothing. Either returning True ends the read there, after
    emitting ``last_batch()`` if it is not empty (a closing message of the
    rule's own making, e.g. an end-of-input marker for what follows)."""

    linger_seconds: float = 0.0
    """How long an unbounded read keeps polling at the end of its partition
    after a batch before it defers (an SDF checkpoint): for a partition whose
    messages answer what the pipeline itself has just written (sharded
    mode's feedback), the answer comes within a Kafka round trip, where a
    deferral costs a runner's bundle."""

    def linger_after(self, batch: list) -> float:
        """How long to linger (see :attr:`linger_seconds`) after ``batch``."""
        return self.linger_seconds

    def observe(self, batch: list) -> bool:
        return False

    def idle(self) -> bool:
        return False

    def last_batch(self, topic: str, partition: int) -> list:
        return []

    def heartbeat(self, topic: str, partition: int) -> list:
        """Asked when a poll found nothing and the read goes on: messages of
        the rule's own making to emit now (e.g. to wake what follows)."""
        return []


class PartitionRange(NamedTuple):
    """A partition and the offsets ``[start, stop)`` to read from it
    (``stop`` = :data:`UNBOUNDED_STOP`: no end), fixed before a read starts."""
    topic: str
    partition: int
    start: int
    stop: int
    stop_rule: Optional[StopRule] = None


PREFETCH_MESSAGES = 20_000
"""Messages librdkafka keeps fetched ahead per partition (``queued.min.messages``)."""


def consumer_settings(bootstrap: str, group_id: Optional[str] = None, config: Optional[dict] = None) -> dict:
    """librdkafka settings for every consumer (see the module docstring)."""
    conf = {
        "bootstrap.servers": bootstrap,
        "session.timeout.ms": 6000,
        "auto.offset.reset": "earliest",
        "fetch.queue.backoff.ms": 10,
        "queued.min.messages": PREFETCH_MESSAGES,
        "socket.timeout.ms": 10000,
        "fetch.wait.max.ms": 20,
    }
    conf.update(config or {})
    conf = quiet(conf)
    conf["enable.auto.commit"] = False
    conf["enable.auto.offset.store"] = False
    conf["enable.partition.eof"] = True
    if group_id is not None:
        conf["group.id"] = group_id
    elif "group.id" not in conf:
        # librdkafka wants a group id for some requests even with assign();
        # a private one commits nothing.
        conf["group.id"] = f"scinol-{uuid.uuid4().hex}"
    return conf


def fatal_consume_error(err) -> bool:
    """Errors that retrying cannot cure: stop the read and say so."""
    if err.fatal():
        return True
    return err.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
    )


class TopicMissing(RuntimeError):
    """The topic does not exist (or has no partitions) on the cluster."""


def topic_partitions(client, topic: str, bootstrap: str, timeout: float = 30.0) -> list[int]:
    """The partitions of ``topic``, sorted, from a consumer's or admin's metadata."""
    md = client.list_topics(topic, timeout=timeout)
    tmd = md.topics.get(topic)
    if tmd is None or tmd.error is not None or not tmd.partitions:
        raise TopicMissing(f"Kafka topic {topic!r} at {bootstrap} is not available: "
                           f"{getattr(tmd, 'error', None) or 'no partitions'}")
    return sorted(tmd.partitions)


def end_offsets_by_fetch(consumer, topic: str, starts: dict[int, int], timeout: float,
                         bootstrap: str) -> dict[int, int]:
    """The end offset (high watermark) of each partition in ``starts`` as a
    fetch from that start reports it (an EOF or a message answers it)."""
    consumer.assign([TopicPartition(topic, p, off) for p, off in starts.items()])
    pending = set(starts)
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no fetch answer from {topic} partitions {sorted(pending)} within "
                               f"{timeout:.0f} s (broker {bootstrap})")
        for m in consumer.consume(1000, timeout=0.1):
            err = m.error()
            if err is None or err.code() == KafkaError._PARTITION_EOF:
                pending.discard(m.partition())
            elif fatal_consume_error(err):
                raise RuntimeError(f"Kafka error on {topic}[{m.partition()}]: {err}")
    highs = {}
    for p in starts:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)
        if high < 0:  # not reported by the fetch: should not happen after a message or EOF
            raise RuntimeError(f"no high watermark for {topic}[{p}] after fetching")
        highs[p] = high
    consumer.unassign()
    return highs


def _start_offsets(consumer, topic, partitions, given, group_id, timeout) -> dict[int, int]:
    """Given offsets, else the group's committed ones, else the log start."""
    unknown = set(given) - set(partitions)
    if unknown:
        raise ValueError(f"start_offsets names partitions {sorted(unknown)} that topic "
                         f"{topic!r} does not have (it has {partitions})")
    starts: dict[int, int] = {}
    for p, off in given.items():
        if off < 0:
            raise ValueError(f"start_offsets[{p}] = {off}: give a concrete offset (>= 0)")
        starts[p] = int(off)
    need = [TopicPartition(topic, p) for p in partitions if p not in starts]
    if group_id is not None and need:
        for tp in committed_offsets(consumer, need, timeout):
            if tp.error is not None:
                raise RuntimeError(f"cannot fetch committed offset of {topic}[{tp.partition}] "
                                   f"for group {group_id!r}: {tp.error}")
            if tp.offset >= 0:
                starts[tp.partition] = tp.offset
    for p in partitions:
        if p not in starts:
            starts[p] = max(0, _log_start(consumer, TopicPartition(topic, p), timeout))
    return starts


# A topic just made (or a leader just moved) answers these until its metadata settles.
_LEADER_MOVING = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)


def _log_start(consumer, tp: TopicPartition, timeout: float) -> int:
    """The partition's first offset, asked again while its leader is moving, up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)[0]
        except KafkaException as exc:
            if exc.args[0].code() not in _LEADER_MOVING or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def resolve_ranges(bootstrap: str, topic: str, *, bounded: bool, group_id: Optional[str] = None,
                   start_offsets: Optional[dict[int, int]] = None, consumer_config: Optional[dict] = None,
                   stop_after: Optional[int] = None, timeout: float = 30.0,
                   start_at_end: bool = False, use_committed: bool = True) -> list[PartitionRange]:
    """Each partition of ``topic`` and the offsets to read:

    * ``start``: ``start_offsets[partition]`` if given, else the group's
      committed offset (unless ``use_committed`` is False), else the log
      start; ``start_at_end``: partitions
      without a given start begin at their current end (read what comes next);
    * ``stop``: bounded, the end offset seen now (by a fetch); unbounded,
      :data:`UNBOUNDED_STOP`; ``stop_after=N`` caps either at ``start + N``,
      the first N offsets of each partition (per partition, not a total:
      a total would depend on scheduling).
    """
    # A fetch at the end of a partition is held by the broker for
    # fetch.wait.max.ms before it answers: keep that short where it only delays the start.
    conf, _ = with_error_reporting(consumer_settings(bootstrap, group_id, {"fetch.wait.max.ms": 50,
                                                                           **(consumer_config or {})}),
                                   f"consumer resolving {topic!r}")
    consumer = Consumer(conf)
    given = dict(start_offsets or {})
    try:
        partitions = topic_partitions(consumer, topic, bootstrap, timeout)
        starts = _start_offsets(consumer, topic, partitions, given, group_id if use_committed else None, timeout)
        if start_at_end:
            ends = end_offsets_by_fetch(consumer, topic, starts, timeout, bootstrap)
            starts = {p: starts[p] if p in given else ends[p] for p in partitions}
        if bounded:
            stops = end_offsets_by_fetch(consumer, topic, starts, timeout, bootstrap)
        else:
            stops = {p: UNBOUNDED_STOP for p in partitions}
    finally:
        consumer.close()
    ranges = []
    for p in partitions:
        start = starts[p]
        if start > stops[p]:
            log.warning("kafka %s[%d]: start offset %d is past the end offset %d; reading nothing there",
                        topic, p, start, stops[p])
        stop = max(start, stops[p])
        if stop_after is not None:
            stop = min(stop, start + stop_after)
        ranges.append(PartitionRange(topic, p, start, stop))
    return ranges


class Polled(NamedTuple):
    """What one poll of a partition gave."""
    batch: list  # KafkaMessage, in offset order
    newest_ts: int  # newest message timestamp (ms), -1 if none had one
    reached_end: bool  # the broker said there is nothing more for now (EOF)
    eof_at: Optional[int]  # the fetch position the EOF reported
    answered: bool  # the poll returned anything at all (messages or events)


class OffsetsGone(RuntimeError):
    """Offsets a read needs were deleted (retention, compaction of a whole
    segment) before it read them: what was there cannot be applied in order."""


REVIVE_SECONDS = 20.0
"""How long a reader may get nothing at all (no message, no end of
partition) after broker errors began before it re-creates its consumer."""


class PartitionReader:
    """A consumer assigned to one partition, and where it reads next.

    A position below the partition's log start (offsets deleted by retention
    before they were read) raises :class:`OffsetsGone`: librdkafka's reset
    to the earliest offset would skip those offsets without a word, and the
    batches would still cover them.

    After a broker restart librdkafka can leave an assigned partition
    unfetched for good (confluentinc/librdkafka#5153, open: a new consumer
    reads on). So once broker errors have been reported and then
    ``revive_seconds`` pass without another error, a message or an end of
    partition, the reader closes its consumer and assigns a new one at its
    position (again every ``revive_seconds`` while that lasts). A healthy
    consumer answers within a fetch of the broker's return, so this never
    touches one."""

    def __init__(self, bootstrap: str, topic: str, partition: int, group_id: Optional[str] = None,
                 config: Optional[dict] = None, error_counter=None, revive_seconds: float = REVIVE_SECONDS):
        self.topic, self.partition = topic, partition
        self.bootstrap, self.group_id, self.config = bootstrap, group_id, config
        settings = {**consumer_settings(bootstrap, group_id, config), "auto.offset.reset": "error"}
        self._conf, self.reporter = with_error_reporting(settings, f"consumer of {topic}[{partition}]",
                                                         error_counter)
        self.consumer = Consumer(self._conf)
        self.position: Optional[int] = None
        """The offset the next poll returns from; None: unknown (seek first)."""
        self.revive_seconds = revive_seconds
        self.revived = 0  # consumers re-created (see the class docstring)
        self._last_answer = time.monotonic()  # of a message or an end of partition

    def seek(self, offset: int) -> None:
        if self.position != offset:
            # (Re)assigning drops whatever was prefetched and fetches from `offset`.
            self.consumer.assign([TopicPartition(self.topic, self.partition, offset)])
            self.position = offset

    def poll(self, want: int, timeout: float) -> Polled:
        """Up to ``want`` messages: what is already fetched at once, else
        wait up to ``timeout`` for the first one only (waiting for all of
        them would add ``timeout`` of latency to every batch not full)."""
        msgs = self.consumer.consume(want, timeout=0)
        if not msgs:
            msgs = self.consumer.consume(1, timeout=timeout)
            if msgs and want > 1:
                msgs += self.consumer.consume(want - 1, timeout=0)
        polled = self._sort(msgs)
        if polled.batch or polled.reached_end:
            self._last_answer = time.monotonic()
            if self.reporter is not None and self.reporter.in_trouble:
                self.reporter.recovered()
        elif self._wedged():
            self._revive()
        return polled

    def lag(self, polled: Polled, position: int) -> int:
        """Messages between ``position`` and the partition's end, as of
        ``polled`` (its end of partition) or the end the last fetch saw."""
        if polled.reached_end and polled.eof_at is not None:
            return max(0, polled.eof_at - position)
        _, end = self.consumer.get_watermark_offsets(TopicPartition(self.topic, self.partition), cached=True)
        return max(0, end - position) if end >= 0 else 0

    def _wedged(self) -> bool:
        """Broker errors were reported, then ``revive_seconds`` passed with
        neither another error (the broker is back) nor an answer."""
        if self.reporter is None or not self.reporter.in_trouble or self.position is None:
            return False
        return time.monotonic() - max(self._last_answer, self.reporter.last_error) >= self.revive_seconds

    def _revive(self) -> None:
        log.warning("Kafka consumer of %s[%d]: nothing read for %.0f s after broker errors stopped; re-creating "
                    "it at offset %d (librdkafka can leave a partition unfetched after a broker restart)",
                    self.topic, self.partition, time.monotonic() - self.reporter.last_error, self.position)
        self.close()
        self.consumer = Consumer(self._conf)
        self.consumer.assign([TopicPartition(self.topic, self.partition, self.position)])
        self.revived += 1
        self._last_answer = time.monotonic()  # the next revive, if needed, one period later

    def _sort(self, msgs) -> Polled:
        topic, partition = self.topic, self.partition
        new_tuple = tuple.__new__  # KafkaMessage(...) without the namedtuple's Python-level __new__
        batch, newest_ts, reached, eof_at = [], -1, False, None
        for m in msgs:
            err = m.error()
            if err is None:
                ts_type, ts = m.timestamp()
                if ts_type == TIMESTAMP_NOT_AVAILABLE:
                    ts = -1
                elif ts > newest_ts:
                    newest_ts = ts
                batch.append(new_tuple(KafkaMessage, (topic, partition, m.offset(), ts, m.key(), m.value(),
                                                      m.headers())))
            elif err.code() == KafkaError._PARTITION_EOF:
                reached, eof_at = True, m.offset()
            elif err.code() == KafkaError._AUTO_OFFSET_RESET:
                raise OffsetsGone(self._gone())
            elif fatal_consume_error(err):
                raise RuntimeError(f"Kafka consumer error on {topic}[{partition}]: {err}")
            else:
                log.warning("Kafka consumer error on %s[%d] (retrying): %s", topic, partition, err)
        return Polled(batch, newest_ts, reached, eof_at, bool(msgs))

    def _gone(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        try:
            low, _ = self.consumer.get_watermark_offsets(TopicPartition(self.topic, self.partition), timeout=10)
            kept = f"; it now starts at offset {low:,}"
        except KafkaException:
            kept = ""
        at = "" if self.position is None else f" from offset {self.position:,}"
        return (f"{where}: the messages{at} on were deleted (retention) before this run read them{kept}: they "
                f"cannot be learned from in order, so the run stops rather than skip them")

    def commit(self, next_offset: int) -> None:
        """Store ``next_offset`` (the next one to read) for the group."""
        commit_offset(self.consumer, self.topic, self.partition, next_offset)

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def commit_offset(consumer, topic: str, partition: int, next_offset: int) -> None:
    consumer.commit(offsets=[TopicPartition(topic, partition, next_offset)], asynchronous=False)


def read_topic(bootstrap: str, topic: str, *, start="beginning", partitions: Optional[list[int]] = None,
               limit: Optional[int] = None, idle_timeout: float = 10.0, timeout: Optional[float] = None,
               config: Optional[dict] = None) -> Iterator[KafkaMessage]:
    """Messages of ``topic`` (or of ``partitions``) from ``start`` of each
    partition: ``"beginning"``, ``"end"`` (only what arrives from now) or an
    offset. Stops after ``limit`` messages, ``idle_timeout`` seconds without
    one (None: never), ``timeout`` seconds in all, or when the caller stops
    iterating. Errors that retrying cannot cure raise."""
    consumer = Consumer(consumer_settings(bootstrap, None, config))
    try:
        if partitions is None:
            partitions = topic_partitions(consumer, topic, bootstrap, timeout=10.0)
        if start == "end":  # learnt from a fetch: tansu answers ListOffsets LATEST wrongly (module docstring)
            ends = end_offsets_by_fetch(consumer, topic, _start_offsets(consumer, topic, partitions, {}, None, 10.0),
                                        10.0, bootstrap)
            consumer.assign([TopicPartition(topic, p, ends[p]) for p in partitions])
        else:
            consumer.assign([TopicPartition(topic, p, _start_offset(start)) for p in partitions])
        yield from _consume(consumer, topic, limit, idle_timeout, timeout)
    finally:
        consumer.close()


def _start_offset(start) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if start == "beginning":
        return OFFSET_BEGINNING
    if start == "end":
        return OFFSET_END
    if isinstance(start, int) and start >= 0:
        return start
    raise ValueError(f"start must be 'beginning', 'end' or an offset >= 0, not {start!r}")


def _consume(consumer, topic, limit, idle_timeout, timeout) -> Iterator[KafkaMessage]:
    count, now = 0, time.monotonic()
    last, deadline = now, None if timeout is None else now + timeout
    while limit is None or count < limit:
        now = time.monotonic()
        if (idle_timeout is not None and now - last > idle_timeout) or (deadline is not None and now > deadline):
            return
        for m in consumer.consume(min(5000, limit - count) if limit else 5000, timeout=0.2):
            err = m.error()
            if err is None:
                last = time.monotonic()
                ts_type, ts = m.timestamp()
                count += 1
                yield KafkaMessage(topic, m.partition(), m.offset(), -1 if ts_type == TIMESTAMP_NOT_AVAILABLE else ts,
                                   m.key(), m.value(), m.headers())
            elif err.code() != KafkaError._PARTITION_EOF and fatal_consume_error(err):
                raise RuntimeError(f"Kafka consumer error on {topic}[{m.partition()}]: {err}")
