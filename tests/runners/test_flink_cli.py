"""``scinol flink up / status / down`` with a real session cluster: up
returns with the cluster registered (REST /overview shows the TaskManagers
asked for), ``scinol run --runner flink --flink-master`` runs on it, a
second up says it is already up, down leaves no process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from learners import make_learner
from pipelines.cli.main import main
from pipelines.records.topics import produce_events
from tests.support.processes import alive
from tests.support.runs import toy_stream
from tests.support.trialkit import read_topic

pytestmark = [pytest.mark.flink, pytest.mark.slow]


def scinol(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_on(master: str, pool: str, bootstrap: str, topic: str, tmp_path) -> subprocess.CompletedProcess:
    return scinol("run", "--bootstrap", bootstrap, "--topic", topic, "--predictions-topic", topic + ".pred",
                  "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"), "--runner", "flink", "--flink-master",
                  master, "--worker-pool", pool, "--parallelism", "2", timeout=600)


def test_up_run_twice_status_and_down(tmp_path, flink_home, flink_job_server_jar, tansu_bootstrap,
                                      topic_name):
    state_dir = str(tmp_path / "session")
    port = free_port()
    first = scinol("flink", "up", "--taskmanagers", "2", "--port", str(port), "--state-dir", state_dir)
    try:
        assert first.returncode == 0, first.stderr
        assert first.stdout == f"localhost:{port}\n"
        with urllib.request.urlopen(f"http://localhost:{port}/overview", timeout=10) as resp:
            overview = json.load(resp)
        assert overview["taskmanagers"] == 2 and overview["slots-total"] == 2
        state = json.loads(Path(state_dir, "state.json").read_text())
        pids = [state["keeper"], state["jobmanager"], *state["taskmanagers"], state["worker_pool_pid"]]
        assert len(set(pids)) == 5 and all(alive(pid) for pid in pids)
        assert f"--worker-pool {state['worker_pool']} --parallelism 2" in first.stderr

        # two models, one per partition (round robin): each must learn its partition in order, as
        # one process would, though two TaskManagers with a Python worker process each run the job
        streams = [toy_stream(300, seed=m, model=f"m{m}") for m in range(2)]
        events = [s[2][i] for i in range(300) for s in streams]
        produce_events(tansu_bootstrap, topic_name, events, partitions=2, progress=False)
        ran = run_on(f"localhost:{port}", state["worker_pool"], tansu_bootstrap, topic_name, tmp_path)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert "600 messages read, 600 predictions written, 0 dead letters" in ran.stderr
        assert "skipped as covered" not in ran.stderr
        scores = {p["event_id"]: p["score"] for _, _, p in read_topic(tansu_bootstrap, topic_name + ".pred")}
        assert sorted(scores) == sorted(e["id"] for e in events)
        for X, y, model_events in streams:
            want = make_learner("scinol2", "logistic").learn(X, y)
            np.testing.assert_allclose([scores[e["id"]] for e in model_events], want, rtol=1e-12, atol=1e-300)
        with urllib.request.urlopen(f"http://localhost:{port}/jobs/overview", timeout=10) as resp:
            jobs = json.load(resp)["jobs"]
        assert [j["state"] for j in jobs] == ["FINISHED"]  # it ran on this cluster, not an embedded one
        # the pool ran each TaskManager's worker as pipelines.runners.harness (bundles end promptly)
        pool_log = Path(state["dir"], "log", "worker-pool.out").read_text()
        started = [line for line in pool_log.splitlines() if "Starting worker with command" in line]
        assert len(started) >= 2 and all(f"['{state['dir']}/sdk-harness', '--id=" in line for line in started)

        again = scinol("flink", "up", "--taskmanagers", "2", "--state-dir", state_dir)
        assert again.returncode == 0 and again.stdout == first.stdout
        assert "already up" in again.stderr

        shown = scinol("flink", "status", "--state-dir", state_dir)
        assert shown.returncode == 0 and "2 TaskManagers" in shown.stderr
    finally:
        stopped = scinol("flink", "down", "--state-dir", state_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped the cluster" in stopped.stderr and "killed" not in stopped.stderr
    assert not any(alive(pid) for pid in pids)
    assert not Path(state_dir, "state.json").exists()
    assert scinol("flink", "status", "--state-dir", state_dir).returncode == 1
    assert "Traceback" not in first.stderr + ran.stderr + again.stderr + stopped.stderr


def test_down_without_a_cluster_says_so(tmp_path, capsys):
    assert main(["flink", "down", "--state-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "scinol flink: no cluster is up\n"


def test_up_refuses_zero_taskmanagers(tmp_path, capsys):
    assert main(["flink", "up", "--taskmanagers", "0", "--state-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scinol: error: flink up: --taskmanagers") and err.count("\n") == 1
    assert not os.listdir(tmp_path)  # nothing started, nothing recorded


def test_up_without_a_reachable_pypi_is_one_error_line_and_leaves_nothing(tmp_path):
    proxy = f"http://127.0.0.1:{free_port()}"  # closed again: connections are refused
    env = {**os.environ, "SCINOL_CACHE": str(tmp_path / "cache"), "PIP_FIND_LINKS": "", "PIP_NO_CACHE_DIR": "1",
           **{name: proxy for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY")}}
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "flink", "up", "--state-dir", str(tmp_path / "s")],
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == ""
    last = proc.stderr.splitlines()[-1]
    assert last.startswith("scinol: error: flink up: the cluster did not start: cannot reach PyPI (connection refused)")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "state.json").exists()


def test_up_on_a_port_in_use_is_refused_at_once(tmp_path, capsys):
    with socket.socket() as listener:
        listener.bind(("localhost", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert main(["flink", "up", "--port", str(port), "--state-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"scinol: error: flink up: --port {port}: something already listens there\n"
