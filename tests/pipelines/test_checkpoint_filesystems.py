"""Checkpoints on a remote location: the store's ``scheme://`` code path
(Beam's FileSystems, the one ``gs://``, ``s3://`` and ``hdfs://`` take on a
cluster), taken here on the local filesystem through a Beam filesystem with
an object store's semantics (tests/support/objectstore.py: no folders, no
atomic rename, objects visible once uploaded)."""

import logging
import os

import numpy as np
import pytest

from learners import make_learner
from learners.state import LearnerState
from pipelines.launch import run
from pipelines.records.topics import produce_events, read_records
from pipelines.state import progress
from pipelines.state.checkpoints import CheckpointStore
from pipelines.state.cuts import CutStore, load_cut
from pipelines.state.resume import resume_exact, supersede
from pipelines.state.store import StoreLocationError
from tests.support.objectstore import LocalObjectStore, url
from tests.support.runs import config, toy_stream


@pytest.fixture
def remote(tmp_path):
    """(the localobj:// URL of a fresh location, its local folder)."""
    return url(tmp_path / "bucket" / "ckpt"), tmp_path / "bucket" / "ckpt"


def _learned(seed: int, n: int = 60):
    rng = np.random.default_rng(seed)
    learner = make_learner("scinol2", "logistic")
    learner.learn(rng.normal(size=(n, 4)) * [1, 10, 100, 1000], np.sign(rng.normal(size=n)))
    return learner


def test_checkpoints_are_written_and_read_back_without_a_rename(remote):
    where, local = remote
    renames = LocalObjectStore.renames
    store = CheckpointStore(where, keep=2)
    learners = [_learned(seed) for seed in range(4)]
    for i, learner in enumerate(learners):
        manifest = store.save("m/1", learner, {("events", 0): 100 * (i + 1)}, 100 * (i + 1))
    assert manifest["uri"].startswith(f"{where}/m_1~") and manifest["uri"].endswith("/ckpt-000000000400.scinol")
    assert LocalObjectStore.renames == renames  # object stores have no atomic rename: none is used
    (model_dir,) = os.listdir(local)
    assert sorted(os.listdir(local / model_dir)) == [  # the newest two kept, each with its sidecar, no temp file
        "ckpt-000000000300.json", "ckpt-000000000300.scinol", "ckpt-000000000400.json", "ckpt-000000000400.scinol"]
    latest = CheckpointStore(where).latest("m/1")
    assert latest.path.startswith(where) and latest.event_count == 400 and latest.offsets == {("events", 0): 400}
    np.testing.assert_array_equal(latest.learner.state.arrays["P"], learners[-1].state.arrays["P"])
    assert CheckpointStore(where).models() == ["m/1"]


