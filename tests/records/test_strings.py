"""The column of strings the sharded steps carry event ids in: each row
reads back as written, through slices, gathers, joins and pickling, and a
pickle holds only its own rows' bytes."""

import pickle

import numpy as np

from pipelines.records.strings import Strings

TEXTS = ["e1", "", "événement-2", "事件3", "e4", ""]


def test_rows_read_back_as_written_through_slices_gathers_and_joins():
    s = Strings.of(TEXTS)
    assert len(s) == 6 and [s[i] for i in range(6)] == TEXTS and s.tolist() == TEXTS and list(s) == TEXTS
    assert s[2:5] == TEXTS[2:5] and s.take(np.array([3, 0, 3])) == ["事件3", "e1", "事件3"]
    assert Strings.concat([s[4:], Strings.of([]), s[:2]]) == TEXTS[4:] + TEXTS[:2]
    assert s.encoded() == [t.encode() for t in TEXTS]
    assert s.empty().tolist() == [t == "" for t in TEXTS]
    assert s != TEXTS[:-1] and s != ["x"] * 6 and Strings.of([]) == []


def test_rows_of_a_larger_buffer_join_into_their_own_bytes():
    """As the decoders make them: rows of a message buffer, with other bytes between."""
    raw = b"\x04e1\x99\x99\x0c\xc3\xa9v\xc3\xa9nt"
    s = Strings(np.frombuffer(raw, np.uint8), np.array([6, 1, 6]), np.array([13, 3, 6]))
    assert s == ["évént", "e1", ""]
    buf, lengths = s.joined()
    assert buf.tobytes() == "événte1".encode() and lengths.tolist() == [7, 2, 0]


def test_a_pickle_holds_only_its_rows():
    big = Strings.of([f"id-{i}" for i in range(10_000)])
    part = big[100:103]
    back = pickle.loads(pickle.dumps(part))
    assert back == ["id-100", "id-101", "id-102"]
    assert back.buf.shape[0] == len(b"id-100id-101id-102")
    assert len(pickle.dumps(part)) < len(pickle.dumps(big)) / 50
