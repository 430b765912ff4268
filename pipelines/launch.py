"""Run a configured pipeline: create the output topics, choose the runner,
build the exact or the sharded graph, and wait for it."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from pipelines.config import RunConfig
from pipelines.kafka.admin import KafkaAdmin, TopicSpec


def ensure_topics(cfg: RunConfig) -> None:
    """Create the output topics when missing (the checkpoint topic compacted)."""
    wanted = [TopicSpec(cfg.predictions_topic), TopicSpec(cfg.dlq_topic),
              TopicSpec(cfg.ckpt_topic, config={"cleanup.policy": "compact"})]
    if cfg.shards is not None:  # one partition: the shards must see each model's feedback in order
        wanted.append(TopicSpec(cfg.feedback))
    KafkaAdmin(cfg.bootstrap, cfg.kafka_config).ensure_topics(wanted)


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


def build(p: beam.Pipeline, cfg: RunConfig) -> None:
    if cfg.shards is not None:
        from pipelines.sharded.pipeline import build_sharded

        build_sharded(p, cfg)
    else:
        from pipelines.exact.pipeline import build_exact

        build_exact(p, cfg)


def run(cfg: RunConfig):
    ensure_topics(cfg)
    options, runner = pipeline_options(cfg)
    p = beam.Pipeline(runner=runner, options=options)
    build(p, cfg)
    result = p.run()
    result.wait_until_finish()
    return result
