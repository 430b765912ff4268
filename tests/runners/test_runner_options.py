"""``scinol run --runner ...`` as Beam flags (pipelines/runners/options.py),
and its mistakes as one line from the command line. No runner starts here:
the jar and binary paths are given, so nothing is provisioned."""

from __future__ import annotations

import pytest
from apache_beam.options.pipeline_options import DebugOptions, FlinkRunnerOptions, PipelineOptions, StandardOptions

from pipelines.cli.main import build_parser, main
from pipelines.provision.flink import DEFAULT_FLINK_VERSION
from pipelines.runners.options import RunnerOptions, beam_args, check

JAR = "/cache/job-server.jar"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty download cache (the java launcher the Flink flags name is written there)."""
    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def flink(*extra, **opts):
    return beam_args(RunnerOptions("flink", **opts), list(extra), job_server_jar=JAR)


def test_direct_adds_nothing_and_keeps_the_users_flags():
    assert beam_args(RunnerOptions(), []) == []
    assert beam_args(RunnerOptions("direct"), ["--runner=PortableRunner", "--job_endpoint=x:1"]) == \
        ["--runner=PortableRunner", "--job_endpoint=x:1"]


def test_unbounded_flink_streams_with_checkpoints_and_a_restart_strategy(cache):
    args = flink(flink_master="localhost:8081", parallelism=2, checkpointing_interval=2000)
    (launcher,) = (cache / "flink-job-server").glob("java-bound-to-parent-*")
    assert args == ["--runner=FlinkRunner", "--flink_master=localhost:8081", f"--flink_version={DEFAULT_FLINK_VERSION}",
                    f"--flink_job_server_jar={JAR}", f"--job_server_java_launcher={launcher}",
                    "--environment_type=LOOPBACK", "--experiments=disable_logging_submission_environment",
                    "--streaming", "--checkpointing_interval=2000", "--finish_bundle_before_checkpointing",
                    "--externalized_checkpoints_enabled", "--retain_externalized_checkpoints_on_cancellation",
                    "--number_of_execution_retries=30", "--execution_retry_delay=3000", "--parallelism=2"]
    options = PipelineOptions(args)
    assert options.view_as(StandardOptions).runner == "FlinkRunner" and options.view_as(StandardOptions).streaming
    assert options.view_as(FlinkRunnerOptions).flink_master == "localhost:8081"
    assert options.view_as(FlinkRunnerOptions).parallelism == 2
    assert options.view_as(DebugOptions).lookup_experiment("disable_logging_submission_environment")


def test_flink_defaults_to_the_embedded_cluster_and_ten_second_checkpoints():
    args = flink()
    assert "--flink_master=[local]" in args and "--checkpointing_interval=10000" in args
    assert not any(a.startswith("--parallelism") for a in args)


def test_an_embedded_flink_writes_its_checkpoints_to_files_a_session_cluster_where_it_is_configured(tmp_path):
    # the embedded default (JobManager memory, 5 MB) fails every checkpoint of a model of 2^18 coordinates
    args = flink(state_dir=str(tmp_path / "state"))
    assert "--state_backend=filesystem" in args
    assert f"--state_backend_storage_path={(tmp_path / 'state').as_uri()}" in args
    assert any(a.startswith("--state_backend_storage_path=file:///") for a in flink())  # a default folder
    assert not any(a.startswith("--state_backend") for a in flink(flink_master="localhost:8081"))
    assert not any(a.startswith("--state_backend") for a in flink(bounded=True))  # no checkpoints at all


def test_scinol_run_puts_an_embedded_flinks_checkpoints_beside_its_own(tmp_path, monkeypatch):
    from pipelines.cli.run import runner_beam_args

    monkeypatch.setattr("pipelines.provision.flink.provision_flink_job_server", lambda *a: JAR)
    args = build_parser().parse_args(["run", "--bootstrap", "b:9092", "--topic", "t", "--predictions-topic", "p",
                                      "--runner", "flink",
                                      "--checkpoint-dir", str(tmp_path / "ck")])
    assert f"--state_backend_storage_path={(tmp_path / 'ck' / 'flink-state').as_uri()}" in runner_beam_args(args)


def test_a_bounded_flink_run_streams_without_checkpoints():
    # not batch mode: it reorders a partition's events on their way to the model (docs/runners.md)
    args = flink(bounded=True)
    assert "--streaming" in args and not any("checkpoint" in a for a in args)
    assert "--number_of_execution_retries=30" in args
    with pytest.raises(ValueError, match="--checkpointing-interval with --bounded"):
        flink(bounded=True, checkpointing_interval=1000)


def test_the_users_beam_flags_override_and_pass_through():
    args = flink("--environment_type=EXTERNAL", "--environment_config=localhost:50000", "--max_bundle_size=10")
    assert "--environment_type=LOOPBACK" not in args
    assert args[-3:] == ["--environment_type=EXTERNAL", "--environment_config=localhost:50000", "--max_bundle_size=10"]
    assert PipelineOptions(args).get_all_options()["environment_type"] == "EXTERNAL"


def test_prism_uses_the_given_binary():
    args = beam_args(RunnerOptions("prism"), ["--streaming"], prism_binary="/cache/prism")
    assert args == ["--runner=PrismRunner", "--prism_location=/cache/prism", "--streaming"]
    assert PipelineOptions(args).get_all_options()["prism_location"] == "/cache/prism"


@pytest.mark.parametrize("opts, message", [
    (RunnerOptions("direct", parallelism=2), "--parallelism applies to --runner flink only"),
    (RunnerOptions("prism", flink_master="[local]"), "--flink-master applies to --runner flink only"),
    (RunnerOptions("flink", flink_master="http://x"), "--flink-master must be HOST:PORT"),
    (RunnerOptions("flink", parallelism=0), "--parallelism must be at least 1"),
    (RunnerOptions("spark"), "--runner must be one of direct, flink, prism"),
])
def test_combinations_that_cannot_work(opts, message):
    with pytest.raises(ValueError, match=message):
        check(opts)


def test_two_runners_are_refused():
    with pytest.raises(ValueError, match="give the runner once"):
        flink("--runner=DirectRunner")


RUN = ["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p"]


def test_the_command_line_parses_the_runner_options():
    args = build_parser().parse_args(RUN + ["--runner", "flink", "--flink-master", "localhost:8081",
                                            "--parallelism", "2", "--checkpointing-interval", "500", "--", "--x=1"])
    assert (args.runner, args.flink_master, args.parallelism, args.checkpointing_interval, args.beam_args) == \
        ("flink", "localhost:8081", 2, 500, ["--x=1"])
    assert build_parser().parse_args(RUN).runner == "direct"


@pytest.mark.parametrize("extra, message", [
    (["--parallelism", "2"], "run: --parallelism applies to --runner flink only (the runner is direct)"),
    (["--runner", "flink", "--flink-master", "nowhere"], "run: --flink-master must be HOST:PORT"),
    (["--runner", "flink", "--", "--runner=PrismRunner"], "run: --runner flink and a Beam --runner flag"),
])
def test_mistakes_are_one_line_and_exit_2(capsys, extra, message):
    assert main(RUN + extra) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"scinol: error: {message}") and err.count("\n") == 1


def test_a_worker_pool_runs_the_sdk_harness_external():
    args = flink(flink_master="localhost:8081", worker_pool="localhost:50000")
    assert "--environment_type=LOOPBACK" not in args
    assert ["--environment_type=EXTERNAL", "--environment_config=localhost:50000"] == \
        [a for a in args if a.startswith("--environment")]
    with pytest.raises(ValueError, match="--worker-pool must be HOST:PORT"):
        flink(worker_pool="[local]")
    with pytest.raises(ValueError, match="--worker-pool applies to --runner flink only"):
        beam_args(RunnerOptions("prism", worker_pool="localhost:50000"), [])


def test_a_bounded_run_never_uses_flinks_batch_mode_even_with_beam_flags_alone(tmp_path):
    """Flink's batch mode reorders a partition's events on the way to the
    keyed model (docs/runners.md): a bounded run that names FlinkRunner
    only through Beam flags still streams; the in-process runner does not."""
    from pipelines.launch import pipeline_options
    from tests.support.runs import config

    flink_cfg = config("127.0.0.1:9092", "t", tmp_path, beam_args=["--runner=FlinkRunner"])
    options, runner = pipeline_options(flink_cfg)
    assert runner == "FlinkRunner" and options.view_as(StandardOptions).streaming
    options, _ = pipeline_options(config("127.0.0.1:9092", "t", tmp_path))
    assert not options.view_as(StandardOptions).streaming


def test_sharded_mode_on_prism_is_refused_in_one_line_before_prism_is_built(cache, capsys):
    """Measured: on Prism sharded mode's feedback loop stalls (1 prediction
    for 40 events); the run is refused before it starts, and before an
    empty cache gets Prism (a Go build of minutes)."""
    from pipelines.cli.main import main

    code = main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "t.pred", "--bounded",
                 "--shards", "2", "--runner", "prism"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--shards does not run on Prism" in err, err
    assert not (cache / "prism").exists()


@pytest.mark.parametrize("flags,restores", [
    ([], False), (["--runner=DirectRunner"], False), (["--runner", "BundleBasedDirectRunner"], False),
    (["--runner=FlinkRunner"], True), (["--runner=PrismRunner"], True), (["--runner=DataflowRunner"], True),
    (["--runner=PortableRunner", "--job_endpoint=x:1"], True),
])
def test_sharded_state_goes_to_beam_state_only_where_the_runner_restores_it(flags, restores):
    """Sharded mode pickles its shards into Beam state each bundle only for
    runners that restore state after a failure; the DirectRunner's lasts one run."""
    from pipelines.config import RunConfig

    assert RunConfig(bootstrap="b", topic="t", predictions_topic="p", beam_args=flags).runner_restores_state() \
        == restores


