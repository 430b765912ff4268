"""The runner a run asks for (``scinol run --runner direct|flink|prism``),
as the Beam pipeline options that work on this machine.

direct
    Nothing is added: the pipeline runs in this process on Beam's FnApiRunner
    (``pipelines.launch``), or on whatever ``--runner=...`` the pass-through
    Beam flags name.
flink
    Beam's FlinkRunner on Flink 1.19 with the provisioned job-server jar
    (nothing downloads at run time); ``[local]`` is an embedded MiniCluster,
    ``HOST:PORT`` a session cluster's REST address (``scinol flink up``). The
    Python SDK harness runs in this process (LOOPBACK), or with
    ``--worker-pool`` in a Beam worker pool's processes, one per TaskManager
    (EXTERNAL); Flink's default for a remote master would be Docker, which
    this machine does not run.
    An unbounded run streams with checkpointing: Beam runs bundle finalizers
    (Kafka offset commits) only after a checkpoint completes, and the model
    lives in Beam state that Flink snapshots with the source position.
    ``--finish_bundle_before_checkpointing``: without it the MiniCluster
    buffers bundle output in its 5 MB in-memory checkpoints and fails them
    (docs/runners.md). An embedded Flink writes its checkpoints to files
    (state backend ``filesystem``, under ``state_dir``): its default keeps
    them in JobManager memory, at most 5 MB, and a model's Beam state is
    larger (2^18 hashed coordinates of ScInOL2: 8 MB), so every checkpoint
    failed and the job restarted over and over, sending its predictions
    again each time. A session cluster's own configuration says where its
    checkpoints go (``scinol flink up``: files). A failed job restarts from its last checkpoint up to
    30 times 3 s apart, long enough for a killed TaskManager to be replaced.
    A bounded run (``--bounded``) streams too, without checkpoints (with
    checkpointing the job wrote all its predictions but did not end: seen
    here with 100 events, 13 minutes), or with ``--execution-mode batch``
    runs in Flink's batch mode, stage after stage: that mode keeps no order
    between steps, which the pipeline no longer needs (each keyed step
    applies a partition's batches in offset order, docs/runners.md).
    Without checkpoints there are no offset commits: the scinol checkpoints
    decide where a rerun resumes.
    An unbounded or sharded run also gets short bundles and a short network
    buffer timeout (:func:`low_latency_flink_args`, added by
    ``pipelines.launch`` for the runner named by any flags, which also keeps
    the Kafka read's calls within a bundle's time).
prism
    Beam's Prism runner, the binary ``scinol provision prism`` built.

A Beam flag the user passes after ``--`` overrides the one made here.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import NamedTuple

from apache_beam.options.pipeline_options import PipelineOptions

RUNNERS = ("direct", "flink", "prism")
EXECUTION_MODES = ("streaming", "batch")
LOCAL = "[local]"
DEFAULT_CHECKPOINTING_INTERVAL_MS = 10_000
RESTART_ATTEMPTS = 30
RESTART_DELAY_MS = 3_000
DEFAULT_STATE_DIR = os.path.join(tempfile.gettempdir(), "scinol-flink-state")
_HOST_PORT = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$")
_MASTER = re.compile(r"^(\[local\]|\[auto\]|[A-Za-z0-9.-]+:\d{1,5})$")


class RunnerOptions(NamedTuple):
    """What ``scinol run`` was asked for, before it becomes Beam flags."""
    runner: str = "direct"
    flink_master: str | None = None
    parallelism: int | None = None
    checkpointing_interval: int | None = None
    """Milliseconds between Flink checkpoints."""
    bounded: bool = False
    """The run stops at the end offsets seen at its start (``--bounded``)."""
    worker_pool: str | None = None
    """``host:port`` of a Beam SDK worker pool (EXTERNAL environment) instead of LOOPBACK."""
    state_dir: str | None = None
    """Where an embedded Flink writes its checkpoints (default: :data:`DEFAULT_STATE_DIR`)."""
    execution_mode: str | None = None
    """Flink's ``streaming`` or ``batch`` execution (None: streaming); batch for a bounded exact run only."""
    sharded: bool = False
    savepoint: str | None = None
    """A Flink savepoint (path or URL) to start from."""
    checkpoints: str | None = None
    """A folder of Flink's retained checkpoints: start from the newest complete one."""


