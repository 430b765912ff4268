"""Run a configured pipeline: check its settings, wait for the broker,
create the output topics and register (or look up) their schemas, check that
the checkpoints belong to the stream, choose the runner, build the exact or
the sharded graph, wait for it, and sum up what it did."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import NamedTuple

import apache_beam as beam
from apache_beam.options.pipeline_options import FlinkRunnerOptions, GoogleCloudOptions, PipelineOptions, StandardOptions

from pipelines.beam_io.read import CALL_SECONDS
from pipelines.config import RunConfig
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.transactions import TransactionalOutput
from pipelines.runners import flink_rest
from pipelines.runners.compat import adjust_beam
from pipelines.runners.harness import collect_garbage_rarely
from pipelines.runners.options import FlinkLatencyOptions, low_latency_flink_args
from pipelines.state.resume import ResumePoint, check_resume, resume_exact, resume_sharded, source_of, supersede
from pipelines.steps import NAMESPACE

log = logging.getLogger(__name__)


def topic_specs(cfg: RunConfig) -> list[TopicSpec]:
    """Every topic a run writes to, as it creates them when missing: the
    configured partitions, replication factor and settings; the checkpoint
    topic compacted with one partition; the feedback topic (sharded mode)
    with one partition, as the shards must see each model's feedback in
    order; and the labels topic, an input, but its labels may not have begun."""
    def spec(name, partitions=cfg.topic_partitions, **config):
        return TopicSpec(name, partitions, cfg.replication_factor, {**cfg.topic_config, **config})

    wanted = [spec(cfg.predictions_topic), spec(cfg.dlq_topic),
              spec(cfg.ckpt_topic, 1, **{"cleanup.policy": "compact"})]
    if cfg.shards is not None:
        wanted.append(spec(cfg.feedback, 1))
    if cfg.labels_topic:
        wanted.append(spec(cfg.labels_topic))
    if cfg.exactly_once:  # read back only after a restore: a week is plenty; the broker's clock orders it
        wanted.append(spec(cfg.order_topic, 1, **{"cleanup.policy": "delete", "retention.ms": 7 * 86_400_000,
                                                   "message.timestamp.type": "LogAppendTime"}))
    return wanted


def ensure_topics(cfg: RunConfig, admin: KafkaAdmin) -> None:
    admin.ensure_topics(topic_specs(cfg))


def output_schemas(cfg: RunConfig) -> dict[str, int]:
    """The schema id of each output record on its topic: registers them, or
    in lookup-only mode finds them, before anything runs, so a registry that
    refuses (or lacks a subject) fails the run at once with one clear error
    (schemas.registry.SchemaRegistryError) instead of inside a worker."""
    codec = cfg.codec()
    outputs = [("scinol.Prediction", cfg.predictions_topic), ("scinol.DeadLetter", cfg.dlq_topic),
               ("scinol.ModelCheckpoint", cfg.ckpt_topic)]
    if cfg.shards is not None:
        outputs.append(("scinol.FeedbackBatch", cfg.feedback))
    return {f"{topic} ({record})": codec.schema_id(record, topic) for record, topic in outputs}


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
    runner_name = options.view_as(StandardOptions).runner
    flink = _on_flink(options)
    if flink and (cfg.shards is not None or not cfg.bounded) and not _has_flag(cfg.beam_args, "--job_endpoint"):
        # A run that streams (the feedback loop, or unbounded); for the job server Beam starts on this machine.
        options = PipelineOptions([*cfg.beam_args, *low_latency_flink_args(cfg.beam_args)])
    standard = options.view_as(StandardOptions)
    # Flink's batch mode only when asked for: it runs stage after stage with
    # no order between them, which the keyed steps no longer need. Sharded
    # mode's feedback loop needs pipelined exchanges: a runner that runs a
    # bounded pipeline stage by stage would wait for feedback that the next
    # stage has not begun to make.
    batch = flink and cfg.bounded and cfg.execution_mode == "batch"
    standard.streaming = (standard.streaming or not cfg.bounded or (flink and not batch)
                          or (cfg.shards is not None and bool(runner_name)))
    if runner_name:
        return options, runner_name
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    return options, FnApiRunner()


def read_calls_for_runner(cfg: RunConfig, options: PipelineOptions) -> RunConfig:
    """``cfg`` with Kafka read calls no longer than the Flink bundles
    ``options`` ask for (unless ``read_call_seconds`` is set already): a
    bundle cannot end before the read call it runs returns, so with 1 s
    calls a 20 ms bundle would still last a second."""
    bundle_ms = options.view_as(FlinkLatencyOptions).max_bundle_time_mills
    if cfg.read_call_seconds is not None or bundle_ms is None or not _on_flink(options):
        return cfg
    return dataclasses.replace(cfg, read_call_seconds=min(CALL_SECONDS, bundle_ms / 1000))


def placement_for_runner(cfg: RunConfig, options: PipelineOptions) -> RunConfig:
    """``cfg`` with its keys placed for Flink's subtasks when the run asks
    for a parallelism: each partition read and sequenced on subtask
    ``partition % parallelism``, the models of ``place_models`` one a
    subtask, a model's shards on consecutive subtasks. Other runners (and
    Flink at its default parallelism) place keys themselves."""
    flink = options.view_as(FlinkRunnerOptions)
    if not _on_flink(options) or (flink.parallelism or -1) < 2:
        return cfg
    groups = flink.max_parallelism if (flink.max_parallelism or -1) > 0 else None
    return dataclasses.replace(cfg, parallelism=flink.parallelism, max_parallelism=groups)


def _on_flink(options: PipelineOptions) -> bool:
    return "flink" in (options.view_as(StandardOptions).runner or "").lower()


def _has_flag(args: list[str], name: str) -> bool:
    return any(arg == name or arg.startswith(name + "=") for arg in args)


def build(p: beam.Pipeline, cfg: RunConfig, point: ResumePoint) -> None:
    if cfg.shards is not None:
        from pipelines.sharded.pipeline import build_sharded

        build_sharded(p, cfg, point)
    else:
        from pipelines.exact.pipeline import build_exact

        build_exact(p, cfg, point)


def run(cfg: RunConfig, say=log.warning):
    """Run the pipeline to its end; the runner's result. Interrupted (Ctrl-C,
    SIGTERM), a job on a Flink session cluster is cancelled there first
    (``say`` tells which)."""
    result = start(cfg)
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        if isinstance(result, SessionJob):
            try:
                for job_id in result.cancel_on_cluster():
                    say(f"cancelled Flink job {job_id} ({result.job_name}) on {result.master}")
            except OSError as exc:  # e.g. its JobManager is gone, and the job with it
                say(f"could not cancel Flink job {result.job_name}: the cluster at {result.master} did not "
                    f"answer ({getattr(exc, 'reason', None) or exc})")
        raise
    return result


def start(cfg: RunConfig):
    """Start the pipeline and return at once with the runner's result (on a
    runner that runs it elsewhere, e.g. Flink; in-process runners finish first)."""
    cfg.check()
    admin = KafkaAdmin(cfg.bootstrap, cfg.kafka_config)
    admin.wait_until_ready(cfg.connect_timeout, say=log.warning)
    ensure_topics(cfg, admin)
    if cfg.exactly_once:  # a broker or an ACL that refuses transactions fails here, in one line
        TransactionalOutput(cfg.bootstrap, cfg.predictions_topic, f"{cfg.predictions_topic}-probe",
                            cfg.kafka_config, timeout=cfg.connect_timeout).close()
    if cfg.registry_url is not None:
        output_schemas(cfg)
    cfg, point = prepare_resume(cfg, admin)
    options, runner = pipeline_options(cfg)
    cfg = placement_for_runner(read_calls_for_runner(cfg, options), options)
    master = session_master(options)
    if master is not None:
        cloud = options.view_as(GoogleCloudOptions)
        cloud.job_name = cloud.job_name or f"scinol-{cfg.topic}-{uuid.uuid4().hex[:8]}"
    p = beam.Pipeline(runner=runner, options=options)
    build(p, cfg, point)
    adjust_beam()  # for the in-process runner and the harnesses in this process (LOOPBACK's)
    collect_garbage_rarely()
    result = p.run()
    return result if master is None else SessionJob(result, master, options.view_as(GoogleCloudOptions).job_name)


def session_master(options: PipelineOptions) -> str | None:
    """The REST address (``host:port``) of the Flink session cluster the
    options run on; None for any other runner or an embedded Flink."""
    if not _on_flink(options):
        return None
    master = options.view_as(FlinkRunnerOptions).flink_master
    return None if master.startswith("[") else master.removeprefix("http://")


class SessionJob:
    """Beam's result for a job on a Flink session cluster, whose ``cancel``
    also cancels the Flink job (by its unique ``--job_name``). Beam's own
    cancel goes to its job server, which stops watching the job but leaves
    it running on the cluster, holding its task slots
    (:mod:`pipelines.runners.flink_rest`)."""

    def __init__(self, result, master: str, job_name: str):
        self.result, self.master, self.job_name = result, master, job_name

    def cancel_on_cluster(self, timeout: float = 60.0) -> list[str]:
        """Cancel the job's Flink jobs that have not ended, and wait for them
        to end (before the job server and a LOOPBACK harness go away: tasks
        cancel cleanly only while their SDK harness answers). Their ids."""
        return flink_rest.cancel_live_jobs(self.master, self.job_name, timeout)

    def cancel(self):
        try:
            self.cancel_on_cluster()
        finally:
            # Even when the cluster did not answer: the job server and a
            # LOOPBACK harness must not outlive the run.
            state = self.result.cancel()
        return state

    def __getattr__(self, name):
        return getattr(self.result, name)


class RunSummary(NamedTuple):
    """What a run did, from its metrics: messages read from the events
    topic, predictions written, dead letters by reason."""

    events: int
    predictions: int
    dead_letters: dict
    skipped: int = 0
    """Events a model skipped as covered by its state (exact mode)."""
    waiting: int = 0
    """Messages still waiting for an earlier batch of their partition when the run ended."""
    waited: int = 0
    """Batches that came before an earlier one of their partition and waited for it (a runner that reorders)."""
    replayed: int = 0
    """Batches dropped as applied already (a runner's retry or repeat, a replay after a restore)."""

    def line(self) -> str:
        dead = sum(self.dead_letters.values())
        reasons = ", ".join(f"{r} {n:,}" for r, n in sorted(self.dead_letters.items()))
        skipped = (f"; {self.skipped:,} events skipped as covered by the model's state (a replay that overlaps "
                   "the checkpoint the run resumed from)") if self.skipped else ""
        order = (f"; {self.waited:,} batches came before an earlier one and waited, {self.replayed:,} came again and "
                 "were dropped") if self.waited or self.replayed else ""
        return (f"{self.events:,} messages read, {self.predictions:,} predictions written, {dead:,} dead letters"
                + (f" ({reasons})" if reasons else "") + skipped + order)

    @property
    def only_dead_letters(self) -> bool:
        return self.predictions == 0 and sum(self.dead_letters.values()) > 0


def summarize(result) -> RunSummary | None:
    """The run's :class:`RunSummary`; None when the runner reports no metrics."""
    try:
        counters = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception as e:  # noqa: BLE001 - a runner without metrics support, or one that fails reading them
        log.warning("no run summary: the runner's metrics could not be read (%s: %s)", type(e).__name__, e)
        return None
    totals: dict[str, int] = {}
    for c in counters:
        value = c.committed if c.committed is not None else c.attempted
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + int(value or 0)
    prefix = "dead_letters_"
    dead = {name[len(prefix):]: n for name, n in totals.items() if name.startswith(prefix) and n}
    gauges = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE))["gauges"]
    waiting = sum(int(g.committed.value if g.committed is not None else g.attempted.value or 0)
                  for g in gauges if g.key.metric.name.startswith("waiting_messages_"))
    return RunSummary(totals.get("events", 0), totals.get("predictions", 0), dead, totals.get("skipped_as_covered", 0),
                      waiting, totals.get("waited_batches", 0), totals.get("replayed_batches", 0))
