"""The compiled FeedbackBatch reader against the codec (fastavro): the same
record for every message the codec reads, the same error for every one it
refuses, on random batches, arrays written in several blocks, and every
truncation and byte flip of a message."""

import math
import struct

import numpy as np
import pytest

import pipelines.records.feedback as fb
from pipelines.records.feedback import FeedbackColumns, FeedbackReader, feedback_batches, feedback_parts
from pipelines.records.strings import Strings
from schemas.codec import Codec, DecodeError


def random_batch(rng, n=None) -> dict:
    n = int(rng.integers(0, 40)) if n is None else n
    width, names = int(rng.integers(0, 4)), ["t", "wealth", "Σ"][: int(rng.integers(0, 4))]
    special = np.array([0.0, -0.0, math.inf, -math.inf, 5e-324, 1.7976931348623157e308])
    g = rng.normal(size=(n, width)) * 10.0 ** rng.integers(-300, 300, size=(n, width))
    g[rng.random((n, width)) < 0.1] = rng.choice(special)
    columns = FeedbackColumns(
        rng.choice(["default", "ctr-π", ""]), f"run-{rng.integers(1 << 40)}",
        Strings.of(rng.choice(["", "e", "événement-", "事件"]) + str(i) for i in range(n)),
        rng.integers(-(1 << 62), 1 << 62, n), rng.integers(-(1 << 31), 1 << 31, n),
        rng.integers(-(1 << 62), 1 << 62, n), rng.random(n) < 0.7, g, names,
        rng.normal(size=(n, len(names))), rng.random(n) < 0.2)
    return feedback_batches([columns])[0] if n else {**columns._batch(0, 0), "g_width": width}


def same(a: dict, b: dict) -> bool:
    """Equal records, doubles compared by their bits (NaN, -0.0)."""
    def bits(rec):
        return {k: [struct.pack("<d", x) for x in v] if k in ("g", "scalars") else v for k, v in rec.items()}
    return bits(a) == bits(b)


def outcome(decode, value):
    try:
        return decode(value)
    except DecodeError as exc:
        return (exc.reason, str(exc))


# -- a slow Avro writer, for the arrays in blocks that other writers make (Avro 1.11 spec, "Binary Encoding")

def zigzag(v: int) -> bytes:
    u, out = (v << 1) ^ (v >> 63), bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    return bytes(out + bytes([u]))


def avro_string(s: str) -> bytes:
    raw = s.encode()
    return zigzag(len(raw)) + raw


def avro_array(items: list, item, block: int) -> bytes:
    """``items`` in blocks of ``block``; a negative block size writes each
    block's count negated and its size in bytes, as the spec allows."""
    out = b""
    for lo in range(0, len(items), abs(block)):
        body = b"".join(item(x) for x in items[lo: lo + abs(block)])
        count = len(items[lo: lo + abs(block)])
        out += zigzag(-count) + zigzag(len(body)) + body if block < 0 else zigzag(count) + body
    return out + b"\0"


def written_in_blocks(header: bytes, rec: dict, block: int) -> bytes:
    double, flag = (lambda x: struct.pack("<d", x)), (lambda b: bytes([b]))
    return header + b"".join([
        avro_string(rec["model"]), avro_string(rec["run_id"]), avro_array(rec["event_ids"], avro_string, block),
        avro_array(rec["seqs"], zigzag, block), avro_array(rec["partitions"], zigzag, block),
        avro_array(rec["offsets"], zigzag, block), avro_array(rec["learned"], flag, block), zigzag(rec["g_width"]),
        avro_array(rec["g"], double, block), avro_array(rec["scalar_names"], avro_string, block),
        avro_array(rec["scalars"], double, block), avro_array(rec["checkpoints"], flag, block)])


# --


