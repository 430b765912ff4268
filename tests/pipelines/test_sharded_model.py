"""Sharded mode's protocol without Beam or Kafka: Router → K ShardRunners →
Combiner, with the feedback loop closed in memory. S = 0 must equal one
learner; S > 0 must still learn; lost and repeated feedback must neither
corrupt nor stall the shards."""

import numpy as np
import pytest

from learners import make_learner
from learners.datasets import toy_examples
from pipelines.records.feedback import feedback_parts
from pipelines.steps import Position
from tests.support.parts import route
from tests.support.sharded_loop import Loop, merged_arrays, stream


@pytest.mark.parametrize("learner_name", ["scinol2", "kt", "nag"])
@pytest.mark.parametrize("k", [1, 4])
def test_zero_staleness_equals_one_learner(learner_name, k):
    X, y, items = stream(400)
    exact = make_learner(learner_name, "logistic")
    want = exact.learn(X, y)
    loop = Loop(make_learner(learner_name, "logistic"), k, staleness=0)
    loop.run(items)
    got = np.array([p["score"] for p in loop.predictions])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    merged = merged_arrays(loop, exact.state.n_coords)
    for name, arr in exact.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[name], arr, rtol=1e-9, atol=1e-12, err_msg=name)
    assert loop.combiner.scalars == pytest.approx(exact.state.scalars, rel=1e-12)
    assert [p["event_id"] for p in loop.predictions] == [e["id"] for _, e in items]


@pytest.mark.parametrize("k", [1, 3])
def test_zero_staleness_with_crosses_of_decoded_named_events_equals_one_learner(k):
    """Named events decoded into arrays (EventRows), crossed by the Router
    from the messages' bytes: at S = 0 the shards predict what one learner
    with the same crosses predicts."""
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.records.event_decoder import EventDecoder
    from pipelines.records.event_rows import EventRows
    from schemas.codec import Codec

    X, y = toy_examples(300, 1)
    rows = [{**{f"a^x{j}": v for j, v in enumerate(x[:3])}, **{f"b^y{j}": v for j, v in enumerate(x[3:6])}, "c": x[6]}
            for x in X.tolist()]
    events = [{"id": f"e{i}", "timestamp": i, "model": "m", "features": {"values": r}, "label": float(label),
               "weight": None} for i, (r, label) in enumerate(zip(rows, y))]
    codec = Codec()
    messages = [KafkaMessage("events", 0, i, 0, None, codec.encode("scinol.Event", e, "events"))
                for i, e in enumerate(events)]
    exact = make_learner("scinol2", "logistic", hash_bits=12, interactions=["ab", "aa"])
    want = exact.learn(rows, y)
    cols = EventDecoder(codec, "logistic", hash_bits=12).decode([m.value for m in messages])
    (_, batch), = EventRows.split(cols, np.ones(len(messages), bool), messages)
    loop = Loop(make_learner("scinol2", "logistic", hash_bits=12, interactions=["ab", "aa"]), k, staleness=0)
    assert batch.learner_rows(loop.router) is not None  # the compiled read, not the per-event path
    loop.run(batch, batch=50)
    got = np.array([p["score"] for p in loop.predictions])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_staleness_lets_shards_run_ahead_and_still_learn():
    X, y, items = stream(2000, unlabelled_every=10**9)
    losses = {}
    for s in (0, 8, 64):
        loop = Loop(make_learner("scinol2", "logistic"), 3, staleness=s)
        loop.run(items, batch=128)
        assert len(loop.predictions) == len(items)
        losses[s] = np.mean([p["loss"] for p in loop.predictions if p["loss"] is not None])
        assert all(len(sh.in_flight) == 0 for sh in loop.shards)
    assert losses[64] < np.log(2) and losses[8] < np.log(2)
    assert losses[0] != losses[64]  # staleness changes what is learned


