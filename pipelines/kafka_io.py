"""A native Python Kafka connector for Beam: ``ReadFromKafka`` and ``WriteToKafka``.

Beam's own ``apache_beam.io.kafka.ReadFromKafka`` is a Java cross-language
transform (it needs jars from Maven). This module reads and writes Kafka with
confluent-kafka from plain Python DoFns, so it runs on any portable runner
(FnApiRunner, PortableRunner, Flink, Dataflow) with nothing runner-specific.

Reading
-------
``ReadFromKafka(bootstrap, topic, ...)`` yields **batches**: each element is a
``list[KafkaMessage]`` from one partition, in offset order, at most
``max_batch`` long. Internally::

    Impulse ─► _ResolvePartitions ─► _ReadPartitionFn (splittable DoFn)

* ``_ResolvePartitions`` (one consumer, at pipeline run time, on a worker)
  lists the topic's partitions and fixes each partition's restriction
  ``OffsetRange(start, stop)``:

  - ``start`` = ``start_offsets[partition]`` if given, else the group's
    committed offset (``group_id`` given and an offset committed), else the
    earliest offset (ListOffsets EARLIEST);
  - bounded: ``stop`` = the partition's high watermark *learnt from a fetch*
    (the consumer is assigned at ``start`` with ``enable.partition.eof`` and
    consumes until each partition has answered with a message or an EOF; then
    ``get_watermark_offsets(cached=True)``). ListOffsets LATEST is not used:
    the embedded tansu broker answers it wrongly; the fetch answer is right on
    tansu and on Apache Kafka alike;
  - unbounded: ``stop`` = ``sys.maxsize``;
  - ``stop_after=N`` caps either at ``start + N``: **the first N offsets of
    each partition** from its start. That is the first N messages per
    partition unless the partition has offset gaps (compaction, transaction
    markers), in which case it is fewer. The cap is per partition, not a total
    over partitions, because a total is not deterministic (which partition
    contributed what would depend on scheduling) and cannot be enforced
    without state shared between restrictions. With ``stop_after`` an
    unbounded read waits for data until each partition has reached its cap,
    then finishes; it is the way to stop unbounded reads in tests and
    backfills.

* ``_ReadPartitionFn`` processes one partition restriction with an
  ``OffsetRestrictionTracker`` and keeps one consumer per (DoFn instance,
  partition) across calls (re-assigned only when a restriction does not start
  where the consumer stands). It claims each batch before emitting it, with
  one ``try_claim`` of the batch's last offset (exact under runner-initiated
  splits; see ``_process``), and returns with ``defer_remainder`` (an SDF
  checkpoint) when the partition is idle (unbounded) or after
  ``checkpoint_seconds`` of reading (both modes, so partitions take turns and
  offsets get committed as it goes). Bounded restrictions finish at ``stop``.

* Consumers get ``enable.auto.commit=false``, ``session.timeout.ms=6000``,
  ``auto.offset.reset=earliest`` (only reached when a start offset is below
  the log start), ``enable.partition.eof=true`` (how the end of a partition is
  seen) and ``fetch.queue.backoff.ms=10`` (librdkafka's 1000 ms default
  stalls a reader slower than its fetcher) and ``socket.timeout.ms=10000``
  (a paused or hung broker is noticed in 10 s, not librdkafka's 60);
  ``consumer_config`` overrides all but the first and the EOF setting (TLS,
  SASL, fetch sizes...).

* Broker trouble (refused connections, timeouts, all brokers down) is
  retried by librdkafka with back-off and reported by every client, reader
  and writer alike, as rate-limited warnings and "working again" when it
  ends (:mod:`pipelines.kafka_health`).

* Counters (namespace ``kafka_io``): ``messages_read``, ``batches_read``,
  ``idle_checkpoints``, ``timed_checkpoints``, ``broker_errors``;
  ``messages_delivered`` for the writer.

* Event time: each batch is emitted with the timestamp of its newest message
  (never below the current watermark, so nothing is late), and a
  ``ManualWatermarkEstimator`` is advanced to the newest message timestamp
  seen. An idle partition holds its watermark (there is no way to know the
  next message's event time).

* Offsets are committed to ``group_id`` (when given) only from a bundle
  finalizer, i.e. after the runner has durably committed the bundle's output,
  so a restarted pipeline resumes exactly after the last committed output:
  nothing lost, nothing repeated (for a runner that finalizes bundles; a crash
  between the bundle commit and the finalizer repeats that bundle, as with
  any Kafka consumer that commits after processing; exactly-once across
  crashes needs the offsets stored with the state, DESIGN §4). Commits are
  monotonic per partition. Consumers use ``assign`` (no group membership/rebalancing); the
  group is only an offset store.

Writing
-------
``WriteToKafka(bootstrap, topic, producer_config=None, key_fn=None)`` takes a
PCollection of ``bytes`` (or ``str``) values, ``(key, value)`` pairs, or lists
of either (batches). One ``Producer`` per DoFn instance; ``flush()`` in
``finish_bundle``; every delivery report is checked and the first failure
raises ``RuntimeError`` naming topic, partition and error (a bundle never
succeeds with a message undelivered). A full local queue (``BufferError``) is
handled by polling and retrying. A broker that is down is waited for (with
a warning every 10 s) until ``message.timeout.ms`` (librdkafka default
300 s; raise it in ``producer_config`` to ride out longer outages, lower it
to fail faster), after which delivery fails. ``flush_each=True`` waits for
each element's acknowledgement (dead letters: see ``WriteToKafka``).

Runner
------
Pick the runner explicitly (DESIGN §3), e.g.::

    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    with beam.Pipeline(runner=FnApiRunner()) as p:
        p | ReadFromKafka("127.0.0.1:9092", "events") | ...

No pipeline options are needed for either mode on the FnApiRunner. On that
runner the deferred remainders of an unbounded read are re-run at once (resume
delays are not honoured), and output crossing a fusion break is held until the
source finishes (DESIGN §3).
"""

