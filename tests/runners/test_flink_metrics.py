"""``scinol flink up --metrics-ports``: a session cluster whose JobManager
and TaskManagers serve Flink's metrics (Flink's Prometheus reporter) and
whose Python workers each serve scinol's, all on one port range; a real
Prometheus scrapes the range while a job runs on two TaskManagers with
the worker pool, and PromQL over its HTTP API sees every event, each
worker's share, and Flink's own metrics."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.partitioned import PARTITIONS, check_scores_per_partition, produce, scinol_command
from tests.support.processes import reaped
from tests.support.prometheus import PrometheusServer, dashboard_queries_answer
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.flink, pytest.mark.slow]

WIDTH = 10


def free_port_range(width: int) -> range:
    """``width`` consecutive ports nothing listens on (checked, not reserved)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("localhost", 0))
            first = s.getsockname()[1]
        ports = range(first, first + width)
        if ports.stop <= 65536 and not any(_listening(port) for port in ports):
            return ports
    raise RuntimeError(f"no {width} free ports in a row")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("localhost", port)) == 0


def scinol(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_flink_and_each_python_worker_serve_metrics_that_prometheus_scrapes(
        tmp_path, flink_home, flink_job_server_jar, prometheus_binary, tansu_bootstrap, topic_name):
    ports = free_port_range(WIDTH)
    state_dir = str(tmp_path / "session")
    up = scinol("flink", "up", "--taskmanagers", "2", "--metrics-ports", f"{ports.start}-{ports.stop - 1}",
                "--state-dir", state_dir)
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(Path(state_dir, "state.json").read_text())
        assert f"Prometheus metrics at /metrics on ports {ports.start}-{ports.stop - 1}" in up.stderr
        targets = [f"localhost:{port}" for port in ports]  # the whole range, as a user would configure it
        with PrometheusServer(prometheus_binary, targets, tmp_path / "prometheus") as prometheus:
            # before any job: the JobManager and two TaskManagers, Flink's reporter each
            wait_for(lambda: prometheus.scalar("sum(up)") == 3, 60, "three Flink endpoints up")
            assert prometheus.scalar("flink_jobmanager_numRegisteredTaskManagers") == 2
            _run_and_check(state, prometheus, tansu_bootstrap, topic_name, tmp_path)
        shown = scinol("flink", "status", "--state-dir", state_dir)
        assert shown.returncode == 0 and f"Prometheus metrics on ports {ports.start}-{ports.stop - 1}" in shown.stderr
    finally:
        stopped = scinol("flink", "down", "--state-dir", state_dir)
    assert stopped.returncode == 0, stopped.stderr


def _run_and_check(state, prometheus, bootstrap, topic, tmp_path):
    X, y, events = produce(bootstrap, topic, 2000, per_partition_models=True)
    n = len(events)
    models = ",".join(f"p{p}" for p in range(PARTITIONS))
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(scinol_command(bootstrap, topic, tmp_path, "--runner", "flink", "--flink-master",
                                               state["master"], "--worker-pool", state["worker_pool"],
                                               "--parallelism", "2", "--models", models, "--checkpoint-every", "200"),
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    with reaped(proc):
        story = lambda: (tmp_path / "stderr").read_text()[-3000:]  # noqa: E731
        wait_for(lambda: prometheus.scalar("sum(scinol_predictions_total)") == n, 300,
                 "every prediction counted in Prometheus", story)
        # two Python workers, one a TaskManager, each with two partitions and their two models
        per_worker = prometheus.query("sum by (instance) (scinol_predictions_total)")
        assert sorted(float(w["value"][1]) for w in per_worker) == [n / 2, n / 2], per_worker
        worker_ports = {w["metric"]["instance"] for w in per_worker}
        assert len(worker_ports) == 2
        assert prometheus.scalar("sum(scinol_events_total)") == n
        assert prometheus.scalar("sum(scinol_messages_read_total)") == n
        assert prometheus.scalar("count(scinol_consumer_lag_messages)") == PARTITIONS
        wait_for(lambda: prometheus.scalar("max(scinol_consumer_lag_messages)") == 0, 60, "a lag of 0")
        assert prometheus.scalar("count(scinol_progressive_loss < 1)") == PARTITIONS  # a model each, learning
        assert prometheus.scalar("sum(scinol_prediction_latency_seconds_count)") == n
        assert prometheus.scalar("count(0 < scinol_checkpoint_events <= 500)") == PARTITIONS  # a checkpoint a model
        # Flink's own metrics of the job, from the TaskManagers' reporters
        assert prometheus.scalar("count(count by (tm_id) (flink_taskmanager_job_task_numRecordsIn))") == 2
        dashboard_queries_answer(prometheus)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 130
    check_scores_per_partition(bootstrap, topic, X, y, events)
    # the job's workers ended with it, and their endpoints with them
    wait_for(lambda: not any(prometheus.query(f"up{{instance='{w}'}} == 1") for w in worker_ports), 30,
             "the workers' endpoints gone with the job")