def test_repeated_feedback_is_ignored():
    X, y, items = stream(300)
    clean = Loop(make_learner("scinol2", "logistic"), 4, staleness=0)
    clean.run(items)
    noisy = Loop(make_learner("scinol2", "logistic"), 4, staleness=0, repeat={5, 6, 100, 299})
    noisy.run(items)
    assert [p["score"] for p in noisy.predictions] == [p["score"] for p in clean.predictions]
    assert sum(s.duplicates for s in noisy.shards) == 4 * 4
    for a, b in zip(noisy.shards, clean.shards):
        for name in a.shard.state.arrays:
            np.testing.assert_array_equal(a.shard.state.arrays[name], b.shard.state.arrays[name])


def test_partials_in_any_order_and_sent_twice_give_the_same_bits():
    """The Combiner adds the K partial sums in shard order, whatever order
    they arrive in, and a shard's partial that comes twice (a replay)
    counts once: it neither stands in for a missing shard nor adds twice."""
    _, _, items = stream(12)
    loop = Loop(make_learner("scinol2", "logistic"), 3, staleness=64)  # partials of all 12 without feedback
    per_shard, _ = route(loop.router, items)
    blocks = [p for shard, slices in zip(loop.shards, per_shard) for p in shard.add(slices)]
    assert [(b.shard, b.first, b.sums.shape[0]) for b in blocks] == [(s, 1, 12) for s in range(3)]  # one call each
    partials = [p._replace(first=p.first + i, sums=p.sums[i:i + 1], heads=p.heads and p.heads[i:i + 1])
                for p in blocks for i in range(p.sums.shape[0])]  # one event each, to shuffle
    assert len(partials) == 3 * 12

    def scores(order):
        fresh = Loop(make_learner("scinol2", "logistic"), 3, staleness=64)
        out = [p for batch in order for run in fresh.combiner.add(batch) for p in run.predictions]
        assert [p["event_id"] for p in out] == [e["id"] for _, e in items]
        return [p["score"] for p in out]

    in_order = scores([partials])
    shuffled = [partials[i] for i in np.random.default_rng(1).permutation(len(partials))]
    twice = [shuffled[:20] + shuffled[5:15], shuffled[20:] + shuffled[:20]]  # repeats before and after the rest
    assert scores([[p] for p in shuffled]) == in_order  # bit for bit
    assert scores(twice) == in_order


def test_lost_feedback_is_reported_and_skipped_without_stalling():
    X, y, items = stream(300, unlabelled_every=10**9)
    loop = Loop(make_learner("scinol2", "logistic"), 4, staleness=3, lose={50})
    loop.run(items)
    # Every event is still predicted; each shard reports the one it lost.
    assert len(loop.predictions) == len(items)
    for shard in loop.shards:
        assert shard.missing == [(50, items[49][1]["id"])]
        assert shard.applied == len(items) and not shard.in_flight
        assert all(np.isfinite(a).all() for a in shard.shard.state.arrays.values())


def test_lost_feedback_at_zero_staleness_is_given_up_after_the_timeout():
    X, y, items = stream(20, unlabelled_every=10**9)
    loop = Loop(make_learner("scinol2", "logistic"), 2, staleness=0, lose={10})
    loop.run(items, end=False)
    assert all(s.in_flight for s in loop.shards)  # stalled: waiting for #10's feedback
    assert len(loop.predictions) == 10
    heartbeat = {"event_id": "", "model": "m", "run_id": "run", "seq": 9, "partition": -1, "offset": -1,
                 "g": [], "scalars": {}, "checkpoint": False}
    for s in loop.shards:
        s.feedback_timeout = 0.0  # as if the timeout has passed
        loop._combine(s.feedback(feedback_parts([heartbeat])))
        assert s.missing == [(10, items[9][1]["id"])]
    loop._deliver()
    while loop.feedback_queue:
        loop._deliver()
    assert len(loop.predictions) == len(items)  # the shards went on


