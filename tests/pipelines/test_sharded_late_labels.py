"""Delayed labels in sharded mode's protocol, without Beam or Kafka: the
Router joins labels to the events awaiting them and routes each such event
again, labelled, when its label comes. At S = 0 the shards then learn the
stream reordered to label-arrival order, as one learner (and exact mode)
does, and the progressive loss is that of the prediction made when the
event arrived."""

import math

import numpy as np
import pytest

from learners import make_learner
from learners.losses import losses_of
from pipelines.kafka.consumer import KafkaMessage
from pipelines.records.feedback import feedback_parts
from pipelines.records.labels import PendingStore
from pipelines.sharded.combiner import Combiner
from pipelines.sharded.router import Router
from pipelines.sharded.shard import ShardRunner
from schemas.reasons import LABEL_DUPLICATE, LABEL_EXPIRED, LABEL_UNKNOWN_EVENT
from learners.datasets import toy_examples
from pipelines.records.events import dense_events
from pipelines.steps import Position
from tests.support.parts import route, route_labels
from tests.support.sharded_loop import merged_arrays

T0 = 1_700_000_000_000


def stream(n, seed=0):
    """(X, y, [(Position, event)]) with every label on its event."""
    X, y = toy_examples(n, seed)
    events = dense_events(X, y, "e-", model="m", start_ms=T0)
    return X, y, [(Position("events", 0, i), e) for i, e in enumerate(events)]


class LateLoop:
    """Router → K ShardRunners → Combiner at staleness 0, feedback delivered
    in memory; the Router keeps the events awaiting labels."""

    def __init__(self, learner, k, ttl_ms=1e12, max_pending=1_000_000, staleness=0):
        algo = learner.algorithm
        scalars = algo.init_state(0, learner.n_outputs).scalars
        self.router = Router(k, learner.hasher, learner.bias, pending=PendingStore(ttl_ms, max_pending))
        self.shards = [ShardRunner(algo, learner.n_outputs, s, staleness, scalars) for s in range(k)]
        self.combiner = Combiner(algo, learner.loss, learner.loss_param, learner.n_outputs, k, "m", "run",
                                 scalars).hold_predictions()
        self.predictions, self.dead, self.queue = [], [], []

    def events(self, items):
        self._run(route(self.router, items)[0])

    def labels(self, items):
        per_shard, dead, _ = route_labels(self.router, items)
        self.dead += dead
        self._run(per_shard)

    def _run(self, per_shard):
        for shard, slices in zip(self.shards, per_shard):
            self._combine(shard.add(slices))
        while self.queue:
            records, self.queue = self.queue, []
            for shard in self.shards:
                self._combine(shard.feedback(feedback_parts(records)))

    def _combine(self, partials):
        for run in self.combiner.add(partials):
            self.predictions += run.predictions
            self.queue.append(run.feedback)


def label_messages(rows, start_offset=0):
    """(message, Label record) pairs for (event id, label, timestamp ms)."""
    return [(KafkaMessage("labels", 0, start_offset + i, ts, eid.encode(), eid.encode()),
             {"event_id": eid, "model": "m", "label": float(label), "weight": None, "timestamp": ts})
            for i, (eid, label, ts) in enumerate(rows)]


