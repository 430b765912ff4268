"""Sharded mode's feedback travels in FeedbackBatch messages: the Feedback
records of a batch, as columns, survive the Avro bytes exactly."""

import math

import pytest

from pipelines.records import feedback as fb
from pipelines.records.feedback import FeedbackColumns, end_markers, feedback_batches, feedback_records
from pipelines.records.strings import Strings
from schemas.codec import Codec, DecodeError
from schemas.reasons import WRONG_RECORD_TYPE


def records(n=7):
    """Feedback as the Combiner makes it: labelled and unlabelled events, a
    late label's (labels-topic) partition, and a checkpoint mark."""
    out = []
    for i in range(n):
        labelled = i % 3 != 1
        out.append({"event_id": f"e{i}", "model": "ctr", "run_id": "r1", "seq": 40 + i,
                    "partition": -2 if i == 4 else 0, "offset": (1 << 33) + i,
                    "g": [-0.25 * i, 0.5, math.pi] if labelled else [],
                    "scalars": {"t": float(i), "wealth": 1.0 + i / 3.0}, "checkpoint": i == 5})
    return out


def through_kafka_bytes(batches):
    codec = Codec()
    return [codec.decode(codec.encode("FeedbackBatch", b), expected="FeedbackBatch") for b in batches]


def test_a_batch_round_trips_through_avro_exactly():
    want = records()
    batches = feedback_batches(want)
    assert len(batches) == 1
    (back,) = through_kafka_bytes(batches)
    assert back["seqs"] == list(range(40, 47)) and back["g_width"] == 3
    assert feedback_records(back) == want


def test_a_wide_batch_is_split_under_the_message_limit(monkeypatch):
    monkeypatch.setattr(fb, "BATCH_BYTES", 300)  # about 4 events of 3 g's and 2 scalars
    want = records(23)
    batches = feedback_batches(want)
    assert len(batches) > 3
    assert [r for b in through_kafka_bytes(batches) for r in feedback_records(b)] == want


def test_control_records_get_batches_of_their_own():
    """The feedback reader's control records carry no scalars: a batch never
    mixes them with events' records (whose scalars it would lose)."""
    heartbeat = {"event_id": "", "model": "ctr", "run_id": "r1", "seq": 46, "partition": -1, "offset": -1,
                 "g": [], "scalars": {}, "checkpoint": True}
    want = records(3) + [heartbeat] + records(2)
    batches = feedback_batches(want)
    assert [len(b["seqs"]) for b in batches] == [3, 1, 2]
    assert [r for b in through_kafka_bytes(batches) for r in feedback_records(b)] == want
    assert [end_markers([FeedbackColumns.of_batch(b)]) for b in batches] == [False, True, False]


def test_a_feedback_reader_names_what_else_it_found():
    codec = Codec()
    label = {"event_id": "e1", "model": "m", "label": 1.0, "weight": None, "timestamp": 0}
    with pytest.raises(DecodeError, match="expected scinol.FeedbackBatch") as err:
        codec.decode(codec.encode("Label", label), expected="FeedbackBatch")
    assert err.value.reason == WRONG_RECORD_TYPE


def test_columns_make_the_batches_their_records_make():
    """The Combiner hands over columns, run by run; a run with nothing
    learned has no g columns at all."""
    want = records(9)
    runs = [FeedbackColumns.of_records(part) for part in (want[:1], want[1:2], want[2:])]
    assert runs[1].g.shape == (1, 0)
    assert feedback_batches(runs) == feedback_batches(want)
    assert [r for b in through_kafka_bytes(feedback_batches(runs)) for r in feedback_records(b)] == want


def test_fault_trials_lose_and_repeat_events_feedback():
    want = records(6)
    out = FeedbackColumns.of_records(want).faulted(drop={41, 44}, duplicate={42})
    assert out.seqs.tolist() == [40, 42, 42, 43, 45]
    assert feedback_records(feedback_batches([out])[0]) == [want[i] for i in (0, 2, 2, 3, 5)]


def test_no_records_no_message():
    assert feedback_batches([]) == []


def random_columns(rng, n: int, width: int, m: int) -> FeedbackColumns:
    """Columns with what the codec must get right: non-ASCII and empty ids,
    labels-topic (negative) partitions, offsets past 2^32, extreme doubles."""
    ids = [("é" * int(rng.integers(0, 3)) + f"e{i}") if i % 11 else "" for i in range(n)]
    g = rng.standard_normal((n, width)) * 10.0 ** rng.integers(-300, 300, (n, width))
    return FeedbackColumns("mødel", "r1", Strings.of(ids), rng.integers(0, 1 << 62, n),
                           rng.integers(-(1 << 31), 1 << 31, n),
                           rng.integers(-1, 1 << 62, n), rng.random(n) < 0.6, g, [f"s{j}" for j in range(m)],
                           rng.standard_normal((n, m)), rng.random(n) < 0.1)


@pytest.mark.parametrize("seed", range(4))
def test_compiled_feedback_values_are_the_codec_bytes(seed, monkeypatch):
    """The combine step writes each FeedbackBatch in one compiled call:
    byte for byte what the codec writes for the batches, split as they are,
    for records and columns, empty widths and no scalars included."""
    import numpy as np

    rng, codec = np.random.default_rng(seed), Codec()
    monkeypatch.setattr(fb, "BATCH_BYTES", 2000)  # several batches a run
    runs = [random_columns(rng, int(rng.integers(1, 120)), int(rng.integers(0, 4)), int(rng.integers(0, 3)))
            for _ in range(5)]
    for parts in ([runs[0]], runs[1:3], runs, records(9)):
        want = [codec.encode("scinol.FeedbackBatch", b, "fb") for b in feedback_batches(parts)]
        assert fb.feedback_values(parts, codec, "fb") == want and len(want) >= 1
