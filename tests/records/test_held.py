"""The events awaiting labels as columns (HeldEvents) against the plain
ordered dict of Waiting records they replace: the same events, in the same
order, with the same fields, whatever mix of batches, single events, lookups
and removals; compaction keeps the columns near the live rows and never
changes an event handed out before."""

from collections import OrderedDict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelines.records.held import HeldEvents, Rows, Source, Waiting

TOPICS = ["events", "other"]


def event(rng, k: int, width: int, crossed: bool, topic) -> Waiting:
    nnz = int(rng.integers(0, 4))
    return Waiting(int(rng.integers(10**6)), k, float(rng.normal()), rng.normal(size=width),
                   rng.integers(0, 1 << 20, nnz), rng.normal(size=nnz), float(rng.uniform(0.1, 2)),
                   None if topic is None else Source(topic, int(rng.integers(4)), k, None if k % 3 else b"key%d" % k),
                   rng.integers(0, 256, nnz).astype(np.uint8) if crossed else None)


def as_rows(events: list[Waiting]) -> Rows:
    indptr = np.concatenate([[0], np.cumsum([w.indices.shape[0] for w in events])]).astype(np.int64)
    return Rows(np.array([w.ts_ms for w in events], np.int64), np.array([w.version for w in events], np.int64),
                np.array([w.latency_ms for w in events]), np.array([w.weight for w in events]),
                np.array([w.scores for w in events]).reshape(len(events), -1), indptr,
                np.concatenate([w.indices for w in events]).astype(np.int64),
                np.concatenate([w.values for w in events]),
                None if events[0].namespaces is None else np.concatenate([w.namespaces for w in events]),
                None, None, None, None)


def same(a: Waiting, b: Waiting) -> bool:
    arrays = ("scores", "indices", "values", "namespaces")
    return all(getattr(a, f) == getattr(b, f) for f in Waiting._fields if f not in arrays) and all(
        (getattr(a, f) is None and getattr(b, f) is None) or np.array_equal(getattr(a, f), getattr(b, f))
        for f in arrays)


ops = st.lists(st.tuples(st.sampled_from(["batch", "set", "pop", "popitem", "take", "columns"]),
                         st.integers(0, 60)), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=ops, seed=st.integers(0, 10**6), width=st.integers(1, 3), crossed=st.booleans())
def test_held_events_hold_what_a_dict_of_waiting_holds(ops, seed, width, crossed):
    rng = np.random.default_rng(seed)
    held, want = HeldEvents(), OrderedDict()
    held.compact_above = 4  # compacts often
    handed: list[tuple[Waiting, Waiting]] = []  # (as handed out, a copy): never changed afterwards
    k = 0
    for op, size in ops:
        if op == "batch" and size:
            topic = TOPICS[size % 2]
            batch = [event(rng, k + j, width, crossed, topic) for j in range(size)]
            ids = [f"e{int(rng.integers(k + size))}" for _ in range(size)]  # some held already, some twice
            batch = [w._replace(source=Source(topic, 3, w.source.offset, w.source.key)) for w in batch]
            held.append(ids, as_rows(batch), topic, np.full(size, 3, np.int64),
                        np.array([w.source.offset for w in batch], np.int64), [w.source.key for w in batch])
            for event_id, w in zip(ids, batch):
                want[event_id] = w
            k += size
        elif op == "set":
            w = event(rng, k, width, crossed, None if size % 4 == 0 else TOPICS[size % 2])
            want[f"e{size}"] = held[f"e{size}"] = w
            k += 1
        elif op in ("pop", "take") and want:
            event_id = list(want)[size % len(want)]
            expect = want.pop(event_id)
            if op == "pop":
                got = held.pop(event_id)
            else:
                got = held.rows_of([held.take(event_id)])
                got = got[0].waiting(0, got[1])
            assert same(got, expect)
            handed.append((got, got._replace(**{f: None if getattr(got, f) is None else getattr(got, f).copy()
                                                 for f in ("scores", "indices", "values", "namespaces")})))
        elif op == "popitem" and want:
            assert held.first_ts() == next(iter(want.values())).ts_ms
            event_id, got = held.popitem(last=False)
            assert (event_id, True) == (next(iter(want)), same(got, want.pop(event_id)))
        elif op == "columns":
            rows, topics = held.columns()
            assert len(rows.ts_ms) == len(want) and list(held) == list(want)
            for j, w in enumerate(want.values()):
                lo, hi = rows.indptr[j], rows.indptr[j + 1]
                assert rows.ts_ms[j] == w.ts_ms and np.array_equal(rows.indices[lo:hi], w.indices)
                assert (topics[rows.topic[j]] if rows.topic[j] >= 0 else None) == (w.source and w.source.topic)
        assert list(held) == list(want) and len(held) == len(want)
    for event_id, w in want.items():
        assert same(held[event_id], w)
    assert all(same(a, b) for a, b in handed)


def test_compaction_keeps_the_columns_within_about_twice_the_live_rows():
    rng = np.random.default_rng(0)
    held = HeldEvents()
    for k in range(200):  # a stream: 50 events held, 48 of them labelled, each round
        batch = [event(rng, 50 * k + j, 1, False, "events") for j in range(50)]
        ids = [f"e{50 * k + j}" for j in range(50)]
        held.append(ids, as_rows(batch), "events", np.zeros(50, np.int64), np.arange(50), [None] * 50)
        for event_id in ids[:48]:
            held.pop(event_id)
    assert len(held) == 400
    assert held._n <= 2 * len(held) + 1024 + 50
    rows, _ = held.columns()
    assert list(rows.version) == [50 * k + j for k in range(200) for j in (48, 49)]