@pytest.mark.parametrize("damage", ["truncated", "no-sidecar-and-truncated", "flipped"])
def test_a_torn_upload_is_skipped_for_the_previous_checkpoint(remote, caplog, damage):
    """A crash mid-upload (HDFS shows a file while it is written) or a
    damaged object: the newest valid checkpoint wins, with one warning."""
    where, local = remote
    store = CheckpointStore(where)
    for i in range(2):
        store.save("a", _learned(i), {("events", 0): 10 * (i + 1)}, 10 * (i + 1))
    newest = local / "a" / "ckpt-000000000020.scinol"
    data = newest.read_bytes()
    if damage == "flipped":
        data = data[:200] + bytes([data[200] ^ 1]) + data[201:]
    else:
        data = data[: len(data) // 2]
    newest.write_bytes(data)
    if damage.startswith("no-sidecar"):
        (local / "a" / "ckpt-000000000020.json").unlink()
    with caplog.at_level(logging.WARNING):
        latest = CheckpointStore(where).latest("a")
    assert latest.event_count == 10
    warnings = [r.getMessage() for r in caplog.records if "skipping checkpoint" in r.getMessage()]
    assert len(warnings) == 1 and f"{where}/a/ckpt-000000000020.scinol" in warnings[0]


def _part(seed: int, coords: np.ndarray) -> LearnerState:
    state = _learned(seed).state
    return LearnerState({k: v[: len(coords)] for k, v in state.arrays.items()}, dict(state.scalars), dict(state.fill))


def test_cuts_are_complete_only_with_every_part(remote):
    where, local = remote
    store = CutStore(where, keep=2)
    head = {"learned": 0, "offsets": [{"topic": "events", "partition": 0, "offset": 0}], "model": "a"}
    for seq in (5, 9):
        for shard in range(2):
            store.save_shard("a", seq, shard, 2, np.array([shard, shard + 2]), _part(seq, np.arange(2)),
                             {**head, "learned": seq, "offsets": [{"topic": "events", "partition": 0, "offset": seq}]})
    store.save_shard("a", 12, 0, 2, np.array([0, 2]), _part(12, np.arange(2)), {**head, "learned": 12})
    assert CutStore(where).latest("a", 2).seq == 9  # cut 12 lacks shard 1's part
    cut = load_cut(f"{where}/a/cut-000000000009")
    assert cut.offsets == {("events", 0): 9} and cut.learned == 9
    coords, state, _ = cut.shard(1)
    np.testing.assert_array_equal(coords, [1, 3])
    assert CutStore(where).models() == ["a"] and CutStore(where).shard_counts("a") == {2}
    assert sorted(os.listdir(local / "a")) == ["cut-000000000005", "cut-000000000009", "cut-000000000012"]


def test_progress_floor_and_a_fresh_start_on_a_remote_location(remote):
    where, local = remote
    CheckpointStore(where).save("a", _learned(0), {("events", 0): 50}, 50)
    progress.write_run_start(where, {("events", 0): 0})
    progress.write_sequenced(where, ("events", 0), 70, ["a", "b"])  # b: a model with no checkpoint yet
    point = resume_exact(where, "events")
    assert point.models == {"a": 50} and point.starts == {("events", 0): 0}  # never past b's events
    progress.write_sequenced(where, ("events", 0), 70, ["a"])
    assert resume_exact(where, "events").starts == {("events", 0): 50}
    moved = supersede(where)
    assert moved.startswith(f"{where}/.superseded-")
    assert resume_exact(where, "events").models == {}  # nothing left to resume from
    assert sorted(os.listdir(local / os.path.basename(moved))) == [".progress", "a"]


def test_an_unknown_scheme_is_one_line():
    with pytest.raises(StoreLocationError) as err:
        CheckpointStore("nosuch://bucket/ckpt")
    message = str(err.value)
    assert message.startswith("nosuch://bucket/ckpt: cannot keep checkpoints at nosuch://: no Beam filesystem")
    assert "localobj" in message and "\n" not in message
    with pytest.raises(StoreLocationError):
        CutStore("nosuch://bucket/ckpt")


@pytest.mark.parametrize("shards", [None, 3], ids=["exact", "sharded"])
def test_a_pipeline_resumes_from_a_remote_location(tansu_bootstrap, topic_name, tmp_path, remote, shards):
    """The checkpoint store's logic, not the broker's: on tansu only."""
    where, _ = remote
    X, y, events = toy_stream(600)
    produce_events(tansu_bootstrap, topic_name, events[:250], partitions=1, progress=False)
    extra = {"shards": shards, "max_staleness": 0} if shards else {}
    cfg = config(tansu_bootstrap, topic_name, tmp_path, checkpoint_dir=where, **extra)
    run(cfg)
    produce_events(tansu_bootstrap, topic_name, events[250:], progress=False)
    run(cfg)  # resumes at event 250 from the remote checkpoint
    straight = make_learner("scinol2", "logistic")
    want = straight.learn(X, y)
    if shards:
        cut = CutStore(where).latest("default", shards)
        assert cut.seq == 600
        got = cut.merged_learner(cfg.learner.make)
    else:
        ckpt = CheckpointStore(where).latest("default")
        assert ckpt.event_count == 600 and ckpt.offsets == {(topic_name, 0): 600}
        got = ckpt.learner
    np.testing.assert_allclose(got.state.arrays["P"], straight.state.arrays["P"][: got.state.n_coords],
                               rtol=1e-9, atol=1e-12)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, 600)
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]  # each once: the second run resumed
    np.testing.assert_allclose([p["score"] for p in preds], want, rtol=1e-9, atol=1e-12)


def test_scinol_model_reads_remote_checkpoints_and_cuts(remote, tmp_path, capsys, monkeypatch):
    from pipelines.cli.main import main

    where, _ = remote
    learner = _learned(3)
    CheckpointStore(where).save("a", learner, {("events", 0): 60}, 60)
    head = {"learned": 7, "offsets": [{"topic": "events", "partition": 0, "offset": 7}], "model": "b", **learner.header()}
    for shard in range(2):
        CutStore(where).save_shard("b", 7, shard, 2, np.array([shard, shard + 2]), _part(7, np.arange(2)), head)
    assert main(["model", "inspect", f"{where}/a/ckpt-000000000060.scinol", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert '"event_count": 60' in out and "top 3 weights" in out
    assert main(["model", "inspect", f"{where}/b/cut-000000000007"]) == 0
    assert '"learned": 7' in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)
    assert main(["model", "export", f"{where}/a/ckpt-000000000060.scinol", "--format", "csv"]) == 0
    capsys.readouterr()
    rows = (tmp_path / "ckpt-000000000060.scinol.weights.csv").read_text().splitlines()
    assert rows[0] == "feature,output,weight" and len(rows) == 1 + learner.weights().size
    assert main(["model", "inspect", "nosuch://bucket/m.scinol"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot keep checkpoints at nosuch://" in err
