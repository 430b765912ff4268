"""The exact pipeline's Prediction values made in one compiled call
(``prediction_values``, ``ModelRunner.process_encoded``) are byte for byte
the values of the per-record path (``prediction_record`` + ``Codec.encode``)
on random batches: labelled and unlabelled, weighted, binary, regression
and multiclass, events of a decoded batch of columns and plain records;
and the cases it cannot make identical bytes for fall back to that path."""

import math

import numpy as np
import pytest

from learners import make_learner
from pipelines.exact.model_runner import LabelSettings, ModelRunner
from pipelines.records.event_decoder import EventDecoder
from pipelines.records.prediction_values import prediction_values
from pipelines.records.predictions import prediction_record, reading_arrays, readings
from pipelines.steps import Position
from schemas.codec import Codec

CODEC = Codec()
TOPIC = "preds"
LOSSES = [("logistic", None), ("hinge", None), ("squared", None), ("softmax", 4)]


def random_events(rng, n: int, kind: str, n_classes: int | None, loss: str) -> list[dict]:
    events = []
    for i in range(n):
        if kind == "dense":
            features = {"values": rng.normal(size=5).tolist()}
        elif kind == "sparse":
            idx = sorted(rng.choice(1000, size=4, replace=False).tolist())
            features = {"indices": idx, "values": rng.normal(size=4).tolist()}
        else:
            features = {"values": {f"{'ab'[j % 2]}^x{j}": float(rng.normal()) for j in range(3)}}
        if rng.random() < 0.4:
            label = None
        elif n_classes:
            label = float(rng.integers(n_classes))
        elif loss == "squared":
            label = float(rng.normal())
        else:
            label = float(rng.choice([-1.0, 1.0]))
        events.append({"id": f"e-{kind}-{i}-é", "timestamp": 1_700_000_000_000 + int(rng.integers(10**6)),
                       "model": "m", "features": features, "label": label,
                       "weight": None if rng.random() < 0.5 else float(rng.uniform(0.1, 3.0))})
    return events


def columnar(events: list[dict], loss: str, n_classes) -> list:
    """The events as the pipeline's columnar Decode step hands them on."""
    cols = EventDecoder(CODEC, loss, n_classes).decode([CODEC.encode("scinol.Event", e) for e in events])
    assert cols.ok.all()
    from pipelines.records.event_rows import ColumnarEvent
    return [ColumnarEvent(cols, i) for i in range(len(events))]


def per_record(model, items, events, versions, scores, losses, loss, now_ms) -> list[bytes]:
    prob, klass = readings(loss, scores)
    return [CODEC.encode("scinol.Prediction", prediction_record(
        e, model, versions[i], scores[i].tolist(), prob[i], klass[i], losses[i], now_ms, items[i][0]), TOPIC)
        for i, e in enumerate(events)]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("loss,n_classes", LOSSES)
@pytest.mark.parametrize("kind", ["dense", "sparse", "named"])
@pytest.mark.parametrize("as_columns", [True, False])
def test_values_are_the_per_record_bytes(seed, loss, n_classes, kind, as_columns):
    rng = np.random.default_rng(seed)
    n = 40
    records = random_events(rng, n, kind, n_classes, loss)
    events = columnar(records, loss, n_classes) if as_columns else records
    if not as_columns:
        events[3] = dict(events[3], label=None)  # a record like one given a label that came before it
    items = [(Position("events", 2, 1000 + 7 * i, None if i % 3 else b"k"), e) for i, e in enumerate(events)]
    learner = make_learner("scinol2", loss, n_classes=n_classes)
    from pipelines.records.events import learner_rows
    rows, y = learner_rows(events, learner)
    scores, losses = learner.learn(rows, y, None, return_losses=True)
    scores = scores.reshape(n, -1)
    versions = 17 + np.concatenate([[0], np.cumsum(~np.isnan(y))[:-1]])
    now_ms = 1_700_000_123_456.789
    prob, klass = reading_arrays(loss, scores)
    got = prediction_values(CODEC, TOPIC, "m", items, events, versions=versions, scores=scores, losses=losses,
                            probability=prob, klass=klass, now_ms=now_ms)
    assert got == per_record("m", items, events, versions, scores, losses, loss, now_ms)


def test_events_of_several_topics_take_the_per_record_path():
    events = random_events(np.random.default_rng(0), 4, "dense", None, "logistic")
    items = [(Position("a" if i % 2 else "b", 0, i), e) for i, e in enumerate(events)]
    scores = np.zeros((4, 1))
    assert prediction_values(CODEC, TOPIC, "m", items, events, versions=np.zeros(4, np.int64), scores=scores,
                             losses=np.full(4, np.nan), probability=None, klass=None, now_ms=0.0) is None
    runner = ModelRunner("m", lambda: make_learner("scinol2", "logistic"))
    values = runner.process_encoded(items, CODEC, TOPIC)
    assert [CODEC.decode(v)["source_topic"] for v in values] == ["b", "a", "b", "a"]


