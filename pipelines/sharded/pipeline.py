"""Build the sharded-mode pipeline (``scinol run --shards K``): where to
start (the newest complete checkpoint cut of each model), which offsets to
read, when a bounded run is done, and the steps (``decode_step``,
``route_step``, ``shard_step``, ``combine_step``) wired together. The
protocol itself is in :mod:`pipelines.sharded` (router, shard, combiner);
the steps only route its messages.

    events topic ─┐                      ┌─► DeadLetters ─► <topic>.dlq (and a record on the feedback topic)
                  ├─► ReadFromKafkaRanges ─► DecodeShardedInput
    feedback topic┘   (one source stage)     │ (model, events | feedback)
          ▲                                  ▼
          │                        RouteEvents (keyed by model): sequence numbers, K slices
          │                                  │ ((model, shard), slices | feedback)
          │                                  ▼
          │                        ShardStep (keyed by model, shard): predict / update
          │                                  │ (model, partial sums)
          │                                  ▼
          └──── Feedback ───────── CombineStep (keyed by model) ─► predictions topic

Both topics are read by one source so that every step is fused with it: on
the FnApiRunner nothing then waits for a fusion break."""

from __future__ import annotations

import logging
import typing
import uuid

import apache_beam as beam

from pipelines.beam_io import ReadFromKafkaRanges, WriteToKafka
from pipelines.config import RunConfig
from pipelines.kafka.consumer import UNBOUNDED_STOP, resolve_ranges
from pipelines.records.feedback import feedback_batches
from pipelines.state.resume import ResumePoint
from pipelines.steps import EncodeDeadLetters, EncodeRecords, Keyed, model_parts, placement, reorder

from .combine_step import CombineStep
from .decode_step import DecodeShardedInput
from .feedback_watch import FeedbackWatch
from .keyed_step import FeedbackFaults, ShardedRun
from .messages import label_partition
from .route_step import RouteEvents, skip_position, skip_record
from .shard_step import ShardStep

log = logging.getLogger(__name__)

# The feedback reader only waits this long at the end of its partition:
# in sharded mode every event's round trip passes through it.
FEEDBACK_FETCH_WAIT_MS = 10
# After a feedback batch the reader polls this long more before it defers:
# the shards' next predictions usually bring the next batch within a round
# trip (a fetch wait and a produce), where a deferral costs the runner a
# bundle (10-20 ms on the FnApiRunner).
FEEDBACK_LINGER_SECONDS = 2 * FEEDBACK_FETCH_WAIT_MS / 1000
# ... but only after feedback of a few hundred events (about 35 bytes each):
# on a quiet stream the wait held every next event back (p50 latency +6 ms
# at 300 events/s, S = 64), and a deferral there costs nothing that matters.
FEEDBACK_LINGER_MIN_BYTES = 8192


def check_shardable(cfg) -> None:
    learner = cfg.learner.make()
    if not getattr(learner.algorithm, "shardable", False):
        raise ValueError(f"learner {learner.algorithm.name!r} is not coordinate-separable (its state couples all "
                         f"coordinates), so it cannot be split over feature shards: run it without --shards")
    if cfg.shards < 1:
        raise ValueError(f"--shards must be at least 1, not {cfg.shards}")
    if cfg.max_staleness < 0:
        raise ValueError(f"--max-staleness must be >= 0, not {cfg.max_staleness}")


def feedback_range(cfg, events_ranges, run_id: str, labels_ranges=()):
    """The feedback topic's one partition, from its current end (earlier
    records belong to earlier runs), watched by a :class:`FeedbackWatch`
    (heartbeats; the end of the run when the events ranges are finite)."""
    ranges = resolve_ranges(cfg.bootstrap, cfg.feedback, bounded=False, consumer_config=cfg.kafka_config,
                            start_at_end=True)
    if len(ranges) != 1:
        raise ValueError(f"the feedback topic {cfg.feedback!r} has {len(ranges)} partitions; sharded mode needs "
                         f"exactly 1 (the shards must see each model's feedback in order)")
    targets = None
    if all(r.stop < UNBOUNDED_STOP for r in [*events_ranges, *labels_ranges]):
        # every label message is accounted for too (learned, waiting, or a dead letter), under its own partitions
        targets = {r.partition: (r.start, r.stop) for r in events_ranges}
        targets.update({label_partition(r.partition): (r.start, r.stop) for r in labels_ranges})
    rule = FeedbackWatch(run_id, heartbeat_seconds=max(cfg.feedback_timeout / 2, 0.5), targets=targets,
                         idle_timeout=2 * cfg.feedback_timeout + 10, registry=cfg.registry(),
                         linger_seconds=FEEDBACK_LINGER_SECONDS, linger_min_bytes=FEEDBACK_LINGER_MIN_BYTES)
    return ranges[0]._replace(stop_rule=rule)


