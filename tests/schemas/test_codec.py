"""schemas/: the .avsc files and id map, the Confluent-framed Avro codec, and
the checks an event must pass before a learner sees it. Real Avro bytes
throughout (fastavro); no mocks."""

import datetime
import glob
import io
import json
import os

import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from learners.losses import LabelError, prepare_labels
from pipelines.records import validation
from pipelines.records.validation import validate_event
from schemas import catalog, reasons
from schemas.codec import Codec, DecodeError, EncodeError, feature_kind

from tests.fixtures import make_event_v1
from tests.fixtures.make_event_v1 import EVENT_V1

SCHEMA_DIR = os.path.dirname(catalog.__file__)
FIXTURES = os.path.dirname(make_event_v1.__file__)

T0 = 1_700_000_000_000


def event(features, label=None, weight=None, **kw):
    return {"id": "e1", "timestamp": T0, "model": "default", "features": features, "label": label, "weight": weight, **kw}


DENSE = {"values": [0.5, -1.0, 1299.0]}
SPARSE = {"indices": [3, 0, 1 << 35], "values": [1.0, 2.5, -0.25]}
NAMED = {"values": {"price_cents": 1299.0, "ratio": 0.3}}

SAMPLES = {
    "scinol.Event": [
        event(DENSE, label=1.0, weight=2.0),
        event(SPARSE, label=None),
        event(NAMED, label=0.0),
        event({"values": []}),
        event({"indices": [], "values": []}, label=-3.5),
        event({"values": {}}),
    ],
    "scinol.Prediction": [
        {
            "event_id": "e1", "model": "ctr", "model_version": 41, "score": 0.75, "scores": [0.75],
            "probability": 0.679, "predicted_class": 1, "label": -1.0, "loss": 1.13,
            "event_timestamp": T0, "latency_ms": 12.5,
            "source_topic": "events", "source_partition": 3, "source_offset": 1 << 33,
        },
        {
            "event_id": "e2", "model": "digits", "model_version": 0, "score": -0.1, "scores": [-0.1, 2.0, 0.3],
            "probability": 0.7, "predicted_class": 1, "label": None, "loss": None,
            "event_timestamp": T0, "latency_ms": 0.0,
            "source_topic": None, "source_partition": None, "source_offset": None,
        },
        {
            "event_id": "e3", "model": "price", "model_version": 7, "score": 12.0, "scores": [12.0],
            "probability": None, "predicted_class": None, "label": 11.0, "loss": 0.5,
            "event_timestamp": T0, "latency_ms": 3.25,
            "source_topic": "prices", "source_partition": 0, "source_offset": 0,
        },
    ],
    "scinol.Feedback": [
        {"event_id": "e1", "model": "ctr", "run_id": "r1", "seq": 42, "partition": 3, "offset": 1 << 33,
         "g": [-0.25, 0.5, 0.0], "scalars": {"wealth": 1.5, "t": 3.0}, "checkpoint": True},
        {"event_id": "e2", "model": "digits", "run_id": "r1", "seq": 1, "partition": 0, "offset": 0,
         "g": [], "scalars": {}, "checkpoint": False},
    ],
    "scinol.FeedbackBatch": [
        {"model": "ctr", "run_id": "r1", "event_ids": ["e1", "e2"], "seqs": [42, 43], "partitions": [3, -2],
         "offsets": [1 << 33, 0], "learned": [True, False], "g_width": 3, "g": [-0.25, 0.5, 0.0, 0.0, 0.0, 0.0],
         "scalar_names": ["t", "wealth"], "scalars": [3.0, 1.5, 3.0, 1.5], "checkpoints": [True, False]},
        {"model": "digits", "run_id": "r1", "event_ids": [], "seqs": [], "partitions": [], "offsets": [],
         "learned": [], "g_width": 0, "g": [], "scalar_names": [], "scalars": [], "checkpoints": []},
    ],
    "scinol.ModelCheckpoint": [
        {
            "model": "ctr", "learner": "scinol2", "params": {"epsilon": 1.0}, "loss": "logistic",
            "loss_param": 0.0, "n_outputs": 1, "bias": True, "n_coords": 262145, "event_count": 123456,
            "offsets": [{"topic": "events", "partition": 0, "offset": 61728},
                        {"topic": "events", "partition": 1, "offset": 61728}],
            "schema_version": 1, "checksum": "ab" * 32, "uri": "file:///tmp/ckpt/ctr-123456.scinol",
            "created_ms": T0,
        },
    ],
    "scinol.DeadLetter": [
        {"topic": "events", "partition": 2, "offset": 99, "timestamp": T0, "reason": "undecodable",
         "detail": "magic byte is 7, not 0", "original": b"\x07\x00\xffgarbage", "key": b"\x00user-7",
         "headers": [{"key": "traceparent", "value": b"00-ab"}, {"key": "empty", "value": None},
                     {"key": "traceparent", "value": b"00-cd"}]},
        {"topic": "events", "partition": 0, "offset": 0, "timestamp": 0, "reason": "bad_label",
         "detail": "label is 2.0", "original": b"", "key": None, "headers": None},
    ],
}

