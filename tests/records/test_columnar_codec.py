"""Differential fuzzing of the columnar codec (pipelines/records/event_decoder.py)
against the per-event path it replaces: random Event records of every
writer schema version, and truncated, corrupted, over-long, wrongly framed
and non-finite variants of them, decode to the same coordinates, values,
labels, weights, ids, models and timestamps as ``screen`` + ``event_rows``,
or to the same dead-letter reason and text; random predictions encode to
the codec's exact bytes."""

import io
import math
import struct

import numpy as np
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from learners.hashing import FeatureHasher
from pipelines.records.avro.primitives import utf8_ok
from learners import make_learner
from pipelines.records.event_decoder import REASON_CODES, EventDecoder
from pipelines.records.event_rows import ColumnarEvent
from pipelines.records.prediction_values import encode_predictions
from pipelines.records.dead_letters import screen
from pipelines.records.events import event_rows, learner_rows
from schemas.catalog import load_schema, schema_id

from schemas.codec import Codec
from tests.support.fuzzkit import _string, _zigzag, corpus, damaged, seed_values, step_parts

CODEC = Codec()
WRITERS = {v: parse_schema(load_schema("scinol.Event", v), named_schemas={}) for v in (1, 2)}
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------ reference


def bits(x: np.ndarray) -> list:
    """Doubles as their bit patterns, so -0.0 != 0.0 and NaN == NaN."""
    return np.asarray(x, np.float64).view(np.int64).tolist()


def assert_same_as_per_event_path(decoder: EventDecoder, values: list) -> None:
    cols = decoder.decode(values)
    hasher = decoder.hasher
    assert len(cols) == len(values)
    valid = []
    for i, value in enumerate(values):
        event, problem = screen(CODEC, value, decoder.loss, decoder.n_classes, max_index=decoder.max_index,
                                max_message_bytes=decoder.max_message_bytes)
        lo, hi = cols.indptr[i], cols.indptr[i + 1]
        if problem is not None:
            assert cols.reason[i] == REASON_CODES[problem[0]] and cols.dead[i] == problem, i
            assert hi == lo
            continue
        assert cols.reason[i] == 0 and i not in cols.dead, (i, cols.dead.get(i))
        _, indices, data, _ = event_rows([event], hasher)
        assert cols.indices[lo:hi].tolist() == indices.tolist(), i
        assert bits(cols.values[lo:hi]) == bits(data), i
        assert cols.event_id(i) == event["id"] and cols.models[cols.model_code[i]] == event["model"]
        assert cols.timestamp[i] == event["timestamp"]
        label, weight = event.get("label"), event.get("weight")
        assert bool(cols.has_label[i]) == (label is not None)
        assert bits([cols.label[i]]) == bits([math.nan if label is None else label])
        assert bool(cols.has_weight[i]) == (weight is not None)
        if weight is not None:
            assert bits([cols.weight[i]]) == bits([weight])
        assert repr(dict(ColumnarEvent(cols, i))) == repr(event)  # what the record-based steps see
        valid.append((event, ColumnarEvent(cols, i)))
    if valid:
        assert_same_learner_rows(decoder, valid)


def assert_same_learner_rows(decoder: EventDecoder, valid: list) -> None:
    """learner_rows over ColumnarEvents (gathered from the columns when the
    learner hashes as the decoder did; for a learner with crosses, the
    namespaced rows read again from the messages) equals it over the
    decoded records."""
    for interactions in (None, ("ab", "nn", " a")):
        learner = make_learner("scinol2", decoder.loss, n_classes=decoder.n_classes, hash_bits=decoder.hasher.bits,
                               hash_seed=decoder.hasher.seed, interactions=interactions)
        want, want_y = learner_rows([e for e, _ in valid], learner)
        got, y = learner_rows([c for _, c in valid], learner)
        assert len(got) == len(want)  # CSR (3 arrays), or namespaced rows (4)
        for got_part, want_part in zip(got, want):
            assert got_part.dtype == want_part.dtype
            assert bits(got_part) == bits(want_part) if got_part.dtype == np.float64 else \
                got_part.tolist() == want_part.tolist()
        assert bits(y) == bits(want_y)


# ------------------------------------------------------------ generators

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
special = st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0.0])
any_double = st.one_of(finite, special)


def doubles(max_size: int):
    """Lists of doubles, most of them all finite (one NaN makes the whole event a dead letter)."""
    return st.one_of(st.lists(finite, max_size=max_size), st.lists(finite, max_size=max_size),
                     st.lists(any_double, max_size=max_size))


