"""Build the exact-mode pipeline (``scinol run`` without ``--shards``)."""

from __future__ import annotations

import logging
import typing

import apache_beam as beam

from pipelines.beam_io import ReadFromKafka, WriteToKafka
from pipelines.config import RunConfig
from pipelines.state.resume import resume_exact

from pipelines.steps import DecodeEvents, EncodeDeadLetters, EncodeRecords

from .transforms import LearnModels

log = logging.getLogger(__name__)


def build_exact(p: beam.Pipeline, cfg: RunConfig) -> None:
    starts = resume_exact(cfg.checkpoint_dir, cfg.topic).starts
    if starts:
        log.warning("resuming %s from checkpoint offsets %s", cfg.topic, starts)
    # The checkpoints decide where to start, never the group's committed offsets (RunConfig.check).
    batches = p | "ReadEvents" >> ReadFromKafka(
        cfg.bootstrap, cfg.topic, bounded=cfg.bounded, group_id=cfg.group_id, start_offsets=starts or None,
        consumer_config=cfg.kafka_config, max_batch=cfg.max_batch, stop_after=cfg.stop_after, use_committed=False)
    decoded = batches | "Decode" >> beam.ParDo(DecodeEvents(cfg)).with_output_types(typing.Tuple[str, typing.Any]).with_outputs(
        DecodeEvents.DEAD, main="events")
    learned = decoded.events | "LearnAndPredict" >> beam.ParDo(LearnModels(cfg)).with_input_types(typing.Tuple[str, typing.Any]).with_outputs(
        LearnModels.CHECKPOINTS, main="predictions")
    producer = dict(cfg.kafka_config)
    (decoded[DecodeEvents.DEAD]
     | "EncodeDeadLetters" >> beam.ParDo(EncodeDeadLetters(cfg.dlq_topic, cfg.registry()))
     # acknowledged one by one: a checkpoint later in the same bundle covers their offsets
     | "WriteDeadLetters" >> WriteToKafka(cfg.bootstrap, cfg.dlq_topic, producer_config=producer, flush_each=True))
    (learned[LearnModels.CHECKPOINTS]
     | "EncodeCheckpoints" >> beam.ParDo(EncodeRecords("scinol.ModelCheckpoint", cfg.ckpt_topic, cfg.registry(),
                                                       key="model"))
     | "WriteCheckpoints" >> WriteToKafka(cfg.bootstrap, cfg.ckpt_topic, producer_config=producer))