FIELDS = {
    "scinol.Event": ["id", "timestamp", "model", "features", "label", "weight"],
    "scinol.Prediction": ["event_id", "model", "model_version", "score", "scores", "probability",
                          "predicted_class", "label", "loss", "event_timestamp", "latency_ms",
                          "source_topic", "source_partition", "source_offset"],
    "scinol.Feedback": ["event_id", "model", "run_id", "seq", "partition", "offset", "g", "scalars",
                        "checkpoint"],
    "scinol.FeedbackBatch": ["model", "run_id", "event_ids", "seqs", "partitions", "offsets", "learned", "g_width",
                             "g", "scalar_names", "scalars", "checkpoints"],
    "scinol.ModelCheckpoint": ["model", "learner", "params", "loss", "loss_param", "n_outputs", "bias",
                               "n_coords", "event_count", "offsets", "schema_version", "checksum", "uri",
                               "created_ms"],
    "scinol.DeadLetter": ["topic", "partition", "offset", "timestamp", "reason", "detail", "original", "key",
                          "headers"],
    "scinol.Label": ["event_id", "model", "label", "weight", "timestamp"],
}


@pytest.fixture(scope="module")
def codec():
    return Codec()


# ------------------------------------------------------------ schema files


def test_id_map_and_schema_files_agree():
    with open(os.path.join(SCHEMA_DIR, "schema_ids.json")) as f:
        id_map = json.load(f)
    assert set(id_map) == set(FIELDS) == set(catalog.RECORD_TYPES)
    listed = set()
    ids = []
    for name, entry in id_map.items():
        assert str(entry["current"]) in entry["versions"]
        for version, sid in entry["versions"].items():
            path = catalog.schema_file(name, int(version))
            listed.add(os.path.basename(path))
            schema = json.loads(open(path).read())
            assert schema["namespace"] == "scinol" and f"scinol.{schema['name']}" == name
            parse_schema(schema)
            ids.append(sid)
    assert len(ids) == len(set(ids)), "two schema versions share an id"
    on_disk = {os.path.basename(p) for p in glob.glob(os.path.join(SCHEMA_DIR, "*.avsc"))}
    assert on_disk == listed, "every .avsc must be in schema_ids.json and vice versa"


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_current_schema_fields(name):
    assert [f["name"] for f in catalog.load_schema(name)["fields"]] == FIELDS[name]


@pytest.mark.parametrize("name, added", [
    ("Prediction", ["source_topic", "source_partition", "source_offset"]),
    ("DeadLetter", ["key", "headers"]),
])
def test_v2_is_v1_plus_fields_that_default_to_null(name, added):
    v1, v2 = catalog.load_schema(name, 1), catalog.load_schema(name, 2)
    assert catalog.current_version(name) == 2
    assert v2["fields"][:len(v1["fields"])] == v1["fields"]
    assert [f["name"] for f in v2["fields"][len(v1["fields"]):]] == added
    for f in v2["fields"][len(v1["fields"]):]:
        assert f["type"][0] == "null" and f["default"] is None  # a plain optional union: compatible both ways
    assert catalog.schema_id(name, 1) != catalog.schema_id(name, 2) == catalog.schema_id(f"scinol.{name}")
    # bytes written with version 1 read as version 2 with the new fields null, and the other way round
    record = {k: v for k, v in SAMPLES[f"scinol.{name}"][0].items() if k not in added}
    codec = Codec()
    old = io.BytesIO()
    old.write(b"\x00" + catalog.schema_id(name, 1).to_bytes(4, "big"))
    schemaless_writer(old, parse_schema(catalog.load_schema(name, 1)), record)
    assert codec.decode(old.getvalue()) == {**record, **{k: None for k in added}}
    new = codec.encode(name, {**record, **{k: None for k in added}})
    assert new[1:5] == catalog.schema_id(name, 2).to_bytes(4, "big")
    assert new[5:] == old.getvalue()[5:] + b"\x00" * len(added)  # the null branch of each new union