def test_a_flink_run_that_streams_ends_bundles_flushes_the_network_and_returns_from_reads_quickly(
        tmp_path, monkeypatch):
    """Sharded mode's feedback loop crosses three Flink exchanges per event
    at staleness 0, and an unbounded exact run's predictions wait for the
    keyed model's bundle: both get short bundles, a 1 ms network buffer
    timeout (a flink-conf.yaml the local job server reads) and read calls
    no longer than a bundle; the user's own flags win; a bounded exact run (a backfill), a job
    server elsewhere and the other runners keep the defaults. The declared
    options parse without a warning."""
    import logging

    from pipelines.launch import pipeline_options, read_calls_for_runner
    from pipelines.runners.options import FlinkLatencyOptions, flink_default_latency_args
    from tests.support.runs import config

    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path / "cache"))
    on_flink = ["--runner=FlinkRunner", "--flink_master=[local]"]

    def latency(beam_args, **kw):
        options, _ = pipeline_options(config("127.0.0.1:9092", "t", tmp_path, beam_args=beam_args, **kw))
        mine = options.view_as(FlinkLatencyOptions)
        return mine.max_bundle_time_mills, mine.flink_conf_dir

    def read_seconds(beam_args, **kw):
        cfg = config("127.0.0.1:9092", "t", tmp_path, beam_args=beam_args, **kw)
        return read_calls_for_runner(cfg, pipeline_options(cfg)[0]).read_call_seconds

    bundle, conf_dir = latency(on_flink, shards=2)
    assert bundle == 20
    with open(f"{conf_dir}/flink-conf.yaml") as f:
        assert f.read() == "execution.buffer-timeout: 1 ms\n"
    assert latency(on_flink, shards=2)[1] == conf_dir  # the same folder the next time
    assert latency(on_flink, bounded=False) == (20, conf_dir)  # exact mode, unbounded
    (tmp_path / "not-a-folder").write_text("")
    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path / "not-a-folder"))  # a cache it cannot write to
    elsewhere = latency(on_flink, shards=2)[1]
    assert not elsewhere.startswith(str(tmp_path))
    with open(f"{elsewhere}/flink-conf.yaml") as f:
        assert f.read() == "execution.buffer-timeout: 1 ms\n"
    assert latency([*on_flink, "--max_bundle_time_mills=250", "--flink_conf_dir=/etc/flink"], shards=2) == \
        (250, "/etc/flink")
    assert latency(on_flink) == (None, None)  # exact mode, bounded
    assert latency(["--runner=FlinkRunner", "--job_endpoint=elsewhere:8099"], shards=2) == (None, None)
    assert latency(["--runner=PortableRunner", "--job_endpoint=x:1"], shards=2) == (None, None)
    assert latency([], shards=2) == (None, None)  # the in-process runner

    # read calls no longer than the bundles: with 1 s calls a 20 ms bundle would still last a second
    assert read_seconds(on_flink, shards=2) == read_seconds(on_flink, bounded=False) == 0.02
    assert read_seconds([*on_flink, "--max_bundle_time_mills=250"], bounded=False) == 0.25
    assert read_seconds([*on_flink, "--max_bundle_time_mills=5000"], bounded=False) == 1.0
    assert read_seconds(on_flink, bounded=False, read_call_seconds=0.5) == 0.5
    back = flink_default_latency_args(tmp_path / "flink-defaults")  # what the benchmarks compare with
    assert latency([*on_flink, *back], bounded=False) == (1000, str(tmp_path / "flink-defaults"))
    assert read_seconds([*on_flink, *back], bounded=False) == 1.0
    assert (tmp_path / "flink-defaults" / "flink-conf.yaml").read_text() == "execution.buffer-timeout: 100 ms\n"
    assert read_seconds(on_flink) is None  # exact mode, bounded: the read's default
    assert read_seconds(["--runner=FlinkRunner", "--job_endpoint=elsewhere:8099"], shards=2) is None
    assert read_seconds([], bounded=False) is read_seconds(["--runner=PrismRunner"], shards=2) is None

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    try:
        PipelineOptions(["--max_bundle_time_mills=20", "--flink_conf_dir=/x"]).get_all_options()
    finally:
        logging.getLogger().removeHandler(handler)
    assert not [r for r in records if "Unparseable" in r.getMessage()]


