"""The project's own pipeline on Apache Flink (embedded MiniCluster and a
2-TaskManager session cluster), Apache Kafka in and out: the predictions equal
the single-process learner's, and a TaskManager killed with SIGKILL mid-stream
costs no update and applies none twice (the model lives in Beam state, which
Flink snapshots together with the Kafka source's position)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from learners import make_learner
from pipelines.launch import run, start
from pipelines.records.topics import produce_events
from pipelines.state.checkpoints import CheckpointStore
from pipelines.state.cuts import CutStore
from tests.support.flink import flink_args, new_running_job, predictions_of
from tests.support.waiting import wait_for
from tests.support.processes import reaped
from tests.support.runs import config, toy_stream
from tests.support.sharded_loop import in_one_process
from tests.support.trialkit import read_topic

pytestmark = [pytest.mark.flink, pytest.mark.slow]


def straight(X, y):
    learner = make_learner("scinol2", "logistic")
    return learner.learn(X, y), learner


def test_exact_mode_on_embedded_flink_equals_the_single_process_learner(
        apache_kafka, topic_name, tmp_path, flink_job_server_jar):
    kafka_bootstrap = apache_kafka.bootstrap
    X, y, events = toy_stream(3000, unlabelled_every=7)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(kafka_bootstrap, topic_name, tmp_path, checkpoint_every=1000,
                 beam_args=flink_args(flink_job_server_jar, "[local]"))
    run(cfg)
    want, learner = straight(X, y)
    preds = predictions_of(kafka_bootstrap, cfg.predictions_topic)
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]
    np.testing.assert_allclose([p["score"] for p in preds], want, rtol=1e-12, atol=1e-300)
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert final.event_count == 3000
    np.testing.assert_array_equal(final.learner.state.arrays["P"], learner.state.arrays["P"][:final.learner.state.n_coords])


def test_sharded_mode_on_embedded_flink_equals_exact_mode(apache_kafka, topic_name, tmp_path,
                                                          flink_job_server_jar):
    kafka_bootstrap = apache_kafka.bootstrap
    X, y, events = toy_stream(30)  # one round trip through Kafka per event at staleness 0 (docs/runners.md)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(kafka_bootstrap, topic_name, tmp_path, shards=2, max_staleness=0,
                 beam_args=flink_args(flink_job_server_jar, "[local]"))
    run(cfg)
    want, _ = straight(X, y)
    preds = predictions_of(kafka_bootstrap, cfg.predictions_topic)
    assert sorted(p["event_id"] for p in preds) == sorted(e["id"] for e in events)
    by_id = {p["event_id"]: p["score"] for p in preds}
    np.testing.assert_allclose([by_id[e["id"]] for e in events], want, rtol=1e-9, atol=1e-12)
    assert [by_id[e["id"]] for e in events] == in_one_process(events, topic_name, 2)  # bit for bit


def test_sharded_mode_on_the_session_cluster_equals_exact_mode(apache_kafka, topic_name, tmp_path,
                                                               flink_job_server_jar, flink_cluster):
    """Two shards, two TaskManagers (parallelism 2): the shards, the
    combiner and the feedback loop spread over the cluster still give
    exact mode's predictions at staleness 0, and the very bits of the same
    sharded protocol run in one process."""
    kafka_bootstrap = apache_kafka.bootstrap
    X, y, events = toy_stream(24)  # one round trip through Kafka per event at staleness 0 (docs/runners.md)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(kafka_bootstrap, topic_name, tmp_path, shards=2, max_staleness=0,
                 beam_args=flink_args(flink_job_server_jar, flink_cluster.master, "--parallelism=2"))
    run(cfg)
    want, _ = straight(X, y)
    by_id = {p["event_id"]: p["score"] for p in predictions_of(kafka_bootstrap, cfg.predictions_topic)}
    assert sorted(by_id) == sorted(e["id"] for e in events)
    np.testing.assert_allclose([by_id[e["id"]] for e in events], want, rtol=1e-9, atol=1e-12)
    assert [by_id[e["id"]] for e in events] == in_one_process(events, topic_name, 2)  # bit for bit


def _model_at(ckpt_dir: str, n: int) -> bool:
    final = CheckpointStore(ckpt_dir).latest("default")
    return final is not None and final.event_count == n


def _failover_run(kafka, cluster, jar, topic, tmp_path, n: int, exactly_once: bool, broker_restart: bool):
    """Run on the session cluster while events arrive at 150/s; kill -9 the
    TaskManager running the job mid-stream, and (``broker_restart``) restart
    the broker mid-stream once the job has recovered. Returns (the events,
    the final checkpoint, how many failures Flink recorded, the result)."""
    bootstrap = kafka.bootstrap
    X, y, events = toy_stream(n)
    produce_events(bootstrap, topic, events[:500], partitions=1, progress=False)
    args = flink_args(jar, cluster.master, "--streaming", "--checkpointing_interval=2000",
                      "--finish_bundle_before_checkpointing", "--number_of_execution_retries=30",
                      "--execution_retry_delay=3000")
    cfg = config(bootstrap, topic, tmp_path, bounded=False, checkpoint_every=n, max_batch=200,
                 exactly_once=exactly_once, beam_args=args)
    before = {j["jid"] for j in cluster.jobs()}
    result = start(cfg)
    try:
        job = new_running_job(cluster, before)
        wait_for(lambda: cluster.completed_checkpoints(job) >= 2, 180, "two completed Flink checkpoints",
              lambda: _job_story(cluster, job))
        producer = _producing(bootstrap, topic, events[500:n // 2])
        _kill_mid_stream(cluster, job, producer)
        restored = cluster.completed_checkpoints(job)
        wait_for(lambda: cluster.completed_checkpoints(job) > restored, 240, "a checkpoint after the restart",
              lambda: _job_story(cluster, job))
        producer = _producing(bootstrap, topic, events[n // 2:])
        if broker_restart:
            time.sleep(2.0)
            assert producer.is_alive(), "the broker restart must come mid-stream"
            kafka.restart(down_for=3.0)
        producer.join()
        wait_for(lambda: _model_at(cfg.checkpoint_dir, n), 300, f"the model's checkpoint at event {n}",
              lambda: f"{_job_story(cluster, job)}; {_input_story(bootstrap, topic, cfg.checkpoint_dir)}")
        failures = cluster.rest(f"/jobs/{job}/exceptions").get("exceptionHistory", {}).get("entries", [])
    finally:
        result.cancel()  # on the cluster too, else the next test's job waits for its slots
    assert cluster.rest(f"/jobs/{job}")["state"] == "CANCELED"
    assert failures, "Flink saw no failure: the TaskManager kill did not reach the job"
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    _, learner = straight(X, y)
    np.testing.assert_array_equal(final.learner.state.arrays["P"],
                                  learner.state.arrays["P"][:final.learner.state.n_coords])
    assert final.learner.state.scalars == learner.state.scalars  # t: every update applied once
    return events, [p["event_id"] for p in predictions_of(bootstrap, cfg.predictions_topic)], len(failures), result


def test_a_killed_taskmanager_and_a_broker_restart_lose_no_update_and_apply_none_twice(
        apache_kafka, topic_name, tmp_path, flink_job_server_jar, flink_cluster):
    """At least once: every event predicted, duplicates counted."""
    events, ids, failures, _ = _failover_run(apache_kafka, flink_cluster, flink_job_server_jar, topic_name,
                                             tmp_path, 4000, exactly_once=False, broker_restart=True)
    assert set(ids) == {e["id"] for e in events}
    print(f"\nFlink failures: {failures}; predictions re-sent: {len(ids) - len(set(ids))}")


def test_with_exactly_once_a_killed_taskmanager_leaves_each_prediction_written_once(
        apache_kafka, topic_name, tmp_path, flink_job_server_jar, flink_cluster):
    events, ids, failures, result = _failover_run(apache_kafka, flink_cluster, flink_job_server_jar, topic_name,
                                                  tmp_path, 3000, exactly_once=True, broker_restart=False)
    assert ids == [e["id"] for e in events]  # read_committed: each once, in order
    print(f"\nFlink failures: {failures}; predictions recomputed after them and not written again: "
          f"{_counter(result, 'predictions_not_resent')}")


def test_sharded_mode_survives_a_killed_taskmanager_without_losing_or_doubling_an_update(
        apache_kafka, topic_name, tmp_path, flink_job_server_jar, flink_cluster):
    """Two shards at staleness 0 over both TaskManagers; one is killed -9
    mid-stream. The Router, the ShardRunners (with the events in flight) and
    the Combiner live in Beam state, which Flink restores with the source's
    position on both topics (events and feedback), so the model carried on
    from the cut equals one learner's: every update applied once."""
    bootstrap, cluster, n = apache_kafka.bootstrap, flink_cluster, 36
    X, y, events = toy_stream(n)
    produce_events(bootstrap, topic_name, events[:8], partitions=1, progress=False)
    args = flink_args(flink_job_server_jar, cluster.master, "--streaming", "--parallelism=2",
                      "--checkpointing_interval=2000", "--finish_bundle_before_checkpointing",
                      "--number_of_execution_retries=30",
                      "--execution_retry_delay=3000")
    cfg = config(bootstrap, topic_name, tmp_path, bounded=False, shards=2, max_staleness=0, checkpoint_every=n,
                 beam_args=args)
    _wait_idle(cluster, slots=2)
    before = {j["jid"] for j in cluster.jobs()}
    result = start(cfg)
    try:
        job = new_running_job(cluster, before)
        story = lambda: _job_story(cluster, job)  # noqa: E731
        wait_for(lambda: len(predictions_of(bootstrap, cfg.predictions_topic)) >= 8, 420, "the first predictions",
              story)
        wait_for(lambda: cluster.completed_checkpoints(job) >= 2, 180, "two completed Flink checkpoints", story)
        producer = _producing(bootstrap, topic_name, events[8:20], rate=2)
        _kill_mid_stream(cluster, job, producer)
        produce_events(bootstrap, topic_name, events[20:], progress=False)
        wait_for(lambda: _cut_at(cfg.checkpoint_dir, n), 420, f"the checkpoint cut at event {n}", story)
        failures = cluster.rest(f"/jobs/{job}/exceptions").get("exceptionHistory", {}).get("entries", [])
    finally:
        result.cancel()  # on the cluster too, else the next test's job waits for its slots
    assert cluster.rest(f"/jobs/{job}")["state"] == "CANCELED"
    assert failures, "Flink saw no failure: the TaskManager kill did not reach the job"
    ids = [p["event_id"] for p in predictions_of(bootstrap, cfg.predictions_topic)]
    assert set(ids) == {e["id"] for e in events}
    final = CutStore(cfg.checkpoint_dir).latest("default", 2).merged_learner(cfg.learner.make)
    _, learner = straight(X, y)
    assert final.state.scalars == learner.state.scalars  # t: every update applied once
    # The K partial sums are added in another order than one learner's dot product: equal to rounding.
    np.testing.assert_allclose(final.state.arrays["P"], learner.state.arrays["P"][:final.state.n_coords],
                               rtol=1e-9, atol=1e-12)
    print(f"\nFlink failures: {len(failures)}; predictions re-sent: {len(ids) - len(set(ids))}")