@pytest.mark.parametrize("k", [1, 3])
def test_random_delays_learn_the_stream_reordered_to_label_arrival(k):
    n = 3000
    X, y, items = stream(n)
    unlabelled = [(pos, {**e, "label": None}) for pos, e in items]
    ids = [e["id"] for _, e in items]
    due = np.arange(n) + np.random.default_rng(3).integers(0, 10_001, size=n)  # label i after event due[i]
    arrival = np.argsort(due, kind="stable")
    labels = label_messages([(ids[i], y[i], T0 + int(due[i])) for i in arrival])
    loop = LateLoop(make_learner("scinol2", "logistic"), k)
    done = 0
    for t in range(n):  # event t, then the labels due after it, in batches of whatever came
        loop.events(unlabelled[t:t + 1])
        upto = int(np.searchsorted(due[arrival], t, side="right"))
        if upto > done:
            loop.labels(labels[done:upto])
            done = upto
    loop.labels(labels[done:])

    order = [p["event_id"] for p in loop.predictions if p["label"] is not None]
    assert order == [ids[i] for i in arrival]  # learned in label-arrival order, each once
    exact = make_learner("scinol2", "logistic")
    want = exact.learn(X[arrival], y[arrival])
    merged = merged_arrays(loop, exact.state.n_coords)
    for name, arr in exact.state.arrays.items():
        if k == 1:  # one shard adds its sums as one learner does: bit for bit
            np.testing.assert_array_equal(merged.arrays[name], arr, err_msg=name)
        else:  # K partial sums added in another order
            np.testing.assert_allclose(merged.arrays[name], arr, rtol=1e-9, atol=1e-12, err_msg=name)
    if k == 1:
        assert loop.combiner.scalars == exact.state.scalars
    assert loop.combiner.scalars == pytest.approx(exact.state.scalars, rel=1e-12)
    assert not loop.router.pending.events and not loop.combiner.predicted  # nothing left waiting

    # Each event's prediction at arrival, and its loss counted when its label came.
    arrived = {p["event_id"]: p for p in loop.predictions if p["label"] is None}
    for p in loop.predictions:
        if p["label"] is not None:
            first = arrived[p["event_id"]]
            assert p["score"] == first["score"] and p["model_version"] == first["model_version"]
            assert p["loss"] == pytest.approx(losses_of("logistic", np.array([p["label"]]),
                                                        np.array([[p["score"]]]))[0], rel=1e-12)
    assert loop.combiner.metrics.labelled == n
    assert not math.isnan(loop.combiner.metrics.mean_loss) and loop.combiner.metrics.mean_loss < math.log(2)
    # versions: the model had learned exactly the labels that came before each event
    assert [arrived[ids[t]]["model_version"] for t in (0, n - 1)] == [0, int(np.sum(due[:-1] < n - 1))]


def test_a_label_before_its_event_is_learned_when_the_event_comes():
    X, y, items = stream(20)
    loop = LateLoop(make_learner("scinol2", "logistic"), 2)
    loop.labels(label_messages([(items[0][1]["id"], y[0], T0)]))
    loop.events([(pos, {**e, "label": None}) for pos, e in items])
    assert loop.predictions[0]["label"] == y[0]  # learned inline, one record
    assert len(loop.predictions) == 20 and len(loop.router.pending.events) == 19


def test_unknown_expired_and_duplicate_labels_are_dead_letters():
    X, y, items = stream(400)
    events = [(pos, {**e, "label": None, "timestamp": T0 + 1000 * i}) for i, (pos, e) in enumerate(items)]
    loop = LateLoop(make_learner("scinol2", "logistic"), 2, ttl_ms=60_000)
    loop.events(events)
    ids = [e["id"] for _, e in events]
    loop.labels(label_messages([(ids[390], y[390], T0 + 395_000),  # in time: learned
                                (ids[390], y[390], T0 + 396_000),  # again: a duplicate
                                (ids[5], y[5], T0 + 397_000),  # expired long ago (the TTL is 60 s)
                                ("no-such-event", 1.0, T0 + 398_000)]))  # waits for its event...
    loop.events([])
    assert {d["reason"] for d in loop.dead} == {LABEL_DUPLICATE, LABEL_EXPIRED}
    assert [p["event_id"] for p in loop.predictions if p["label"] is not None] == [ids[390]]
    more = [(pos._replace(offset=400 + i), {**e, "id": f"x{i}", "label": None, "timestamp": T0 + 500_000 + i})
            for i, (pos, e) in enumerate(items[:3])]
    loop.events(more)  # ...which the events topic moves past by more than the TTL
    _, dead, _ = route_labels(loop.router, [])
    assert [d["reason"] for d in dead] == [LABEL_UNKNOWN_EVENT]
    assert all(d["topic"] == "labels" for d in loop.dead + dead)
    # The events the Router dropped are forgotten by the Combiner with the next late event.
    loop.labels(label_messages([(f"x{i}", 1.0, T0 + 500_010) for i in range(3)], start_offset=10))
    assert set(loop.combiner.predicted) <= set(loop.router.pending.events)