def check(opts: RunnerOptions) -> None:
    """ValueError (one line, naming the option) for a combination that cannot work."""
    if opts.runner not in RUNNERS:
        raise ValueError(f"--runner must be one of {', '.join(RUNNERS)}, not {opts.runner!r}")
    flink_only = [name for name, value in (("--flink-master", opts.flink_master), ("--parallelism", opts.parallelism),
                                           ("--checkpointing-interval", opts.checkpointing_interval),
                                           ("--worker-pool", opts.worker_pool),
                                           ("--from-savepoint", opts.savepoint),
                                           ("--from-checkpoint", opts.checkpoints))
                  if value is not None]
    if flink_only and opts.runner != "flink":
        raise ValueError(f"{flink_only[0]} applies to --runner flink only (the runner is {opts.runner})")
    if opts.flink_master is not None and not _MASTER.match(opts.flink_master):
        raise ValueError(f"--flink-master must be HOST:PORT (a session cluster's REST address) or {LOCAL}, "
                         f"not {opts.flink_master!r}")
    if opts.worker_pool is not None and not _HOST_PORT.match(opts.worker_pool):
        raise ValueError(f"--worker-pool must be HOST:PORT (`scinol flink status` shows it), not {opts.worker_pool!r}")
    if opts.execution_mode not in (None, *EXECUTION_MODES):
        raise ValueError(f"--execution-mode must be one of {', '.join(EXECUTION_MODES)}, not {opts.execution_mode!r}")
    if opts.execution_mode is not None and opts.runner != "flink":
        raise ValueError(f"--execution-mode applies to --runner flink only (the runner is {opts.runner})")
    if opts.execution_mode == "batch" and not opts.bounded:
        raise ValueError("--execution-mode batch needs --bounded: Flink's batch mode runs a job that ends")
    if opts.execution_mode == "batch" and opts.sharded:
        raise ValueError("--execution-mode batch with --shards: sharded mode's feedback loop needs every step "
                         "running at once (streaming)")
    if opts.bounded and opts.checkpointing_interval is not None:
        raise ValueError("--checkpointing-interval with --bounded: a bounded run on Flink takes no checkpoints "
                         "(it would not end)")
    for name, value in (("--parallelism", opts.parallelism), ("--checkpointing-interval", opts.checkpointing_interval)):
        if value is not None and value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if opts.savepoint is not None and opts.checkpoints is not None:
        raise ValueError("--from-savepoint and --from-checkpoint: start from one of them")
    if opts.savepoint is not None:
        check_savepoint(opts.savepoint)
    if opts.checkpoints is not None:
        newest_checkpoint(opts.checkpoints)


def newest_checkpoint(folder: str) -> str:
    """The newest complete checkpoint (a ``chk-N`` folder holding Flink's
    ``_metadata``, written last) in ``folder``: a checkpoint itself, a job's
    folder of them, or the cluster's ``state.checkpoints.dir`` holding a
    folder a job; ValueError when there is none."""
    root = Path(folder.removeprefix("file://").removeprefix("file:"))
    found = [root / "_metadata", *root.glob("chk-*/_metadata"), *root.glob("*/chk-*/_metadata")]
    complete = [metadata for metadata in found if metadata.is_file()]
    if not complete:
        raise ValueError(f"--from-checkpoint {folder}: no complete Flink checkpoint there (no chk-N folder with a "
                         f"_metadata file)")
    return str(max(complete, key=lambda metadata: metadata.stat().st_mtime_ns).parent)