def _wait_idle(cluster, slots: int, timeout: float = 180.0) -> None:
    """Until the cluster runs no job and has ``slots`` free slots on live
    TaskManagers: a TaskManager an earlier test killed may still be
    registered, and a job of parallelism 2 would wait for its slot."""
    def idle():
        overview = cluster.rest("/overview")
        busy = [j["jid"] for j in cluster.jobs() if j["state"] not in ("FINISHED", "CANCELED", "FAILED")]
        return (not busy and overview["slots-available"] >= slots
                and overview["taskmanagers"] == len(cluster.taskmanager_pids()))

    wait_for(idle, timeout, f"an idle cluster with {slots} free slots",
          lambda: f"{cluster.rest('/overview')}, jobs {cluster.jobs()}")


def _cut_at(ckpt_dir: str, n: int) -> bool:
    cut = CutStore(ckpt_dir).latest("default", 2)
    return cut is not None and cut.seq == n


def _kill_mid_stream(cluster, job: str, producer: threading.Thread) -> None:
    """kill -9 a TaskManager running ``job`` while ``producer`` still
    produces; a new TaskManager takes its place."""
    time.sleep(2.0)
    victims = cluster.job_taskmanagers(job)
    assert victims and producer.is_alive(), "the kill must hit the job mid-stream"
    cluster.kill_taskmanager(victims[0])
    cluster.add_taskmanager()
    producer.join()