def test_with_staleness_every_event_is_still_learned_once_in_label_arrival_order():
    n = 1000
    X, y, items = stream(n)
    ids = [e["id"] for _, e in items]
    due = np.arange(n) + np.random.default_rng(4).integers(0, 500, size=n)
    arrival = np.argsort(due, kind="stable")
    labels = label_messages([(ids[i], y[i], T0 + int(due[i])) for i in arrival])
    loop = LateLoop(make_learner("scinol2", "logistic"), 3, staleness=16)
    done = 0
    for lo in range(0, n, 50):
        loop.events([(pos, {**e, "label": None}) for pos, e in items[lo:lo + 50]])
        upto = int(np.searchsorted(due[arrival], lo + 49, side="right"))
        loop.labels(labels[done:upto])
        done = upto
    loop.labels(labels[done:])
    for shard in loop.shards:  # the end of the input: what is held is applied
        shard.give_up_all()
    assert [p["event_id"] for p in loop.predictions if p["label"] is not None] == [ids[i] for i in arrival]
    assert all(not sh.in_flight and not sh.missing for sh in loop.shards)
    assert loop.combiner.metrics.mean_loss < math.log(2)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _decoded_batches(events: list[dict], size: int):
    """The events as Avro messages on the events topic, decoded a batch of
    ``size`` at a time: (EventRows, the same as (Position, record) pairs)."""
    from pipelines.records.event_decoder import EventDecoder
    from pipelines.records.event_rows import EventRows
    from schemas.codec import Codec

    codec = Codec()
    messages = [KafkaMessage("events", 0, i, T0, None, codec.encode("scinol.Event", e, "events"))
                for i, e in enumerate(events)]
    decoder = EventDecoder(codec, "logistic")
    for lo in range(0, len(messages), size):
        part = messages[lo:lo + size]
        (_, rows), = EventRows.split(decoder.decode([m.value for m in part]), np.ones(len(part), bool), part)
        yield rows, [(Position("events", 0, m.offset), codec.decode(m.value)) for m in part]


def test_decoded_event_rows_are_held_and_routed_as_their_records_are(monkeypatch):
    """A decoded batch (EventRows) keeps its unlabelled events as columns
    (no record per event); routed so, a stream with labels before, right
    after and long after their events, some of them twice, gives what the
    same batches as records give: the predictions, the dead letters, what
    waits and the offsets taken in."""
    n, rng = 1200, np.random.default_rng(11)
    X, y, items = stream(n)
    events = [{**e, "label": e["label"] if i % 7 == 0 else None, "weight": 2.0 if i % 5 == 0 else None}
              for i, (_, e) in enumerate(items)]
    due = np.arange(n) + rng.integers(-60, 400, size=n)  # some labels come before their events
    arrival = [i for i in np.argsort(due, kind="stable").tolist() if events[i]["label"] is None]
    labels = label_messages([(events[i]["id"], y[i], T0 + max(int(due[i]), 0)) for i in arrival])
    labels += label_messages([(events[i]["id"], y[i], T0 + n) for i in arrival[:30]], start_offset=len(labels))
    loops = {"rows": LateLoop(make_learner("scinol2", "logistic"), 3, ttl_ms=10**9),
             "records": LateLoop(make_learner("scinol2", "logistic"), 3, ttl_ms=10**9)}
    held_as_records, hold = [], loops["rows"].router._hold
    monkeypatch.setattr(loops["rows"].router, "_hold", lambda pos, *a: (held_as_records.append(pos), hold(pos, *a)))
    done = 0
    for rows, records in _decoded_batches(events, 50):
        loops["rows"].events(rows)
        loops["records"].events(records)
        upto = sum(1 for _, r in labels[done:] if r["timestamp"] <= T0 + int(records[-1][0].offset)) + done
        for loop in loops.values():
            loop.labels(labels[done:upto])
        done = upto
        a, b = (loop.router.pending.to_arrays() for loop in loops.values())
        assert a.keys() == b.keys() and [k for k in a if not _same_bits(a[k], b[k])] == []
    for loop in loops.values():
        loop.labels(labels[done:])

    rows, records = loops["rows"], loops["records"]
    def timeless(predictions):  # latency_ms is the clock's
        return repr([{k: v for k, v in p.items() if k != "latency_ms"} for p in predictions])

    assert timeless(rows.predictions) == timeless(records.predictions)
    assert repr(rows.dead) == repr(records.dead) and rows.dead  # the second labels are duplicates
    assert rows.router.offsets == records.router.offsets
    assert sum(p["label"] is not None for p in rows.predictions) == n  # every event learned, once
    assert held_as_records == []
    records_of = {}
    for p in rows.predictions:
        records_of.setdefault(p["event_id"], []).append(p)
    early = [e["id"] for e in events if e["label"] is None and len(records_of[e["id"]]) == 1]
    assert len(early) > 50  # labels that came before their events, learned on arrival