def check_savepoint(where: str) -> None:
    """ValueError unless a local savepoint (a path or ``file:`` URI) is a
    folder holding Flink's ``_metadata``; other URLs are the cluster's to read."""
    if "://" in where and not where.startswith("file:"):
        return
    path = Path(where.removeprefix("file://").removeprefix("file:"))
    if not (path / "_metadata").is_file():
        raise ValueError(f"--from-savepoint {where}: no Flink savepoint there (no _metadata file)")


def beam_args(opts: RunnerOptions, extra: list[str], *, job_server_jar=None, prism_binary=None) -> list[str]:
    """The Beam flags for ``opts`` followed by ``extra`` (the user's own);
    a flag named in ``extra`` is left to it. The jar and binary default to
    the provisioned ones (a ProvisionError if they cannot be)."""
    check(opts)
    if opts.runner == "direct":
        return list(extra)
    if any(arg.split("=")[0] == "--runner" for arg in extra):
        raise ValueError(f"--runner {opts.runner} and a Beam --runner flag after `--`: give the runner once")
    made = flink_args(opts, job_server_jar) if opts.runner == "flink" else prism_args(prism_binary)
    return _not_given(made, extra) + list(extra)


def _not_given(made: list[str], given: list[str]) -> list[str]:
    """The flags of ``made`` whose names ``given`` does not name."""
    names = {arg.split("=")[0] for arg in given if arg.startswith("--")}
    return [arg for arg in made if arg.split("=")[0] not in names]


def flink_args(opts: RunnerOptions, job_server_jar=None) -> list[str]:
    from pipelines.provision.flink import DEFAULT_FLINK_VERSION, provision_flink_job_server

    jar = job_server_jar or provision_flink_job_server(DEFAULT_FLINK_VERSION)
    interval = opts.checkpointing_interval or DEFAULT_CHECKPOINTING_INTERVAL_MS
    args = ["--runner=FlinkRunner", f"--flink_master={opts.flink_master or LOCAL}", *job_server_args(jar),
            *environment_args(opts.worker_pool),
            # Beam runs `pip freeze` at every submission (1-4 s here) only to log the submitter's packages
            "--experiments=disable_logging_submission_environment"]
    if opts.execution_mode != "batch":
        args.append("--streaming")
    if not opts.bounded:
        # retained when the job is cancelled or lost, so a run can go on from one (--from-checkpoint)
        args += [f"--checkpointing_interval={interval}", "--finish_bundle_before_checkpointing",
                 "--externalized_checkpoints_enabled", "--retain_externalized_checkpoints_on_cancellation"]
        if (opts.flink_master or LOCAL) == LOCAL:
            state = Path(opts.state_dir or DEFAULT_STATE_DIR).resolve()
            args += ["--state_backend=filesystem", f"--state_backend_storage_path={state.as_uri()}"]
    args += [f"--number_of_execution_retries={RESTART_ATTEMPTS}", f"--execution_retry_delay={RESTART_DELAY_MS}"]
    if opts.parallelism is not None:
        args.append(f"--parallelism={opts.parallelism}")
    if opts.savepoint is not None or opts.checkpoints is not None:
        args.append(f"--savepoint_path={opts.savepoint or newest_checkpoint(opts.checkpoints)}")
    return args


def job_server_args(jar) -> list[str]:
    """Beam's Flink job server: the provisioned jar, its Flink version, and
    a ``java`` that dies with this process (:mod:`pipelines.runners.java_launcher`)."""
    from pipelines.provision.flink import DEFAULT_FLINK_VERSION
    from pipelines.runners.java_launcher import java_launcher

    return [f"--flink_version={DEFAULT_FLINK_VERSION}", f"--flink_job_server_jar={jar}",
            f"--job_server_java_launcher={java_launcher()}"]


def environment_args(worker_pool: str | None) -> list[str]:
    """Where the Python SDK harness runs: a worker pool's processes (one per
    TaskManager, so the job's Python uses more than one core) or this
    process (LOOPBACK; Flink's default for a remote master, Docker, does
    not run here)."""
    if worker_pool is None:
        return ["--environment_type=LOOPBACK"]
    return ["--environment_type=EXTERNAL", f"--environment_config={worker_pool}"]


