"""The loss of a JobManager without high availability: ``kill -9`` of a
session cluster's JobManager under an exactly-once run takes the job with
it; another cluster given the checkpoint folder by ``scinol run
--from-checkpoint`` carries the run on from its last retained checkpoint:
every prediction written once (read_committed), and the one model over
four partitions the single-process learner's to the bit over the order its
predictions were committed in (what it had committed after the checkpoint
it re-applies in that order, from the order journal). Real parts: Apache
Kafka, two session clusters, ``scinol run`` as a process."""

from __future__ import annotations

import re
import time

import pytest

from pipelines.records.topics import produce_events
from pipelines.runners.flink_cluster import FlinkSessionCluster
from pipelines.state.checkpoints import CheckpointStore
from tests.support.flink import exactly_once_run, new_running_job, predictions_of, produce_slowly
from tests.support.partitioned import PARTITIONS, check_one_model
from tests.support.processes import reaped
from tests.support.runs import toy_stream
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]


PLACED = ("--parallelism", "2", "--checkpoint-every", "500")


def _log(path):
    return lambda: open(path).read()[-3000:]


def test_a_killed_jobmanager_costs_no_prediction_and_writes_none_twice_from_the_retained_checkpoint(
        apache_kafka, flink_home, flink_cluster, topic_name, tmp_path):
    bootstrap, n = apache_kafka.bootstrap, 2000
    X, y, events = toy_stream(n)  # one model, "default"; event i on partition i % 4
    produce_events(bootstrap, topic_name, events[:40], partitions=PARTITIONS, progress=False)
    checkpoints = tmp_path / "flink-checkpoints"
    with FlinkSessionCluster(taskmanagers=2, flink_home=flink_home, checkpoint_dir=checkpoints) as lost:
        with reaped(exactly_once_run(bootstrap, topic_name, tmp_path, lost.master, "before", *PLACED)) as first:
            job = new_running_job(lost, set(), 240)
            producer = produce_slowly(bootstrap, topic_name, events[40:])  # 20 s of events, mid-stream below
            wait_for(lambda: lost.completed_checkpoints(job) >= 2, 240, "two Flink checkpoints",
                     _log(tmp_path / "before.log"))
            time.sleep(1.0)  # half a checkpoint interval: predictions committed after the checkpoint
            lost.jobmanager.kill()  # SIGKILL: no HA, the job goes with it
            lost.jobmanager.wait()
            first.terminate()
            assert first.wait(120) == 130
    said = open(tmp_path / "before.log").read()
    assert "could not cancel Flink job" in said and f"the cluster at {lost.master} did not answer" in said
    assert "Traceback" not in said and "scinol: error: :" not in said, said[-3000:]
    retained = sorted(p.parent.name for p in checkpoints.glob(f"{job}/chk-*/_metadata"))
    assert retained, f"no checkpoint of job {job} left in {checkpoints}"
    producer.join(120)
    assert not producer.is_alive()

    # the session's cluster, already up: another cluster, to which the lost one's checkpoint is just a folder
    cluster = flink_cluster
    with reaped(exactly_once_run(bootstrap, topic_name, tmp_path, cluster.master, "after", *PLACED,
                                 "--from-checkpoint", str(checkpoints))):
        store = CheckpointStore(str(tmp_path / "ckpt"))
        wait_for(lambda: (c := store.latest("default")) is not None and c.event_count == n, 300,
                 f"the model's checkpoint at its event {n}", _log(tmp_path / "after.log"))
        cluster.cancel_live_jobs()
    log = open(tmp_path / "after.log").read()
    restored = [int(k) for k in re.findall(r"model 'default' restored from the runner's state \((\d+) events", log)]
    assert len(restored) == 1 and 0 < restored[0] < n, log[-3000:]  # the checkpoint's model, lost mid-stream
    followed = re.findall(r"re-applies what it committed after its state in the committed order: (.*)", log)
    print(f"\nrestored at event {restored[0]} of {n}; committed after it, re-applied in order: {followed}")
    ids = [p["event_id"] for p in predictions_of(bootstrap, topic_name + ".pred")]  # read_committed
    assert sorted(ids) == sorted(e["id"] for e in events)  # each once
    check_one_model(bootstrap, topic_name, tmp_path, X, y, events)