from __future__ import annotations

import copy
import logging
import sys
import threading
import time
import uuid
from typing import Any, Callable, NamedTuple, Optional

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp
from confluent_kafka import (TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

from .kafka.group_offsets import committed_offsets
from .kafka_health import with_error_reporting

_LOG = logging.getLogger(__name__)

METRICS_NAMESPACE = "kafka_io"

UNBOUNDED_STOP = sys.maxsize


class KafkaMessage(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int  # -1 when the broker gave no timestamp
    key: Optional[bytes]
    value: bytes


class _PartitionSpec(NamedTuple):
    """One partition to read and its initial offset range (resolved at run time)."""
    topic: str
    partition: int
    start: int
    stop: int
    stop_rule: Any = None
    """Optional: ends the read early (see :class:`StopRule`)."""


class StopRule:
    """Ends the read of one partition on a condition of its content: a
    picklable prototype, copied once per partition per reader. ``observe``
    sees each batch after it was emitted; ``idle`` is asked when a poll
    found nothing. Either returning True ends the restriction there, after
    emitting ``last_batch()`` if it is not empty (a closing message of the
    rule's own making, e.g. an end-of-input marker for what follows)."""

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
    (``stop`` = :data:`UNBOUNDED_STOP`: no end), fixed before the pipeline
    starts; see :class:`ReadFromKafkaRanges`."""
    topic: str
    partition: int
    start: int
    stop: int
    stop_rule: Optional[StopRule] = None


# --------------------------------------------------------------------------- config

def _consumer_config(bootstrap: str, group_id: Optional[str], consumer_config: Optional[dict]) -> dict:
    conf = {
        "bootstrap.servers": bootstrap,
        "session.timeout.ms": 6000,
        "auto.offset.reset": "earliest",  # only used when a start offset is below the log start
        "enable.partition.eof": True,
        # librdkafka backs a partition's fetcher off for this long once its
        # local queue is full (queued.min.messages / queued.max.messages.kbytes);
        # the default 1000 ms drains the queue and stalls a reader that is
        # slower than the fetcher (measured: ~1.2 s per 200k messages).
        "fetch.queue.backoff.ms": 10,
        # A fetch is answered within fetch.wait.max.ms (500 ms); librdkafka's
        # 60 s default would leave a paused or hung broker unnoticed for a
        # minute. After 10 s the request is failed, the connection re-made
        # with back-off, and the error reported (pipelines.kafka_health).
        "socket.timeout.ms": 10000,
        # A consumer that has caught up sends fetches the broker may hold for
        # this long before answering, even when new data arrives meanwhile
        # (tansu does): librdkafka's 500 ms default is then the floor of the
        # pipeline's latency. 20 ms costs ~50 small requests/s per idle partition.
        "fetch.wait.max.ms": 20,
    }
    conf.update(consumer_config or {})
    # Not overridable: offsets are committed only from bundle finalizers, and
    # the reader relies on EOF events to learn the end of a partition.
    conf["enable.auto.commit"] = False
    conf["enable.auto.offset.store"] = False
    conf["enable.partition.eof"] = True
    if group_id is not None:
        conf["group.id"] = group_id
    elif "group.id" not in conf:
        # librdkafka wants a group id for some requests even with assign();
        # a private one commits nothing (we never commit without group_id).
        conf["group.id"] = f"scinol-kafka-io-{uuid.uuid4().hex}"
    return conf


def _fatal_consume_error(err) -> bool:
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


# --------------------------------------------------------------------------- resolve

def resolve_ranges(bootstrap: str, topic: str, *, bounded: bool, group_id: Optional[str] = None,
                   start_offsets: Optional[dict[int, int]] = None, consumer_config: Optional[dict] = None,
                   stop_after: Optional[int] = None, timeout: float = 30.0,
                   start_at_end: bool = False) -> list[PartitionRange]:
    """Each partition of ``topic`` and the offsets to read (see the module
    docstring for the rules); ``start_at_end``: start every partition without
    a given start offset at its current end (read only what comes next)."""
    # A fetch at the end of a partition is held by the broker for
    # fetch.wait.max.ms (500 ms by default) before it answers with the
    # high watermark: keep that short here, where it only delays the start.
    conf, _ = with_error_reporting(_consumer_config(bootstrap, group_id, {"fetch.wait.max.ms": 50,
                                                                          **(consumer_config or {})}),
                                   f"consumer resolving {topic!r}")
    consumer = Consumer(conf)
    start_offsets = dict(start_offsets or {})
    try:
        md = consumer.list_topics(topic, timeout=timeout)
        tmd = md.topics.get(topic)
        if tmd is None or tmd.error is not None or not tmd.partitions:
            raise RuntimeError(f"Kafka topic {topic!r} at {bootstrap} is not available: "
                               f"{getattr(tmd, 'error', None) or 'no partitions'}")
        partitions = sorted(tmd.partitions)
        unknown = set(start_offsets) - set(partitions)
        if unknown:
            raise ValueError(f"start_offsets names partitions {sorted(unknown)} that topic "
                             f"{topic!r} does not have (it has {partitions})")

        starts: dict[int, int] = {}
        for p, off in start_offsets.items():
            if off < 0:
                raise ValueError(f"start_offsets[{p}] = {off}: give a concrete offset (>= 0)")
            starts[p] = int(off)
        if group_id is not None:
            need = [TopicPartition(topic, p) for p in partitions if p not in starts]
            if need:
                for tp in committed_offsets(consumer, need, timeout):
                    if tp.error is not None:
                        raise RuntimeError(f"cannot fetch committed offset of {topic}[{tp.partition}] "
                                           f"for group {group_id!r}: {tp.error}")
                    if tp.offset >= 0:
                        starts[tp.partition] = tp.offset
        for p in partitions:
            if p not in starts:
                low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout, cached=False)
                starts[p] = max(0, low)
        if start_at_end:
            ends = _high_watermarks_by_fetch(consumer, topic, partitions, starts, timeout, bootstrap)
            starts = {p: starts[p] if p in start_offsets else ends[p] for p in partitions}
        if bounded:
            stops = _high_watermarks_by_fetch(consumer, topic, partitions, starts, timeout, bootstrap)
        else:
            stops = {p: UNBOUNDED_STOP for p in partitions}
    finally:
        consumer.close()

    ranges = []
    for p in partitions:
        start = starts[p]
        if start > stops[p]:
            _LOG.warning("kafka %s[%d]: start offset %d is past the end offset %d; reading nothing there",
                         topic, p, start, stops[p])
        stop = max(start, stops[p])
        if stop_after is not None:
            stop = min(stop, start + stop_after)
        _LOG.debug("kafka %s[%d]: OffsetRange(%d, %d)", topic, p, start, stop)
        ranges.append(PartitionRange(topic, p, start, stop))
    return ranges


def _high_watermarks_by_fetch(consumer, topic, partitions, starts, timeout, bootstrap) -> dict[int, int]:
    """The end offset of each partition as a fetch reports it (not ListOffsets)."""
    consumer.assign([TopicPartition(topic, p, starts[p]) for p in partitions])
    pending = set(partitions)
    deadline = time.monotonic() + timeout
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no fetch answer from {topic} partitions {sorted(pending)} within "
                               f"{timeout:.0f} s (broker {bootstrap})")
        for m in consumer.consume(1000, timeout=0.1):
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    pending.discard(m.partition())
                elif _fatal_consume_error(err):
                    raise RuntimeError(f"Kafka error on {topic}[{m.partition()}]: {err}")
            else:
                pending.discard(m.partition())
    highs = {}
    for p in partitions:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), cached=True)
        if high < 0:  # not reported by the fetch: should not happen after a message or EOF
            raise RuntimeError(f"no high watermark for {topic}[{p}] after fetching")
        highs[p] = high
    consumer.unassign()
    return highs


class _ResolvePartitions(beam.DoFn):
    """Impulse -> one ``_PartitionSpec`` per partition of the topic (at run time, on a worker)."""

    def __init__(self, bootstrap, topic, bounded, group_id, start_offsets, consumer_config, stop_after,
                 resolve_timeout):
        self._bootstrap = bootstrap
        self._topic = topic
        self._bounded = bounded
        self._group_id = group_id
        self._start_offsets = dict(start_offsets or {})
        self._consumer_config = consumer_config
        self._stop_after = stop_after
        self._timeout = resolve_timeout

    def process(self, _impulse):
        for r in resolve_ranges(self._bootstrap, self._topic, bounded=self._bounded, group_id=self._group_id,
                                start_offsets=self._start_offsets, consumer_config=self._consumer_config,
                                stop_after=self._stop_after, timeout=self._timeout):
            yield _PartitionSpec(*r)


# --------------------------------------------------------------------------- read SDF

class _PartitionRestrictionProvider(RestrictionProvider):
    """One ``OffsetRange`` per partition; never split initially (one consumer per partition)."""

    def initial_restriction(self, spec: _PartitionSpec) -> OffsetRange:
        return OffsetRange(spec.start, spec.stop)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, spec, restriction):
        yield restriction

    def restriction_size(self, spec, restriction: OffsetRange) -> float:
        if restriction.stop >= UNBOUNDED_STOP:
            return 1.0  # unknown backlog; equal weight per partition
        return float(restriction.stop - restriction.start)

    def truncate(self, spec, restriction: OffsetRange):
        # Drain: an unbounded partition stops at its last checkpoint; a bounded one finishes.
        if restriction.stop >= UNBOUNDED_STOP:
            return None
        return restriction


class _ConsumerSlot:
    """A cached consumer assigned to one partition, and where it will read next."""
    __slots__ = ("consumer", "position", "reporter")

    def __init__(self, consumer, reporter=None):
        self.consumer = consumer
        self.position: Optional[int] = None  # offset the next consume() returns from; None = unknown
        self.reporter = reporter  # its error_cb (logs broker trouble), told when reading works again


class _ReadPartitionFn(beam.DoFn):
    """Splittable DoFn: a ``_PartitionSpec`` with an ``OffsetRange`` -> ``list[KafkaMessage]`` batches."""

    _restrictions = _PartitionRestrictionProvider()
    _watermarks = ManualWatermarkEstimator.default_provider()

    def __init__(self, bootstrap, group_id, consumer_config, max_batch, poll_timeout, checkpoint_seconds,
                 unbounded):
        self._bootstrap = bootstrap
        self._group_id = group_id
        self._consumer_config = consumer_config
        self._max_batch = int(max_batch)
        self._poll_timeout = float(poll_timeout)
        self._checkpoint_seconds = float(checkpoint_seconds)
        self._unbounded = unbounded
        self._slots: dict[tuple[str, int], _ConsumerSlot] = {}
        self._rules: dict[tuple[str, int], StopRule] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._messages = Metrics.counter(METRICS_NAMESPACE, "messages_read")
        self._batches = Metrics.counter(METRICS_NAMESPACE, "batches_read")
        self._idle_checkpoints = Metrics.counter(METRICS_NAMESPACE, "idle_checkpoints")
        self._timed_checkpoints = Metrics.counter(METRICS_NAMESPACE, "timed_checkpoints")
        self._broker_errors = Metrics.counter(METRICS_NAMESPACE, "broker_errors")

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_slots"] = {}
        state["_rules"] = {}
        state["_committed"] = {}
        state["_lock"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def setup(self):
        self._slots = {}
        self._rules = {}
        self._committed = {}

    def _rule(self, spec) -> Optional[StopRule]:
        """This partition's stop rule: it keeps its state across SDF checkpoints."""
        if spec.stop_rule is None:
            return None
        key = (spec.topic, spec.partition)
        if key not in self._rules:
            self._rules[key] = copy.deepcopy(spec.stop_rule)
        return self._rules[key]

    def teardown(self):
        slots, self._slots = self._slots, {}
        for slot in slots.values():
            try:
                slot.consumer.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass

    # -- consumers

    def _slot(self, topic: str, partition: int, start: int) -> _ConsumerSlot:
        key = (topic, partition)
        slot = self._slots.get(key)
        if slot is None:
            conf, reporter = with_error_reporting(
                _consumer_config(self._bootstrap, self._group_id, self._consumer_config),
                f"consumer of {topic}[{partition}]", self._broker_errors)
            slot = _ConsumerSlot(Consumer(conf), reporter)
            self._slots[key] = slot
        if slot.position != start:
            # (Re)assigning drops whatever was prefetched and fetches from `start`.
            slot.consumer.assign([TopicPartition(topic, partition, start)])
            slot.position = start
        return slot

    def _commit(self, topic: str, partition: int, next_offset: int) -> None:
        """Bundle-finalizer callback: store `next_offset` (the next one to read) for the group."""

        key = (topic, partition)
        with self._lock:
            if self._committed.get(key, -1) >= next_offset:
                return  # a later bundle already committed further
            slot = self._slots.get(key)
            consumer = slot.consumer if slot is not None else None
            owned = consumer is None
            if owned:
                consumer = Consumer(_consumer_config(self._bootstrap, self._group_id, self._consumer_config))
            try:
                consumer.commit(offsets=[TopicPartition(topic, partition, next_offset)], asynchronous=False)
                self._committed[key] = next_offset
                # (No Beam counter here: finalizers run outside the bundle's
                # metrics context, so the FnApiRunner would drop it.)
                _LOG.debug("committed %s[%d] offset %d for group %r", topic, partition, next_offset,
                           self._group_id)
            except Exception as exc:  # noqa: BLE001
                # Not data loss: a later commit supersedes this one; a restart
                # before then re-reads from the previous commit.
                _LOG.warning("committing %s[%d] offset %d for group %r failed: %s",
                             topic, partition, next_offset, self._group_id, exc)
            finally:
                if owned:
                    consumer.close()

    # -- process

    def _process(self, spec, bundle_finalizer, tracker, watermark):
        rng = tracker.current_restriction()
        _LOG.debug("process %s %s", spec, rng)
        topic, partition = spec.topic, spec.partition
        start, stop = rng.start, rng.stop
        if start >= stop:
            return
        slot = self._slot(topic, partition, start)
        consumer = slot.consumer
        rule = self._rule(spec)
        next_offset = start  # one past the last offset claimed and emitted
        finalizer_registered = False
        progress = {"next": start}
        wm = watermark.current_watermark()
        deadline = time.monotonic() + self._checkpoint_seconds
        max_batch = self._max_batch
        new_tuple = tuple.__new__  # KafkaMessage(...) without the namedtuple's Python-level __new__

        while True:
            want = max_batch if stop >= UNBOUNDED_STOP else max(1, min(max_batch, stop - next_offset))
            # What is already fetched, at once; else wait for the first message
            # only (consume(n, timeout) would wait for all n: poll_timeout of
            # latency for every batch that is not full).
            msgs = consumer.consume(want, timeout=0)
            if not msgs:
                msgs = consumer.consume(1, timeout=self._poll_timeout)
                if msgs and want > 1:
                    msgs += consumer.consume(want - 1, timeout=0)
            batch: list[KafkaMessage] = []
            newest_ts = -1
            reached = False  # consumer caught up with what the broker has (EOF)
            eof_at = None
            for m in msgs:
                err = m.error()
                if err is None:
                    ts_type, ts = m.timestamp()
                    if ts_type == TIMESTAMP_NOT_AVAILABLE:
                        ts = -1
                    elif ts > newest_ts:
                        newest_ts = ts
                    batch.append(new_tuple(KafkaMessage, (topic, partition, m.offset(), ts, m.key(), m.value())))
                elif err.code() == KafkaError._PARTITION_EOF:
                    reached = True
                    eof_at = m.offset()
                elif _fatal_consume_error(err):
                    raise RuntimeError(f"Kafka consumer error on {topic}[{partition}]: {err}")
                else:
                    _LOG.warning("Kafka consumer error on %s[%d] (retrying): %s", topic, partition, err)
            if (batch or reached) and slot.reporter is not None and slot.reporter.in_trouble:
                slot.reporter.recovered()
            if batch and batch[0].offset < next_offset:  # stale (cannot happen after assign; be safe)
                batch = [km for km in batch if km.offset >= next_offset]

            # Claim the batch with ONE try_claim of its last offset (a claim per
            # message costs more than building the message). Exact under
            # concurrent splits: if the claim succeeds, the stop offset was
            # above every offset of the batch when claimed, and a later split
            # can only cut after it. If it fails, the claim attempt at or past
            # the stop freezes the restriction (try_split cannot cut below an
            # attempted position), so its final stop is known and the offsets
            # below it are this restriction's and no other's: emit those, end.
            refused = False  # the tracker refused: restriction done or split
            if batch and not tracker.try_claim(batch[-1].offset):
                refused = True
                final_stop = tracker.current_restriction().stop
                batch = [km for km in batch if km.offset < final_stop]
                newest_ts = max((km.timestamp_ms for km in batch), default=-1)
            if batch:
                next_offset = batch[-1].offset + 1
                progress["next"] = next_offset
                self._messages.inc(len(batch))
                self._batches.inc()
                if self._group_id is not None and not finalizer_registered:
                    # Reads progress["next"] when the bundle is finalized: the
                    # offset after the last message this call emitted.
                    bundle_finalizer.register(lambda: self._commit(topic, partition, progress["next"]))
                    finalizer_registered = True
                if newest_ts >= 0:
                    event_time = Timestamp(micros=newest_ts * 1000)
                    if wm is not None and event_time < wm:
                        event_time = wm
                    yield TimestampedValue(batch, event_time)
                    if wm is None or event_time > wm:
                        wm = event_time
                        watermark.set_watermark(wm)
                else:
                    yield batch

            if rule is not None:
                if rule.observe(batch) if batch else rule.idle():
                    closing = rule.last_batch(topic, partition)
                    if closing:
                        yield closing
                    tracker.try_claim(tracker.current_restriction().stop)  # refused; marks the restriction done
                    slot.position = next_offset
                    return
                if not batch:
                    beat = rule.heartbeat(topic, partition)
                    if beat:
                        yield beat
            if refused:
                # Done (claim at or past stop) or the runner split us: the
                # consumer has moved past what we emitted; re-seek next time.
                slot.position = None
                return
            # Every data message returned was claimed: the consumer continues
            # exactly where a residual restriction would start.
            slot.position = next_offset

            # With a gap at the end (e.g. transaction markers) the fetch
            # position (reported by EOF) is past the last message.
            # (An EOF event follows every message before it, so no message
            # lies between next_offset and eof_at.)
            fetched_to = max(next_offset, eof_at) if eof_at is not None else next_offset
            stop = tracker.current_restriction().stop  # a runner split may have lowered it
            if fetched_to >= stop:
                tracker.try_claim(stop)  # refused; marks the restriction done
                return
            idle = not batch and (reached or not msgs)
            if idle and self._unbounded:
                self._idle_checkpoints.inc()
                tracker.defer_remainder(Duration(micros=int(self._poll_timeout * 1e6)))
                return
            if time.monotonic() >= deadline:
                self._timed_checkpoints.inc()
                tracker.defer_remainder()
                return


class _BoundedReadPartitionFn(_ReadPartitionFn):
    def process(self, spec,
                bundle_finalizer=beam.DoFn.BundleFinalizerParam,
                tracker=beam.DoFn.RestrictionParam(_ReadPartitionFn._restrictions),
                watermark=beam.DoFn.WatermarkEstimatorParam(_ReadPartitionFn._watermarks)):
        yield from self._process(spec, bundle_finalizer, tracker, watermark)


class _UnboundedReadPartitionFn(_ReadPartitionFn):
    @beam.DoFn.unbounded_per_element()
    def process(self, spec,
                bundle_finalizer=beam.DoFn.BundleFinalizerParam,
                tracker=beam.DoFn.RestrictionParam(_ReadPartitionFn._restrictions),
                watermark=beam.DoFn.WatermarkEstimatorParam(_ReadPartitionFn._watermarks)):
        yield from self._process(spec, bundle_finalizer, tracker, watermark)


class ReadFromKafka(beam.PTransform):
    """Read a Kafka topic as ``list[KafkaMessage]`` batches (see the module docstring).

    Args:
      bootstrap: ``bootstrap.servers``.
      topic: the topic (all its partitions are read).
      bounded: read up to the end offsets seen at start, then finish (default);
        else read forever (or up to ``stop_after``).
      group_id: consumer group used as the offset store: start from its
        committed offsets, commit after each finalized bundle.
      start_offsets: ``{partition: offset}`` overriding the committed/earliest start.
      consumer_config: extra librdkafka settings (TLS, SASL, fetch sizes, ...).
      max_batch: most messages per emitted batch.
      poll_timeout: seconds one consume() waits; also the idle back-off.
      stop_after: read at most the first N offsets of each partition from its start.
      checkpoint_seconds: longest a partition is read before an SDF checkpoint
        (lets partitions take turns and offsets be committed as it goes).
      resolve_timeout: seconds allowed for metadata/offset look-ups at start.
    """

    def __init__(self, bootstrap: str, topic: str, *, bounded: bool = True, group_id: Optional[str] = None,
                 start_offsets: Optional[dict[int, int]] = None, consumer_config: Optional[dict] = None,
                 max_batch: int = 1000, poll_timeout: float = 0.2, stop_after: Optional[int] = None,
                 checkpoint_seconds: float = 1.0, resolve_timeout: float = 30.0):
        super().__init__()
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if stop_after is not None and stop_after < 0:
            raise ValueError("stop_after must be >= 0")
        self.bootstrap = bootstrap
        self.topic = topic
        self.bounded = bounded
        self.group_id = group_id
        self.start_offsets = dict(start_offsets or {})
        self.consumer_config = dict(consumer_config or {})
        self.max_batch = max_batch
        self.poll_timeout = poll_timeout
        self.stop_after = stop_after
        self.checkpoint_seconds = checkpoint_seconds
        self.resolve_timeout = resolve_timeout

    def expand(self, pbegin):
        fn_cls = _BoundedReadPartitionFn if self.bounded else _UnboundedReadPartitionFn
        return (
            pbegin
            | "Impulse" >> beam.Impulse()
            | "ResolvePartitions" >> beam.ParDo(_ResolvePartitions(
                self.bootstrap, self.topic, self.bounded, self.group_id, self.start_offsets,
                self.consumer_config, self.stop_after, self.resolve_timeout))
            | "ReadPartitions" >> beam.ParDo(fn_cls(
                self.bootstrap, self.group_id, self.consumer_config, self.max_batch, self.poll_timeout,
                self.checkpoint_seconds, unbounded=not self.bounded))
        )


class ReadFromKafkaRanges(beam.PTransform):
    """Read given partition ranges, of one or several topics, as batches
    (``list[KafkaMessage]``, one partition per batch) in one splittable DoFn.

    The ranges are fixed before the pipeline starts (:func:`resolve_ranges`),
    so several topics share one source stage: on the FnApiRunner everything
    fused after it runs live, which two sources joined by a Flatten would not
    (DESIGN §3). A range with ``stop = UNBOUNDED_STOP`` reads until its
    ``stop_rule`` says so (or forever); the read is unbounded if any range is.
    Settings as for :class:`ReadFromKafka`."""

    def __init__(self, bootstrap: str, ranges: list[PartitionRange], *, group_id: Optional[str] = None,
                 consumer_config: Optional[dict] = None, max_batch: int = 1000, poll_timeout: float = 0.2,
                 checkpoint_seconds: float = 1.0):
        super().__init__()
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.bootstrap = bootstrap
        self.ranges = [_PartitionSpec(*r) for r in ranges]
        self.group_id = group_id
        self.consumer_config = dict(consumer_config or {})
        self.max_batch = max_batch
        self.poll_timeout = poll_timeout
        self.checkpoint_seconds = checkpoint_seconds

    def expand(self, pbegin):
        unbounded = any(r.stop >= UNBOUNDED_STOP for r in self.ranges)
        fn_cls = _UnboundedReadPartitionFn if unbounded else _BoundedReadPartitionFn
        return (
            pbegin
            | "Ranges" >> beam.Create(self.ranges, reshuffle=False)
            | "ReadPartitions" >> beam.ParDo(fn_cls(
                self.bootstrap, self.group_id, self.consumer_config, self.max_batch, self.poll_timeout,
                self.checkpoint_seconds, unbounded=unbounded))
        )


# --------------------------------------------------------------------------- write

def _to_bytes(x, what: str) -> Optional[bytes]:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"WriteToKafka: {what} must be bytes or str, got {type(x).__name__}")


class _KafkaWriteFn(beam.DoFn):
    _MAX_ERRORS_KEPT = 10

    def __init__(self, bootstrap, topic, producer_config, key_fn, flush_each=False):
        self._bootstrap = bootstrap
        self._topic = topic
        self._flush_each = flush_each
        self._producer_config = dict(producer_config or {})
        self._key_fn = key_fn
        self._producer = None
        self._reporter = None
        self._errors: list[tuple[str, int, str]] = []
        self._failed = 0
        self._ok = 0  # deliveries confirmed in this bundle
        self._delivered = Metrics.counter(METRICS_NAMESPACE, "messages_delivered")

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_producer"] = None
        state["_reporter"] = None
        state["_errors"] = []
        state["_failed"] = 0
        return state

    def setup(self):
        conf = {"bootstrap.servers": self._bootstrap, "linger.ms": 20}
        conf.update(self._producer_config)
        conf, self._reporter = with_error_reporting(conf, f"producer for {self._topic!r}")
        self._producer = Producer(conf)
        self._errors = []
        self._failed = 0

    def _on_delivery(self, err, msg):
        # Called from poll()/flush() in this DoFn's thread, during the bundle.
        if err is None:
            self._ok += 1
            if self._reporter is not None and self._reporter.in_trouble:
                self._reporter.recovered()
        else:
            self._failed += 1
            if len(self._errors) < self._MAX_ERRORS_KEPT:
                self._errors.append((msg.topic() or self._topic, msg.partition(), str(err)))

    def _raise_if_failed(self):
        if self._failed:
            topic, partition, err = self._errors[0]
            part = partition if partition is not None and partition >= 0 else "(unassigned)"
            more = f" (and {self._failed - 1} more messages failed)" if self._failed > 1 else ""
            raise RuntimeError(f"Kafka delivery to topic {topic!r} partition {part} failed: {err}{more}")

    def _produce(self, key, value):
        producer = self._producer
        while True:
            try:
                producer.produce(self._topic, value=value, key=key, on_delivery=self._on_delivery)
                return
            except BufferError:
                # Local queue full: serve delivery reports to make room, then retry.
                producer.poll(0.05)
                self._raise_if_failed()
            except KafkaException as exc:
                raise RuntimeError(f"Kafka produce to topic {self._topic!r} failed: {exc}") from exc

    def _write_one(self, item):
        if isinstance(item, tuple):
            if len(item) != 2:
                raise TypeError(f"WriteToKafka: a tuple element must be (key, value), got {len(item)} items")
            key, value = _to_bytes(item[0], "key"), _to_bytes(item[1], "value")
        else:
            value = _to_bytes(item, "value")
            key = _to_bytes(self._key_fn(item), "key") if self._key_fn is not None else None
        self._produce(key, value)

    def start_bundle(self):
        self._errors = []
        self._failed = 0
        self._ok = 0

    def process(self, element):
        if isinstance(element, list):
            produce, topic, on_delivery = self._producer.produce, self._topic, self._on_delivery
            plain = self._key_fn is None
            for item in element:
                if plain and type(item) is bytes:  # the common case, without the general path's calls
                    try:
                        produce(topic, item, on_delivery=on_delivery)
                        continue
                    except (BufferError, KafkaException):
                        pass  # not queued: the general path retries or raises
                self._write_one(item)
        else:
            self._write_one(element)
        if self._flush_each:
            self._wait_delivered()
        self._producer.poll(0)  # serve delivery reports
        self._raise_if_failed()

    def finish_bundle(self):
        self._wait_delivered()
        self._delivered.inc(self._ok)
        self._ok = 0

    def _wait_delivered(self):
        # flush() returns when every message is delivered or has failed
        # (failures at the latest after message.timeout.ms): a broker that is
        # down for less than that is waited for, with a warning now and then.
        waited, left = 0, self._producer.flush(1.0)
        while left > 0:
            self._raise_if_failed()
            waited += 1
            if waited % 10 == 0:
                _LOG.warning("Kafka has not acknowledged %d messages to %r for %d s; waiting (librdkafka retries "
                             "with back-off until message.timeout.ms)", left, self._topic, waited)
            left = self._producer.flush(1.0)
        self._raise_if_failed()

    def teardown(self):
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None


class WriteToKafka(beam.PTransform):
    """Produce a PCollection to a Kafka topic (see the module docstring).

    Elements: ``bytes``/``str`` values, ``(key, value)`` pairs, or lists of those.
    ``key_fn(value) -> key`` keys bare values (pairs keep their own key).
    ``flush_each``: every element is acknowledged by Kafka before the next
    one is taken (not only at the end of the bundle). For low-volume topics
    whose records must be durable before what follows them in the same
    bundle, e.g. dead letters, whose offsets a model checkpoint written later
    in the bundle covers (a restart does not read them again).
    Returns the (empty) output of the writing ParDo.
    """

    def __init__(self, bootstrap: str, topic: str, *, producer_config: Optional[dict] = None,
                 key_fn: Optional[Callable[[Any], Any]] = None, flush_each: bool = False):
        super().__init__()
        self.bootstrap = bootstrap
        self.topic = topic
        self.producer_config = dict(producer_config or {})
        self.key_fn = key_fn
        self.flush_each = flush_each

    def expand(self, pcoll):
        return pcoll | "Produce" >> beam.ParDo(_KafkaWriteFn(self.bootstrap, self.topic, self.producer_config,
                                                             self.key_fn, self.flush_each))


__all__ = ["KafkaMessage", "ReadFromKafka", "WriteToKafka", "UNBOUNDED_STOP"]