index = st.one_of(st.integers(0, 200), st.integers(-5, 2**63 - 1), st.integers(-(2**63), 2**63 - 1))
name = st.one_of(st.text(max_size=12), st.sampled_from(["a", "b", "ns^x", "", "ü", "\U0001F600", "a^x", "b^x", "a^",
                                                        "^b", "b^^a", "ü^x", "a^b^c"]))
dense = doubles(40).map(lambda v: ("scinol.DenseFeatures", {"values": v}))
sparse = st.one_of(
    st.lists(st.tuples(index, finite), max_size=40).map(
        lambda p: {"indices": [i for i, _ in p], "values": [v for _, v in p]}),
    st.tuples(st.lists(index, max_size=5), doubles(5)).map(
        lambda iv: {"indices": iv[0], "values": iv[1]}),  # lengths may differ
    st.lists(st.integers(0, 30), max_size=30).map(lambda ix: {"indices": ix, "values": [1.5] * len(ix)}),
    st.lists(st.integers(0, 1000), max_size=30, unique=True).map(
        lambda ix: {"indices": sorted(ix), "values": [0.5] * len(ix)}),
).map(lambda f: ("scinol.SparseFeatures", f))
signed_zero = st.one_of(finite, st.sampled_from([0.0, -0.0]))  # a hashed name's sign flips zeros too
named = st.one_of(st.dictionaries(name, signed_zero, max_size=30), st.dictionaries(name, any_double, max_size=30)).map(
    lambda d: ("scinol.NamedFeatures", {"values": d}))
label = st.one_of(st.sampled_from([None, 1.0, -1.0, 0.0, 2.0, 0.5, math.nan, math.inf]), any_double)
weight = st.one_of(st.none(), st.floats(1e-300, 1e300), st.sampled_from([1.0, 0.0, -1.0, math.nan, math.inf]),
                   any_double)
events = st.fixed_dictionaries({
    "id": st.text(max_size=20), "timestamp": st.integers(-(2**63), 2**63 - 1),
    "model": st.sampled_from(["default", "a", "b", "ü-model"]), "features": st.one_of(dense, sparse, named),
    "label": label, "weight": weight,
})


def frame(event: dict, version: int) -> bytes:
    """The event as Confluent-framed Avro written with Event schema ``version``."""
    fo = io.BytesIO()
    fo.write(b"\x00" + schema_id("scinol.Event", version).to_bytes(4, "big"))
    record = event if version == 2 else {k: v for k, v in event.items() if k != "weight"}
    schemaless_writer(fo, WRITERS[version], record)
    return fo.getvalue()


@st.composite
def messages(draw):
    """A framed event, often damaged (:func:`tests.support.fuzzkit.damaged`)."""
    value = frame(draw(events), draw(st.sampled_from([1, 2])))
    return damaged(draw, value, [0, 3, 7, 8, 99, 2**31])


decoders = st.builds(
    lambda loss, hb, seed, max_index, max_features, max_bytes: EventDecoder(
        CODEC, loss, 3 if loss == "softmax" else None, hash_bits=hb, hash_seed=seed, max_index=max_index,
        max_features=max_features, max_message_bytes=max_bytes),
    st.sampled_from(["logistic", "hinge", "squared", "softmax"]), st.sampled_from([1, 3, 18, 31]),
    st.sampled_from([0, 42]), st.sampled_from([1 << 22, 25, 1 << 62]), st.sampled_from([1_000_000, 12]),
    st.sampled_from([16 << 20, 300]))

# ------------------------------------------------------------ decode


@SETTINGS
@given(decoders, st.lists(messages(), min_size=1, max_size=20))
def test_decode_equals_the_per_event_path(decoder, values):
    assert_same_as_per_event_path(decoder, values)


@SETTINGS
@given(decoders, st.lists(messages(), min_size=1, max_size=20), st.randoms(use_true_random=False))
def test_a_models_part_pickles_its_own_rows_and_reads_as_it_did(decoder, values, rnd):
    """A batch of several models, dead letters and messages the compiled
    reader did not take: each model's part (and a random subset of a part)
    pickled on its own comes back with the same events, ids, features read
    again from the messages (crosses) and learner rows, from its rows alone."""
    import pickle

    from pipelines.records.event_rows import EventRows

    cols = decoder.decode(values)
    valid = np.flatnonzero(cols.ok)
    for code in sorted(set(cols.model_code[valid].tolist())):
        mine = valid[cols.model_code[valid] == code]
        for rows in (mine, np.array(sorted(rnd.sample(mine.tolist(), rnd.randint(0, len(mine)))), np.int64)):
            part = EventRows(cols, rows, 10 + rows, [b"k%d" % r for r in rows.tolist()], ("ev", 1))
            data = pickle.dumps(part, pickle.HIGHEST_PROTOCOL)
            back = pickle.loads(data)
            assert len(back.cols) == len(rows) or len(rows) == len(cols)
            assert [(p, repr(dict(e))) for p, e in back] == [(p, repr(dict(e))) for p, e in part]
            assert back.event_ids().encoded() == part.event_ids().encoded()
            if len(rows):
                assert_same_learner_rows(decoder, list(zip([dict(e) for _, e in part], [e for _, e in back])))