def test_the_kafka_read_call_is_given_a_second_by_default_or_the_length_asked_for():
    """A read call holds its partition for ``checkpoint_seconds`` (an SDF
    checkpoint then lets the bundle end); None is the read's default."""
    from pipelines.beam_io.read import CALL_SECONDS, ReadFromKafkaRanges
    from pipelines.kafka.consumer import UNBOUNDED_STOP, PartitionRange

    ranges = [PartitionRange("t", 0, 0, UNBOUNDED_STOP)]
    assert ReadFromKafkaRanges("b:1", ranges).read._checkpoint_seconds == CALL_SECONDS == 1.0
    assert ReadFromKafkaRanges("b:1", ranges, checkpoint_seconds=None).read._checkpoint_seconds == 1.0
    assert ReadFromKafkaRanges("b:1", ranges, checkpoint_seconds=0.02).read._checkpoint_seconds == 0.02


def test_from_checkpoint_starts_from_the_newest_complete_checkpoint(tmp_path, cache):
    import os
    import time

    from pipelines.runners.options import newest_checkpoint

    with pytest.raises(ValueError, match="no complete Flink checkpoint there"):
        newest_checkpoint(str(tmp_path))
    for job, chk, age in (("a1", 3, 30), ("a1", 4, 20), ("b2", 9, 10), ("b2", 10, 0)):
        folder = tmp_path / job / f"chk-{chk}"
        folder.mkdir(parents=True)
        if chk != 10:  # chk-10 is being written: no _metadata yet
            (folder / "_metadata").write_bytes(b"m")
            stamp = time.time() - age
            os.utime(folder / "_metadata", (stamp, stamp))
    assert newest_checkpoint(str(tmp_path)) == str(tmp_path / "b2" / "chk-9")  # the cluster's folder
    assert newest_checkpoint(str(tmp_path / "a1")) == str(tmp_path / "a1" / "chk-4")  # a job's
    assert newest_checkpoint(str(tmp_path / "a1" / "chk-3")) == str(tmp_path / "a1" / "chk-3")  # one
    assert newest_checkpoint(tmp_path.as_uri()) == str(tmp_path / "b2" / "chk-9")
    assert f"--savepoint_path={tmp_path / 'b2' / 'chk-9'}" in flink(flink_master="localhost:8081",
                                                                     checkpoints=str(tmp_path))
    with pytest.raises(ValueError, match="--from-savepoint and --from-checkpoint: start from one of them"):
        check(RunnerOptions("flink", checkpoints=str(tmp_path), savepoint=str(tmp_path / "a1" / "chk-3")))
    with pytest.raises(ValueError, match="--from-checkpoint applies to --runner flink only"):
        check(RunnerOptions("direct", checkpoints=str(tmp_path)))
