"""JobManager high availability: ``scinol flink up --high-availability``
runs ZooKeeper (the server Flink's distribution ships) beside the cluster
and Flink's ZooKeeper high availability. Under an exactly-once run of one
model over four partitions the JobManager is killed with SIGKILL; the
cluster's keeper starts it again, as a supervisor would, and it takes the
same job over from ZooKeeper and the job's last checkpoint, with no new
submission: every prediction written once (read_committed), each model
version once, and the model the single-process learner's to the bit over
the committed order. Real parts: Apache Kafka, ZooKeeper, a session
cluster with the worker pool, ``scinol run`` as a process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.records.topics import produce_events
from pipelines.runners import flink_rest
from pipelines.state.checkpoints import CheckpointStore
from tests.support.flink import exactly_once_run, predictions_of, produce_slowly
from tests.support.partitioned import PARTITIONS, check_one_model
from tests.support.processes import reaped
from tests.support.runs import toy_stream
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]


def scinol(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _state(state_dir) -> dict:
    return json.loads(Path(state_dir, "state.json").read_text())


def _running(master) -> list[str]:
    try:
        return [j["jid"] for j in flink_rest.jobs(master) if j["state"] == "RUNNING"]
    except OSError:  # the JobManager is down
        return []


def test_a_killed_jobmanager_is_started_again_and_takes_its_running_job_over(
        apache_kafka, flink_home, flink_job_server_jar, topic_name, tmp_path):
    state_dir = tmp_path / "session"
    up = scinol("flink", "up", "--taskmanagers", "2", "--high-availability", "--state-dir", str(state_dir))
    try:
        assert up.returncode == 0, up.stderr
        assert "high availability: ZooKeeper at localhost:" in up.stderr
        _kill_and_check(_state(state_dir), state_dir, apache_kafka.bootstrap, topic_name, tmp_path)
    finally:
        down = scinol("flink", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stderr


def _kill_and_check(state, state_dir, bootstrap, topic, tmp_path):
    n, master = 2000, state["master"]
    X, y, events = toy_stream(n)  # one model, "default"; event i on partition i % 4
    produce_events(bootstrap, topic, events[:40], partitions=PARTITIONS, progress=False)
    log = lambda: open(tmp_path / "ha.log").read()[-3000:]  # noqa: E731
    with reaped(exactly_once_run(bootstrap, topic, tmp_path, master, "ha", "--parallelism", "2",
                                 "--checkpoint-every", "500", "--worker-pool", state["worker_pool"])):
        wait_for(lambda: _running(master), 240, "the job running", log)
        job = _running(master)[0]
        # 40 s of events: the kill comes mid-stream even when two checkpoints take 20 s on a busy machine (they did)
        producer = produce_slowly(bootstrap, topic, events[40:], pause=0.8)
        wait_for(lambda: flink_rest.rest(master, f"/jobs/{job}/checkpoints")["counts"]["completed"] >= 2, 240,
                 "two Flink checkpoints", log)
        time.sleep(1.0)  # half a checkpoint interval: predictions committed after the checkpoint
        assert producer.is_alive(), "the kill must come mid-stream"
        os.kill(state["jobmanager"], signal.SIGKILL)
        wait_for(lambda: _state(state_dir)["jobmanager"] != state["jobmanager"], 240,
                 "the keeper starting the JobManager again", lambda: (state_dir / "keeper.log").read_text()[-3000:])
        wait_for(lambda: _running(master) == [job], 240, "the same job running again", log)
        restored = flink_rest.rest(master, f"/jobs/{job}/checkpoints")["latest"]["restored"]
        assert restored is not None and not restored["is_savepoint"], restored  # from its checkpoint
        store = CheckpointStore(str(tmp_path / "ckpt"))
        wait_for(lambda: (c := store.latest("default")) is not None and c.event_count == n, 300,
                 f"the model's checkpoint at its event {n}", log)
        assert [j["jid"] for j in flink_rest.jobs(master)] == [job]  # taken over, never submitted again
        flink_rest.cancel_live_jobs(master)
    print(f"\nJobManager killed mid-stream; the job came back from checkpoint {restored['id']}")
    ids = [p["event_id"] for p in predictions_of(bootstrap, topic + ".pred")]  # read_committed
    assert sorted(ids) == sorted(e["id"] for e in events)  # each once
    check_one_model(bootstrap, topic, tmp_path, X, y, events)
