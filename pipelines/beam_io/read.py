"""``ReadFromKafka`` and ``ReadFromKafkaRanges``: Kafka topics as a
PCollection of **batches**, each a ``list[KafkaMessage]`` from one
partition, in offset order, at most ``max_batch`` long::

    Impulse ─► ResolvePartitions ─► ReadPartitions (splittable DoFn)

``ResolvePartitions`` runs on a worker at pipeline run time and fixes each
partition's offset range (:func:`pipelines.kafka.consumer.resolve_ranges`:
start at the given, committed or earliest offset; bounded reads stop at the
end offset seen then, unbounded ones never, ``stop_after=N`` after the
first N offsets of each partition). ``ReadFromKafkaRanges`` takes ranges
fixed before the pipeline starts instead, so several topics share one
source stage. The reading itself is :mod:`pipelines.beam_io.partition_fn`.

Broker trouble (refused connections, timeouts) is retried by librdkafka
with back-off and reported as rate-limited warnings
(:mod:`pipelines.kafka.health`). Choose the runner explicitly: on the
FnApiRunner the deferred remainders of an unbounded read are re-run at once,
and output crossing a fusion break is held until the source finishes.
"""

from __future__ import annotations

from typing import Optional

import apache_beam as beam
from apache_beam import coders

from pipelines.kafka.consumer import UNBOUNDED_STOP, PartitionRange, resolve_ranges

from .batch_coder import KafkaBatch
from .partition_fn import BoundedReadPartitionFn, PartitionSpec, UnboundedReadPartitionFn
from .placement import Placement, nested, salt_for

CALL_SECONDS = 1.0
"""Default longest read of a partition in one call (``checkpoint_seconds``)."""


class _ResolvePartitions(beam.DoFn):
    """Impulse -> one ``PartitionSpec`` per partition of the topic."""

    def __init__(self, bootstrap, topic, bounded, group_id, start_offsets, consumer_config, stop_after,
                 resolve_timeout, use_committed=True):
        self._args = (bootstrap, topic)
        self._kwargs = dict(bounded=bounded, group_id=group_id, start_offsets=dict(start_offsets or {}),
                            consumer_config=consumer_config, stop_after=stop_after, timeout=resolve_timeout,
                            use_committed=use_committed)

    def process(self, _impulse):
        for r in resolve_ranges(*self._args, **self._kwargs):
            yield PartitionSpec(*r)


def _read_fn(unbounded: bool, bootstrap, group_id, consumer_config, max_batch, poll_timeout, checkpoint_seconds):
    fn_cls = UnboundedReadPartitionFn if unbounded else BoundedReadPartitionFn
    return fn_cls(bootstrap, group_id, consumer_config, max_batch, poll_timeout, checkpoint_seconds, unbounded)


class ReadFromKafka(beam.PTransform):
    """Read a Kafka topic as ``list[KafkaMessage]`` batches.

    Args:
      bootstrap: ``bootstrap.servers``.
      topic: the topic (all its partitions are read).
      bounded: read up to the end offsets seen at start, then finish (default);
        else read forever (or up to ``stop_after``).
      group_id: consumer group used as the offset store: start from its
        committed offsets (unless ``use_committed`` is False), commit after
        each finalized bundle.
      start_offsets: ``{partition: offset}`` overriding the committed/earliest start.
      consumer_config: extra librdkafka settings (TLS, SASL, fetch sizes, ...).
      max_batch: most messages per emitted batch.
      poll_timeout: seconds one poll waits; also the idle back-off.
      stop_after: read at most the first N offsets of each partition from its start.
      checkpoint_seconds: longest a partition is read before an SDF checkpoint
        (lets partitions take turns and offsets be committed as it goes).
      resolve_timeout: seconds allowed for metadata/offset look-ups at start.
      use_committed: False: the group's committed offsets are only written
        (progress for Kafka's tools), never where the read starts.
    """

    def __init__(self, bootstrap: str, topic: str, *, bounded: bool = True, group_id: Optional[str] = None,
                 start_offsets: Optional[dict[int, int]] = None, consumer_config: Optional[dict] = None,
                 max_batch: int = 1000, poll_timeout: float = 0.2, stop_after: Optional[int] = None,
                 checkpoint_seconds: float = CALL_SECONDS, resolve_timeout: float = 30.0, use_committed: bool = True):
        super().__init__()
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if stop_after is not None and stop_after < 0:
            raise ValueError("stop_after must be >= 0")
        self.resolve = _ResolvePartitions(bootstrap, topic, bounded, group_id, start_offsets,
                                          dict(consumer_config or {}), stop_after, resolve_timeout, use_committed)
        self.read = _read_fn(not bounded, bootstrap, group_id, dict(consumer_config or {}), max_batch,
                             poll_timeout, checkpoint_seconds)

    def expand(self, pbegin):
        return (pbegin
                | "Impulse" >> beam.Impulse()
                | "ResolvePartitions" >> beam.ParDo(self.resolve)
                | "ReadPartitions" >> beam.ParDo(self.read).with_output_types(KafkaBatch))


def placed_specs(ranges: list[PartitionRange], placement: Placement) -> list[PartitionSpec]:
    """The ranges as the source's elements, range ``i`` salted to be read on
    subtask ``i``: Flink keys a splittable DoFn's work by its element,
    pickled (so length-prefixed for the runner)."""
    specs = [PartitionSpec(*r) for r in ranges]
    if placement.parallelism == 1:
        return specs
    pickled = coders.registry.get_coder(PartitionSpec)

    def key(spec: PartitionSpec) -> bytes:
        return nested(pickled.encode(spec))

    return [spec._replace(salt=salt_for(lambda salt: key(spec._replace(salt=salt)), i % placement.parallelism,
                                        placement.parallelism, placement.max_parallelism))
            for i, spec in enumerate(specs)]


class ReadFromKafkaRanges(beam.PTransform):
    """Read given partition ranges, of one or several topics, as batches
    (``list[KafkaMessage]``, one partition per batch) in one splittable DoFn.

    The ranges are fixed before the pipeline starts
    (:func:`~pipelines.kafka.consumer.resolve_ranges`), so several topics
    share one source stage: on the FnApiRunner everything fused after it
    runs live, which two sources joined by a Flatten would not. A range with
    ``stop = UNBOUNDED_STOP`` reads until its ``stop_rule`` says so (or
    forever); the read is unbounded if any range is. Settings as for
    :class:`ReadFromKafka` (``checkpoint_seconds`` None: its default);
    ``placement``: range ``i`` is read on subtask ``i`` (mod the parallelism)."""

    def __init__(self, bootstrap: str, ranges: list[PartitionRange], *, group_id: Optional[str] = None,
                 consumer_config: Optional[dict] = None, max_batch: int = 1000, poll_timeout: float = 0.2,
                 checkpoint_seconds: float | None = None, placement: Placement | None = None):
        super().__init__()
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.ranges = placed_specs(ranges, placement or Placement())
        unbounded = any(r.stop >= UNBOUNDED_STOP for r in self.ranges)
        self.read = _read_fn(unbounded, bootstrap, group_id, dict(consumer_config or {}), max_batch, poll_timeout,
                             CALL_SECONDS if checkpoint_seconds is None else checkpoint_seconds)

    def expand(self, pbegin):
        return (pbegin
                | "Ranges" >> beam.Create(self.ranges, reshuffle=False)
                | "ReadPartitions" >> beam.ParDo(self.read).with_output_types(KafkaBatch))