def test_event_v2_is_v1_plus_a_defaulted_weight():
    v1, v2 = catalog.load_schema("Event", 1), catalog.load_schema("Event", 2)
    assert catalog.current_version("Event") == 2
    assert [f["name"] for f in v1["fields"]] == FIELDS["scinol.Event"][:-1]
    assert v2["fields"][:-1] == v1["fields"]
    assert v2["fields"][-1] == {**v2["fields"][-1], "name": "weight", "type": ["null", "double"], "default": None}
    assert catalog.schema_id("Event", 1) != catalog.schema_id("Event", 2) == catalog.schema_id("scinol.Event")


def test_event_schema_details():
    fields = {f["name"]: f for f in catalog.load_schema("Event")["fields"]}
    assert fields["timestamp"]["type"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert fields["model"]["default"] == "default"
    assert [b["name"] for b in fields["features"]["type"]] == ["DenseFeatures", "SparseFeatures", "NamedFeatures"]
    assert fields["label"]["type"] == ["null", "double"] and fields["label"]["default"] is None


# --------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip_every_record_type(codec, name):
    for record in SAMPLES[name]:
        data = codec.encode(name, record)
        assert codec.decode(data) == record
        assert codec.decode(data, expected=name) == record
        assert codec.decode(data, expected=name.split(".")[1]) == record
    assert codec.decode_many([codec.encode(name, r) for r in SAMPLES[name]], name) == SAMPLES[name]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_framing_is_magic_zero_then_big_endian_id(codec, name):
    record = SAMPLES[name][0]
    data = codec.encode(name, record)
    sid = catalog.schema_id(name)
    assert data[:5] == bytes([0, (sid >> 24) & 255, (sid >> 16) & 255, (sid >> 8) & 255, sid & 255])
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == sid == codec.schema_id(name)
    # the rest is plain Avro binary of the current schema, nothing else
    body = io.BytesIO()
    schemaless_writer(body, parse_schema(catalog.load_schema(name)), record)
    assert data[5:] == body.getvalue()


def test_features_decode_to_the_branch_they_were_written_as(codec):
    for features, kind in [(DENSE, "dense"), (SPARSE, "sparse"), (NAMED, "named"),
                           ({"values": []}, "dense"), ({"values": {}}, "named")]:
        out = codec.decode(codec.encode("Event", event(features)))["features"]
        assert out == features and feature_kind(out) == kind
    forced = codec.decode(codec.encode("Event", event(("scinol.SparseFeatures", {"indices": [], "values": []}))))
    assert forced["features"] == {"indices": [], "values": []}


def test_defaults_fill_in_and_timestamps_stay_ints(codec):
    minimal = {"id": "e", "timestamp": datetime.datetime(2023, 11, 14, 22, 13, 20, tzinfo=datetime.timezone.utc),
               "features": DENSE}
    out = codec.decode(codec.encode("Event", minimal))
    assert out == {"id": "e", "timestamp": T0, "model": "default", "features": DENSE, "label": None, "weight": None}
    assert type(out["timestamp"]) is int


def test_encode_rejects_records_that_do_not_fit(codec):
    with pytest.raises(EncodeError, match="timestamp"):
        codec.encode("Event", {"id": "e", "features": DENSE})
    with pytest.raises(EncodeError, match="wieght"):
        codec.encode("Event", {**event(DENSE), "wieght": 1.0})
    with pytest.raises(EncodeError):
        codec.encode("Event", event({"idx": [1]}))
    with pytest.raises(EncodeError):
        codec.encode("Prediction", {**SAMPLES["scinol.Prediction"][0], "scores": "0.75"})
    with pytest.raises(ValueError, match="unknown record type 'Evnt'"):
        codec.encode("Evnt", event(DENSE))


# ------------------------------------------------------- schema evolution


def test_checked_in_v1_event_decodes_under_the_v2_reader(codec):
    with open(os.path.join(FIXTURES, "event_v1.bin"), "rb") as f:
        data = f.read()
    assert data[:5] == b"\x00" + catalog.schema_id("Event", 1).to_bytes(4, "big")
    assert catalog.schema_id("Event", 1) != codec.schema_id("Event")
    out = codec.decode(data, expected="Event")
    assert out == {**EVENT_V1, "weight": None}
    assert list(out) == FIELDS["scinol.Event"]
    assert validate_event(out, "logistic") is None


def test_v1_fixture_is_what_the_v1_schema_writes():
    # fails if event.v1.avsc or v1's id were edited: old bytes must stay as they were
    with open(os.path.join(FIXTURES, "event_v1.bin"), "rb") as f:
        assert make_event_v1.frame() == f.read()


@pytest.mark.parametrize("features", [DENSE, SPARSE, NAMED])
def test_v1_events_of_every_feature_kind_read_as_v2(codec, features):
    v1 = parse_schema(catalog.load_schema("Event", 1))
    record = {"id": "old", "timestamp": T0, "model": "m", "features": features, "label": 1.0}
    out = io.BytesIO(b"\x00" + catalog.schema_id("Event", 1).to_bytes(4, "big"))
    out.seek(5)
    schemaless_writer(out, v1, record)
    assert codec.decode(out.getvalue()) == {**record, "weight": None}


# --------------------------------------------------------------- decode errors


def _reason(codec, data, expected=None):
    with pytest.raises(DecodeError) as info:
        codec.decode(data, expected)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(info.value.reason + ": ")
    return info.value.reason, info.value.detail


def test_every_decode_error_reason(codec):
    good = codec.encode("Event", event(SPARSE, label=1.0))
    eid = catalog.schema_id("Event")
    assert _reason(codec, b"")[0] == "undecodable"
    assert _reason(codec, b"\x00\x00\x00\x02")[0] == "undecodable"  # header cut short
    assert _reason(codec, None) == ("undecodable", "no value (None) instead of bytes")  # a Kafka tombstone
    assert _reason(codec, "text")[0] == "undecodable"
    reason, detail = _reason(codec, b"\x01" + good[1:])
    assert reason == "undecodable" and "magic byte is 1" in detail
    reason, detail = _reason(codec, good[:-3])  # truncated Avro
    assert reason == "undecodable" and f"schema id {eid} (scinol.Event), at or before byte" in detail
    reason, detail = _reason(codec, good + b"\x00")  # trailing garbage
    assert reason == "undecodable" and "1 bytes left over" in detail
    reason, detail = _reason(codec, b"\x00" + (999).to_bytes(4, "big") + good[5:])
    assert reason == "unknown_schema_id" and "999" in detail
    prediction = codec.encode("Prediction", SAMPLES["scinol.Prediction"][0])
    reason, detail = _reason(codec, prediction, expected="Event")
    assert reason == "wrong_record_type" and "scinol.Prediction" in detail and "expected scinol.Event" in detail
    # a v1 Event is still an Event
    assert codec.decode(open(os.path.join(FIXTURES, "event_v1.bin"), "rb").read(), "scinol.Event")["id"] == EVENT_V1["id"]
    # a union branch index that does not exist (features: 3 branches)
    dense, named = codec.encode("Event", event({"values": []})), codec.encode("Event", event({"values": {}}))
    at = next(i for i in range(len(dense)) if dense[i] != named[i])  # the features branch byte
    assert (dense[at], named[at]) == (0, 4)  # zigzag 0 and 2
    reason, detail = _reason(codec, dense[:at] + b"\x06" + dense[at + 1 :])
    assert reason == "undecodable"
    assert _reason(codec, good[:5] + b"\x04e1" + b"\x80")[0] == "undecodable"  # timestamp varint never ends


def test_decode_accepts_any_bytes_like(codec):
    data = codec.encode("Event", event(DENSE))
    assert codec.decode(bytearray(data)) == codec.decode(memoryview(data)) == event(DENSE)


def test_expecting_a_record_type_that_does_not_exist_is_a_caller_bug(codec):
    with pytest.raises(ValueError, match="unknown record type 'Evnt'") as info:
        codec.decode(codec.encode("Event", event(DENSE)), expected="Evnt")
    assert not isinstance(info.value, DecodeError)


def test_codec_survives_pickling(codec):
    import pickle

    data = codec.encode("Event", event(SPARSE, label=1.0))
    clone = pickle.loads(pickle.dumps(codec))
    assert clone.decode(data, "Event") == event(SPARSE, label=1.0) and clone.encode("Event", event(SPARSE, label=1.0)) == data


def test_decode_many_keeps_positions(codec):
    good = codec.encode("Event", event(DENSE))
    out = codec.decode_many([good, b"\x07junk", None, good], expected="Event")
    assert out[0] == out[3] == event(DENSE)
    assert [e.reason for e in out[1:3]] == ["undecodable", "undecodable"]


# --------------------------------------------------------------- event checks

GOOD_EVENTS = [
    event(DENSE), event(SPARSE, label=1.0), event(NAMED, label=0.0), event(DENSE, label=-1.0, weight=0.5),
    event({"values": []}), event({"indices": [], "values": []}), event({"values": {}}),
    event(SPARSE, label=float("nan")), event(DENSE, label=None, weight=None),
    event({"values": [1e308, 1e308]}),  # finite values whose sum overflows
    event({"indices": [(1 << 40) - 1], "values": [1.0]}),
]


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_good_events_pass(loss):
    for e in GOOD_EVENTS:
        assert validate_event(e, loss) is None, e


BAD_EVENTS = [
    ("non_finite_feature", event({"values": [1.0, float("nan"), 2.0]}), "feature index 1"),
    ("non_finite_feature", event({"values": [float("inf"), float("-inf")]}), "feature index 0"),
    ("non_finite_feature", event({"indices": [4, 9], "values": [1.0, float("-inf")]}), "feature index 9"),
    ("non_finite_feature", event({"values": {"ok": 1.0, "price": float("nan")}}), "'price'"),
    ("length_mismatch", event({"indices": [1, 2, 3], "values": [1.0, 2.0]}), "3 sparse indices but 2 values"),
    ("negative_index", event({"indices": [0, -5], "values": [1.0, 2.0]}), "-5"),
    ("duplicate_index", event({"indices": [7, 3, 7], "values": [1.0, 2.0, 3.0]}), "feature index 7"),
    ("bad_label", event(DENSE, label=2.0), "2.0"),
    ("bad_label", event(DENSE, label=0.5), "0.5"),
    ("bad_label", event(DENSE, label=float("inf")), "inf"),
    ("non_finite_weight", event(DENSE, weight=float("nan")), "nan"),
    ("non_finite_weight", event(DENSE, weight=float("inf")), "inf"),
    ("bad_weight", event(DENSE, weight=0.0), "0.0"),
    ("bad_weight", event(DENSE, weight=-1.0), "-1.0"),
    ("index_out_of_range", event({"indices": [1 << 40], "values": [1.0]}), str(1 << 40)),
    ("index_out_of_range", event({"indices": [3, 1 << 62], "values": [1.0, 1.0]}), str(1 << 62)),
    ("oversized", event({"values": [0.0] * (validation.MAX_FEATURES + 1)}), "1000001 dense"),
]


@pytest.mark.parametrize("reason,bad,needle", BAD_EVENTS, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BAD_EVENTS)])
def test_every_event_reason(codec, reason, bad, needle):
    assert reason in reasons.EVENT_REASONS and reason in reasons.REASONS
    out = validate_event(bad, "logistic")
    assert out is not None and out[0] == reason, out
    assert needle in out[1], out
    # the same event, as it comes off the wire, gets the same verdict
    assert validate_event(codec.decode(codec.encode("Event", bad)), "logistic") == out


