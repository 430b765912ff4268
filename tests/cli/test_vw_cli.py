"""Vowpal Wabbit text files and -q/--cubic through `scinol learn`, `scinol
produce` + `scinol run` (exact mode, real broker) and sharded mode's
router: each equal to the Python API on the same rows as named features."""

from __future__ import annotations

import numpy as np
import pytest

from learners import OnlineLearner, make_learner
from pipelines.files.vw_text import vw_rows
from pipelines.records.events import vw_events
from pipelines.records.topics import read_records
from pipelines.sharded.router import Router
from pipelines.steps import Position
from tests.support.cli import assert_one_error_line, ok, run
from tests.support.sharded_loop import Loop


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def vw_file(path, n=400, seed=0, tags=False):
    """Labels ±1 from a hidden rule with an a×b interaction; three namespaces."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        a = {f"f{k}": rng.normal() * 10.0 ** k for k in range(3) if rng.random() < 0.8}
        b = {f"g{k}": round(rng.normal(), 6) for k in range(2)}
        margin = sum(a.values()) * 1e-2 + b["g0"] * a.get("f0", 0.0)
        label = 1 if margin + 0.1 * rng.normal() > 0 else -1
        tag = f"ex{i}" if tags and i % 3 == 0 else ""
        feats_a = " ".join(f"{k}:{v:.17g}" for k, v in a.items())
        feats_b = " ".join(f"{k}:{v:g}" for k, v in b.items())
        lines.append(f"{label} {tag}|a {feats_a} |b {feats_b} |c city:{'xy'[i % 2]}\n")
    path.write_text("".join(lines))
    return str(path)


def python_api_rows(path):
    rows, y = [], []
    for _, row in vw_rows(path):
        named: dict[str, float] = {}
        for name, value in row.features:
            named[name] = named.get(name, 0.0) + value
        rows.append(named)
        y.append(np.nan if row.label is None else row.label)
    return rows, np.array(y)


def read_predictions(path):
    return np.array([float(line.split()[0]) for line in open(path)])


@pytest.mark.parametrize("flags,interactions", [([], ()), (["-q", "ab"], ("ab",)),
                                                (["-q", "ba", "--cubic", "abc", "-q", "cc"], ("ab", "cc", "abc"))])
def test_learn_vw_equals_the_python_api_on_named_features(workdir, capsys, flags, interactions):
    data = vw_file(workdir / "d.vw")
    err = ok(capsys, "learn", data, *flags, "-p", "p.txt", "--save", "m.scinol")
    assert "average loss = " in err[-3]
    rows, y = python_api_rows(data)
    model = make_learner("scinol2", "logistic", interactions=list(interactions))
    want = model.learn(rows, y)
    assert np.array_equal(read_predictions("p.txt"), want)
    saved = OnlineLearner.load("m.scinol")
    assert saved.interactions == interactions
    assert np.array_equal(saved.weights(), model.weights())


def test_crosses_help_where_the_rule_needs_them(workdir, capsys):
    data = vw_file(workdir / "d.vw", n=3000)

    def final_loss(*flags):
        err = ok(capsys, "learn", data, *flags)
        return float(next(line for line in err if line.startswith("average loss")).split("=")[1])
    assert final_loss("-q", "ab") < final_loss() - 0.02


def test_load_continues_with_the_saved_interactions(workdir, capsys):
    data = vw_file(workdir / "d.vw")
    ok(capsys, "learn", data, "-q", "ab", "--passes", "2", "-p", "two.txt")
    ok(capsys, "learn", data, "-q", "ab", "--save", "one.scinol", "--quiet")
    ok(capsys, "learn", data, "--load", "one.scinol", "-p", "again.txt", "--quiet")
    assert np.array_equal(read_predictions("again.txt"), read_predictions("two.txt")[400:])


def test_predictions_carry_vw_tags(workdir, capsys):
    data = vw_file(workdir / "d.vw", n=10, tags=True)
    ok(capsys, "learn", data, "-p", "p.txt", "--quiet")
    lines = open("p.txt").read().splitlines()
    assert lines[0].split()[1] == "ex0" and len(lines[1].split()) == 1 and lines[3].endswith(" ex3")


def test_importance_weights_are_applied(workdir, capsys):
    (workdir / "w.vw").write_text("1 |a x\n-1 0 |a x y\n1 2 |a y\n-1 0.25 |a x\n1 |a y\n")
    err = ok(capsys, "learn", "w.vw", "-p", "p.txt", "--save", "m.scinol")
    rows = [{"a^x": 1.0}, {"a^x": 1.0, "a^y": 1.0}, {"a^y": 1.0}, {"a^x": 1.0}, {"a^y": 1.0}]
    model = make_learner("scinol2", "logistic")
    want = model.learn(rows, [1.0, -1.0, 1.0, -1.0, 1.0], [1.0, 0.0, 2.0, 0.25, 1.0])
    assert np.array_equal(read_predictions("p.txt"), want)
    assert np.array_equal(OnlineLearner.load("m.scinol").weights(), model.weights())
    assert OnlineLearner.load("m.scinol").n_examples == 4  # weight 0: predicted, not learned from
    assert "weighted example sum = 4.25" in err


@pytest.mark.parametrize("args,expected", [
    (["learn", "bad.vw"], ["bad.vw:2:6:", "non-finite value 'inf' for feature 'x'"]),
    (["learn", "good.csv", "-q", "ab"], ["-q/--cubic", "--format vw"]),
    (["learn", "d.vw", "-q", "abc"], ["-q 'abc': expected 2 namespace letters"]),
    (["learn", "d.vw", "--cubic", "a:b"], ["cannot name a namespace"]),
    (["learn", "d.vw", "--load", "m.scinol", "-q", "ac"], ["conflict with the loaded model's interactions (ab)"]),
    (["learn", "d.vw", "--load", "m.scinol", "-b", "20"], ["--hash-bits 20 conflicts with the loaded model (18)"]),
])
def test_vw_errors_are_one_line(workdir, capsys, args, expected):
    (workdir / "bad.vw").write_text("1 |a x\n1 |a x:inf\n")
    (workdir / "good.csv").write_text("y,a\n1,2\n")
    vw_file(workdir / "d.vw", n=5)
    make_learner("scinol2", "logistic", interactions=["ab"]).save("m.scinol")
    rc, err = run(capsys, *args)
    assert rc == 2
    assert_one_error_line(err, expected)


def test_hash_bits_option(workdir, capsys):
    data = vw_file(workdir / "d.vw", n=50)
    ok(capsys, "learn", data, "-b", "6", "-q", "ab", "-p", "p.txt", "--save", "m.scinol", "--quiet")
    rows, y = python_api_rows(data)
    assert np.array_equal(read_predictions("p.txt"),
                          make_learner("scinol2", "logistic", hash_bits=6, interactions=["ab"]).learn(rows, y))
    assert OnlineLearner.load("m.scinol").state.n_coords <= 2 ** 6 + 1


def test_sharded_router_crosses_before_splitting(workdir):
    data = vw_file(workdir / "d.vw", n=300)
    rows, y = python_api_rows(data)
    events = list(vw_events(data, "m"))
    items = [(Position("events", 0, i), e) for i, e in enumerate(events)]
    want = make_learner("scinol2", "logistic", interactions=["ab", "abc"]).learn(rows, y)
    learner = make_learner("scinol2", "logistic", interactions=["ab", "abc"])
    loop = Loop(learner, 3, staleness=0)
    loop.router = Router(3, learner.hasher, learner.bias, interactions=learner.interactions)
    loop.run(items)
    np.testing.assert_allclose([p["score"] for p in loop.predictions], want, rtol=1e-9, atol=1e-12)


def test_produce_vw_then_run_with_interactions_equals_the_python_api(kafka_bootstrap, topic_name, workdir, capsys):
    data = vw_file(workdir / "d.vw", n=500, tags=True)
    ok(capsys, "produce", data, "--topic", topic_name, "--bootstrap", kafka_bootstrap, "--quiet")
    ok(capsys, "run", "--topic", topic_name, "--bootstrap", kafka_bootstrap, "--predictions-topic",
       topic_name + ".pred", "--bounded", "-q", "ab", "--cubic", "abc", "--checkpoint-dir", "ckpt")
    preds = read_records(kafka_bootstrap, topic_name + ".pred", 500)
    rows, y = python_api_rows(data)
    want = make_learner("scinol2", "logistic", interactions=["ab", "abc"]).learn(rows, y)
    assert [p["event_id"] for p in preds][:4] == ["ex0", "d.vw:2", "d.vw:3", "ex3"]
    np.testing.assert_allclose([p["score"] for p in preds], want, rtol=1e-12, atol=1e-300)
