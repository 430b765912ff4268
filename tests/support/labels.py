"""Delayed labels for the pipeline tests: producing a labels topic, and the
reference a run that learned in label-arrival order is held to."""

import numpy as np

from learners import OnlineLearner, make_learner
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.producer import KafkaWriter
from pipelines.records.topics import produce_events
from schemas.codec import Codec
from tests.support.runs import toy_stream

T0 = 1_700_000_000_000


def produce_labels(bootstrap, topic, labels):
    """``labels``: (event id, label, timestamp ms) in the order they arrive."""
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic)])
    codec, writer = Codec(), KafkaWriter(bootstrap, topic)
    for event_id, label, ts in labels:
        writer.produce(codec.encode("scinol.Label", {"event_id": event_id, "label": float(label), "timestamp": ts}),
                       key=event_id.encode())
    writer.close()


def unlabelled(events):
    return [{**e, "label": None} for e in events]


def produce_delayed(bootstrap, topic, n, max_delay, seed):
    """``n`` toy events to ``topic`` without their labels, and the labels to
    ``topic.labels``, each due 0..``max_delay`` events after its event and
    produced in the order they fall due; returns (X, y, event ids)."""
    X, y, events = toy_stream(n)
    ids = [e["id"] for e in events]
    due = np.arange(n) + np.random.default_rng(seed).integers(0, max_delay, size=n)
    arrival = np.argsort(due, kind="stable")
    produce_events(bootstrap, topic, unlabelled(events), partitions=1, progress=False)
    produce_labels(bootstrap, topic + ".labels", [(ids[i], y[i], T0 + int(due[i])) for i in arrival])
    return X, y, ids


def learning_order(predictions):
    """The events in the order the model learned them: the prediction records
    that carry a label (a late label's record is written when it is learned)."""
    return [p["event_id"] for p in predictions if p["label"] is not None]


def reference_after(X, y, ids, order):
    where = {event_id: i for i, event_id in enumerate(ids)}
    rows = [where[e] for e in order]
    learner = make_learner("scinol2", "logistic")
    learner.learn(X[rows], y[rows])
    return learner


def assert_same_state(saved: OnlineLearner, want: OnlineLearner):
    for name, arr in want.state.arrays.items():
        n = saved.state.arrays[name].shape[0]
        np.testing.assert_array_equal(saved.state.arrays[name], arr[:n], err_msg=name)
    assert saved.state.scalars == want.state.scalars