def test_oversized_limits_are_parameters():
    e = event({"values": {"a": 1.0, "b": 2.0, "c": 3.0}})
    assert validate_event(e, "squared", max_features=3) is None
    assert validate_event(e, "squared", max_features=2)[0] == "oversized"
    s = event({"indices": [0, 1, 2], "values": [1.0, 1.0, 1.0]})
    assert validate_event(s, "squared", max_features=2)[0] == "oversized"
    assert validate_event(s, "squared", max_index=3) is None
    assert validate_event(s, "squared", max_index=2)[0] == "index_out_of_range"
    assert validate_event(event({"values": [1.0, 2.0, 3.0]}), "squared", max_index=2)[0] == "index_out_of_range"
    # the size check comes before any per-entry work
    assert validate_event(event({"indices": [-1] * 5, "values": [1.0] * 4}), "squared", max_features=4)[0] == "oversized"


def test_labels_by_loss():
    assert validate_event(event(DENSE, label=2.0), "squared") is None
    assert validate_event(event(DENSE, label=-1e9), "absolute") is None
    assert validate_event(event(DENSE, label=float("inf")), "squared")[0] == "bad_label"
    assert validate_event(event(DENSE, label=2.0), "softmax", n_classes=3) is None
    assert validate_event(event(DENSE, label=0.0), "softmax", n_classes=3) is None
    for y in (3.0, -1.0, 1.5):
        reason, detail = validate_event(event(DENSE, label=y), "softmax", n_classes=3)
        assert reason == "bad_label" and "0..2" in detail
    with pytest.raises(ValueError, match="n_classes"):
        validate_event(event(DENSE), "softmax")
    with pytest.raises(ValueError, match="unknown loss"):
        validate_event(event(DENSE), "logistc")


