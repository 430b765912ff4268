"""The chain that applies batches of a partition in offset order, whatever
order and how many times they arrive (pipelines.kafka.spans)."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from pipelines.kafka.spans import Chain, ChainConflict, Span, WaitingBoundExceeded


def tiling(origin, cuts, topic="t", partition=0):
    """Spans of one read from ``origin`` through the sorted ``cuts``."""
    edges = [origin, *cuts]
    return [Span(topic, partition, a, b, origin) for a, b in zip(edges, edges[1:])]


def applied_in_order(chain, deliveries):
    """(span, since) of everything the chain released, in release order."""
    out = []
    for span in deliveries:
        out += [(r.span, r.since) for r in chain.offer(span, span.start, size=span.end - span.start)
                if not r.is_replay]
    return out


@st.composite
def reordered_reads(draw):
    origin = draw(st.integers(0, 50))
    cuts = sorted(draw(st.sets(st.integers(origin + 1, origin + 400), min_size=1, max_size=30)))
    spans = tiling(origin, cuts)
    twice = draw(st.lists(st.sampled_from(spans), max_size=10))
    order = draw(st.permutations(spans + twice))
    return spans, twice, order


@given(reordered_reads())
@settings(max_examples=300, deadline=None)
def test_any_order_with_repeats_applies_each_batch_once_in_offset_order(read):
    spans, twice, order = read
    chain = Chain()
    got = applied_in_order(chain, order)
    assert [s for s, _ in got] == spans
    assert all(since == s.start for s, since in got)
    assert chain.replayed == len(twice)
    assert len(chain) == 0 and chain.waiting_messages == 0
    assert chain.applied == {("t", 0): spans[-1].end}


@given(reordered_reads(), st.data())
@settings(max_examples=300, deadline=None)
def test_a_state_restored_mid_stream_applies_exactly_the_offsets_past_it(read, data):
    spans, _, order = read
    covered = data.draw(st.integers(spans[0].start, spans[-1].end))  # what a checkpoint file says
    chain = Chain({("t", 0): covered})
    got = applied_in_order(chain, order)
    new = [(s, since) for s, since in got]
    # the released pieces tile [covered, end) exactly, in order
    pieces = [(since, s.end) for s, since in new]
    edges = [covered] + [b for _, b in pieces]
    assert [a for a, _ in pieces] == edges[:-1]
    assert edges[-1] == spans[-1].end or covered == spans[-1].end and not pieces
    assert len(chain) == 0


def test_a_replay_comes_back_marked_and_counted():
    chain = Chain()
    a, b = tiling(0, [10, 20])
    chain.offer(a, "a")
    again = chain.offer(a, "a twice")
    assert [(r.payload, r.is_replay) for r in again] == [("a twice", True)]
    chain.offer(Span("t", 0, 30, 40, 0), "early")
    assert [r.is_replay for r in chain.offer(Span("t", 0, 30, 40, 0), "early twice")] == [True]
    assert chain.replayed == 2


def test_a_read_that_starts_past_the_state_continues_it():
    """A restart may begin beyond a model's last offset on a partition (it
    had nothing there in between): the read's first batch continues it."""
    chain = Chain({("t", 0): 100})
    later, first = tiling(500, [600, 700])[::-1]
    assert applied_in_order(chain, [later, first]) == [(first, 500), (later, 600)]


def test_a_batch_after_the_first_waits_for_it_even_on_a_fresh_state():
    chain = Chain()
    first, second = tiling(0, [10, 20])
    assert chain.offer(second, "b") == []
    assert len(chain) == 1 and chain.changed
    assert [r.payload for r in chain.offer(first, "a")] == ["a", "b"]


def test_markers_come_after_every_batch_before_them():
    chain = Chain()
    a, b = tiling(0, [10, 20])
    marks = [b.at(20), a.at(10)]
    out = [(r.span, r.payload) for s, p in [(marks[0], "m20"), (b, "b"), (marks[1], "m10"), (a, "a")]
           for r in chain.offer(s, p)]
    assert [p for _, p in out] == ["a", "m10", "b", "m20"]


def test_a_marker_at_the_origin_needs_nothing_before_it():
    chain = Chain()
    assert [r.payload for r in chain.offer(Span("t", 0, 5, 5, 5), "beat")] == ["beat"]


def test_streams_are_ordered_apart():
    chain = Chain()
    a0, a1 = tiling(0, [10, 20], partition=0)
    b0, b1 = tiling(0, [5, 9], partition=1)
    got = applied_in_order(chain, [a1, b1, b0, a0])
    assert [s for s, _ in got] == [b0, b1, a0, a1]


def test_the_waiting_bound_names_the_partition_the_missing_offsets_and_the_bound():
    chain = Chain({("events", 3): 100}, max_waiting=50)
    chain.offer(Span("events", 3, 200, 240, 0), None, size=40)
    with pytest.raises(WaitingBoundExceeded) as err:
        chain.offer(Span("events", 3, 240, 260, 0), None, size=20)
    text = str(err.value)
    assert "events[3]" in text and "offsets 100-200" in text and "--max-waiting 50" in text


def test_two_different_batches_at_one_place_are_refused():
    chain = Chain()
    chain.offer(Span("t", 0, 10, 20, 0), None)
    with pytest.raises(ChainConflict, match=r"t\[0\].*offset 10"):
        chain.offer(Span("t", 0, 10, 30, 0), None)