@pytest.mark.parametrize("loss,n_classes", LOSSES)
@pytest.mark.parametrize("late", [False, True])
def test_runner_encoded_predictions_are_its_records(loss, n_classes, late):
    """Two runners fed the same batches, one giving records, one encoded
    values: the same predictions (latency aside: each reads the clock) and
    the same events waiting for labels."""
    rng = np.random.default_rng(5)
    records = random_events(rng, 300, "dense", n_classes, loss)
    events = columnar(records, loss, n_classes)
    items = [(Position("events", 0, i), e) for i, e in enumerate(events)]
    labels = LabelSettings("labels", 3.6e6, 10_000) if late else None
    make = lambda: make_learner("scinol2", loss, n_classes=n_classes)  # noqa: E731
    plain, fast = ModelRunner("m", make, labels=labels), ModelRunner("m", make, labels=labels)
    for lo in range(0, 300, 64):
        want = plain.process(items[lo:lo + 64])
        got = [CODEC.decode(v) for v in fast.process_encoded(items[lo:lo + 64], CODEC, TOPIC)]
        for w, g in zip(want, got, strict=True):
            w, g = CODEC.decode(CODEC.encode("scinol.Prediction", w, TOPIC)), g
            assert {**w, "latency_ms": 0} == {**g, "latency_ms": 0}
    assert fast.events == plain.events == 300 and fast.offsets == plain.offsets
    if late:
        assert sorted(fast.pending.events) == sorted(plain.pending.events)
        assert [w.version for w in fast.pending.events.values()] == [w.version for w in plain.pending.events.values()]


def test_an_older_registered_prediction_schema_takes_the_per_record_path(schema_registry):
    """A registry whose subject holds Prediction version 1 (no source
    fields) and a codec that does not register (--no-auto-register, so it
    writes the subject's latest): the compiled layout (version 2) does not
    apply, so the values are the codec's, with the registered id and
    without the source."""
    import json
    import uuid

    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from schemas.catalog import load_schema
    from schemas.registry import Registry

    topic = f"preds-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": schema_registry.url, **schema_registry.config})
    sid = client.register_schema(f"{topic}-value", Schema(json.dumps(load_schema("scinol.Prediction", 1)), "AVRO"))
    codec = Codec(Registry(schema_registry.url, schema_registry.config, auto_register=False))
    events = random_events(np.random.default_rng(1), 6, "dense", None, "logistic")
    items = [(Position("events", 0, i), e) for i, e in enumerate(events)]
    scores = np.zeros((6, 1))
    assert prediction_values(codec, topic, "m", items, events, versions=np.zeros(6, np.int64), scores=scores,
                             losses=np.full(6, np.nan), probability=None, klass=None, now_ms=0.0) is None
    values = ModelRunner("m", lambda: make_learner("scinol2", "logistic")).process_encoded(items, codec, topic)
    assert [int.from_bytes(v[1:5], "big") for v in values] == [sid] * 6
    decoded = [codec.decode(v) for v in values]
    assert [d["event_id"] for d in decoded] == [e["id"] for e in events]
    assert all(d.get("source_topic") is None for d in decoded)


def test_a_batch_of_columnar_events_pickles_as_its_columns_and_comes_back_the_same():
    """How a model's batch crosses Beam's steps (pickled): an EventRows is
    its columns (pickled once, without the Python values cached per
    event) and arrays of row numbers and offsets; it comes back with the
    same (Position, event) pairs and source, and so does a slice."""
    import pickle

    from pipelines.records.event_rows import EventRows

    records = random_events(np.random.default_rng(2), 30, "sparse", None, "logistic")
    cols = columnar(records, "logistic", None)[0].cols
    rows = np.arange(0, 30, 2)
    batch = EventRows(cols, rows, 50 + 2 * rows, [None if i % 4 else b"k%d" % i for i in rows.tolist()], ("ev", 3))
    assert [(p, dict(e)) for p, e in batch] == [(Position("ev", 3, 50 + 2 * i, None if i % 4 else b"k%d" % i),
                                                 dict(records[i])) for i in rows.tolist()]
    cols.fields()  # cached Python values: one object per event, not to be pickled
    for part in (batch, batch[3:9]):
        data = pickle.dumps(part, pickle.HIGHEST_PROTOCOL)
        back = pickle.loads(data)
        assert type(back) is EventRows and back.source == ("ev", 3)
        assert [(p, dict(e)) for p, e in back] == [(p, dict(e)) for p, e in part]
        assert b"ColumnarEvent" not in data and b"Position" not in data and b"_fields" not in data