def test_sigterm_to_scinol_run_cancels_its_job_on_the_session_cluster(
        apache_kafka, topic_name, tmp_path, flink_cluster):
    """Beam's own cancel leaves a job running on a session cluster, holding
    its slots; ``scinol run`` stopped by SIGTERM (or Ctrl-C) cancels it there."""
    bootstrap, cluster = apache_kafka.bootstrap, flink_cluster
    proc, job = _twenty_events_running(bootstrap, topic_name, tmp_path, cluster)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = (tmp_path / "stderr").read_text()
    assert f"scinol run: cancelled Flink job {job}" in err and "Traceback" not in err, err[-3000:]
    assert cluster.rest(f"/jobs/{job}")["state"] == "CANCELED"
    assert not [j for j in cluster.jobs() if j["state"] not in ("CANCELED", "FINISHED", "FAILED")]


def test_a_job_cancelled_on_the_cluster_ends_scinol_run_in_one_line(apache_kafka, topic_name, tmp_path,
                                                                    flink_cluster):
    """Someone cancels the job on the cluster (Flink's UI, REST, CLI):
    ``scinol run`` ends with one line naming what happened, exit status 5."""
    bootstrap, cluster = apache_kafka.bootstrap, flink_cluster
    proc, job = _twenty_events_running(bootstrap, topic_name, tmp_path, cluster)
    with reaped(proc):
        cluster.cancel_job(job)
        assert proc.wait(120) == 5
    err = (tmp_path / "stderr").read_text()
    errors = [line for line in err.splitlines() if line.startswith("scinol: error")]
    assert errors == [line for line in errors if "was cancelled on the cluster, not by this run" in line], errors
    assert len(errors) == 1 and "Traceback" not in err, err[-3000:]


