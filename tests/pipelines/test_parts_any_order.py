"""Without Beam, over many seeds: the decode step's parts and the sequencing
step's SKIP parts, delivered to the models in any order and some twice,
give each model its events once, in offset order, with the single-process
learner's predictions bit for bit (pipelines.records.parts, the chain of
pipelines.kafka.spans, pipelines.exact.model_runner)."""

import random

import numpy as np
from hypothesis import given, settings, strategies as st

from learners import make_learner
from learners.datasets import toy_examples
from pipelines.exact.model_runner import ModelRunner
from pipelines.kafka.consumer import Position
from pipelines.kafka.spans import Span
from pipelines.records.parts import EVENTS, Decoded, Part, Sequencer
from pipelines.steps import EventBatch

N = 240


def stream(seed: int):
    """Offsets of one partition: events of models a and b in runs, and messages that are no event."""
    rng = random.Random(seed)
    X, y = toy_examples(N, seed)
    messages, model = [], "a"
    for i in range(N):
        if rng.random() < 0.1:
            model = "b" if model == "a" else "a"
        if rng.random() < 0.05:
            messages.append(None)  # a dead letter
        messages.append((i, model))
    return X, y, messages


def decoded_batches(messages, rng, origin=0):
    out, at = [], 0
    while at < len(messages):
        end = min(len(messages), at + rng.randint(1, 25))
        span = Span("t", 0, origin + at, origin + end, origin)
        by_model: dict[str, EventBatch] = {}
        for offset in range(at, end):
            if messages[offset] is None:
                continue
            i, model = messages[offset]
            event = {"id": f"e{i}", "timestamp": 0, "model": model, "features": {"values": [0.0]}, "label": None,
                     "weight": None}
            by_model.setdefault(model, EventBatch(source=("t", 0))).append((Position("t", 0, origin + offset), event))
        out.append(Decoded(span, [(m, Part(span, EVENTS, items)) for m, items in by_model.items()]))
        at = end
    return out


@given(st.integers(0, 10**6))
@settings(max_examples=60, deadline=None)
def test_parts_in_any_order_give_each_model_its_events_once_in_offset_order(seed):
    rng = random.Random(seed)
    X, y, messages = stream(seed % 7)
    rows = {}  # event index -> its features, put into the records below
    batches = decoded_batches(messages, rng)
    for d in batches:
        for _, part in d.parts:
            for pos, event in part.payload:
                i = int(event["id"][1:])
                event["features"] = {"values": X[i].tolist()}
                event["label"] = float(y[i])
                rows[i] = event["model"]
    delivered = []  # what the sequencing step sends on, in the order the runner hands it the batches
    sequencer = Sequencer()
    for d in rng.sample(batches, len(batches)) + rng.sample(batches, len(batches) // 4):
        delivered += sequencer.take(d.manifest) + d.parts
    rng.shuffle(delivered)  # ...and the order the keyed step receives them in
    runners = {m: ModelRunner(m, lambda: make_learner("scinol2", "logistic")) for m in "ab"}
    predictions = {m: [] for m in "ab"}
    for model, part in delivered:
        runner = runners[model]
        for ready in runner.take(part):
            if ready.kind == EVENTS:
                predictions[model] += runner.process(ready.payload)
    for m in "ab":
        mine = [i for i in sorted(rows) if rows[i] == m]
        assert [p["event_id"] for p in predictions[m]] == [f"e{i}" for i in mine]
        want = make_learner("scinol2", "logistic").learn(X[mine], y[mine]) if mine else np.empty(0)
        assert [p["score"] for p in predictions[m]] == want.tolist()
        assert runners[m].skipped == 0 and len(runners[m].chain) == 0


def test_a_part_split_at_an_offset_tiles_its_span_and_keeps_its_items():
    """What a model following a committed order does with a part that
    straddles the end of a run (pipelines.records.parts.Part.split)."""
    from pipelines.records.parts import SKIP

    items = EventBatch([(Position("t", 0, o), {"id": f"e{o}"}) for o in (3, 5, 9)], source=("t", 0))
    head, tail = Part(Span("t", 0, 2, 12, 0), EVENTS, items).split(6)
    assert (head.span, tail.span) == (Span("t", 0, 2, 6, 0), Span("t", 0, 6, 12, 0))
    assert [p.offset for p, _ in head.payload] == [3, 5] and [p.offset for p, _ in tail.payload] == [9]
    assert type(tail.payload) is EventBatch and tail.payload.source == ("t", 0)
    skipped = Part(Span("t", 0, 2, 12, 0), SKIP).split(4)
    assert [(p.span.start, p.span.end, p.payload) for p in skipped] == [(2, 4, None), (4, 12, None)]