@pytest.mark.parametrize("kind", ["dense", "sparse", "named", "dense with a dead letter", "dense widths differ"])
def test_pickled_columns_are_narrowed_for_the_wire_and_come_back_bit_for_bit(kind):
    """Positions pickled as int32 and dense rows' column numbers as their
    width: the columns come back with the same dtypes and bits, and a dense
    batch pickles in well under the bytes of its columns."""
    import pickle

    rng = np.random.default_rng(5)
    records = random_events(rng, 200, kind.split()[0], None, "logistic")
    values = [CODEC.encode("scinol.Event", e) for e in records]
    if kind == "dense with a dead letter":
        values[7] = b"not an event"
    if kind == "dense widths differ":
        values[3] = CODEC.encode("scinol.Event", {**records[3], "features": {"values": [1.0, 2.0]}})
    cols = EventDecoder(CODEC, "logistic", None).decode(values)
    back = pickle.loads(pickle.dumps(cols, pickle.HIGHEST_PROTOCOL))
    for name, value in vars(cols).items():
        got = vars(back)[name]
        if isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and got.tobytes() == value.tobytes(), name
        else:
            assert got == value, name
    if kind == "dense":  # 5 features an event: 40 of its 8-byte column numbers and positions dropped or halved
        as_they_are = len(pickle.dumps(vars(cols), pickle.HIGHEST_PROTOCOL))
        assert len(pickle.dumps(cols, pickle.HIGHEST_PROTOCOL)) < 0.8 * as_they_are


