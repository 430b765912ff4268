"""Exact on real runners that keep no order: Flink's batch mode at
parallelism 2, which runs the pipeline stage after stage and hands each
keyed step its input in no particular order, and Prism. ``scinol run`` as a user types it, four partitions: with one model
per partition every event is predicted once and each model is the
single-process learner's over its partition, bit for bit; with one model
over the four partitions every event is applied once and each partition in
its offset order."""

from __future__ import annotations

import subprocess
import sys

import pytest

from learners import make_learner
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from tests.support.labels import assert_same_state
from tests.support.runs import toy_stream

pytestmark = pytest.mark.slow
PARTITIONS = 4


def scinol_run(bootstrap, topic, tmp_path, *flags, timeout=900):
    return subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
         "--predictions-topic", topic + ".pred", "--checkpoint-dir", str(tmp_path / "ckpt"), "--max-batch", "97",
         *flags],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def check_model_per_partition(bootstrap, topic, tmp_path, X, y, events):
    preds = read_records(bootstrap, topic + ".pred", len(events), timeout=60)
    assert sorted(p["event_id"] for p in preds) == sorted(e["id"] for e in events)  # each once
    for part in range(PARTITIONS):
        mine = sorted((p for p in preds if p["model"] == f"p{part}"), key=lambda p: p["source_offset"])
        want = make_learner("scinol2", "logistic")
        assert [p["score"] for p in mine] == want.learn(X[part::PARTITIONS], y[part::PARTITIONS]).tolist()
        assert [p["model_version"] for p in mine] == list(range(len(mine)))  # learned in offset order
        assert_same_state(CheckpointStore(str(tmp_path / "ckpt")).latest(f"p{part}").learner, want)


def check_one_model(bootstrap, topic, tmp_path, X, y, events):
    preds = read_records(bootstrap, topic + ".pred", len(events), timeout=60)
    applied = sorted(preds, key=lambda p: p["model_version"])  # every event labelled: its version is its place
    assert [p["model_version"] for p in applied] == list(range(len(events)))  # each once
    index = {e["id"]: i for i, e in enumerate(events)}
    order = [index[p["event_id"]] for p in applied]
    for part in range(PARTITIONS):
        assert [i for i in order if i % PARTITIONS == part] == list(range(part, len(events), PARTITIONS))
    want = make_learner("scinol2", "logistic")
    assert [p["score"] for p in applied] == want.learn(X[order], y[order]).tolist()
    assert_same_state(CheckpointStore(str(tmp_path / "ckpt")).latest("default").learner, want)


def produce(bootstrap, topic, n, per_partition_models):
    X, y, events = toy_stream(n)
    if per_partition_models:
        events = [{**e, "model": f"p{i % PARTITIONS}"} for i, e in enumerate(events)]  # event i: partition i % 4
    produce_events(bootstrap, topic, events, partitions=PARTITIONS, progress=False)
    return X, y, events


@pytest.mark.flink
@pytest.mark.parametrize("per_partition_models", [True, False], ids=["model-per-partition", "one-model"])
def test_flink_batch_mode(tansu_bootstrap, topic_name, tmp_path, flink_job_server_jar, per_partition_models):
    """On an embedded Flink: on a session cluster of two TaskManagers Beam's
    batch translation restarts tasks now and then ("Unknown process bundle
    instruction id" from a stateful step's state read; docs/runners.md), and
    a restarted task re-sends predictions, which an exact count cannot take."""
    X, y, events = produce(tansu_bootstrap, topic_name, 4000, per_partition_models)
    proc = scinol_run(tansu_bootstrap, topic_name, tmp_path, "--bounded", "--runner", "flink", "--parallelism", "2",
                      "--execution-mode", "batch")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"scinol run: done: {len(events):,} messages read, {len(events):,} predictions written" in proc.stderr
    assert "skipped as covered" not in proc.stderr
    check = check_model_per_partition if per_partition_models else check_one_model
    check(tansu_bootstrap, topic_name, tmp_path, X, y, events)


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded", "unbounded"])
def test_prism(tansu_bootstrap, topic_name, tmp_path, prism_binary, bounded):
    X, y, events = produce(tansu_bootstrap, topic_name, 2000, per_partition_models=True)
    ends = ["--bounded"] if bounded else ["--stop-after", str(len(events) // PARTITIONS)]
    proc = scinol_run(tansu_bootstrap, topic_name, tmp_path, *ends, "--runner", "prism")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "skipped as covered" not in proc.stderr
    check_model_per_partition(tansu_bootstrap, topic_name, tmp_path, X, y, events)
