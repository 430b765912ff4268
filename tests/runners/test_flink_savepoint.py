"""Stop, upgrade, resume: ``scinol flink stop JOB --savepoint DIR`` stops an
exactly-once run of an earlier release of scinol (:data:`PREVIOUS`, taken
from this clone's git history) on a Flink session cluster with a
savepoint, and this version's ``scinol run --from-savepoint`` carries it
on, at another parallelism: every
prediction written once (read_committed), and the model, which reads four
partitions in whatever order they come, the single-process learner's to
the bit over the order it applied the events in. A resume Flink cannot map (here: to parallelism 1,
which joins the steps differently) is refused in one line. Real parts:
Apache Kafka, the session cluster with a third TaskManager added, ``scinol
run`` as a process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pipelines.cli.main import main
from pipelines.records.topics import produce_events
from pipelines.state.checkpoints import CheckpointStore
from tests.support.flink import exactly_once_run, predictions_of, released_code
from tests.support.partitioned import PARTITIONS, check_one_model
from tests.support.runs import toy_stream
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]

PREVIOUS = "8acc8624325a54c6e730591d249f96a480d3ffd0"
"""The last release before the order journal of --exactly-once (its state
has no ``applied_ms``; it writes no journal): an upgrade across a change
of the model's state."""


def _log(path):
    return lambda: open(path).read()[-3000:]


def _running(cluster, name: str) -> str | None:
    return next((j["jid"] for j in cluster.jobs() if j["name"] == name and j["state"] == "RUNNING"), None)


def test_a_run_of_the_previous_release_stopped_with_a_savepoint_resumes_upgraded_at_another_parallelism(
        apache_kafka, flink_cluster, topic_name, tmp_path, capsys):
    bootstrap, master, n = apache_kafka.bootstrap, flink_cluster.master, 2000
    X, y, events = toy_stream(n)
    produce_events(bootstrap, topic_name, events[:1200], partitions=PARTITIONS, progress=False)
    previous = released_code(PREVIOUS, tmp_path / "previous")
    imported = subprocess.run([sys.executable, "-c", "import pipelines.exact.model_runner as m; print(m.__file__)"],
                              cwd=previous, env={**os.environ, "PYTHONPATH": str(previous)}, capture_output=True,
                              text=True, timeout=120)
    assert imported.stdout.strip().startswith(str(previous)), imported  # the job below runs that release
    first = exactly_once_run(bootstrap, topic_name, tmp_path, master, "before", "--parallelism", "2",
                             "--checkpoint-every", str(n), code=previous)
    try:
        wait_for(lambda: _running(flink_cluster, "before"), 240, "the first job", _log(tmp_path / "before.log"))
        job = _running(flink_cluster, "before")
        wait_for(lambda: flink_cluster.completed_checkpoints(job) >= 2, 240, "two Flink checkpoints")
        assert main(["flink", "stop", "before", "--savepoint", str(tmp_path / "savepoints"),
                     "--flink-master", master]) == 0
        location = capsys.readouterr().out.strip().splitlines()[-1]
        assert location.startswith("file:") and (tmp_path / "savepoints").exists()
        assert flink_cluster.rest(f"/jobs/{job}")["state"] == "FINISHED"
        assert first.wait(120) == 0, open(tmp_path / "before.log").read()[-3000:]
    finally:
        first.kill()
    written_before = len(predictions_of(bootstrap, topic_name + ".pred"))
    produce_events(bootstrap, topic_name, events[1200:], partitions=PARTITIONS, progress=False)  # i % 4 still

    unfit = exactly_once_run(bootstrap, topic_name, tmp_path, master, "unfit", "--parallelism", "1",
                        "--checkpoint-every", str(n), "--from-savepoint", location)
    assert unfit.wait(240) == 2
    log = open(tmp_path / "unfit.log").read()
    errors = [line for line in log.splitlines() if "error" in line.lower() and "Unparseable" not in line]
    assert len(errors) == 1 and errors[0].startswith(f"scinol: error: run: the savepoint {location} does not "
                                                     "fit this pipeline"), errors  # Beam's own error line hidden
    assert "Traceback" not in log

    third = flink_cluster.add_taskmanager()
    resumed = exactly_once_run(bootstrap, topic_name, tmp_path, master, "after", "--parallelism", "3",
                          "--checkpoint-every", str(n), "--from-savepoint", location)
    try:
        wait_for(lambda: (c := CheckpointStore(str(tmp_path / "ckpt")).latest("default")) is not None
                 and c.event_count == n, 300, f"the model's checkpoint at event {n}", _log(tmp_path / "after.log"))
    finally:
        flink_cluster.cancel_live_jobs()
        resumed.kill()
        flink_cluster.kill_taskmanager(third, graceful=True)
    log = open(tmp_path / "after.log").read()
    assert "restored from the runner's state" in log  # the savepoint's model, not a replay from offset 0
    ids = [p["event_id"] for p in predictions_of(bootstrap, topic_name + ".pred")]  # read_committed
    assert sorted(ids) == sorted(e["id"] for e in events)  # each once
    assert 0 < written_before < n
    check_one_model(bootstrap, topic_name, tmp_path, X, y, events)


def test_stopping_a_job_that_is_not_running_is_a_one_line_error(flink_cluster, tmp_path, capsys):
    assert main(["flink", "stop", "no-such-job", "--savepoint", str(tmp_path / "sp"),
                 "--flink-master", flink_cluster.master]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("scinol: error: flink stop: no running job with id or name 'no-such-job'"), err


def test_a_folder_without_a_savepoint_is_refused_before_anything_runs(tmp_path, capsys):
    assert main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p",
                 "--runner", "flink", "--from-savepoint", str(tmp_path)]) == 2
    assert "no Flink savepoint there (no _metadata file)" in capsys.readouterr().err
    assert main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p",
                 "--from-savepoint", str(tmp_path)]) == 2
    assert "--from-savepoint applies to --runner flink only" in capsys.readouterr().err