def test_valid_events_of_both_versions_take_the_compiled_path():
    """The fuzz above would pass with everything on the per-event path:
    here valid events of every shape and both versions must not need it."""
    rng = np.random.default_rng(0)
    values = []
    for i in range(300):
        features = [("scinol.DenseFeatures", {"values": rng.normal(size=21).tolist()}),
                    ("scinol.SparseFeatures", {"indices": sorted(rng.choice(1000, 5, replace=False).tolist()),
                                               "values": rng.normal(size=5).tolist()}),
                    ("scinol.NamedFeatures", {"values": {f"f{j}é": float(j % 3) - 1.0 for j in range(i % 7)}})][i % 3]
        event = {"id": f"ev-{i}", "timestamp": i, "model": ["a", "b"][i % 2], "features": features,
                 "label": [None, 1.0, -1.0][i % 3], "weight": [None, 2.0][i % 2]}
        values.append(frame(event, 1 + i % 2))
    decoder = EventDecoder(CODEC, "logistic", hash_bits=4)  # 16 slots: named features collide and add up
    cols = decoder.decode(values)
    assert cols.fallbacks == 0 and cols.ok.all() and cols.models == ["a", "b"]
    assert_same_as_per_event_path(decoder, values)


def test_crossed_features_of_compiled_rows_are_read_without_the_per_event_path():
    """With crosses, the learner's rows of a decoded batch come from one
    compiled read of the messages: names that collide stay apart (the
    crosses need each name's namespace), each with its namespace byte."""
    from pipelines.records.event_rows import EventRows
    from pipelines.records.row_features import features_of

    events = [{"id": f"ev-{i}", "timestamp": i, "model": "m", "label": 1.0, "weight": None,
               "features": ("scinol.NamedFeatures", {"values": {"a^x": 1.0, "b^y": -2.0, "z": 0.5, f"a^{i}": 3.0}})}
              for i in range(40)] + [{"id": "d", "timestamp": 0, "model": "m", "label": 0.0, "weight": None,
                                      "features": ("scinol.DenseFeatures", {"values": [1.0, 2.0]})}]
    decoder = EventDecoder(CODEC, "logistic", hash_bits=2)  # 4 slots: the names collide
    cols = decoder.decode([frame(e, 2) for e in events])
    assert cols.fallbacks == 0
    learner = make_learner("scinol2", "logistic", hash_bits=2, interactions=["ab"])
    rows = features_of(cols, np.arange(len(events)), learner)
    assert rows is not None  # not left to the per-event path
    assert rows.indptr.tolist() == [4 * i for i in range(41)] + [162]  # 4 names a row: none merged
    assert rows.namespaces[:4].tolist() == [ord("a"), ord("b"), ord(" "), ord("a")]
    assert rows.namespaces[-2:].tolist() == [ord(" "), ord(" ")] and rows.indices[-2:].tolist() == [0, 1]
    slot = decoder.hasher.slot
    assert rows.indices[:4].tolist() == [slot(n)[0] for n in ("a^x", "b^y", "z", "a^0")]
    assert rows.data[:4].tolist() == [slot(n)[1] * v for n, v in (("a^x", 1.0), ("b^y", -2.0), ("z", 0.5), ("a^0", 3.0))]
    batch = EventRows(cols, np.arange(len(events)), np.arange(len(events)), [None] * len(events), ("t", 0))
    records = [dict(ColumnarEvent(cols, i)) for i in range(len(cols))]
    (got, y), (want, want_y) = batch.learner_rows(learner), learner_rows(records, learner)
    assert [a.tolist() for a in got] == [a.tolist() for a in want] and y.tolist() == want_y.tolist()


def test_a_repeated_map_key_keeps_its_first_place_and_last_value():
    """fastavro reads a map into a dict: a key given twice keeps the place
    of its first occurrence and the value of its last."""
    entries = [(b"x", 1.0), (b"y", 2.0), (b"x", 3.0)]
    body = _string(b"id") + _zigzag(5) + _string(b"m") + _zigzag(2) + _zigzag(len(entries))
    body += b"".join(_string(k) + struct.pack("<d", v) for k, v in entries) + _zigzag(0)
    value = b"\x00" + schema_id("scinol.Event", 2).to_bytes(4, "big") + body + _zigzag(0) + _zigzag(0)
    decoder = EventDecoder(CODEC, "logistic", hash_bits=20)
    cols = decoder.decode([value])
    assert cols.fallbacks == 0
    assert cols.indices.tolist() == [decoder.hasher.slot("x")[0], decoder.hasher.slot("y")[0]]
    assert abs(cols.values).tolist() == [3.0, 2.0]
    assert_same_as_per_event_path(decoder, [value])


