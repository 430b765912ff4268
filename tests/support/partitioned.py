"""Four partitions through ``scinol run`` as a user types it: the events
(a model per partition, or one model over all), the run, and the checks
against the single-process learner, for the tests of runners that keep no
order or place keys on subtasks."""

from __future__ import annotations

import subprocess
import sys

from learners import make_learner
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from tests.support.labels import assert_same_state
from tests.support.runs import toy_stream

PARTITIONS = 4


def scinol_command(bootstrap, topic, tmp_path, *flags) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
            "--predictions-topic", topic + ".pred", "--checkpoint-dir", str(tmp_path / "ckpt"), "--max-batch", "97",
            *flags]


def scinol_run(bootstrap, topic, tmp_path, *flags, timeout=900):
    return subprocess.run(scinol_command(bootstrap, topic, tmp_path, *flags), capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def check_scores_per_partition(bootstrap, topic, X, y, events) -> list:
    """Every event predicted once, each model's scores the single-process
    learner's over its partition in offset order; the learners."""
    preds = read_records(bootstrap, topic + ".pred", len(events), timeout=60)
    assert sorted(p["event_id"] for p in preds) == sorted(e["id"] for e in events)  # each once
    learners = []
    for part in range(PARTITIONS):
        mine = sorted((p for p in preds if p["model"] == f"p{part}"), key=lambda p: p["source_offset"])
        want = make_learner("scinol2", "logistic")
        assert [p["score"] for p in mine] == want.learn(X[part::PARTITIONS], y[part::PARTITIONS]).tolist()
        assert [p["model_version"] for p in mine] == list(range(len(mine)))  # learned in offset order
        learners.append(want)
    return learners


def check_model_per_partition(bootstrap, topic, tmp_path, X, y, events):
    """:func:`check_scores_per_partition`, and each model's last checkpoint is its learner's state."""
    for part, want in enumerate(check_scores_per_partition(bootstrap, topic, X, y, events)):
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
