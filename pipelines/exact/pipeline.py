"""Build and run the exact-mode pipeline (``scinol run``)."""

from __future__ import annotations

import logging
import typing
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.state.checkpoints import CheckpointStore
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, DEFAULT_MAX_MESSAGE_BYTES
from pipelines.beam_io import ReadFromKafka, WriteToKafka
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.exact.transforms import DecodeEvents, EncodeRecords, LearnerConfig, LearnModels

log = logging.getLogger(__name__)


@dataclass
class RunConfig:
    bootstrap: str
    topic: str
    predictions_topic: str
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    bounded: bool = False
    checkpoint_dir: str | None = None
    checkpoint_every: int | None = None
    checkpoint_seconds: float | None = None
    checkpoint_topic: str | None = None
    dead_letter_topic: str | None = None
    group_id: str | None = None
    kafka_config: dict = field(default_factory=dict, repr=False)  # may hold secrets: never in a repr
    registry_url: str | None = None
    max_batch: int = 2000
    max_index: int = DEFAULT_MAX_INDEX
    """Sparse indices and dense lengths at or above this are dead letters (pipelines.records.dead_letters)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    stop_after: int | None = None
    progress_seconds: float | None = 5.0
    beam_args: list = field(default_factory=list)
    shards: int | None = None
    """Sharded mode with this many feature shards (None: exact mode)."""
    max_staleness: int = 0
    feedback_topic: str | None = None
    feedback_timeout: float = 30.0
    feedback_faults: object = None
    """Fault injection (tests, fault trials): a sharded_transforms.FeedbackFaults."""

    @property
    def dlq_topic(self) -> str:
        return self.dead_letter_topic or f"{self.topic}.dlq"

    @property
    def feedback(self) -> str:
        return self.feedback_topic or f"{self.predictions_topic}.feedback"

    @property
    def ckpt_topic(self) -> str:
        return self.checkpoint_topic or f"{self.predictions_topic}.checkpoints"


def resume_offsets(cfg: RunConfig) -> dict[int, int] | None:
    """Where to start reading so that every model's checkpoint is covered:
    per partition of the input topic, the smallest next-offset over the
    models' newest checkpoints (events a model has already learned are
    skipped by that model). None without checkpoints."""
    if not cfg.checkpoint_dir:
        return None
    store = CheckpointStore(cfg.checkpoint_dir)
    starts: dict[int, int] = {}
    checkpoints = [store.latest(m) for m in store.models()]
    for ckpt in filter(None, checkpoints):
        for (topic, partition), offset in ckpt.offsets.items():
            if topic == cfg.topic:
                starts[partition] = min(offset, starts.get(partition, offset))
    return starts or None


def ensure_topics(cfg: RunConfig) -> None:
    """Create the output topics when missing (the checkpoint topic compacted)."""
    wanted = [TopicSpec(cfg.predictions_topic), TopicSpec(cfg.dlq_topic),
              TopicSpec(cfg.ckpt_topic, config={"cleanup.policy": "compact"})]
    if cfg.shards is not None:  # one partition: the shards must see each model's feedback in order
        wanted.append(TopicSpec(cfg.feedback))
    KafkaAdmin(cfg.bootstrap, cfg.kafka_config).ensure_topics(wanted)


def build(p: beam.Pipeline, cfg: RunConfig) -> None:
    if cfg.shards is not None:
        from pipelines.sharded.pipeline import build_sharded

        build_sharded(p, cfg, *([cfg.feedback_faults] if cfg.feedback_faults else []))
        return
    starts = resume_offsets(cfg)
    if starts:
        log.warning("resuming %s from checkpoint offsets %s", cfg.topic, starts)
    lc = cfg.learner
    batches = p | "ReadEvents" >> ReadFromKafka(
        cfg.bootstrap, cfg.topic, bounded=cfg.bounded, group_id=cfg.group_id, start_offsets=starts,
        consumer_config=cfg.kafka_config, max_batch=cfg.max_batch, stop_after=cfg.stop_after)
    decoded = batches | "Decode" >> beam.ParDo(DecodeEvents(
        lc.loss, lc.n_classes, cfg.registry_url, max_index=cfg.max_index,
        max_message_bytes=cfg.max_message_bytes)).with_output_types(typing.Tuple[str, typing.Any]).with_outputs(
        DecodeEvents.DEAD, main="events")
    learned = decoded.events | "LearnAndPredict" >> beam.ParDo(LearnModels(
        lc, cfg.checkpoint_dir, cfg.checkpoint_every, cfg.checkpoint_seconds, cfg.progress_seconds,
        bootstrap=cfg.bootstrap, predictions_topic=cfg.predictions_topic, kafka_config=cfg.kafka_config,
        registry_url=cfg.registry_url)).with_input_types(typing.Tuple[str, typing.Any]).with_outputs(
        LearnModels.CHECKPOINTS, main="predictions")
    producer = dict(cfg.kafka_config)
    (decoded[DecodeEvents.DEAD]
     | "EncodeDeadLetters" >> beam.ParDo(EncodeRecords("scinol.DeadLetter", registry_url=cfg.registry_url))
     # acknowledged one by one: a checkpoint later in the same bundle covers their offsets
     | "WriteDeadLetters" >> WriteToKafka(cfg.bootstrap, cfg.dlq_topic, producer_config=producer, flush_each=True))
    (learned[LearnModels.CHECKPOINTS]
     | "EncodeCheckpoints" >> beam.ParDo(EncodeRecords("scinol.ModelCheckpoint", key="model",
                                                       registry_url=cfg.registry_url))
     | "WriteCheckpoints" >> WriteToKafka(cfg.bootstrap, cfg.ckpt_topic, producer_config=producer))


def pipeline_options(cfg: RunConfig) -> tuple[PipelineOptions, object]:
    """Options from the pass-through Beam flags; the runner is chosen
    explicitly: the FnApiRunner unless ``--runner`` says otherwise (the
    DirectRunner would first try to download Prism, which cannot work here)."""
    options = PipelineOptions(cfg.beam_args)
    options.view_as(beam.options.pipeline_options.StandardOptions).streaming = not cfg.bounded
    runner_name = options.view_as(beam.options.pipeline_options.StandardOptions).runner
    if runner_name:
        return options, runner_name
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return options, FnApiRunner()


def run(cfg: RunConfig):
    ensure_topics(cfg)
    options, runner = pipeline_options(cfg)
    p = beam.Pipeline(runner=runner, options=options)
    build(p, cfg)
    result = p.run()
    result.wait_until_finish()
    return result