@settings(max_examples=2000, deadline=None)
@given(st.one_of(st.binary(max_size=12), st.text(max_size=6).map(lambda s: s.encode("utf-8", "surrogatepass"))))
def test_utf8_check_is_pythons_strict_decoder(raw):
    try:
        raw.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert utf8_ok(np.frombuffer(raw, np.uint8), 0, len(raw)) == valid


# ------------------------------------------------------------ encode


@st.composite
def prediction_batches(draw):
    n = draw(st.integers(1, 12))
    k = draw(st.sampled_from([1, 1, 3]))
    ids = draw(st.lists(st.text(max_size=15), min_size=n, max_size=n))
    doubles = st.lists(any_double, min_size=n, max_size=n)
    longs = st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)
    return {
        "ids": ids, "model": draw(name), "model_version": draw(longs),
        "scores": np.array(draw(st.lists(st.lists(any_double, min_size=k, max_size=k), min_size=n, max_size=n))),
        "label": draw(doubles), "has_label": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
        "loss": draw(doubles), "event_timestamp": draw(longs), "latency_ms": draw(doubles),
        "probability": draw(st.none() | doubles), "predicted_class": draw(st.none() | longs),
        "source_topic": draw(st.none() | name),
        "source_partition": draw(st.none() | st.lists(st.integers(-(2**31), 2**31 - 1), min_size=n, max_size=n)),
        "source_offset": draw(st.none() | longs),
    }


def prediction_dicts(b: dict) -> list[dict]:
    """The records the per-event path builds (pipelines.records.predictions)."""
    out = []
    for i, event_id in enumerate(b["ids"]):
        def opt(key, cast=float):
            return None if b[key] is None else cast(b[key][i])
        out.append({
            "event_id": event_id, "model": b["model"], "model_version": b["model_version"][i],
            "score": float(b["scores"][i, 0]), "scores": b["scores"][i].tolist(), "probability": opt("probability"),
            "predicted_class": opt("predicted_class", int), "label": b["label"][i] if b["has_label"][i] else None,
            "loss": None if math.isnan(b["loss"][i]) else b["loss"][i], "event_timestamp": b["event_timestamp"][i],
            "latency_ms": b["latency_ms"][i], "source_topic": b["source_topic"],
            "source_partition": opt("source_partition", int), "source_offset": opt("source_offset", int)})
    return out


@SETTINGS
@given(prediction_batches())
def test_encode_equals_the_codec_bytes(b):
    raw = [s.encode() for s in b["ids"]]
    lengths = np.array([len(r) for r in raw], np.int64)
    ends = np.cumsum(lengths)
    opt = {k: (None if b[k] is None else np.array(b[k])) for k in
           ("probability", "predicted_class", "source_partition", "source_offset")}
    buf, offsets = encode_predictions(
        CODEC, "predictions", buf=np.frombuffer(b"".join(raw), np.uint8), id_start=ends - lengths, id_end=ends,
        model=b["model"], model_version=np.array(b["model_version"]), scores=b["scores"],
        label=np.array(b["label"]), has_label=np.array(b["has_label"]), loss=np.array(b["loss"]),
        event_timestamp=np.array(b["event_timestamp"]), latency_ms=np.array(b["latency_ms"]),
        source_topic=b["source_topic"], **opt)
    want = [CODEC.encode("scinol.Prediction", r, "predictions") for r in prediction_dicts(b)]
    assert [buf[offsets[i]:offsets[i + 1]].tobytes() for i in range(len(want))] == want
    assert offsets[-1] == buf.shape[0]


# ------------------------------------------------------------ the pipeline's decode step


def step_outputs(columnar: bool, values: list, **limits) -> tuple[list, list]:
    """(dead letters, [(model, [(position, event as dict)])]) of DecodeEvents on one batch."""
    return step_parts(columnar, values, item=lambda pair: (pair[0], repr(dict(pair[1]))), **limits)


def test_the_columnar_decode_step_gives_what_the_per_event_step_gives():
    values = corpus(3000, seed=7) + seed_values() * 20 + [None]
    for limits in ({}, {"max_models": 2, "max_index": 1000}):
        want = step_outputs(False, values, **limits)
        got = step_outputs(True, values, **limits)
        assert len(want[0]) > 1000 and sum(len(items) for _, items in want[1]) > 100  # both outcomes exercised
        assert got == want
