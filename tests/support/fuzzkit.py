"""Hostile message values for the fuzz tests (tests/test_fuzz.py) and
benchmarks/fault_trials.py: valid events of every shape, byte-level
mutations of them, random bytes, and hand-made absurd encodings (declared
lengths of 10**9 and 2**62, indices of 2**40, huge strings, a 17 MB value).
"""

from __future__ import annotations

import random

from apache_beam.pvalue import TaggedOutput

from pipelines.records.dead_letters import MAX_ORIGINAL_BYTES
from pipelines.beam_io import KafkaMessage
from pipelines.kafka.spans import Span
from pipelines.exact.model_runner import ModelRunner
from pipelines.config import LearnerConfig, RunConfig
from pipelines.steps import DecodeEvents
from schemas.catalog import schema_id
from schemas.codec import Codec
from schemas.reasons import REASONS

_CODEC = Codec()


def damaged(draw, value: bytes, other_ids: list[int]):
    """``value`` (a framed message), often damaged, drawn with hypothesis's
    ``draw``: cut short, a byte changed, bytes appended, another schema id
    from ``other_ids``, no value at all, or random bytes."""
    from hypothesis import strategies as st  # the tests' dependency, not the fault trials'

    damage = draw(st.sampled_from(["truncate", "flip", "trail", "sid", "none_value", "random"] + ["none"] * 8))
    if damage == "truncate":
        return value[:draw(st.integers(0, len(value) - 1))]
    if damage == "flip":
        at = draw(st.integers(0, len(value) - 1))
        return value[:at] + bytes([draw(st.integers(0, 255))]) + value[at + 1:]
    if damage == "trail":
        return value + draw(st.binary(min_size=1, max_size=9))
    if damage == "sid":
        return value[:1] + draw(st.sampled_from(other_ids)).to_bytes(4, "big") + value[5:]
    if damage == "none_value":
        return None
    return draw(st.binary(max_size=60)) if damage == "random" else value


def event(i: int, features, **extra) -> dict:
    return {"id": f"fz-{i}", "timestamp": 1_700_000_000_000 + i, "model": "fuzz", "features": features,
            "label": 1.0 if i % 2 else -1.0, "weight": None, **extra}


def seed_values() -> list[bytes]:
    """Valid events of every kind, plus valid events with hostile model names."""
    shapes = [
        {"values": [0.5 * k for k in range(21)]},
        {"indices": [0, 7, 123_456], "values": [1.0, -2.0, 0.25]},
        {"values": {"price_cents": 1299.0, "ratio": 0.3, "": 1.0, "ü": 2.0}},
        {"values": []},
        {"indices": [], "values": []},
    ]
    out = [_CODEC.encode("scinol.Event", event(i, f)) for i, f in enumerate(shapes)]
    out.append(_CODEC.encode("scinol.Event", event(9, shapes[0], label=None, weight=2.5)))
    # model names become directory names: none may escape or collide
    for k, model in enumerate(["..", ".", "../../escaped", "a/b", "a_b", "x" * 1000, "\u202e\x00bidi"]):
        out.append(_CODEC.encode("scinol.Event", event(20 + k, shapes[1], model=model)))
    return out


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _string(b: bytes) -> bytes:
    return _zigzag(len(b)) + b


def absurd_values() -> dict[str, bytes]:
    """Hand-made encodings that declare absurd sizes: each must be rejected
    with a reason at once, without allocating what it declares."""
    header = b"\x00" + schema_id("scinol.Event").to_bytes(4, "big")
    head = _string(b"id") + _zigzag(1_700_000_000_000) + _string(b"fuzz")
    good = _CODEC.encode
    return {
        "dense length 10**9 declared": header + head + _zigzag(0) + _zigzag(10**9) + bytes(64),
        "dense length 2**62 declared": header + head + _zigzag(0) + _zigzag(1 << 62) + bytes(64),
        "negative block count, 10**12 bytes": header + head + _zigzag(0) + _zigzag(-(10**9)) + _zigzag(10**12),
        "sparse 10**9 entries declared": header + head + _zigzag(1) + _zigzag(10**9) + _zigzag(5) * 10,
        "map 10**9 entries declared": header + head + _zigzag(2) + _zigzag(10**9) + _string(b"k") + bytes(8),
        "id of 2**40 bytes declared": header + _zigzag(1 << 40) + b"abc",
        "varint of 20 bytes": header + b"\xff" * 20,
        "sparse index 2**40 - 1": good("scinol.Event", event(1, {"indices": [(1 << 40) - 1], "values": [1.0]})),
        "sparse index 2**22": good("scinol.Event", event(2, {"indices": [1 << 22], "values": [1.0]})),
        "sparse index 2**62": good("scinol.Event", event(3, {"indices": [1 << 62], "values": [1.0]})),
    }


def oversized_value() -> bytes:
    """17 MiB: over the pipeline's 16 MiB default, and its dead letter over Kafka's 1 MB default."""
    return b"\x00" + schema_id("scinol.Event").to_bytes(4, "big") + bytes(17 << 20)


_INTERESTING = (0x00, 0x01, 0x7F, 0x80, 0xFF)


