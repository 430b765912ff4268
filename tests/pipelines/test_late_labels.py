"""Delayed labels in exact mode, on the real broker: events come without a
label, their labels later on a labels topic; the model learns when a label
arrives, in label-arrival order, and the progressive loss is that of the
prediction made when the event arrived."""

import numpy as np
import pytest

from learners import make_learner
from learners.losses import losses_of
from pipelines.launch import run
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from schemas.codec import Codec
from tests.support.runs import config, toy_stream

from tests.support.labels import T0, assert_same_state, learning_order, produce_labels, reference_after, unlabelled


def test_random_delays_give_the_model_of_the_stream_reordered_to_label_arrival(kafka_bootstrap, topic_name, tmp_path):
    n = 6000
    X, y, events = toy_stream(n)
    ids = [e["id"] for e in events]
    rng = np.random.default_rng(7)
    due = np.arange(n) + rng.integers(0, 10_000, size=n)  # each label arrives 0..10,000 events after its event
    arrival = np.argsort(due, kind="stable")
    produce_events(kafka_bootstrap, topic_name, unlabelled(events), partitions=1, progress=False)
    produce_labels(kafka_bootstrap, topic_name + ".labels", [(ids[i], y[i], T0 + int(due[i])) for i in arrival])
    cfg = config(kafka_bootstrap, topic_name, tmp_path, labels_topic=topic_name + ".labels", max_batch=300)
    run(cfg)

    predictions = read_records(kafka_bootstrap, cfg.predictions_topic, 2 * n, timeout=30)
    order = learning_order(predictions)
    assert sorted(order) == sorted(ids)  # each event learned from exactly once
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert_same_state(final.learner, reference_after(X, y, ids, order))
    assert len(final.learner.loaded_aux["pending_event_ts"]) == 0  # nothing left waiting

    # Progressive loss: the loss of the prediction made when the event arrived.
    first = {}
    for p in predictions:
        first.setdefault(p["event_id"], p)
    for p in predictions:
        if p["label"] is not None:
            arrived = first[p["event_id"]]
            assert p["score"] == arrived["score"] and p["model_version"] == arrived["model_version"]
            assert p["loss"] == pytest.approx(losses_of("logistic", np.array([p["label"]]),
                                                        np.array([[p["score"]]]))[0], rel=1e-12)


def test_unknown_expired_and_duplicate_labels_go_to_the_dead_letter_topic(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(400)
    events = [{**e, "label": None, "timestamp": T0 + 1000 * i} for i, e in enumerate(events)]  # one a second
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    labels = [(events[10]["id"], y[10], T0 + 20_000),  # in time: learned
              (events[10]["id"], y[10], T0 + 21_000),  # again: a duplicate
              ("no-such-event", 1.0, T0 + 30_000),  # its event never comes
              (events[5]["id"], y[5], T0 + 300_000)]  # 295 s after event 5: more than the 60 s TTL
    produce_labels(kafka_bootstrap, topic_name + ".labels", labels)
    cfg = config(kafka_bootstrap, topic_name, tmp_path, labels_topic=topic_name + ".labels", label_ttl=60.0)
    run(cfg)
    dead = {d["reason"]: d for d in read_records(kafka_bootstrap, cfg.dlq_topic, 3, timeout=20)}
    assert set(dead) == {"label_duplicate", "label_unknown_event", "label_expired"}
    assert all(d["topic"] == topic_name + ".labels" for d in dead.values())
    assert Codec().decode(dead["label_unknown_event"]["original"])["event_id"] == "no-such-event"
    assert "came more than the label TTL (60 s) after the event" in dead["label_expired"]["detail"]
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert final.learner.n_examples == 1  # only event 10 was learned


def test_a_restart_keeps_the_events_waiting_for_labels(kafka_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(1000)
    ids = [e["id"] for e in events]
    labels_topic = topic_name + ".labels"
    produce_events(kafka_bootstrap, topic_name, unlabelled(events), partitions=1, progress=False)
    produce_labels(kafka_bootstrap, labels_topic, [(ids[i], y[i], T0 + 2000 + i) for i in range(0, 1000, 2)])
    cfg = config(kafka_bootstrap, topic_name, tmp_path, labels_topic=labels_topic)
    run(cfg)
    first = CheckpointStore(cfg.checkpoint_dir).latest("default")
    waiting = first.learner.loaded_aux["pending_event_ts"]
    assert len(waiting) == 500  # the odd events still wait

    produce_labels(kafka_bootstrap, labels_topic, [(ids[i], y[i], T0 + 3000 + i) for i in range(1, 1000, 2)])
    run(cfg)  # a new run: resumes from the checkpoint, with the waiting events
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert len(final.learner.loaded_aux["pending_event_ts"]) == 0
    predictions = read_records(kafka_bootstrap, cfg.predictions_topic, 2000, timeout=30)
    order = learning_order(predictions)
    assert sorted(order) == sorted(ids)
    assert_same_state(final.learner, reference_after(X, y, ids, order))


def test_late_labels_with_crossed_namespaces_learn_the_crossed_features(kafka_bootstrap, topic_name, tmp_path):
    """The waiting event keeps each feature's namespace, so its late label
    learns the same crosses as an inline label would."""
    from pipelines.config import LearnerConfig

    rng = np.random.default_rng(3)
    n = 300
    events, rows, y = [], [], []
    for i in range(n):
        values = {f"a^x{j}": float(v) for j, v in enumerate(rng.normal(size=3))}
        values.update({f"b^y{j}": float(v) for j, v in enumerate(rng.normal(size=2))})
        label = 1.0 if values["a^x0"] * values["b^y1"] > 0 else -1.0
        events.append({"id": f"e{i}", "timestamp": T0 + i, "model": "default", "features": {"values": values},
                       "label": None, "weight": None})
        rows.append(values)
        y.append(label)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    produce_labels(kafka_bootstrap, topic_name + ".labels", [(f"e{i}", y[i], T0 + n + i) for i in range(n)])
    learner = LearnerConfig(interactions=("ab",))
    cfg = config(kafka_bootstrap, topic_name, tmp_path, labels_topic=topic_name + ".labels", learner=learner)
    run(cfg)
    order = learning_order(read_records(kafka_bootstrap, cfg.predictions_topic, 2 * n, timeout=30))
    want = make_learner("scinol2", "logistic", interactions=["ab"])
    where = {f"e{i}": i for i in range(n)}
    want.learn([rows[where[e]] for e in order], [y[where[e]] for e in order])
    assert_same_state(CheckpointStore(cfg.checkpoint_dir).latest("default").learner, want)
