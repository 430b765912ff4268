"""Model files: no pickle, validated on load, and a loaded learner continues
bit-identically."""

import io
import json
import time
import zipfile

import numpy as np
import pytest

from learners import OnlineLearner, make_learner
from learners.state import StateFileError


def test_file_is_arrays_and_json_only(tmp_path):
    model = make_learner("scinol2")
    model.learn(np.eye(3), [1, -1, 1])
    path = tmp_path / "m.scinol"
    model.save(str(path))
    with zipfile.ZipFile(path) as zf:
        names = sorted(zf.namelist())
        header = json.loads(zf.read("header.json"))
        for name in names:
            if name.endswith(".npy"):
                arr = np.lib.format.read_array(io.BytesIO(zf.read(name)), allow_pickle=False)
                assert arr.dtype == np.float64
    assert names == ["P.npy", "Q.npy", "header.json"]
    assert header["learner"] == "scinol2" and header["loss"] == "logistic" and header["scalars"]["t"] == 3.0


def _rewrite(path, out, mutate):
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    mutate(members)
    with zipfile.ZipFile(out, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)


def _object_array_member():
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    return buf.getvalue()


def _set_header(key, value):
    def mutate(members):
        h = json.loads(members["header.json"])
        h[key] = value
        members["header.json"] = json.dumps(h).encode()
    return mutate


@pytest.mark.parametrize("mutate,message", [
    (lambda m: m.update({"P.npy": m["P.npy"][:-8] + b"\x00" * 8}), "checksum"),
    (lambda m: m.update({"P.npy": _object_array_member()}), "unreadable"),
    (lambda m: m.pop("header.json"), "header.json"),
    (lambda m: m.pop("Q.npy"), "unreadable"),
    (_set_header("format", "other"), "not a scinol model"),
    (_set_header("learner", "no-such-learner"), "does not describe a learner"),
])
def test_corrupt_files_are_rejected(tmp_path, mutate, message):
    model = make_learner("scinol2")
    model.learn(np.eye(3), [1, -1, 1])
    good = tmp_path / "good.scinol"
    model.save(str(good))
    bad = tmp_path / "bad.scinol"
    _rewrite(good, bad, mutate)
    with pytest.raises(StateFileError, match=message):
        OnlineLearner.load(str(bad))


def test_truncated_and_foreign_files_are_rejected(tmp_path):
    model = make_learner("scinol2")
    model.learn(np.eye(3), [1, -1, 1])
    good = tmp_path / "good.scinol"
    model.save(str(good))
    cut = tmp_path / "cut.scinol"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    for path in (cut, text, tmp_path / "missing"):
        with pytest.raises(StateFileError):
            OnlineLearner.load(str(path))


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    model = make_learner("scinol1")
    model.learn(np.eye(4), [1, -1, 1, 1])
    path = tmp_path / "m.scinol"
    model.save(str(path))
    model.learn(np.eye(4), [1, 1, 1, 1])
    model.save(str(path))  # overwrite in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.scinol"]
    assert OnlineLearner.load(str(path)).n_examples == 8


def test_the_same_state_is_the_same_bytes_at_any_time(tmp_path, monkeypatch):
    model = make_learner("scinol2", "logistic")
    model.learn(np.random.default_rng(0).normal(size=(20, 3)), np.ones(20))
    model.save(str(tmp_path / "now.scinol"))
    later = time.time() + 3 * 86400 + 7  # zip dates members to 2 s: a clock tick between two writes
    monkeypatch.setattr(time, "time", lambda: later)
    model.save(str(tmp_path / "later.scinol"))
    assert (tmp_path / "now.scinol").read_bytes() == (tmp_path / "later.scinol").read_bytes()
