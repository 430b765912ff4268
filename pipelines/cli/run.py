"""``scinol run``: the streaming pipeline from the command line."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import re
import sys

from pipelines.kafka.spans import DEFAULT_MAX_WAITING

from .errors import EXIT_DEAD_LETTERS, EXIT_ENDED_ELSEWHERE, EXIT_ORDER, UsageError
from .options import (add_interaction_options, add_kafka_options, add_learner_options, add_topic_options,
                      interactions_of, kafka_settings, parse_params, registry_settings, topic_settings)


def input_limits(args) -> dict:
    """--max-index, --max-message-bytes, --max-models, --connect-timeout as
    RunConfig fields (absent: its defaults);
    also refuses a checkpoint directory the checkpoint store cannot use."""
    if args.checkpoint_dir:
        from pipelines.state.store import StoreLocationError, check_location

        try:  # a URL goes through Beam's FileSystems: its scheme must have a filesystem installed here
            check_location(args.checkpoint_dir)
        except StoreLocationError as exc:
            raise UsageError(f"run: --checkpoint-dir {exc}") from None
    limits = {}
    for option, name in (("--max-index", "max_index"), ("--max-message-bytes", "max_message_bytes"),
                         ("--max-models", "max_models"), ("--connect-timeout", "connect_timeout")):
        value = getattr(args, name, None)
        if value is not None:
            if value < 1:
                raise UsageError(f"run: {option} must be at least 1, got {value}")
            limits[name] = value
    if args.label_ttl <= 0 or args.max_pending < 1:
        raise UsageError(f"run: --label-ttl must be > 0 and --max-pending at least 1, got {args.label_ttl:g} and "
                         f"{args.max_pending}")
    return limits


def place_models(args) -> tuple:
    """--models as names; only with --runner flink (the other runners place keys themselves)."""
    if args.models is None:
        return ()
    names = tuple(name.strip() for name in args.models.split(","))
    if not all(names):
        raise UsageError(f"run: --models takes model names separated by commas, got {args.models!r}")
    if args.runner != "flink":
        raise UsageError(f"run: --models places models on Flink's subtasks; --runner is {args.runner}")
    return names


def runner_beam_args(args, provision: bool = True) -> list[str]:
    """--runner and its options as Beam flags, before the pass-through ones
    (provisions the Flink job server or Prism if not yet in the cache; with
    ``provision`` False they are named but not fetched: flags to check the
    run's settings with before a download or a build)."""
    from pipelines.provision.cache import ProvisionError
    from pipelines.runners.options import RunnerOptions, beam_args

    local = args.checkpoint_dir and "://" not in args.checkpoint_dir
    state_dir = os.path.join(args.checkpoint_dir, "flink-state") if local else None  # an embedded Flink's
    opts = RunnerOptions(args.runner, args.flink_master, args.parallelism, args.checkpointing_interval, args.bounded,
                         args.worker_pool, state_dir, args.execution_mode, args.shards is not None,
                         args.from_savepoint, args.from_checkpoint)
    parts = {} if provision else {"job_server_jar": "(not provisioned)", "prism_binary": "(not provisioned)"}
    try:
        return beam_args(opts, list(args.beam_args), **parts)
    except (ValueError, ProvisionError) as exc:
        raise UsageError(f"run: {exc}") from None


def run(args) -> int:
    from pipelines.config import LearnerConfig, RunConfig

    learner = LearnerConfig(args.learner or "scinol2", args.loss or "logistic", parse_params(args.param),
                            args.n_classes, not args.no_bias, args.hash_bits, args.loss_param,
                            interactions_of(args))
    try:
        learner.make()  # fail fast, with a one-line error, on a bad learner/loss/parameter
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    registry, topics = registry_settings(args), topic_settings(args)
    cfg = RunConfig(
        bootstrap=args.bootstrap, topic=args.topic, predictions_topic=args.predictions_topic, learner=learner,
        bounded=args.bounded, checkpoint_dir=args.checkpoint_dir, checkpoint_every=args.checkpoint_every,
        checkpoint_seconds=args.checkpoint_seconds, checkpoint_topic=args.checkpoint_topic,
        dead_letter_topic=args.dead_letter_topic, group_id=args.group_id,
        kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file),
        registry_url=registry and registry.url, registry_config=registry.config if registry else {},
        subject_name_strategy=args.subject_name_strategy, auto_register=args.auto_register,
        topic_partitions=args.partitions or 1, replication_factor=topics["replication"],
        topic_config=topics["config"], max_dead_letter_ratio=args.max_dead_letter_ratio,
        max_batch=args.max_batch, stop_after=args.stop_after, beam_args=runner_beam_args(args, provision=False),
        shards=args.shards, max_staleness=args.max_staleness, feedback_topic=args.feedback_topic,
        feedback_timeout=args.feedback_timeout, from_scratch=args.from_scratch, labels_topic=args.labels_topic,
        label_ttl=args.label_ttl, max_pending=args.max_pending, exactly_once=args.exactly_once,
        max_waiting=args.max_waiting, execution_mode=args.execution_mode, place_models=place_models(args),
        **input_limits(args))
    try:
        cfg.check()
    except ValueError as exc:
        raise UsageError(f"run: {exc}") from None
    if cfg.shards is not None:
        from pipelines.sharded.pipeline import check_shardable

        try:
            check_shardable(cfg)
        except ValueError as exc:
            raise UsageError(f"run: {exc}") from None
    cfg = dataclasses.replace(cfg, beam_args=runner_beam_args(args))  # settings checked: now fetch or build
    if args.metrics_port is not None:
        serve_metrics(args.metrics_port, args.metrics_host)
    mode = f"{cfg.shards} shards, max staleness {cfg.max_staleness}" if cfg.shards else "exact"
    print(f"scinol run: {cfg.topic} -> {cfg.predictions_topic} ({learner.learner}, {learner.loss}, {mode}, "
          f"{'bounded' if cfg.bounded else 'unbounded'}) on {cfg.bootstrap}, runner {args.runner}"
          + (f" at {args.flink_master or '[local]'}" if args.runner == "flink" else ""), file=sys.stderr)
    return launch(cfg)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0-65535)")
    return port


