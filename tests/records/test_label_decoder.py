"""Differential fuzzing of the batch Label decoder
(pipelines/records/label_decoder.py) against ``screen_label``, the
per-message path it stands in for: random Label records, and truncated,
corrupted, over-long, wrongly framed and missing variants of them, screen
to the same records (bit for bit) or the same dead-letter reason and text,
for every kind of loss; and the pipeline's decode step gives the same
label batches and dead letters either way."""

import io
import math

import numpy as np
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipelines.records.avro.event_reader import FALLBACK
from pipelines.records.avro.label_reader import decode_labels
from pipelines.records.dead_letters import screen_label
from pipelines.records.label_decoder import LabelDecoder
from schemas.catalog import load_schema, schema_id
from schemas.codec import Codec
from tests.support.fuzzkit import damaged, step_parts

CODEC = Codec()
WRITER = parse_schema(load_schema("scinol.Label", 1), named_schemas={})
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LOSSES = [("logistic", None), ("hinge", None), ("squared", None), ("softmax", 3)]


def exact(x):
    """A screened pair with every double as its bit pattern (-0.0 != 0.0, NaN == NaN)."""
    record, problem = x
    if record is None:
        return None, problem
    return {k: ("f8", np.float64(v).view(np.int64).item()) if isinstance(v, float) else (type(v).__name__, v)
            for k, v in record.items()}, list(record), problem


any_double = st.floats(allow_nan=True, allow_infinity=True, width=64)
labels = st.one_of(st.sampled_from([1.0, -1.0, 0.0, -0.0, 2.0, 0.5, 3.0, math.nan, math.inf, -math.inf]), any_double)
weights = st.one_of(st.none(), st.floats(1e-300, 1e300), st.sampled_from([1.0, 0.0, -0.0, -1.0, math.nan, math.inf]),
                    any_double)
records = st.fixed_dictionaries({
    "event_id": st.one_of(st.text(max_size=20), st.sampled_from(["file.csv:7", "", "ü", "\U0001F600"])),
    "model": st.sampled_from(["default", "a", "ü-model", ""]), "label": labels, "weight": weights,
    "timestamp": st.integers(-(2**63), 2**63 - 1),
})


def frame(record: dict) -> bytes:
    fo = io.BytesIO()
    fo.write(b"\x00" + schema_id("scinol.Label", 1).to_bytes(4, "big"))
    schemaless_writer(fo, WRITER, record)
    return fo.getvalue()


@st.composite
def messages(draw):
    """A framed Label, often damaged (:func:`tests.support.fuzzkit.damaged`),
    among the other schema ids an Event's and a Prediction's."""
    others = [0, 99, 2**31, schema_id("scinol.Event", 2), schema_id("scinol.Prediction", 1)]
    return damaged(draw, frame(draw(records)), others)


@SETTINGS
@given(st.sampled_from(LOSSES), st.sampled_from([16 << 20, 40]), st.lists(messages(), min_size=1, max_size=20))
def test_screen_equals_the_per_message_path(loss, max_bytes, values):
    name, n_classes = loss
    got = LabelDecoder(CODEC, name, n_classes, max_message_bytes=max_bytes).screen(values)
    want = [screen_label(CODEC, v, name, n_classes, max_bytes) for v in values]
    assert [exact(g) for g in got] == [exact(w) for w in want]


def test_valid_labels_take_the_compiled_path():
    """The fuzz above would pass with every message on the per-message
    path: well-formed labels must not go there."""
    values = [frame({"event_id": f"e{i}", "model": "m", "label": (1.0, -1.0)[i % 2], "weight": (None, 2.5)[i % 2],
                     "timestamp": 1_700_000_000_000 + i}) for i in range(50)]
    decoder = LabelDecoder(CODEC, "logistic")
    buf = np.frombuffer(b"".join(values), np.uint8)
    ends = np.cumsum([len(v) for v in values])
    status, _ = decode_labels(buf, ends - [len(v) for v in values], ends, decoder.writers.ids, decoder.labels, 16 << 20)
    assert (status == 0).all()
    bad = frame({"event_id": "e", "model": "m", "label": 0.5, "weight": None, "timestamp": 0})  # not a logistic label
    status, _ = decode_labels(np.frombuffer(bad, np.uint8), np.array([0]), np.array([len(bad)]), decoder.writers.ids,
                              decoder.labels, 16 << 20)
    assert status.tolist() == [FALLBACK]


def step_outputs(columnar: bool, values: list) -> tuple[list, list]:
    """(dead letters, [(model, [(offset, record)])]) of DecodeEvents on one batch of the labels topic."""
    return step_parts(columnar, values, "labels", lambda pair: (pair[0].offset, exact((pair[1], None))),
                      labels_topic="labels")


def test_the_decode_step_gives_the_same_label_batches_either_way():
    import random

    rnd = random.Random(5)
    values = []
    for i in range(3000):
        value = frame({"event_id": f"e{i}", "model": rnd.choice(["a", "b"]), "label": rnd.choice([1.0, -1.0, 0.5]),
                       "weight": rnd.choice([None, 1.5, 0.0]), "timestamp": i})
        if rnd.random() < 0.1:
            value = value[:rnd.randrange(len(value))]
        values.append(value)
    want = step_outputs(False, values)
    got = step_outputs(True, values)
    assert len(want[0]) > 500 and sum(len(items) for _, items in want[1]) > 1000  # both outcomes exercised
    assert got == want