def test_what_waits_survives_a_round_trip_through_the_owner_state():
    rng = random.Random(7)
    spans = tiling(0, sorted(rng.sample(range(1, 500), 40)))
    first_half, rest = spans[1:20], [spans[0], *spans[20:]]
    chain = Chain()
    for s in first_half:
        chain.offer(s, s.start, size=3)
    again = Chain(dict(chain.applied))
    again.restore_waiting(chain.waiting_items())
    assert again.waiting_messages == chain.waiting_messages == 3 * len(first_half)
    assert [r.span for s in rest for r in again.offer(s, s.start) if not r.is_replay] == spans


def test_missing_says_where_each_stream_stands_and_what_it_waits_behind():
    chain = Chain({("t", 0): 10})
    chain.offer(Span("t", 0, 30, 40, 0), None)
    assert chain.missing() == [(("t", 0), 10, 30)]


def runs_of(pieces):
    """Released pieces ((stream, end) each) as runs: consecutive pieces of one stream merged."""
    runs = []
    for stream, end in pieces:
        if runs and runs[-1][0] == stream:
            runs[-1] = (stream, end)
        else:
            runs.append((stream, end))
    return runs


@st.composite
def restored_interleavings(draw):
    """Two partitions batched and interleaved one way (a first attempt),
    a state after some of it, the runs committed after the state, and the
    same offsets batched another way (the replay), delivered in any order
    and some twice."""
    ends = {("t", p): draw(st.integers(20, 200)) for p in (0, 1)}
    first = {s: tiling(0, sorted(draw(st.sets(st.integers(1, e - 1), max_size=8))) + [e], *s)
             for s, e in ends.items()}
    picks = draw(st.lists(st.sampled_from(sorted(first)), min_size=sum(map(len, first.values())),
                          max_size=sum(map(len, first.values()))))
    queue = {s: list(spans) for s, spans in first.items()}
    order = [queue[s].pop(0) for s in picks if queue[s]] + [sp for s in sorted(queue) for sp in queue[s]]
    state_at = draw(st.integers(0, len(order)))
    failed_at = draw(st.integers(state_at, len(order)))
    applied = {}
    for span in order[:state_at]:
        applied[span.stream] = span.end
    committed = runs_of([(span.stream, span.end) for span in order[state_at:failed_at]])
    replay = []
    for s, end in ends.items():
        start = applied.get(s, 0)
        cuts = sorted(draw(st.sets(st.integers(start + 1, end - 1), max_size=8))) if end - start > 1 else []
        replay += [sp._replace(origin=0) for sp in tiling(start, cuts + [end], *s)] if start < end else []
    twice = draw(st.lists(st.sampled_from(replay), max_size=4)) if replay else []
    return ends, applied, committed, draw(st.permutations(replay + twice))


def halves(payload, offset):
    return (payload, 1), (payload, 1)


@given(restored_interleavings())
@settings(max_examples=400, deadline=None)
def test_a_followed_order_is_the_order_applied_whatever_order_batches_come_in(case):
    """A chain told to follow the committed runs applies them in that order
    (a batch straddling a run's end split there), then the rest; every
    offset once."""
    ends, applied, committed, arrivals = case
    chain = Chain(dict(applied), split=halves)
    released = [(r.span, r.since) for r in chain.follow(committed)]
    for span in arrivals:
        released += [(r.span, r.since) for r in chain.offer(span, None) if not r.is_replay]
    got = runs_of([(span.stream, span.end) for span, _ in released])
    if committed:
        assert got[:len(committed) - 1] == committed[:-1]
        assert got[len(committed) - 1][0] == committed[-1][0] and got[len(committed) - 1][1] >= committed[-1][1]
    for stream, end in ends.items():  # each stream's offsets past the state, each once, in order
        mine = [(max(since, span.start), span.end) for span, since in released if span.stream == stream]
        assert [a for a, _ in mine] == ([applied.get(stream, 0)] + [b for _, b in mine[:-1]] if mine else [])
        assert (mine[-1][1] if mine else applied.get(stream, 0)) == end
    assert len(chain) == 0 and chain.waiting_messages == 0 and chain.runs is None


def test_a_followed_order_holds_other_partitions_until_its_runs_are_done():
    a, b = ("t", 0), ("t", 1)
    chain = Chain({a: 0, b: 0}, split=halves)
    assert chain.follow([(b, 5), (a, 10), (b, 8)]) == []
    assert chain.offer(Span("t", 0, 0, 20, 0), None) == []  # a waits for b's first run
    got = chain.offer(Span("t", 1, 0, 20, 0), None)
    assert [(r.span.partition, r.span.start, r.span.end) for r in got] == [(1, 0, 5), (0, 0, 10), (1, 5, 8),
                                                                          (0, 10, 20), (1, 8, 20)]
    assert chain.runs is None and chain.applied == {a: 20, b: 20}


def test_a_chain_pickled_by_an_earlier_release_goes_on_after_an_upgrade():
    """A savepoint holds Chains pickled by the release that took it; one
    from before the order following (no ``split``, no ``runs``) still
    applies what comes after the upgrade."""
    import pickle

    old = Chain()
    old.offer(Span("t", 0, 0, 5, 0), None)
    del old.__dict__["split"], old.__dict__["runs"]  # as that release pickled it
    chain = pickle.loads(pickle.dumps(old))
    assert chain.runs is None and chain.split is None
    assert [(r.span.start, r.span.end) for r in chain.offer(Span("t", 0, 5, 9, 0), None)] == [(5, 9)]