def mutate(data: bytes, rnd: random.Random) -> bytes:
    """One to four random byte-level edits (flip, set, insert, delete,
    duplicate, truncate, splice with a seed)."""
    out = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        op = rnd.randrange(7)
        pos = rnd.randrange(len(out) + 1)
        if op == 0 and out:
            out[min(pos, len(out) - 1)] ^= 1 << rnd.randrange(8)
        elif op == 1 and out:
            out[min(pos, len(out) - 1)] = rnd.choice(_INTERESTING)
        elif op == 2:
            out[pos:pos] = bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))
        elif op == 3:
            del out[pos:pos + rnd.randint(1, 8)]
        elif op == 4:
            out[pos:pos] = out[pos:pos + rnd.randint(1, 16)]
        elif op == 5:
            del out[pos:]
        else:
            other = rnd.choice(seed_values())
            out[pos:] = other[rnd.randrange(len(other) + 1):]
    return bytes(out)


def corpus(n: int, seed: int) -> list[bytes]:
    """``n`` values: mostly mutated seeds, some random bytes, some framed random bodies."""
    rnd = random.Random(seed)
    seeds = seed_values()
    header = b"\x00" + schema_id("scinol.Event").to_bytes(4, "big")
    out = []
    for _ in range(n):
        kind = rnd.random()
        if kind < 0.8:
            out.append(mutate(rnd.choice(seeds), rnd))
        elif kind < 0.9:
            out.append(bytes(rnd.randrange(256) for _ in range(rnd.randrange(64))))
        else:
            out.append(header + bytes(rnd.randrange(256) for _ in range(rnd.randrange(64))))
    return out


# --------------------------------------------------------------------------- the invariant

def decoder(**limits) -> DecodeEvents:
    fn = DecodeEvents(RunConfig("unused:9092", "events", "predictions", **limits))
    fn.setup()
    return fn


def outcomes(fn, values: list) -> tuple[list[dict], list[tuple]]:
    """(dead letters, (position, event) pairs) of one batch through the real DoFn."""
    batch = [KafkaMessage("t", 0, i, 1_700_000_000_000, None, v) for i, v in enumerate(values)]
    dead, events = [], []
    for out in fn.process(batch):
        if isinstance(out, TaggedOutput):
            dead.append(out.value)
        else:
            for _, part in out[1].parts:
                events.extend(part.payload)
    return dead, events


def step_parts(columnar: bool, values: list, topic: str = "t", item=lambda pair: pair, **settings) -> tuple[list, list]:
    """(dead letters, [(model, [item(pair) for each of its pairs])]) of a
    new DecodeEvents (``settings`` for its RunConfig) on one batch of
    ``topic``'s partition 0 at offsets 100 on."""
    fn = DecodeEvents(RunConfig("unused:9092", "events", "predictions", **settings), columnar=columnar)
    fn.setup()
    batch = [KafkaMessage(topic, 0, 100 + i, 1_700_000_000_000, b"k%d" % i, v) for i, v in enumerate(values)]
    dead, parts = [], []
    for out in fn.process(batch):
        if isinstance(out, TaggedOutput):
            dead.append(out.value)
        else:
            stream, decoded = out
            assert stream == (topic, 0) and decoded.span == Span(topic, 0, 100, 100 + len(values), 100)
            for model, part in decoded.parts:
                assert part.span == decoded.span and part.payload.source == (topic, 0)
                parts.append((model, [item(pair) for pair in part.payload]))
    return dead, parts


def check_batch(fn, values):
    """The invariant: every message exactly once, as a dead letter Kafka can
    take or as an event the learner takes."""
    dead, events = outcomes(fn, values)
    offsets = sorted([d["offset"] for d in dead] + [pos.offset for pos, _ in events])
    assert offsets == list(range(len(values)))
    for d in dead:
        assert d["reason"] in REASONS and d["detail"]
        assert d["original"] == (values[d["offset"]] or b"")[:MAX_ORIGINAL_BYTES]
        _CODEC.encode("scinol.DeadLetter", d)  # the dead letter itself can be written
    by_model = {}
    for pos, event in events:
        by_model.setdefault(event["model"], []).append((pos, event))
    for model, items in by_model.items():  # and the learner takes what passed
        predictions = ModelRunner(model, LearnerConfig().make).process(items)
        assert len(predictions) == len(items)
        for p in predictions:
            _CODEC.encode("scinol.Prediction", p)
    return dead, events


def fuzz_through_pipeline(bootstrap: str, topic: str, values: list, checkpoint_dir: str | None):
    """Produce ``values`` to a new topic and run the whole pipeline over it
    (bounded, in this process). Returns (dead letters by offset, prediction
    records, offsets that must be dead letters)."""
    from confluent_kafka import Producer

    from pipelines.records.dead_letters import screen
    from pipelines.kafka.admin import KafkaAdmin, TopicSpec
    from pipelines.config import RunConfig
    from pipelines.launch import run
    from tests.support.trialkit import read_topic

    # Apache Kafka refuses messages over 1 MB unless the topic allows more (tansu takes any size).
    KafkaAdmin(bootstrap).ensure_topics([TopicSpec(topic, 1, config={"max.message.bytes": "20000000"})])
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 20_000_000, "linger.ms": 20})
    failed = []  # a refused message would shift every later offset: the expected dead letters would be wrong
    for v in values:
        while True:
            try:
                producer.produce(topic, value=v, on_delivery=lambda err, _msg: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0 and not failed, failed
    expected_dead = {i for i, v in enumerate(values) if screen(_CODEC, v, "logistic", None)[1] is not None}
    cfg = RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", bounded=True,
                    checkpoint_dir=checkpoint_dir, progress_seconds=None, max_batch=200)
    run(cfg)
    dead = {r["offset"]: r for _, _, r in read_topic(bootstrap, cfg.dlq_topic)}
    predictions = [r for _, _, r in read_topic(bootstrap, cfg.predictions_topic)]
    return dead, predictions, expected_dead