@pytest.mark.parametrize("learner_name", ["scinol2", "kt", "implicit"])
def test_zero_staleness_with_event_weights_equals_one_weighted_learner(learner_name):
    """The weight enters at the combiner (it scales g, or the step size, in
    ``combine``): the shards apply the feedback as they get it."""
    loss = "squared" if learner_name == "implicit" else "logistic"
    X, y, items = stream(300)
    if loss == "squared":
        y = np.where(np.isnan(y), np.nan, X[:, 0] - 0.5 * X[:, 1])
        items = [(pos, {**e, "label": None if np.isnan(v) else float(v)}) for (pos, e), v in zip(items, y)]
    w = np.random.default_rng(3).choice([1.0, 0.25, 3.0, 40.0], size=len(items))
    items = [(pos, {**e, "weight": None if h == 1.0 else h}) for (pos, e), h in zip(items, w)]
    exact = make_learner(learner_name, loss)
    want = exact.learn(X, y, w)
    loop = Loop(make_learner(learner_name, loss), 3, staleness=0)
    loop.run(items)
    np.testing.assert_allclose([p["score"] for p in loop.predictions], want, rtol=1e-9, atol=1e-12)
    merged = merged_arrays(loop, exact.state.n_coords)
    for name, arr in exact.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[name], arr, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("staleness", [0, 3])
def test_a_loop_kept_as_bytes_mid_stream_carries_on_as_the_uninterrupted_one(staleness):
    """What the sharded steps keep in Beam state (pipelines.steps.pickle_sharing):
    Router, ShardRunners and Combiner pickled with events in flight and
    feedback undelivered, then read back beside a learner made afresh (its
    compiled algorithm and hasher are not pickled), carry on bit for bit
    like the loop that was never stopped."""
    from pipelines.records.feedback import FeedbackColumns
    from pipelines.sharded import state_classes
    from pipelines.steps import pickle_sharing, unpickle_sharing

    _, _, items = stream(300)
    whole = Loop(make_learner("scinol2", "logistic"), 3, staleness)
    whole.run(items)

    first = make_learner("scinol2", "logistic")
    before = Loop(first, 3, staleness)
    for lo in range(0, 150, 16):  # as Loop.run, but stopped with feedback still queued
        per_shard, _ = route(before.router, items[lo: lo + 16])
        for shard, slices in zip(before.shards, per_shard):
            before._combine(shard.add(slices))
    assert before.feedback_queue and any(s.in_flight for s in before.shards)
    data = pickle_sharing(before, {"algorithm": first.algorithm, "hasher": first.hasher})
    again = make_learner("scinol2", "logistic")
    after = unpickle_sharing(data, {"algorithm": again.algorithm, "hasher": again.hasher},
                             (*state_classes(), Loop, FeedbackColumns))
    assert after.shards[0].algorithm is again.algorithm and after.router.hasher is again.hasher
    for shard in after.shards:
        shard.restart_clocks()
    after.run(items[160:])

    assert [p["event_id"] for p in after.predictions] == [p["event_id"] for p in whole.predictions]
    assert [p["score"] for p in after.predictions] == [p["score"] for p in whole.predictions]
    for a, b in zip(after.shards, whole.shards):
        for name, arr in b.shard.state.arrays.items():
            np.testing.assert_array_equal(a.shard.state.arrays[name], arr)


def test_state_bytes_that_name_any_other_global_are_refused():
    """Sharded state is read back by a restricted unpickler: bytes crafted to
    call something (here os.system) are refused before anything runs."""
    import os
    import pickle as stdlib_pickle

    from pipelines.sharded import state_classes
    from pipelines.steps import unpickle_sharing

    class Evil:
        def __reduce__(self):
            return os.system, ("echo pwned",)

    with pytest.raises(stdlib_pickle.UnpicklingError, match="posix.system|os.system"):
        unpickle_sharing(stdlib_pickle.dumps(Evil()), {}, state_classes())


