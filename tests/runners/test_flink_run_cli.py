"""``scinol run --runner flink`` as a user types it: a real process on an
embedded Flink (MiniCluster) against the session's broker, bounded, exact
mode: one prediction per event, equal to the single-process learner's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines.records.topics import produce_events
from tests.support.processes import gone_within
from tests.support.runs import assert_predicted_as_one_process, bounded_cli_run, toy_stream
from tests.support.trialkit import read_topic

pytestmark = [pytest.mark.flink, pytest.mark.slow]


def test_scinol_run_on_embedded_flink_predicts_every_event_as_one_process_would(
        tansu_bootstrap, topic_name, tmp_path, flink_job_server_jar):
    proc, X, y, events = bounded_cli_run(tansu_bootstrap, topic_name, 100, tmp_path, "--runner", "flink")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runner flink at [local]" in proc.stderr
    assert "scinol run: done: 100 messages read, 100 predictions written, 0 dead letters" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert_predicted_as_one_process(tansu_bootstrap, topic_name + ".pred", X, y, events)


def children(pid: int) -> dict[int, str]:
    """The child processes of ``pid``: {pid: command line}."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
                cmdline = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found[int(entry)] = cmdline
    return found


def large_model_events(n: int) -> list[dict]:
    """Toy events plus one coordinate near 2^18 each: the model's state spans
    all 2^18 coordinates (8 MB), more than an embedded Flink's default
    in-memory checkpoints take (5 MB)."""
    _, _, events = toy_stream(n)
    for i, event in enumerate(events):
        values = event["features"]["values"]
        event["features"] = {"indices": list(range(len(values))) + [(1 << 18) - 1 - i], "values": values + [1.0]}
    return events


def completed_checkpoints(state_dir) -> list[str]:
    return [str(p) for p in state_dir.glob("*/chk-*/_metadata")]


def test_an_unbounded_flink_run_checkpoints_a_large_model_without_restarts_and_stops_on_sigterm(
        tansu_bootstrap, topic_name, tmp_path, flink_job_server_jar):
    events = large_model_events(20)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    predictions = topic_name + ".pred"
    err_path, state_dir = tmp_path / "stderr", tmp_path / "ckpt" / "flink-state"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", tansu_bootstrap, "--topic", topic_name,
             "--predictions-topic", predictions, "--checkpoint-dir", str(tmp_path / "ckpt"), "--runner", "flink",
             "--checkpointing-interval", "2000"], stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while len(read_topic(tansu_bootstrap, predictions, timeout=5) if topic_exists(tansu_bootstrap, predictions)
                  else []) < len(events) or len(completed_checkpoints(state_dir)) == 0:
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()[-3000:]
            time.sleep(2)
        time.sleep(6)  # three more checkpoint intervals: a failing checkpoint would restart the job by now
        assert len(read_topic(tansu_bootstrap, predictions, timeout=5)) == len(events)  # none sent again
        servers = [pid for pid, cmd in children(proc.pid).items() if "job-server.jar" in cmd]
        assert len(servers) == 1, children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 130  # like Ctrl-C
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = err_path.read_text()
    assert "scinol: interrupted" in err and "Traceback" not in err
    assert not os.path.exists(f"/proc/{servers[0]}")  # the job server JVM stopped with the run


def test_a_run_killed_with_sigkill_takes_its_flink_job_server_with_it(
        tansu_bootstrap, topic_name, tmp_path, flink_job_server_jar):
    """SIGKILL runs no exit handler, so Beam's never stops the job-server JVM
    (which holds the embedded Flink and its job): it got SIGTERM from Linux
    when its parent died (pipelines/runners/java_launcher.py)."""
    _, _, events = toy_stream(20)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    predictions = topic_name + ".pred"
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", tansu_bootstrap, "--topic", topic_name,
             "--predictions-topic", predictions, "--checkpoint-dir", str(tmp_path / "ckpt"), "--runner", "flink"],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (topic_exists(tansu_bootstrap, predictions)
                   and len(read_topic(tansu_bootstrap, predictions, timeout=5)) == len(events)):
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()[-3000:]
            time.sleep(2)
        (server,) = [pid for pid, cmd in children(proc.pid).items() if "job-server.jar" in cmd]
        assert open(f"/proc/{server}/cmdline", "rb").read().split(b"\0")[0] == b"java"  # the launcher became java
    finally:
        proc.kill()
        proc.wait()
    assert gone_within(server, 60), "the job server outlived its run"


def topic_exists(bootstrap: str, topic: str) -> bool:
    from confluent_kafka.admin import AdminClient

    return topic in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics


def test_on_embedded_flink_the_metrics_endpoint_counts_what_its_loopback_workers_did(
        tansu_bootstrap, topic_name, tmp_path, flink_job_server_jar, capsys):
    """The steps run in the SDK harness of this process (LOOPBACK), so the
    endpoint of ``--metrics-port`` sees them as on the direct runner."""
    from pipelines import telemetry
    from pipelines.cli.main import main
    from tests.support.prometheus import scrape, total

    _, _, events = toy_stream(200)
    produce_events(tansu_bootstrap, topic_name, events, partitions=2, progress=False)
    telemetry.stop()
    try:
        assert main(["run", "--bootstrap", tansu_bootstrap, "--topic", topic_name, "--predictions-topic",
                     topic_name + ".pred", "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"), "--runner",
                     "flink", "--parallelism", "2", "--metrics-port", "0", "--metrics-host", "127.0.0.1"]) == 0
        assert "200 predictions written" in capsys.readouterr().err
        samples = scrape()
    finally:
        telemetry.stop()
    assert total(samples, "scinol_messages_read_total") == 200
    assert total(samples, "scinol_events_total") == 200
    assert total(samples, "scinol_predictions_total", model="default") == 200
    assert {p: total(samples, "scinol_consumer_lag_messages", partition=p) for p in "01"} == {"0": 0, "1": 0}