def test_random_batches_read_as_the_codec_reads_them_without_the_codec():
    codec, rng = Codec(), np.random.default_rng(7)
    reader = FeedbackReader(codec)
    values = [codec.encode("FeedbackBatch", random_batch(rng)) for _ in range(300)]
    want = [codec.decode(v, expected="FeedbackBatch") for v in values]
    codec.decode = None  # the compiled path alone: a call to the codec would fail the test
    got = [reader.decode(v) for v in values]
    assert all(same(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("block", [1, 3, -2])
def test_arrays_written_in_blocks_read_as_the_codec_reads_them(block):
    codec, rng = Codec(), np.random.default_rng(block + 10)
    reader = FeedbackReader(codec)
    header = codec.encode("FeedbackBatch", random_batch(rng, 0))[:5]
    records = [random_batch(rng, int(rng.integers(1, 12))) for _ in range(30)]
    values = [written_in_blocks(header, rec, block) for rec in records]
    assert all(same(codec.decode(v, expected="FeedbackBatch"), rec) for v, rec in zip(values, records))
    if block > 0:  # counted blocks are the compiled reader's; sized ones (negative counts) the codec's
        codec.decode = None
    assert all(same(reader.decode(v), rec) for v, rec in zip(values, records))


def test_every_truncation_and_byte_flip_gets_the_codecs_answer():
    codec, rng = Codec(), np.random.default_rng(3)
    reader = FeedbackReader(codec)
    value = codec.encode("FeedbackBatch", random_batch(rng, 6))
    broken = [value[:k] for k in range(len(value))] + [value + b"\0"]
    for _ in range(1500):
        flipped = bytearray(value)
        flipped[int(rng.integers(5, len(value)))] ^= int(rng.integers(1, 256))
        broken.append(bytes(flipped))
    for v in broken:
        got, want = outcome(reader.decode, v), outcome(lambda b: codec.decode(b, expected="FeedbackBatch"), v)
        assert same(got, want) if isinstance(want, dict) else got == want, v


def test_other_records_and_schema_ids_get_the_codecs_error():
    codec = Codec()
    reader = FeedbackReader(codec)
    label = codec.encode("Label", {"event_id": "e1", "model": "m", "label": 1.0, "weight": None, "timestamp": 0})
    unknown = b"\0\0\0\x7f\xff" + codec.encode("FeedbackBatch", random_batch(np.random.default_rng(1), 2))[5:]
    for value in (label, unknown, None, b""):
        with pytest.raises(DecodeError) as got:
            reader.decode(value)
        with pytest.raises(DecodeError) as want:
            codec.decode(value, expected="FeedbackBatch")
        assert (got.value.reason, str(got.value)) == (want.value.reason, str(want.value))


def test_columns_hold_what_the_codec_reads_and_refuse_columns_of_other_lengths():
    codec, rng = Codec(), np.random.default_rng(11)
    reader = FeedbackReader(codec)
    for _ in range(200):
        value = codec.encode("FeedbackBatch", random_batch(rng))
        assert same(reader.columns(value)._batch(0, None), codec.decode(value, expected="FeedbackBatch"))
    ragged = {**random_batch(rng, 3), "g_width": 2, "g": [1.0, 2.0, 3.0]}  # 3 events, 3 values of width 2
    value = codec.encode("FeedbackBatch", ragged)
    assert same(reader.decode(value), ragged)  # a record the codec reads...
    with pytest.raises(DecodeError, match="3 events holds 3 g values of width 2"):
        reader.columns(value)  # ...but no columns a shard could apply
    empty = {**random_batch(rng, 0), "g_width": -5}  # no events, a negative width: no rows to shape
    value = codec.encode("FeedbackBatch", empty)
    assert same(reader.decode(value), empty)
    with pytest.raises(DecodeError, match="width -5"):
        reader.columns(value)


def test_feedback_parts_are_the_batches_as_columns(monkeypatch):
    rng = np.random.default_rng(5)
    records = [random_batch(rng, 30) for _ in range(3)]
    monkeypatch.setattr(fb, "BATCH_BYTES", 1000)  # a few events a message: runs are split
    columns = [FeedbackColumns.of_batch(r) for r in records]
    parts = feedback_parts(columns)
    assert len(parts) > len(records)
    assert [p._batch(0, None) for p in parts] == feedback_batches(columns)