@pytest.mark.parametrize("learner_name, loss", [("scinol2", "logistic"), ("scinol2", "softmax"), ("ogd", "squared")])
def test_the_combiner_encodes_a_batch_of_predictions_as_the_codec_does(learner_name, loss):
    """The combine step's Prediction values come from one compiled call per
    batch: byte for byte what the codec writes for each record."""
    from schemas.codec import Codec

    X, y, items = stream(60)
    if loss == "softmax":
        items = [(pos, {**e, "label": None if e["label"] is None else float(i % 3)})
                 for i, (pos, e) in enumerate(items)]
    learner = make_learner(learner_name, loss, n_classes=3 if loss == "softmax" else None)
    loop, codec, made = Loop(learner, 3, staleness=4), Codec(), []
    add = loop.combiner.add
    loop.combiner.add = lambda blocks: [made.append(c) or c for c in add(blocks, encode_for=(codec, "preds"))]
    loop.run(items)
    records = [p for run in made for p in run.predictions]
    assert len(records) == len(items) and all(run.values is not None for run in made)
    assert any(p["label"] is None for p in records) and any(p["label"] is not None for p in records)
    assert [v for run in made for v in run.values] == [codec.encode("scinol.Prediction", p, "preds") for p in records]


@pytest.mark.parametrize("interactions", [None, ["  "]])
@pytest.mark.parametrize("staleness", [0, 4])
def test_events_as_arrays_route_shard_and_combine_as_the_pairs_do(staleness, interactions):
    """The decode step hands sharded mode a batch's events as arrays
    (EventRows): the Router, shard 0 and the Combiner read those, never a
    pair of objects per event, and must give the same bits: scores,
    Prediction values, keys, Feedback and learner state, with message
    keys, weights, unlabelled events and a restart's already-learned
    prefix among them; with crosses of the default namespace too."""
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.records.event_decoder import EventDecoder
    from pipelines.records.event_rows import EventRows
    from schemas.codec import Codec

    codec, learner = Codec(), make_learner("scinol2", "logistic", interactions=interactions)
    _, _, items = stream(90)
    events = [{**e, "weight": 0.5 if i % 5 == 0 else None} for i, (_, e) in enumerate(items)]
    messages = [KafkaMessage("events", 0, 100 + i, 0, None if i % 3 else f"k{i}".encode(),
                             codec.encode("scinol.Event", e, "events")) for i, e in enumerate(events)]
    cols = EventDecoder(codec, "logistic", hash_bits=learner.hasher.bits).decode([m.value for m in messages])
    (model, rows), = EventRows.split(cols, np.ones(len(messages), bool), messages)
    pairs = list(rows)
    assert model == "m" and [p for p, _ in pairs] == [Position("events", 0, m.offset, m.key) for m in messages]

    def run(batches):
        loop, made = Loop(learner, 3, staleness, offsets={("events", 0): 110}), []  # 100..109 learned before a restart
        add, take, kinds = loop.combiner.add, loop.combiner.table.take, set()
        loop.combiner.add = lambda blocks: [made.append(r) or r for r in add(blocks, encode_for=(codec, "preds"))]
        loop.combiner.table.take = lambda n: [kinds.update(map(type, out[1])) or out for out in [take(n)]][0]
        skipped = []
        for batch in batches:
            per_shard, old = route(loop.router, batch, origin=100)
            skipped += old
            for shard, slices in zip(loop.shards, per_shard):
                loop._combine(shard.add(slices))
            loop._deliver()
        while loop.feedback_queue:
            loop._deliver()
        loop.end()
        return loop, made, skipped, kinds

    assert rows.learner_rows(learner) is not None  # the arrays' own path is the one under test
    a, made_a, skipped_a, kinds = run([rows[:30], rows[30:]])
    b, made_b, skipped_b, _ = run([pairs[:30], pairs[30:]])
    assert kinds == {EventRows}  # what reached the Combiner
    assert skipped_a == skipped_b == [p for p, _ in pairs[:10]]
    assert len(a.predictions) == 80 and [p["score"] for p in a.predictions] == [p["score"] for p in b.predictions]
    assert [v for r in made_a for v in r.values] == [codec.encode("scinol.Prediction", p, "preds")
                                                     for r in made_a for p in r.predictions]

    def decoded(made):  # the latency is the clock's
        return [{**codec.decode(v), "latency_ms": None} for r in made for v in r.values]

    assert decoded(made_a) == decoded(made_b)
    assert [k for r in made_a for k in r.keys] == [k for r in made_b for k in r.keys]
    for x, y in zip(made_a, made_b):
        for field in ("event_ids", "seqs", "partitions", "offsets", "learned", "g", "scalars"):
            np.testing.assert_array_equal(getattr(x.feedback, field), getattr(y.feedback, field))
    assert a.router.offsets == b.router.offsets == a.shards[0].offsets == b.shards[0].offsets == {("events", 0): 190}
    for x, y in zip(a.shards, b.shards):
        for name in x.shard.state.arrays:
            np.testing.assert_array_equal(x.shard.state.arrays[name], y.shard.state.arrays[name])