def prism_args(prism_binary=None) -> list[str]:
    from pipelines.provision.prism import provision_prism

    return ["--runner=PrismRunner", f"--prism_location={prism_binary or provision_prism()}"]


LOW_LATENCY_BUNDLE_MILLIS = 20
"""Flink's ``--max_bundle_time_mills`` for a run that streams (Flink's default: 1,000)."""
LOW_LATENCY_BUFFER_TIMEOUT_MS = 1
"""Flink's ``execution.buffer-timeout`` for a run that streams (Flink's default: 100 ms)."""


class FlinkLatencyOptions(PipelineOptions):
    """Options of Beam's Flink job server that Beam's Python SDK does not
    declare: declared here so they parse without a warning; the portable
    runner passes them on to the job server as any other option."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_bundle_time_mills", type=int, default=None,
                            help="Flink: longest a bundle stays open, in milliseconds (Flink's default 1000)")
        parser.add_argument("--flink_conf_dir", default=None,
                            help="Flink: a directory whose flink-conf.yaml the job server reads")
        parser.add_argument("--savepoint_path", default=None,
                            help="Flink: the savepoint (or retained checkpoint) the job starts from")
        parser.add_argument("--externalized_checkpoints_enabled", action="store_true", default=None,
                            help="Flink: write each checkpoint's metadata where a later job can start from it")
        parser.add_argument("--retain_externalized_checkpoints_on_cancellation", action="store_true",
                            default=None, help="Flink: keep the last checkpoint when the job is cancelled")


def low_latency_flink_args(given: list[str]) -> list[str]:
    """The Flink flags an unbounded or sharded run adds to the user's
    (``given``), which win. With Flink's defaults every network exchange
    waits for its bundle to end (up to 1 s) and for its buffer to be
    flushed (up to 100 ms). Sharded mode's feedback loop crosses three per
    round: at staleness 0 that was 1.5 s per event on embedded Flink, with
    these and read calls as short (``pipelines.launch.read_calls_for_runner``)
    about 0.05 s. Exact mode's predictions waited for the keyed model's
    bundle: at 1,000 events/s p50 1.1 s and p99 2.0 s; with these 62-64 ms
    and 106-112 ms, for about a quarter of a core more (docs/runners.md). A
    bounded exact run keeps Flink's defaults: it is a backfill, throughput-bound."""
    made = [f"--max_bundle_time_mills={LOW_LATENCY_BUNDLE_MILLIS}"]
    if _not_given(["--flink_conf_dir"], given):
        made.append(f"--flink_conf_dir={low_latency_flink_conf_dir()}")  # written only when it is used
    return _not_given(made, given)


def flink_default_latency_args(folder: Path) -> list[str]:
    """The flags that give a run Flink's own bundle time and network buffer
    timeout back (1 s, 100 ms; the read calls follow the bundles), the
    buffer timeout in a flink-conf.yaml written in ``folder``: what the
    benchmarks compare :func:`low_latency_flink_args` with."""
    _written(Path(folder), "execution.buffer-timeout: 100 ms\n")
    return ["--max_bundle_time_mills=1000", f"--flink_conf_dir={folder}"]


def low_latency_flink_conf_dir() -> Path:
    """A directory holding a flink-conf.yaml with the low-latency network
    buffer timeout (the job server Beam starts on this machine reads it), in
    scinol's cache, or the temporary directory where the cache cannot be
    written; written once."""
    from pipelines.provision.cache import cache_root

    text = f"execution.buffer-timeout: {LOW_LATENCY_BUFFER_TIMEOUT_MS} ms\n"
    try:
        return _written(cache_root() / "flink-conf" / "low-latency", text)
    except OSError:
        return _written(Path(tempfile.gettempdir()) / "scinol-flink-conf-low-latency", text)


def _written(folder: Path, text: str) -> Path:
    conf = folder / "flink-conf.yaml"
    if not conf.is_file() or conf.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".flink-conf.yaml.{os.getpid()}"
        partial.write_text(text)
        os.replace(partial, conf)
    return folder