LOSS_CASES = [("logistic", None), ("hinge", None), ("absolute", None), ("squared", None),
              ("epsilon_insensitive", None), ("softmax", 2), ("softmax", 5)]


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(LOSS_CASES),
       y=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 6).map(float),
                   st.sampled_from([-1.0, 0.0, 1.0, -0.0, 0.5, 4.0, 5.0])))
def test_label_verdict_matches_prepare_labels(case, y):
    loss, k = case
    try:
        prepare_labels(loss, [y], k or 1)
        expected_ok = True
    except LabelError:
        expected_ok = False
    out = validate_event(event(DENSE, label=y), loss, k)
    assert (out is None) == expected_ok, (loss, k, y, out)


# -------------------------------------------------------------------- fuzz

_ALL_IDS = sorted({sid for _, versions in catalog._ID_MAP.values() for sid in versions.values()})


def _valid_frames():
    c = Codec()
    frames = [c.encode(name, r) for name, records in SAMPLES.items() for r in records]
    frames.append(open(os.path.join(FIXTURES, "event_v1.bin"), "rb").read())
    return frames


VALID_FRAMES = _valid_frames()
FUZZ = settings(max_examples=1500, deadline=1000, suppress_health_check=[HealthCheck.too_slow])


def _decode_or_decode_error(codec, data, expected=None):
    try:
        out = codec.decode(data, expected)
    except DecodeError as exc:
        assert exc.reason in reasons.DECODE_REASONS
        return None
    assert isinstance(out, dict)
    return out


@FUZZ
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(codec, data):
    _decode_or_decode_error(codec, data)


@FUZZ
@given(st.sampled_from(_ALL_IDS), st.binary(max_size=300), st.sampled_from([None, "Event", "DeadLetter"]))
def test_fuzz_random_body_behind_a_valid_header(codec, sid, body, expected):
    _decode_or_decode_error(codec, b"\x00" + sid.to_bytes(4, "big") + body, expected)


@FUZZ
@given(st.sampled_from(VALID_FRAMES), st.lists(st.integers(0, 10_000), min_size=1, max_size=6))
def test_fuzz_bit_flipped_valid_records(codec, frame, flips):
    data = bytearray(frame)
    for f in flips:
        data[f // 8 % len(data)] ^= 1 << (f % 8)
    out = _decode_or_decode_error(codec, bytes(data))
    if out is not None and "features" in out:  # a decodable event can still be checked
        validate_event(out, "logistic")


@FUZZ
@given(st.sampled_from(VALID_FRAMES), st.integers(0, 400), st.binary(max_size=20))
def test_fuzz_cut_and_spliced_records(codec, frame, cut, tail):
    _decode_or_decode_error(codec, frame[: cut % (len(frame) + 1)] + tail)