def serve_metrics(port: int, host: str) -> None:
    from pipelines import telemetry

    try:
        where = telemetry.serve(port, host)
    except telemetry.MetricsPortError as exc:
        raise UsageError(f"run: {exc}") from None
    print(f"scinol run: Prometheus metrics at http://{where[0]}:{where[1]}/metrics", file=sys.stderr)


STOPS = {"DeadLetterRatioExceeded": EXIT_DEAD_LETTERS, "WaitingBoundExceeded": EXIT_ORDER,
         "ChainConflict": EXIT_ORDER, "OffsetsGone": EXIT_ORDER}
"""A step's errors that stop a run on purpose, reported in one line, and the exit status of each."""


def _stop_of(exc) -> tuple[str, str] | None:
    """(the stop's name, its one-line message) when ``exc`` (as Beam re-raises
    a step's error, wrapped in its own) is one of :data:`STOPS`."""
    text = f"{type(exc).__name__}: {exc}"
    for name in STOPS:
        if f"{name}: " in text:
            return name, text.split(f"{name}: ")[-1].splitlines()[0].split(" [while running")[0]
    return None


_NO_FIT = re.compile(r"Failed to rollback to checkpoint/savepoint (\S+?)\.? Cannot map checkpoint/savepoint state "
                     r"for operator (\w+)")


_ENDED = re.compile(r"Pipeline (\S+) failed in state (\w+)")
"""Beam's portable runner's error for a job that did not end done."""
_CANCELLATION = re.compile(r"JobCancellationException: Job was cancelled")
"""How Flink's job server reports a job cancelled on the cluster (as a failure)."""