def build_sharded(p: beam.Pipeline, cfg: RunConfig, resume: ResumePoint) -> ShardedRun:
    check_shardable(cfg)
    if resume.models:
        log.warning("resuming %s from checkpoint cuts %s at offsets %s", cfg.topic, resume.models, resume.starts)
    # The checkpoint cuts decide where to start, never the group's committed offsets (RunConfig.check).
    events = resolve_ranges(cfg.bootstrap, cfg.topic, bounded=cfg.bounded, group_id=cfg.group_id,
                            start_offsets=resume.starts_of(cfg.topic) or None, consumer_config=cfg.kafka_config,
                            stop_after=cfg.stop_after, use_committed=False)
    labels = []
    if cfg.labels_topic:  # from the offsets the cuts' shard 0 covers: the Router skips what its part holds
        labels = resolve_ranges(cfg.bootstrap, cfg.labels_topic, bounded=cfg.bounded, group_id=cfg.group_id,
                                start_offsets=resume.starts_of(cfg.labels_topic) or None,
                                consumer_config=cfg.kafka_config, stop_after=cfg.stop_after, use_committed=False)
    run = ShardedRun(uuid.uuid4().hex, resume.models, cfg.feedback_faults or FeedbackFaults())
    feedback = feedback_range(cfg, events, run.run_id, labels)

    consumer = {"fetch.wait.max.ms": FEEDBACK_FETCH_WAIT_MS, **cfg.kafka_config}
    batches = p | "ReadEventsAndFeedback" >> ReadFromKafkaRanges(
        cfg.bootstrap, events + labels + [feedback], group_id=cfg.group_id, consumer_config=consumer,
        max_batch=cfg.max_batch, checkpoint_seconds=cfg.read_call_seconds, placement=placement(cfg))
    # Output type hints give the keyed steps deterministic key coders.
    ShardKeyed = typing.Tuple[typing.Tuple[typing.Tuple[str, int], int], typing.Any]  # ((model, shard), salt)
    parts = model_parts(batches, cfg, DecodeShardedInput(cfg, columnar=cfg.columnar_decode))
    slices = parts.parts | "Route" >> beam.ParDo(RouteEvents(cfg, run)).with_output_types(ShardKeyed)
    partials = reorder(slices, cfg, "Slices") | "Shards" >> beam.ParDo(ShardStep(cfg, run)).with_output_types(Keyed)
    reorder(partials, cfg, "Partials") | "Combine" >> beam.ParDo(CombineStep(cfg, run))

    producer = dict(cfg.kafka_config)
    dead = parts.dead
    (dead
     | "EncodeDeadLetters" >> beam.ParDo(EncodeDeadLetters(cfg.dlq_topic, cfg.registry()))
     # acknowledged one by one: a checkpoint cut made later in the bundle covers their offsets
     | "WriteDeadLetters" >> WriteToKafka(cfg.bootstrap, cfg.dlq_topic, producer_config=producer, flush_each=True))
    (dead
     | "AccountForDeadLetters" >> beam.Map(
         lambda d, run_id: feedback_batches(
             [skip_record(run_id, skip_position(cfg, d["topic"], d["partition"]), d["offset"])])[0], run.run_id)
     | "EncodeSkips" >> beam.ParDo(EncodeRecords("scinol.FeedbackBatch", cfg.feedback, cfg.registry()))
     | "WriteSkips" >> WriteToKafka(cfg.bootstrap, cfg.feedback, producer_config=producer))
    return run