def _twenty_events_running(bootstrap, topic, tmp_path, cluster) -> tuple[subprocess.Popen, str]:
    """``scinol run`` on the session cluster (stderr to tmp_path/stderr), its
    Flink job running and its 20 events predicted: (the process, the job)."""
    _, _, events = toy_stream(20)
    produce_events(bootstrap, topic, events, partitions=1, progress=False)
    before = {j["jid"] for j in cluster.jobs()}
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
             "--predictions-topic", topic + ".pred", "--checkpoint-dir", str(tmp_path / "ckpt"),
             "--runner", "flink", "--flink-master", cluster.master],
            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    try:
        job = new_running_job(cluster, before)
        wait_for(lambda: len(predictions_of(bootstrap, topic + ".pred")) >= len(events), 300,
                 "the predictions", lambda: _job_story(cluster, job))
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc, job


def _job_story(cluster, job: str) -> str:
    """The job's state, its latest failures and checkpoints, and the
    cluster's jobs and TaskManagers, for a failure message."""
    state = cluster.rest(f"/jobs/{job}")["state"]
    entries = cluster.rest(f"/jobs/{job}/exceptions").get("exceptionHistory", {}).get("entries", [])
    causes = [e.get("exceptionName", "") + ": " + (e.get("stacktrace", "").splitlines() or [""])[0][:300]
              for e in entries[:3]]
    checkpoints = cluster.rest(f"/jobs/{job}/checkpoints")["counts"]
    others = [(j["name"], j["state"]) for j in cluster.jobs() if j["jid"] != job]
    slots = [(tm["id"], tm.get("slotsNumber"), tm.get("freeSlots")) for tm in cluster.registered_taskmanagers()]
    return (f"job {state}, {len(entries)} failures, latest: {causes}; checkpoints {checkpoints}; "
            f"other jobs {others}; TaskManagers (id, slots, free) {slots}")


def _input_story(bootstrap: str, topic: str, ckpt_dir: str) -> str:
    """How many events the input topic holds and where the latest model
    checkpoint is: a feeder that lost or repeated a record across the broker
    restart is then told from a pipeline that stalled."""
    latest = CheckpointStore(ckpt_dir).latest("default")
    return (f"input topic holds {len(read_topic(bootstrap, topic, raw=True))} records; latest checkpoint at event "
            f"{latest.event_count if latest is not None else None}")


def _producing(bootstrap: str, topic: str, events: list, rate: float = 150) -> threading.Thread:
    """Produce ``events`` at ``rate``/s in a thread (started), one produce
    request in flight: with five, a request failed by the broker restart can
    make librdkafka bump its epoch and resend, which may reorder the input
    (see ``tests/support/trialkit.py``)."""
    thread = threading.Thread(target=produce_events, args=(bootstrap, topic, events),
                              kwargs={"rate": rate, "progress": False,
                                      "kafka_config": {"max.in.flight.requests.per.connection": 1}})
    thread.start()
    return thread


def _counter(result, name: str):
    try:
        from pipelines.steps import NAMESPACE
        import apache_beam as beam

        found = result.metrics().query(beam.metrics.MetricsFilter().with_namespace(NAMESPACE).with_name(name))
        return sum(c.committed or c.attempted or 0 for c in found["counters"])
    except Exception as exc:  # noqa: BLE001 - a cancelled Flink job may not report metrics
        return f"unknown ({type(exc).__name__})"