def _cancelled_elsewhere(exc) -> str | None:
    """Beam's job id when ``exc`` says the job was cancelled, which this run did not ask for."""
    ended = _ENDED.search(str(exc))
    if ended is None or not (ended.group(2) == "CANCELLED" or _CANCELLATION.search(str(exc))):
        return None
    return ended.group(1)


def _savepoint_refusal(text: str) -> str | None:
    """One line for Flink's refusal of a savepoint whose state does not fit
    the job (``text``: the job's failure as Beam reports it), else None."""
    found = _NO_FIT.search(text)
    if found is None:
        return None
    return (f"the savepoint {found.group(1)} does not fit this pipeline: Flink finds no step for the state of "
            f"its operator {found.group(2)}. Resume with the options the job was stopped with (mode, topics, "
            f"labels, shards); --parallelism may change, but not to or from 1 (Flink then joins the steps "
            f"differently, and Beam's Flink runner names them by how they are joined)")


def _not_a_refusal(record: logging.LogRecord) -> bool:
    """Neither a savepoint's refusal nor a cancellation: each ends the run in one line of its own."""
    message = record.getMessage()
    return _NO_FIT.search(message) is None and _CANCELLATION.search(message) is None


def _not_a_stop(record: logging.LogRecord) -> bool:
    """Beam logs a step's error with its traceback before re-raising it; a
    stop (:data:`STOPS`) is reported in one line instead."""
    return record.exc_info is None or _stop_of(record.exc_info[1]) is None


def _closed_by_the_runner(exc) -> bool:
    """A gRPC stream the runner ended (status CANCELLED): how a LOOPBACK SDK
    harness in this process learns that its job's tasks on a Flink cluster
    are done. Beam's threads then die with a traceback: not an error."""
    code = getattr(exc, "code", None)
    try:
        return callable(code) and code().name == "CANCELLED"
    except Exception:  # noqa: BLE001 - not a gRPC error after all
        return False


_HUNG_UP = "Channel closed prematurely"  # Beam's data plane, when the runner's end of the channel went away


