"""Importance weights through the pipeline, on the real broker: the events'
weights are learned as the in-memory learner learns them, in exact mode and
in sharded mode at staleness 0, and events with a NaN, negative or zero
weight go to the dead-letter topic with their reason."""

import numpy as np
import pytest

from learners import make_learner
from pipelines.launch import run
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from tests.support.runs import config, toy_stream

BAD = {5: (float("nan"), "non_finite_weight"), 17: (-1.0, "bad_weight"), 40: (0.0, "bad_weight")}


def weighted_stream(n):
    X, y, events = toy_stream(n, unlabelled_every=13)
    w = np.random.default_rng(0).choice([1.0, 0.2, 2.0, 9.5], size=n)
    events = [{**e, "weight": None if h == 1.0 else float(h)} for e, h in zip(events, w)]
    for i, (h, _) in BAD.items():
        events[i] = {**events[i], "weight": h}
    good = np.array([i not in BAD for i in range(n)])
    return X[good], y[good], w[good], events, good


@pytest.mark.parametrize("shards", [None, 3])
def test_event_weights_are_learned_and_bad_ones_are_dead_letters(kafka_bootstrap, topic_name, tmp_path, shards):
    X, y, w, events, good = weighted_stream(600)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    extra = {"shards": shards, "max_staleness": 0} if shards else {}
    cfg = config(kafka_bootstrap, topic_name, tmp_path, **extra)
    run(cfg)
    preds = read_records(kafka_bootstrap, cfg.predictions_topic, int(good.sum()))
    assert [p["event_id"] for p in preds] == [e["id"] for e, ok in zip(events, good) if ok]
    want = make_learner("scinol2", "logistic")
    scores = want.learn(X, y, w)
    np.testing.assert_allclose([p["score"] for p in preds], scores, rtol=1e-9 if shards else 1e-12, atol=1e-300)
    if not shards:
        ckpt = CheckpointStore(cfg.checkpoint_dir).latest("default")
        n = ckpt.learner.state.n_coords
        np.testing.assert_array_equal(ckpt.learner.state.arrays["P"], want.state.arrays["P"][:n])
    dead = read_records(kafka_bootstrap, cfg.dlq_topic, len(BAD))
    assert sorted((d["reason"], d["detail"].split(";")[0]) for d in dead) == sorted(
        (reason, f"weight is {h!r}" + ("" if reason == "bad_weight" else ", not a finite number"))
        for h, reason in BAD.values())
