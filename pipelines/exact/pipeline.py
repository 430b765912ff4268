"""Build the exact-mode pipeline (``scinol run`` without ``--shards``)."""

from __future__ import annotations

import logging

import apache_beam as beam

from pipelines.beam_io import ReadFromKafkaRanges, WriteToKafka
from pipelines.config import RunConfig
from pipelines.kafka.consumer import resolve_ranges
from pipelines.state.progress import write_run_start
from pipelines.state.resume import ResumePoint
from pipelines.steps import DecodeEvents, EncodeDeadLetters, EncodeRecords, Keyed, model_parts, placement

from .transforms import LearnModels

log = logging.getLogger(__name__)



def _read(p: beam.Pipeline, cfg: RunConfig, point: ResumePoint):
    """The events topic, and the labels topic when labels come late (both
    read by one source, so labels and events interleave as they arrive),
    from offsets fixed here, which the checkpoint folder records as this
    run's start (see :mod:`pipelines.state.progress`)."""
    if point.starts:
        log.warning("resuming %s from checkpoint offsets %s", cfg.topic, point.starts)
    ranges = []
    for topic in filter(None, (cfg.topic, cfg.labels_topic)):
        # The checkpoints decide where to start, never the group's committed offsets (RunConfig.check).
        ranges += resolve_ranges(cfg.bootstrap, topic, bounded=cfg.bounded, group_id=cfg.group_id,
                                 start_offsets=point.starts_of(topic) or None,
                                 consumer_config=cfg.kafka_config, stop_after=cfg.stop_after, use_committed=False)
    if cfg.checkpoint_dir:
        write_run_start(cfg.checkpoint_dir, {(r.topic, r.partition): r.start for r in ranges})
    return p | "Read" >> ReadFromKafkaRanges(
        cfg.bootstrap, ranges, group_id=cfg.group_id, consumer_config=cfg.kafka_config, max_batch=cfg.max_batch,
        checkpoint_seconds=cfg.read_call_seconds, placement=placement(cfg))


def build_exact(p: beam.Pipeline, cfg: RunConfig, point: ResumePoint) -> None:
    parts = model_parts(_read(p, cfg, point), cfg, DecodeEvents(cfg, columnar=cfg.columnar_decode))
    learned = parts.parts | "LearnAndPredict" >> beam.ParDo(LearnModels(cfg)).with_input_types(
        Keyed).with_outputs(LearnModels.CHECKPOINTS, main="predictions")
    producer = dict(cfg.kafka_config)
    (parts.dead
     | "EncodeDeadLetters" >> beam.ParDo(EncodeDeadLetters(cfg.dlq_topic, cfg.registry()))
     # acknowledged one by one: a checkpoint later in the same bundle covers their offsets
     | "WriteDeadLetters" >> WriteToKafka(cfg.bootstrap, cfg.dlq_topic, producer_config=producer, flush_each=True))
    (learned[LearnModels.CHECKPOINTS]
     | "EncodeCheckpoints" >> beam.ParDo(EncodeRecords("scinol.ModelCheckpoint", cfg.ckpt_topic, cfg.registry(),
                                                       key="model"))
     | "WriteCheckpoints" >> WriteToKafka(cfg.bootstrap, cfg.ckpt_topic, producer_config=producer))