@pytest.mark.parametrize("n_shards", [1, 2, 3, 5])
@pytest.mark.parametrize("bias", [True, False])
def test_a_batch_is_split_into_each_shards_entries_row_by_row_in_order(n_shards, bias):
    """Router._split: shard s gets, for every row, the entries whose
    coordinate it owns, in the row's order, the constant feature (coordinate
    0, value 1) first where its shard is s; rows that are empty stay rows."""
    from learners.sharding import shards_of
    from pipelines.sharded.router import Router

    rng = np.random.default_rng(n_shards + 10 * bias)
    lengths = rng.integers(0, 9, size=40)
    lengths[[3, 17]] = 0
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    coords = rng.integers(1, 1 << 20, size=indptr[-1]).astype(np.int64)
    values = rng.normal(size=indptr[-1])
    router = Router(n_shards, hasher=None, bias=bias, seq=7)
    per_shard = [[] for _ in range(n_shards)]
    ids = [f"e{i}" for i in range(40)]
    router._split(per_shard, ids, indptr, coords, values, np.ones(40, bool), ["heads"])
    assert router.seq == 47
    for s, (block,) in enumerate(per_shard):
        assert block.first == 8 and block.event_ids == ids and (block.heads == ["heads"]) == (s == 0)
        for i in range(40):
            row_coords = [0] * bias + coords[indptr[i]:indptr[i + 1]].tolist()
            row_values = [1.0] * bias + values[indptr[i]:indptr[i + 1]].tolist()
            mine = [j for j, c in enumerate(row_coords) if shards_of(np.array([c]), n_shards)[0] == s]
            lo, hi = block.indptr[i], block.indptr[i + 1]
            assert block.coords[lo:hi].tolist() == [row_coords[j] for j in mine]
            assert block.values[lo:hi].tolist() == [row_values[j] for j in mine]


def test_the_feedback_reader_lingers_only_after_a_busy_streams_feedback():
    """After feedback of many events the reader polls on for the next
    (linger_seconds); after a few events' feedback it does not, so a quiet
    stream's next events are not held back."""
    from pipelines.kafka.consumer import KafkaMessage
    from pipelines.sharded.feedback_watch import FeedbackWatch

    rule = FeedbackWatch("run", heartbeat_seconds=1.0, linger_seconds=0.02, linger_min_bytes=8192)
    message = lambda size: KafkaMessage("fb", 0, 0, 0, None, b"x" * size)  # noqa: E731
    assert rule.linger_after([message(20_000)]) == 0.02
    assert rule.linger_after([message(5000), message(5000)]) == 0.02
    assert rule.linger_after([message(300)]) == 0.0
    assert rule.linger_after([KafkaMessage("fb", 0, 0, 0, None, None)]) == 0.0
