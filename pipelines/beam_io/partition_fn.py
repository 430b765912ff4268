"""The splittable DoFn that reads one Kafka partition per restriction.

An element is a :class:`PartitionSpec` (a partition and its initial offset
range); its restriction an ``OffsetRange`` tracked by an
``OffsetRestrictionTracker``. Each call reads batches with a
:class:`~pipelines.kafka.consumer.PartitionReader` kept per (DoFn instance,
partition) across calls (re-positioned only when a restriction does not
start where it stands), claims each batch before emitting it, and returns
with ``defer_remainder`` (an SDF checkpoint) when the partition is idle
(unbounded reads) or after ``checkpoint_seconds`` of reading (both modes,
so partitions take turns and offsets get committed as it goes). Bounded
restrictions finish at ``stop``.

* Offsets are committed to ``group_id`` (when given) only from a bundle
  finalizer, i.e. after the runner has durably committed the bundle's
  output; commits are monotonic per partition. A crash between the bundle
  commit and the finalizer repeats that bundle, as with any Kafka consumer
  that commits after processing.
* Event time: each batch is emitted with the timestamp of its newest message
  (never below the current watermark, so nothing is late), and a
  ``ManualWatermarkEstimator`` is advanced to the newest timestamp seen. An
  idle partition holds its watermark.
* Counters (namespace ``kafka_io``): ``messages_read``, ``batches_read``,
  ``idle_checkpoints``, ``timed_checkpoints``, ``broker_errors``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from typing import Any, NamedTuple, Optional

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.io.watermark_estimators import ManualWatermarkEstimator
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.transforms.window import TimestampedValue
from apache_beam.utils.timestamp import Duration, Timestamp
from confluent_kafka import Consumer

from pipelines.kafka.consumer import (UNBOUNDED_STOP, PartitionReader, StopRule, commit_offset,
                                      consumer_settings)
from pipelines import telemetry
from pipelines.kafka.spans import Span

from .batch_coder import KafkaBatch

log = logging.getLogger(__name__)

METRICS_NAMESPACE = "kafka_io"


class PartitionSpec(NamedTuple):
    """One partition to read and its initial offset range."""
    topic: str
    partition: int
    start: int
    stop: int
    stop_rule: Any = None
    salt: int = 0
    """Chosen so the read of this partition runs on the subtask wanted (:mod:`.placement`)."""
    """Optional: ends the read early (see :class:`~pipelines.kafka.consumer.StopRule`)."""


class PartitionRestrictionProvider(RestrictionProvider):
    """One ``OffsetRange`` per partition; never split initially (one consumer per partition)."""

    def initial_restriction(self, spec: PartitionSpec) -> OffsetRange:
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


class _Call:
    """What one process() call has emitted so far."""
    __slots__ = ("span", "next_offset", "watermark", "finalizing", "finished_at")

    def __init__(self, spec: "PartitionSpec", start: int, watermark):
        self.span = Span(spec.topic, spec.partition, start, start, spec.start)  # where this read stands
        self.next_offset = start  # one past the last offset claimed and emitted
        self.watermark = watermark
        self.finalizing = None  # {"next": offset} read by this call's bundle finalizer
        self.finished_at = None  # the restriction's stop, once it is done

    def covering(self, end: int) -> Span:
        """The span of the next batch: from where the last one ended to ``end``."""
        return self.span._replace(start=self.next_offset, end=end)


class ReadPartitionFn(beam.DoFn):
    """``PartitionSpec`` with an ``OffsetRange`` -> ``list[KafkaMessage]`` batches."""

    _restrictions = PartitionRestrictionProvider()
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
        self.setup()
        self._messages = Metrics.counter(METRICS_NAMESPACE, "messages_read")
        self._batches = Metrics.counter(METRICS_NAMESPACE, "batches_read")
        self._idle_checkpoints = Metrics.counter(METRICS_NAMESPACE, "idle_checkpoints")
        self._timed_checkpoints = Metrics.counter(METRICS_NAMESPACE, "timed_checkpoints")
        self._broker_errors = Metrics.counter(METRICS_NAMESPACE, "broker_errors")

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_readers", "_rules", "_committed", "_lock", "_last_batch_at"):
            state.pop(name)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.setup()

    def setup(self):
        self._readers: dict[tuple[str, int], PartitionReader] = {}
        self._rules: dict[tuple[str, int], StopRule] = {}
        self._committed: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self._last_batch_at: dict[tuple[str, int], float] = {}  # monotonic time each partition last emitted

    def teardown(self):
        readers, self._readers = self._readers, {}
        for reader in readers.values():
            reader.close()

    def _reader(self, topic: str, partition: int, start: int) -> PartitionReader:
        reader = self._readers.get((topic, partition))
        if reader is None:
            reader = self._readers[(topic, partition)] = PartitionReader(
                self._bootstrap, topic, partition, self._group_id, self._consumer_config, self._broker_errors)
        reader.seek(start)
        return reader

    def _rule(self, spec) -> Optional[StopRule]:
        """This partition's stop rule: it keeps its state across SDF checkpoints."""
        if spec.stop_rule is None:
            return None
        key = (spec.topic, spec.partition)
        if key not in self._rules:
            self._rules[key] = copy.deepcopy(spec.stop_rule)
        return self._rules[key]

    def _commit(self, topic: str, partition: int, next_offset: int) -> None:
        """Bundle-finalizer callback: store ``next_offset`` for the group.
        A failure is not data loss: a later commit supersedes it, and a
        restart before then re-reads from the previous commit."""
        key = (topic, partition)
        with self._lock:
            if self._committed.get(key, -1) >= next_offset:
                return  # a later bundle already committed further
            reader = self._readers.get(key)
            consumer = reader.consumer if reader is not None else Consumer(
                consumer_settings(self._bootstrap, self._group_id, self._consumer_config))
            try:
                commit_offset(consumer, topic, partition, next_offset)
                self._committed[key] = next_offset
            except Exception as exc:  # noqa: BLE001
                log.warning("committing %s[%d] offset %d for group %r failed: %s",
                            topic, partition, next_offset, self._group_id, exc)
            finally:
                if reader is None:
                    consumer.close()

    # -- process

    def _process(self, spec, bundle_finalizer, tracker, watermark):
        rng = tracker.current_restriction()
        if rng.start >= rng.stop:
            return
        topic, partition = spec.topic, spec.partition
        reader = self._reader(topic, partition, rng.start)
        rule = self._rule(spec)
        call = _Call(spec, rng.start, watermark.current_watermark())
        deadline = time.monotonic() + self._checkpoint_seconds
        linger = rule.linger_seconds if rule is not None and self._unbounded else 0.0
        lingering_until = 0.0  # from a batch read (its steps fused after the read included): poll on until then
        while True:
            stop = tracker.current_restriction().stop
            want = self._max_batch if stop >= UNBOUNDED_STOP else max(1, min(self._max_batch, stop - call.next_offset))
            wait = self._poll_timeout if not self._sibling_busy(topic, partition) else 0.0
            if lingering_until:
                wait = min(wait, max(0.0, lingering_until - time.monotonic()))
            polled = reader.poll(want, wait)
            if telemetry.serving():
                after = polled.batch[-1].offset + 1 if polled.batch else call.next_offset
                telemetry.gauge("consumer_lag", reader.lag(polled, after), topic=topic, partition=str(partition))
            batch, refused = self._claim(tracker, polled.batch, call.next_offset)
            if batch:
                self._last_batch_at[(topic, partition)] = time.monotonic()
                if linger:
                    lingering_until = time.monotonic() + rule.linger_after(batch)
                newest_ts = polled.newest_ts if batch is polled.batch else max(km.timestamp_ms for km in batch)
                yield from self._emit(call, batch, newest_ts, bundle_finalizer, watermark, topic, partition)
            if rule is not None:
                done, extra = self._consult(rule, batch, topic, partition)
                for own in extra:  # control records: they belong where the read stands
                    yield KafkaBatch(own, call.covering(call.next_offset))
                if done:
                    tracker.try_claim(tracker.current_restriction().stop)  # refused; marks the restriction done
                    reader.position = call.next_offset
                    return
            if refused:
                # Done (claim at or past stop) or the runner split us: the
                # consumer has moved past what we emitted; re-seek next time.
                reader.position = None
                yield from self._close_gap(call, tracker.current_restriction().stop)
                return
            # Every data message returned was claimed: the consumer continues
            # exactly where a residual restriction would start.
            reader.position = call.next_offset
            if self._finished_or_deferred(tracker, call, polled, batch, deadline,
                                          lingering=time.monotonic() < lingering_until):
                if call.finished_at is not None:
                    yield from self._close_gap(call, call.finished_at)
                return

    def _sibling_busy(self, topic: str, partition: int) -> bool:
        """Whether another partition this instance reads emitted a batch in
        the last poll timeout (unbounded reads only). Then this one does not
        wait for its first message: the calls of one instance run one after
        another, so its wait would hold the busy partition back. Sharded mode
        reads the feedback that way beside idle events and labels partitions:
        on the FnApiRunner each event's round trip waited 0.2 s per idle
        partition. With every partition idle, each waits as before (no spin)."""
        if not self._unbounded:
            return False
        recent = time.monotonic() - self._poll_timeout
        return any(at > recent for key, at in self._last_batch_at.items() if key != (topic, partition))

    @staticmethod
    def _claim(tracker, batch: list, next_offset: int) -> tuple[list, bool]:
        """(the part of ``batch`` this restriction owns, whether the tracker refused).

        ONE try_claim of the batch's last offset (a claim per message costs
        more than building the message). Exact under concurrent splits: if
        the claim succeeds, the stop was above every offset of the batch
        when claimed, and a later split can only cut after it. If it fails,
        the attempt at or past the stop freezes the restriction (try_split
        cannot cut below an attempted position), so its final stop is known
        and the offsets below it are this restriction's and no other's."""
        if batch and batch[0].offset < next_offset:  # stale (cannot happen after assign; be safe)
            batch = [km for km in batch if km.offset >= next_offset]
        if not batch or tracker.try_claim(batch[-1].offset):
            return batch, False
        final_stop = tracker.current_restriction().stop
        return [km for km in batch if km.offset < final_stop], True

    @staticmethod
    def _close_gap(call: _Call, stop: int):
        """A restriction that ends at ``stop`` after its last message (offsets
        with no message: transaction markers, or a runner's split point)
        closes the chain there with a batch of no messages, so the batch
        that continues from ``stop`` (a split's residual) follows on."""
        if call.next_offset < stop < UNBOUNDED_STOP:
            yield KafkaBatch([], call.covering(stop))
            call.next_offset = stop

    def _emit(self, call: _Call, batch: list, newest_ts: int, bundle_finalizer, watermark, topic: str,
              partition: int):
        batch = KafkaBatch(batch, call.covering(batch[-1].offset + 1))
        call.next_offset = batch[-1].offset + 1
        self._messages.inc(len(batch))
        self._batches.inc()
        telemetry.count("messages_read", len(batch), topic=topic, partition=str(partition))
        if self._group_id is not None:
            if call.finalizing is None:
                # Read when the bundle is finalized: the offset after the last message this call emitted.
                progress = call.finalizing = {}
                bundle_finalizer.register(lambda: self._commit(topic, partition, progress["next"]))
            call.finalizing["next"] = call.next_offset
        if newest_ts < 0:
            yield batch
            return
        event_time = Timestamp(micros=newest_ts * 1000)
        if call.watermark is not None and event_time < call.watermark:
            event_time = call.watermark
        yield TimestampedValue(batch, event_time)
        if call.watermark is None or event_time > call.watermark:
            call.watermark = event_time
            watermark.set_watermark(event_time)

    @staticmethod
    def _consult(rule: StopRule, batch: list, topic: str, partition: int) -> tuple[bool, list]:
        """(whether the rule ends the read, batches of the rule's own making to emit)."""
        if rule.observe(batch) if batch else rule.idle():
            closing = rule.last_batch(topic, partition)
            return True, [closing] if closing else []
        beat = [] if batch else rule.heartbeat(topic, partition)
        return False, [beat] if beat else []

    def _finished_or_deferred(self, tracker, call: _Call, polled, batch: list, deadline: float,
                              lingering: bool = False) -> bool:
        """True when this call should return: the restriction is done, the
        partition is idle (unbounded: resume later, unless ``lingering`` after
        a batch, see StopRule.linger_seconds), or reading time is up."""
        # With a gap at the end (e.g. transaction markers) the fetch position
        # reported by EOF is past the last message; an EOF event follows every
        # message before it, so no message lies between next_offset and eof_at.
        fetched_to = max(call.next_offset, polled.eof_at) if polled.eof_at is not None else call.next_offset
        stop = tracker.current_restriction().stop  # a runner split may have lowered it
        if fetched_to >= stop:
            tracker.try_claim(stop)  # refused; marks the restriction done
            call.finished_at = stop
            return True
        idle = not batch and (polled.reached_end or not polled.answered)
        if idle and self._unbounded and not lingering:
            self._idle_checkpoints.inc()
            tracker.defer_remainder(Duration(micros=int(self._poll_timeout * 1e6)))
            return True
        if time.monotonic() >= deadline:
            self._timed_checkpoints.inc()
            tracker.defer_remainder()
            return True
        return False


class BoundedReadPartitionFn(ReadPartitionFn):
    def process(self, spec,
                bundle_finalizer=beam.DoFn.BundleFinalizerParam,
                tracker=beam.DoFn.RestrictionParam(ReadPartitionFn._restrictions),
                watermark=beam.DoFn.WatermarkEstimatorParam(ReadPartitionFn._watermarks)):
        yield from self._process(spec, bundle_finalizer, tracker, watermark)


class UnboundedReadPartitionFn(ReadPartitionFn):
    @beam.DoFn.unbounded_per_element()
    def process(self, spec,
                bundle_finalizer=beam.DoFn.BundleFinalizerParam,
                tracker=beam.DoFn.RestrictionParam(ReadPartitionFn._restrictions),
                watermark=beam.DoFn.WatermarkEstimatorParam(ReadPartitionFn._watermarks)):
        yield from self._process(spec, bundle_finalizer, tracker, watermark)
