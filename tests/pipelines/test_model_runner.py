"""A model of the stream without Beam: predictions equal the in-memory
learner's, checkpoints cover exactly the events their state has seen, and a
restart from the newest valid checkpoint loses and repeats nothing."""

import logging
from typing import NamedTuple

import numpy as np
import pytest

from learners import make_learner
from learners.datasets import toy_examples
from pipelines.state.checkpoints import CheckpointStore
from pipelines.exact.model_runner import ModelRunner
from tests.support.parts import feed


class Msg(NamedTuple):  # the (topic, partition, offset) part of a Kafka message
    topic: str
    partition: int
    offset: int


def stream(n, seed=0, topic="events"):
    X, y = toy_examples(n, seed)
    items = []
    for i, (row, label) in enumerate(zip(X, y)):
        event = {"id": f"e{i}", "timestamp": 1_700_000_000_000 + i, "model": "m",
                 "features": {"values": row.tolist()}, "label": None if i % 7 == 3 else float(label), "weight": None}
        items.append((Msg(topic, 0, i), event))
    return X, np.where(np.arange(n) % 7 == 3, np.nan, y), items


def runner(store=None, every=None):
    return ModelRunner("m", lambda: make_learner("scinol2", "logistic"), store, every_events=every)


def test_predictions_equal_the_in_memory_learner():
    X, y, items = stream(1000)
    r = runner()
    preds = [p for lo in range(0, 1000, 128) for p in feed(r, items[lo:lo + 128])]
    want = make_learner("scinol2", "logistic").learn(X, y)
    np.testing.assert_array_equal([p["score"] for p in preds], want)
    assert [p["event_id"] for p in preds] == [f"e{i}" for i in range(1000)]
    labelled = ~np.isnan(y)
    assert [p["model_version"] for p in preds] == np.concatenate([[0], np.cumsum(labelled)[:-1]]).tolist()
    assert all((p["loss"] is None) == np.isnan(label) for p, label in zip(preds, y))
    assert r.offsets == {("events", 0): 1000} and r.events == 1000
    assert r.labelled == int(labelled.sum())
    assert r.mean_loss == pytest.approx(np.mean(np.logaddexp(0, -y[labelled] * want[labelled])), rel=1e-12)
    assert r.accuracy == np.mean(np.where(want[labelled] > 0, 1.0, -1.0) == y[labelled])  # ŷ = 0 reads as -1


def test_restart_from_checkpoint_loses_and_repeats_nothing(tmp_path):
    X, y, items = stream(1000)
    store = CheckpointStore(str(tmp_path), keep=2)
    first = runner(store, every=250)
    for lo in range(0, 700, 100):
        feed(first, items[lo:lo + 100])
        if first.checkpoint_due():
            first.checkpoint()
    # Killed here: events 600..699 were learned but never checkpointed.
    second = runner(store, every=250)
    assert second.events == 600 and second.offsets == {("events", 0): 600}
    replay = feed(second, items[500:1000])  # the source may hand back already-covered events
    assert [p["event_id"] for p in replay] == [f"e{i}" for i in range(600, 1000)]
    straight = make_learner("scinol2", "logistic")
    straight.learn(X, y)
    np.testing.assert_array_equal(second.learner.state.arrays["P"], straight.state.arrays["P"])
    assert second.learner.state.scalars == straight.state.scalars
    assert len(list((tmp_path / "m").glob("*.scinol"))) == 2  # pruned to keep=2


def test_corrupt_newest_checkpoint_falls_back_with_a_warning(tmp_path, caplog):
    _, _, items = stream(300)
    store = CheckpointStore(str(tmp_path))
    r = runner(store)
    feed(r, items[:100])
    r.checkpoint()
    feed(r, items[100:200])
    newest = store.model_dir("m") + "/ckpt-000000000200.scinol"
    r.checkpoint()
    data = open(newest, "rb").read()
    open(newest, "wb").write(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING):
        back = runner(store)
    assert back.events == 100 and back.offsets == {("events", 0): 100}
    assert "checksum mismatch" in caplog.text and "ckpt-000000000200" in caplog.text


def test_checkpoint_header_describes_the_model(tmp_path):
    _, _, items = stream(50)
    store = CheckpointStore(str(tmp_path))
    r = runner(store)
    feed(r, items)
    manifest = r.checkpoint()
    assert manifest["model"] == "m" and manifest["learner"] == "scinol2" and manifest["event_count"] == 50
    assert manifest["offsets"] == [{"topic": "events", "partition": 0, "offset": 50}]
    assert len(manifest["checksum"]) == 64 and manifest["uri"].endswith("ckpt-000000000050.scinol")
    assert store.models() == ["m"]


def test_multiclass_predictions_carry_class_and_probability():
    rng = np.random.default_rng(0)
    items = [(Msg("t", 0, i), {"id": str(i), "timestamp": 0, "model": "k",
                               "features": {"indices": [0, 3], "values": [float(v), 1.0]},
                               "label": float(i % 3), "weight": None})
             for i, v in enumerate(rng.normal(size=30))]
    r = ModelRunner("k", lambda: make_learner("scinol2", "softmax", n_classes=3))
    preds = r.process(items)
    assert all(len(p["scores"]) == 3 and p["predicted_class"] in (0, 1, 2) for p in preds)
    assert all(p["probability"] == pytest.approx(max(np.exp(p["scores"]) / np.exp(p["scores"]).sum()))
               for p in preds)


