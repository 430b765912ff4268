"""Run a configured pipeline: wait for the broker, create the output topics,
check that the checkpoints belong to the stream, choose the runner, build
the exact or the sharded graph, and wait for it."""

from __future__ import annotations

import dataclasses
import logging

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.config import RunConfig
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.state.resume import ResumePoint, check_resume, resume_exact, resume_sharded, source_of, supersede

log = logging.getLogger(__name__)


def ensure_topics(cfg: RunConfig, admin: KafkaAdmin) -> None:
    """Create the output topics (the checkpoint topic compacted), and the
    labels topic, when missing."""
    wanted = [TopicSpec(cfg.predictions_topic), TopicSpec(cfg.dlq_topic),
              TopicSpec(cfg.ckpt_topic, config={"cleanup.policy": "compact"})]
    if cfg.shards is not None:  # one partition: the shards must see each model's feedback in order
        wanted.append(TopicSpec(cfg.feedback))
    if cfg.labels_topic:  # an input, but the labels may not have begun yet
        wanted.append(TopicSpec(cfg.labels_topic))
    admin.ensure_topics(wanted)


def prepare_resume(cfg: RunConfig, admin: KafkaAdmin) -> tuple[RunConfig, ResumePoint]:
    """(cfg with its ``source`` set, where to resume); ResumeRefused when the
    checkpoints were made from another cluster or topic."""
    info = admin.describe(cfg.topic)
    source = source_of(admin.cluster_id(), cfg.topic, info.topic_id, info.partitions)
    if cfg.checkpoint_dir and cfg.from_scratch:
        moved = supersede(cfg.checkpoint_dir)
        if moved:
            log.warning("starting from scratch: the checkpoints in %s were moved to %s", cfg.checkpoint_dir, moved)
    if cfg.shards is not None:
        point = resume_sharded(cfg.checkpoint_dir, cfg.topic, cfg.shards)
    else:
        point = resume_exact(cfg.checkpoint_dir, cfg.topic)
    if point.saved:
        check_resume(point, source, admin.end_offsets(cfg.topic), cfg.bootstrap)
    return dataclasses.replace(cfg, source=source), point


def pipeline_options(cfg: RunConfig) -> tuple[PipelineOptions, object]:
    """Options from the pass-through Beam flags; the runner is chosen
    explicitly: the FnApiRunner unless ``--runner`` says otherwise (the
    DirectRunner would first try to download Prism, which cannot work here)."""
    options = PipelineOptions(cfg.beam_args)
    options.view_as(StandardOptions).streaming = not cfg.bounded
    runner_name = options.view_as(StandardOptions).runner
    if runner_name:
        return options, runner_name
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return options, FnApiRunner()


def build(p: beam.Pipeline, cfg: RunConfig, point: ResumePoint) -> None:
    if cfg.shards is not None:
        from pipelines.sharded.pipeline import build_sharded

        build_sharded(p, cfg, point)
    else:
        from pipelines.exact.pipeline import build_exact

        build_exact(p, cfg, point)


def run(cfg: RunConfig):
    admin = KafkaAdmin(cfg.bootstrap, cfg.kafka_config)
    admin.wait_until_ready(cfg.connect_timeout, say=log.warning)
    ensure_topics(cfg, admin)
    cfg, point = prepare_resume(cfg, admin)
    options, runner = pipeline_options(cfg)
    p = beam.Pipeline(runner=runner, options=options)
    build(p, cfg, point)
    result = p.run()
    result.wait_until_finish()
    return result