class _RunnerHangUps(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and (_closed_by_the_runner(record.exc_info[1]) or _HUNG_UP in str(record.exc_info[1])):
            return False
        return _HUNG_UP not in record.getMessage()


def _quiet_runner_hang_ups() -> None:
    import threading

    if getattr(threading.excepthook, "scinol", False):
        return
    default = threading.excepthook

    def hook(hook_args):
        if not (_closed_by_the_runner(hook_args.exc_value) or _HUNG_UP in str(hook_args.exc_value)):
            default(hook_args)

    hook.scinol = True
    threading.excepthook = hook
    for name in ("apache_beam.runners.worker.data_plane", "apache_beam.runners.worker.sdk_worker"):
        logging.getLogger(name).addFilter(_RunnerHangUps())


def _interrupt(*_) -> None:
    import threading

    # Beam's threads (the job's state reader, the in-process SDK harness's
    # data plane) fail once the job server is stopped and log or print
    # tracebacks: expected while stopping, not worth showing.
    threading.excepthook = lambda hook_args: None
    logging.disable(logging.CRITICAL)
    sys.stderr = _MainThreadOnly(sys.stderr)  # the SDK harness also prints a failed bundle's traceback itself
    raise KeyboardInterrupt


class _MainThreadOnly:
    """A stream that drops what other threads write (while stopping)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        import threading

        if threading.current_thread() is threading.main_thread():
            return self.stream.write(text)
        return len(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


class _WithoutHangUps:
    """A stream that drops what another thread writes about the runner
    hanging up (the SDK harness prints a failed bundle's traceback itself):
    while a job runs, as its end can come from the cluster."""

    def __init__(self, stream):
        self.stream, self.dropped = stream, None

    def write(self, text: str) -> int:
        import threading

        thread = threading.current_thread()
        if thread is not threading.main_thread():
            if _HUNG_UP in text:
                self.dropped = thread
                return len(text)
            if self.dropped is thread and text == "\n":  # print()'s own end of line
                return len(text)
        self.dropped = None
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _stop_on_signals() -> dict:
    """SIGTERM ends the run like Ctrl-C: the exception unwinds and the atexit
    handlers run, among them Beam's, which stops the Flink job-server JVM
    (SIGTERM's default action would leave it running). The handlers replaced."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # handlers can be set there only
        return {}
    return {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}


def launch(cfg) -> int:
    """Run the pipeline; a bounded run ends with one summary line (and a
    warning when nothing but dead letters came out)."""
    import signal

    from pipelines.launch import run as run_pipeline
    from pipelines.launch import summarize

    previous = _stop_on_signals()
    _quiet_runner_hang_ups()
    beam_log = logging.getLogger("apache_beam.runners.common")
    beam_log.addFilter(_not_a_stop)
    logging.getLogger().addFilter(_not_a_refusal)  # Beam's portable runner logs the job's failure at the root
    stderr = sys.stderr
    sys.stderr = _WithoutHangUps(stderr)
    try:
        result = run_pipeline(cfg, say=lambda line: print(f"scinol run: {line}", file=sys.stderr))
    except Exception as exc:  # noqa: BLE001 - Beam re-raises a step's error wrapped in its own
        refused = _savepoint_refusal(str(exc))
        if refused is not None:
            raise UsageError(f"run: {refused}") from None
        cancelled = _cancelled_elsewhere(exc)
        if cancelled is not None:
            print(f"scinol: error: run: the Flink job was cancelled on the cluster, not by this run (Beam job "
                  f"{cancelled}); `scinol run ... --from-checkpoint` carries it on from its last checkpoint",
                  file=sys.stderr)
            return EXIT_ENDED_ELSEWHERE
        stop = _stop_of(exc)
        if stop is None:
            raise
        print(f"scinol: error: run: {stop[1]}", file=sys.stderr)
        return STOPS[stop[0]]
    finally:
        if isinstance(sys.stderr, _WithoutHangUps):  # not replaced meanwhile (by _interrupt)
            sys.stderr = stderr
        beam_log.removeFilter(_not_a_stop)
        logging.getLogger().removeFilter(_not_a_refusal)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary = summarize(result) if cfg.bounded else None
    if summary is not None:
        print(f"scinol run: done: {summary.line()}", file=sys.stderr)
        if summary.waiting:
            print(f"scinol: error: run: {summary.waiting:,} messages still wait for offsets that never came (a "
                  f"warning above names them): the run ended without applying them", file=sys.stderr)
            return EXIT_ORDER
        if summary.only_dead_letters:
            hint = "" if cfg.registry_url else " (if the events were produced through a schema registry, pass " \
                                               "--schema-registry URL)"
            print(f"scinol run: warning: every message became a dead letter, no prediction was made; see topic "
                  f"{cfg.dlq_topic}{hint}", file=sys.stderr)
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("run", help="run the streaming pipeline: events topic in, predictions and checkpoints out",
                       description="Exact mode (default): one stateful learner per model name; sharded mode "
                                   "with --shards K. Beam flags go after `--`, "
                                   "e.g. `-- --runner=PortableRunner --job_endpoint=localhost:8099`.")
    add_kafka_options(p, "the events topic (Avro Event records)")
    p.add_argument("--predictions-topic", required=True, help="where Prediction records go")
    add_learner_options(p)
    add_interaction_options(p)
    p.add_argument("--n-classes", type=int, default=None, help="number of classes (softmax)")
    p.add_argument("--hash-bits", type=int, default=18, help="hash space of named features (default 18)")
    _add_checkpoint_options(p)
    p.add_argument("--dead-letter-topic", default=None, help="default: TOPIC.dlq")
    p.add_argument("--group-id", default=None,
                   help="consumer group: offsets committed after each bundle, for Kafka's tools to show progress "
                        "(needs --checkpoint-dir: the checkpoints decide where a restart resumes)")
    _add_input_limit_options(p)
    _add_output_options(p)
    _add_delayed_label_options(p)
    _add_sharded_options(p)
    _add_runner_options(p)
    p.add_argument("beam_args", nargs="*", metavar="-- BEAM_ARGS", help="passed to Beam's PipelineOptions")
    p.set_defaults(func=run)


def _add_checkpoint_options(p) -> None:
    """--bounded and the checkpoints: where they go, how often, and whether a run resumes from them."""
    p.add_argument("--bounded", action="store_true",
                   help="read up to the end offsets seen at start, write a final checkpoint, stop")
    p.add_argument("--checkpoint-dir", metavar="DIR", help="write checkpoints here and resume from the newest")
    p.add_argument("--from-scratch", action="store_true",
                   help="start fresh models: move the checkpoints in --checkpoint-dir aside (nothing is deleted)")
    p.add_argument("--checkpoint-every", type=int, default=None, metavar="N", help="checkpoint every N events")
    p.add_argument("--checkpoint-seconds", type=float, default=None, metavar="T", help="checkpoint every T seconds")
    p.add_argument("--checkpoint-topic", default=None, help="compacted topic for checkpoint headers "
                                                            "(default: PREDICTIONS_TOPIC.checkpoints)")


def _add_input_limit_options(p) -> None:
    """How much a run reads and holds, and what it takes as a dead letter."""
    p.add_argument("--stop-after", type=int, default=None, metavar="N",
                   help="unbounded: stop after the first N offsets of each partition")
    p.add_argument("--max-batch", type=int, default=2000, help="messages per batch from the source")
    p.add_argument("--max-waiting", type=int, default=DEFAULT_MAX_WAITING, metavar="N",
                   help="most messages a model (or a sharded route step) holds while they wait for an earlier batch "
                        "of their partition, on a runner that delivers out of order; past it the run stops (exit "
                        f"status {EXIT_ORDER}) naming the partition and the missing offsets (default "
                        f"{DEFAULT_MAX_WAITING:,})")
    p.add_argument("--max-models", type=int, default=None, metavar="N",
                   help="accept at most N distinct model names per worker; events for more are dead letters "
                        "(too_many_models). Default: no limit")
    p.add_argument("--connect-timeout", type=float, default=None, metavar="S",
                   help="wait up to S seconds for a broker that does not answer at start (default 30)")
    p.add_argument("--max-index", type=int, default=None, metavar="N",
                   help="dead-letter events with a sparse index >= N or more than N dense values "
                        "(index_out_of_range; default 4194304): bounds a model's memory")
    p.add_argument("--max-message-bytes", type=int, default=None, metavar="N",
                   help="dead-letter messages over N bytes undecoded (oversized; default 16 MiB)")
    p.add_argument("--max-dead-letter-ratio", type=float, default=None, metavar="R",
                   help=f"stop (exit status {EXIT_DEAD_LETTERS}) when more than this share of the messages became dead "
                        "letters, judged over windows of 1000 messages from the 100th on (default: never stop)")


def _add_output_options(p) -> None:
    """The metrics endpoint, exactly-once predictions, and the output topics' settings."""
    p.add_argument("--metrics-port", type=_port, default=None, metavar="PORT",
                   help="serve Prometheus metrics at http://HOST:PORT/metrics while the run lasts (0: any free "
                        "port): events, predictions, dead letters, consumer lag, checkpoints; with the direct "
                        "runner, and Flink without --worker-pool (its workers then run in this process)")
    p.add_argument("--metrics-host", default="0.0.0.0", metavar="HOST",
                   help="address the metrics endpoint listens on (default all)")
    p.add_argument("--exactly-once", action="store_true",
                   help="write predictions in Kafka transactions, each committed with the input offsets it answers: "
                        "a read_committed consumer sees each prediction once, across restarts and failovers "
                        "(needs a broker with transactions, e.g. Apache Kafka; exact mode only)")
    add_topic_options(p, "partitions of the predictions and dead-letter topics when created (default 1)")


def _add_delayed_label_options(p) -> None:
    d = p.add_argument_group("delayed labels (events that come without a label learn when it arrives)")
    d.add_argument("--labels-topic", default=None, metavar="TOPIC",
                   help="Label records (event id, model, label), keyed by event id; unlabelled events wait for "
                        "theirs and are learned from in label-arrival order")
    d.add_argument("--label-ttl", type=float, default=86_400.0, metavar="S",
                   help="seconds of event time an event waits for its label, or a label for its event "
                        "(default 86400)")
    d.add_argument("--max-pending", type=int, default=1_000_000, metavar="N",
                   help="most events (and, separately, early labels) a model holds waiting (default 1000000)")


def _add_sharded_options(p) -> None:
    g = p.add_argument_group("sharded mode (features split over K stateful shards, g_t fed back through Kafka)")
    g.add_argument("--shards", type=int, default=None, metavar="K",
                   help="split each model's coordinates over K shards (default: exact mode, one learner per model)")
    g.add_argument("--max-staleness", type=int, default=0, metavar="S",
                   help="a shard predicts at most S events ahead of the feedback it has applied; 0 (default) "
                        "equals exact mode, larger S trades exactness for throughput")
    g.add_argument("--feedback-topic", default=None, help="default: PREDICTIONS_TOPIC.feedback (1 partition)")
    g.add_argument("--feedback-timeout", type=float, default=30.0, metavar="T",
                   help="give up (and report) feedback awaited longer than T seconds (default 30)")


def _add_runner_options(p) -> None:
    r = p.add_argument_group("runner (Beam flags after `--` still pass through and override these)")
    r.add_argument("--runner", choices=("direct", "flink", "prism"), default="direct",
                   help="direct (default): in this process; flink: Apache Flink 1.19 through Beam's FlinkRunner "
                        "(streaming, checkpointed, restarted from its last checkpoint on failure); prism: Beam's "
                        "Prism runner. See `scinol provision`")
    r.add_argument("--flink-master", default=None, metavar="HOST:PORT",
                   help="a Flink session cluster's REST address (`scinol flink up` prints it); default [local], "
                        "an embedded cluster in this process")
    r.add_argument("--worker-pool", default=None, metavar="HOST:PORT",
                   help="run the job's Python in a Beam SDK worker pool, one process per TaskManager (`scinol flink "
                        "up` starts one and prints it), instead of in this process (LOOPBACK, one core)")
    r.add_argument("--parallelism", type=int, default=None, metavar="N",
                   help="Flink parallelism (default: the cluster's); with N, partition i is read and sequenced on "
                        "subtask i %% N and the models of --models go one a subtask")
    r.add_argument("--models", default=None, metavar="NAME[,NAME...]",
                   help="Flink with --parallelism: the models to spread, one a subtask in this order (others go "
                        "where their names hash); each partition is read on subtask partition %% parallelism")
    r.add_argument("--execution-mode", choices=("streaming", "batch"), default=None,
                   help="Flink: streaming (default), or batch for a --bounded exact run (Flink runs it stage by "
                        "stage; the result is the same bits)")
    r.add_argument("--checkpointing-interval", type=int, default=None, metavar="MS",
                   help="milliseconds between Flink checkpoints (default 10000); Kafka offsets are committed "
                        "when a checkpoint completes")
    r.add_argument("--from-savepoint", default=None, metavar="PATH",
                   help="Flink: start from a savepoint (`scinol flink stop` prints its path): each model's state and "
                        "each partition's position carry on from it, also at another --parallelism")
    r.add_argument("--from-checkpoint", default=None, metavar="DIR",
                   help="Flink: start from the newest checkpoint retained in DIR (the cluster's "
                        "state.checkpoints.dir, a job's folder in it, or one chk-N), as after the loss of a "
                        "JobManager without high availability")