def kept_parts(runner: ModelRunner) -> tuple:
    """The runner's parts as the runner's state store keeps them and reads them back."""
    from pipelines.exact.model_runner import KEPT_CLASSES
    from pipelines.steps.row_deltas import Written, base_record, restore

    return restore(base_record(runner.parts(), {}, Written()), [], {}, KEPT_CLASSES)


@pytest.mark.parametrize("kept_as", ["snapshot bytes", "parts in the state store"])
def test_a_snapshot_continues_bit_identically_with_position_and_waiting_events(kept_as):
    """What the runner's state store keeps: a runner made from a snapshot
    goes on exactly as the one it was taken from (model, offsets, metrics,
    events awaiting labels, checkpoint cadence)."""
    from pipelines.exact.model_runner import LabelSettings

    _, _, items = stream(900)
    labels = LabelSettings("labels", 3.6e6, 1000)
    make = lambda: make_learner("scinol2", "logistic")  # noqa: E731
    first = ModelRunner("m", make, every_events=500, labels=labels)
    feed(first, items[:400])
    kept = first.snapshot() if kept_as == "snapshot bytes" else kept_parts(first)
    copy = ModelRunner("m", make, every_events=500, labels=labels, snapshot=kept)
    assert copy.learner.state is not first.learner.state
    assert copy.offsets == first.offsets and copy.events == 400
    assert list(copy.pending.events) == list(first.pending.events) and len(copy.pending.events) > 0
    assert copy.metrics.as_dict() == first.metrics.as_dict()
    assert feed(copy, items[300:]) and feed(copy, items[300:]) == []  # covered events are skipped
    feed(first, items[400:])
    np.testing.assert_array_equal(copy.learner.state.arrays["P"], first.learner.state.arrays["P"])
    assert copy.checkpoint_due() == first.checkpoint_due() and copy.metrics.as_dict() == first.metrics.as_dict()


def weighted(items, seed=0):
    """The stream with importance weights: None (1) on some events, others in (0, 5]."""
    rng = np.random.default_rng(seed)
    w = np.where(rng.uniform(size=len(items)) < 0.3, 1.0, rng.uniform(0.01, 5.0, size=len(items)))
    out = [(m, {**e, "weight": None if h == 1.0 else float(h)}) for (m, e), h in zip(items, w)]
    return w, out


def test_event_weights_are_applied_as_the_in_memory_learner_applies_them():
    X, y, items = stream(600)
    w, items = weighted(items)
    r = runner()
    preds = [p for lo in range(0, 600, 128) for p in r.process(items[lo:lo + 128])]
    want = make_learner("scinol2", "logistic")
    np.testing.assert_array_equal([p["score"] for p in preds], want.learn(X, y, w))
    np.testing.assert_array_equal(r.learner.state.arrays["P"], want.state.arrays["P"])
    unweighted = make_learner("scinol2", "logistic")
    unweighted.learn(X, y)
    assert not np.array_equal(unweighted.state.arrays["P"], want.state.arrays["P"])  # the weights did matter


def test_late_labels_learn_with_the_label_weight_else_the_event_weight():
    """A label's weight replaces its event's; a label without one (null) keeps
    the event's: for a label that comes after its event and for one that
    comes first alike."""
    from pipelines.exact.model_runner import LabelSettings

    X, y, items = stream(60)
    w, items = weighted(items, seed=1)
    label_w = np.where(np.arange(60) % 3 == 0, 2.5, np.nan)  # every third label carries its own weight
    r = ModelRunner("m", lambda: make_learner("scinol2", "logistic"), labels=LabelSettings("labels", 3.6e6, 100))
    bare = [(m, {**e, "label": None}) for m, e in items]

    def label(i):  # labels 50..59 arrive first (offsets 0..9), then 0..49
        return (Msg("labels", 0, (i + 10) % 60), {
            "event_id": f"e{i}", "label": float(y[i]) if y[i] == y[i] else 1.0, "timestamp": 1_700_000_000_000 + i,
            "weight": None if np.isnan(label_w[i]) else float(label_w[i])})

    r.process_labels([label(i) for i in range(50, 60)])  # labels first: they wait for their events
    r.process(bare)
    out, _, _, dead = r.process_labels([label(i) for i in range(50)])
    assert dead == [] and r.labels_learned == 50 and r.learner.n_examples == 60  # 10 met their label on arrival
    order = list(range(50, 60)) + list(range(50))
    labels = np.array([y[i] if y[i] == y[i] else 1.0 for i in order])
    weights = np.where(np.isnan(label_w[order]), w[order], label_w[order])
    want = make_learner("scinol2", "logistic")
    want.learn(X[order], labels, weights)
    np.testing.assert_array_equal(r.learner.state.arrays["P"], want.state.arrays["P"])