@pytest.mark.parametrize("loss,n_classes", LOSSES)
def test_labels_that_came_first_keep_the_columns_and_learn_as_records_do(loss, n_classes, monkeypatch):
    """Events whose labels came on the labels topic before them: as rows of
    the columns (never decoded again) they give the same predictions and the
    same model as the same events as plain records."""
    from pipelines.records.event_columns import EventColumns
    from pipelines.records.event_rows import LabelledEvent
    from pipelines.records.labels import PendingStore

    rng = np.random.default_rng(11)
    records = [{**r, "label": None} for r in random_events(rng, 200, "dense", n_classes, loss)]
    truth = random_events(np.random.default_rng(11), 200, "dense", n_classes, loss)  # the same draws: labels
    settings = LabelSettings("labels", math.inf, 10_000)
    make = lambda: make_learner("scinol2", loss, n_classes=n_classes)  # noqa: E731
    runners, outputs = [], []
    for events in (records, columnar(records, loss, n_classes)):
        runner = ModelRunner("m", make, labels=settings)
        for k in range(0, 200, 2):  # every other event's label comes first
            label = truth[k]["label"] if truth[k]["label"] is not None else 1.0
            runner.pending.add_label(records[k]["id"], 0, label, float("nan"), None)
        items = [(Position("events", 0, i), e) for i, e in enumerate(events)]
        if events is not records:
            monkeypatch.setattr(EventColumns, "record", lambda *a: pytest.fail("features decoded again"))
            probe = PendingStore(math.inf, 10)
            probe.add_label(records[0]["id"], 0, 1.0, float("nan"), None)
            assert type(probe.with_early_label(events[0])) is LabelledEvent
        outputs.append([CODEC.decode(v) for v in runner.process_encoded(items, CODEC, TOPIC)])
        runners.append(runner)
    for want, got in zip(*outputs, strict=True):
        assert {**want, "latency_ms": 0} == {**got, "latency_ms": 0}
    assert sum(p["label"] is not None for p in outputs[1]) == 100
    a, b = (r.learner.state.arrays for r in runners)
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("loss,n_classes", LOSSES)
def test_event_rows_with_late_labels_give_what_records_give(loss, n_classes):
    """Exact mode's arrays path with a labels topic (EventRows batches, their
    predictions and the labelled ones encoded in one call each) against the
    record path, fed the same events and labels: labels that come first
    (with and without a weight), one too late for its event, one for no
    event, one twice, and the rest one batch after their events. The same
    bytes (latency aside: each runner reads the clock), dead letters, events
    left waiting and model."""
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.records.event_rows import EventRows

    rng = np.random.default_rng(7)
    truth = random_events(rng, 256, "sparse", n_classes, loss)
    truth[2]["timestamp"] -= 10**8  # long before the others: its label, too late for it, moves no clock past them
    records = [{**r, "label": None} if i % 3 else r for i, r in enumerate(truth)]
    values = [CODEC.encode("scinol.Event", r) for r in records]
    messages = [KafkaMessage("events", 1, 500 + i, 0, None if i % 5 else b"k%d" % i, v) for i, v in enumerate(values)]

    def label(i: int, offset: int, late_ms: int = 1000, weight=None):
        value = truth[i]["label"] if truth[i]["label"] is not None else (1.0 if n_classes is None else 0.0)
        return (KafkaMessage("labels", 0, offset, 0, None, b""),
                {"event_id": truth[i]["id"], "model": "m", "label": value,
                 "timestamp": truth[i]["timestamp"] + late_ms, "weight": weight})

    first = [label(i, i, weight=None if i % 2 else 2.5) for i in range(1, 60, 3)]
    first.append(label(2, 99, late_ms=10**7))  # more than the TTL after its event
    first.append((KafkaMessage("labels", 0, 100, 0, None, b""),
                  {"event_id": "nobody", "model": "m", "label": 1.0, "timestamp": 0, "weight": None}))
    settings = LabelSettings("labels", 3.6e6, 10_000)
    make = lambda: make_learner("scinol2", loss, n_classes=n_classes)  # noqa: E731
    plain, fast = ModelRunner("m", make, labels=settings), ModelRunner("m", make, labels=settings)
    outputs = {"plain": [], "fast": []}

    def feed_labels(items):
        got, keys, answering, dead = plain.process_labels(items)
        outputs["plain"] += [CODEC.encode("scinol.Prediction", r, TOPIC) for r in got] + keys + dead_reasons(dead)
        got, keys, answering, dead = fast.process_labels_encoded(items, CODEC, TOPIC)
        outputs["fast"] += got + keys + dead_reasons(dead)

    feed_labels(first)
    offset = 200
    for lo in range(0, 256, 64):
        part = messages[lo:lo + 64]
        cols = EventDecoder(CODEC, loss, n_classes).decode([m.value for m in part])
        (_, rows), = EventRows.split(cols, np.ones(len(part), bool), part)
        outputs["plain"] += [CODEC.encode("scinol.Prediction", r, TOPIC) for r in plain.process(list(rows))]
        outputs["fast"] += fast.process_encoded(rows, CODEC, TOPIC)
        later = [label(i, offset + k) for k, i in enumerate(range(lo, lo + 64)) if i % 3 and (i % 3 != 1 or i >= 60)]
        later.append(label(lo + 1, offset + 64))  # labelled twice (or once, after it came first)
        offset += 65
        feed_labels(later)
    assert len(outputs["fast"]) == len(outputs["plain"])
    for want, got in zip(outputs["plain"], outputs["fast"]):
        if isinstance(want, bytes) and want[:1] == b"\0":  # a framed Prediction
            want, got = CODEC.decode(want), CODEC.decode(got)
            assert {**want, "latency_ms": 0} == {**got, "latency_ms": 0}
        else:
            assert want == got
    assert fast.labels_learned == plain.labels_learned > 140
    reasons = [x for x in outputs["fast"] if isinstance(x, str)]
    assert {"label_duplicate", "label_expired"} <= set(reasons)
    assert sorted(fast.pending.events) == sorted(plain.pending.events)
    a, b = plain.pending.to_arrays(), fast.pending.to_arrays()
    assert all(np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f") for k in a if k != "pending_event_latency")
    a, b = (r.learner.state.arrays for r in (plain, fast))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert fast.metrics.as_dict() == plain.metrics.as_dict()


def dead_reasons(dead: list[dict]) -> list[str]:
    return [d["reason"] for d in dead]


def test_labelled_predictions_of_events_from_several_topics_or_none_take_the_per_record_path():
    """Held events read from two topics, or from nowhere known: the one
    compiled call cannot write them (one source topic per call), so they are
    encoded record by record, the same bytes as the records give."""
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.records.labels import Source, Waiting

    settings = LabelSettings("labels", math.inf, 100)
    make = lambda: make_learner("scinol2", "logistic")  # noqa: E731
    runners = [ModelRunner("m", make, labels=settings) for _ in range(2)]
    sources = [Source("a", 0, 1), Source("b", 1, 2, b"key"), None]
    for runner in runners:
        for k, source in enumerate(sources):
            runner.pending.add_event(f"e{k}", Waiting(10 + k, k, 1.5, np.array([0.25 * k]), np.array([k, 7]),
                                                      np.array([1.0, -2.0]), 1.0, source))
    labels = [(KafkaMessage("labels", 0, k, 0, None, b""), {"event_id": f"e{k}", "model": "m", "label": 1.0,
                                                            "timestamp": 20 + k, "weight": None}) for k in range(3)]
    got, keys, answering, dead = runners[0].process_labels_encoded(labels, CODEC, TOPIC)
    records, keys_too, _, _ = runners[1].process_labels(labels)
    assert got == [CODEC.encode("scinol.Prediction", r, TOPIC) for r in records] and len(got) == 3
    assert keys == keys_too == [b"e0", b"key", b"e2"] and not dead
    assert [CODEC.decode(v)["source_topic"] for v in got] == ["a", "b", None]
