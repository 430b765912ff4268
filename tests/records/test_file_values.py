"""file_values: data file rows encoded a batch per compiled call are the
Event records file_events gives, framed byte for byte as the codec frames
them (the path ``scinol produce FILE`` takes)."""

import os

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipelines.files.datafiles import open_reader
from pipelines.records.event_values import file_values
from pipelines.records.events import file_events
from schemas.codec import Codec

FILES = {
    "rows.libsvm": ("1 1:2 3:1.5 7:-2\n-1:0 2:1\n1:0.5\n0 5:1e300 9:-0.0\n-1:1 1:1\n-1:2.5 4:3\n", {}),
    "rows.csv": ("y,a,b,w\n1,0,2,0.5\n-1,-0.0,3,0\n1,1,1,1\n0,1e-300,-7,2\n", {"label": "y", "weight": "w"}),
    "plain.csv": ("a,b,c\n1,2,0\n0,0,0\n3.25,-1,1\n", {"label": "c"}),
}


@pytest.mark.parametrize("name", sorted(FILES))
@pytest.mark.parametrize("model", ["default", "mödel-ünïcode"])
def test_values_are_the_codecs_frames_of_file_events(tmp_path, name, model):
    text, options = FILES[name]
    path = os.path.join(tmp_path, name)
    with open(path, "w") as f:
        f.write(text)
    codec = Codec()
    fast = list(file_values(open_reader(path, None, **options), model, codec, None))
    slow = list(file_events(open_reader(path, None, **options), model))
    assert len(fast) == len(slow) == text.count("\n") - name.endswith(".csv")
    for value, event in zip(fast, slow):
        got = codec.decode(value)
        assert abs(got.pop("timestamp") - event.pop("timestamp")) < 60_000
        assert got == {**event, "features": got["features"]} and _same(got["features"], event["features"])
        assert codec.encode("scinol.Event", codec.decode(value)) == value  # byte for byte the codec's framing


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) and
                                        np.array_equal(np.signbit(np.asarray(a[k], float)),
                                                       np.signbit(np.asarray(b[k], float))) for k in a)


def test_many_batches_keep_order_and_line_ids(tmp_path):
    path = os.path.join(tmp_path, "many.libsvm")
    rng = np.random.default_rng(0)
    with open(path, "w") as f:
        for i in range(30_000):
            f.write(f"{rng.choice([-1, 1])} {i % 97 + 1}:{rng.normal():.6g}\n")
    codec = Codec()
    ids = [codec.decode(v)["id"] for v in file_values(open_reader(path, None), "default", codec, None)]
    assert ids == [f"many.libsvm:{line}" for line in range(1, 30_001)]


def _random_vw_line(rng, i: int) -> str:
    """A VW line with what the format allows: labels, importance weights (0,
    1 and others), both tag forms, namespaces with scales, repeated names,
    text values, zero values, names with '^', and now and then a non-ASCII
    name (a line the compiled parser hands to Python)."""
    head = rng.choice(["", "1 ", "-1 2.5 ", "0.5 0 ", "1 1 ", f"1 'tag{i} ", f"-1 tag{i}", "3 0.25 "])
    parts = [head]
    for _ in range(rng.integers(1, 4)):  # at least one '|': "-1 tag7" alone would be two numbers
        space = rng.choice(["|", "|a", "|abc:0.5", "|b:-2", "| ", "|é"] if rng.random() < 0.05 else
                           ["|", "|a", "|abc:0.5", "|b:-2", "| "])
        words = []
        for _ in range(rng.integers(0, 6)):
            name = rng.choice(["x", "y", "z", "a^b", "13", "long_feature_name"])
            value = rng.choice(["", ":2", ":-1.5", ":0", ":txt", ":1e-300", ":-0.0", ":7e2"])
            words.append(name + value)
        parts.append(space + " " + " ".join(words) + " ")
    return "".join(parts).rstrip() if rng.random() < 0.9 else ""


@pytest.mark.parametrize("seed, block_bytes", [(0, None), (1, None), (2, 4096)])
def test_vw_values_are_the_codecs_frames_byte_for_byte(tmp_path, monkeypatch, seed, block_bytes):
    """VW text, encoded by the compiled kernel (names kept by the parser,
    repeats summed in the order they come), against vw_events + the codec,
    with the clock stopped so that the timestamps agree: identical bytes.
    One line has 70,000 features with long names, past the parser's first
    entry and name buffers; one file is read in 4 KiB blocks (blocks parsed
    on threads, each tag read from its own block)."""
    import time

    from pipelines.files import blocks

    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.123)
    if block_bytes:
        monkeypatch.setattr(blocks, "BLOCK_BYTES", block_bytes)
    rng = np.random.default_rng(seed)
    lines = [_random_vw_line(rng, i) for i in range(3000)]
    lines[1234] = "1 |wide " + " ".join(f"feature_with_a_long_name_{k % 50_000}:{k}" for k in range(70_000))
    path = os.path.join(tmp_path, "rows.vw")
    with open(path, "w", newline="") as f:
        f.write("".join(line + ("\r\n" if k % 7 == 0 else "\n") for k, line in enumerate(lines)))
    codec = Codec()
    fast = list(file_values(open_reader(path, None), "mödel", codec, None))
    slow = [codec.encode("scinol.Event", e) for e in file_events(open_reader(path, None), "mödel")]
    assert len(fast) == len(slow) == sum(1 for line in lines if line.strip())
    assert fast == slow
    assert any(len(codec.decode(v)["features"]["values"]) == 50_000 for v in fast)


def test_repeated_names_are_found_behind_equal_hashes():
    """Names whose hashes collide stay apart; a repeated name is summed
    into its first occurrence, in the order the values come."""
    from pipelines.records.avro.event_writer import _first_names

    names = np.frombuffer(b"aabaab", np.uint8)  # "a", "ab", "a" | "ab": two rows
    name_ends = np.array([1, 3, 4, 6])
    indptr = np.array([0, 3, 4])
    values = np.array([0.1, 5.0, 0.2, 1.0])
    keep, summed = _first_names(indptr, np.zeros(4, np.int64), names, name_ends, values)
    assert keep.tolist() == [True, True, False, True]
    assert summed[0] == 0.1 + 0.2 and summed[1] == 5.0 and summed[3] == 1.0


@settings(max_examples=150, deadline=None)
@example([[("a", 1.0), ("ab", 2.0)] * 20 + [("b", 0.5), ("a", 0.25)]], 1)  # one hash: every probe collides
@given(st.lists(st.lists(st.tuples(st.sampled_from(["a", "ab", "b", "ba", "abc", "c"]),
                                   st.floats(-10, 10, allow_nan=False)), max_size=80), min_size=1, max_size=4),
       st.integers(1, 3))
def test_repeated_names_match_a_dict_filled_in_line_order(rows, n_hashes):
    """Rows with hashes that collide across names (a few hash values for
    six names), against a dict: the first occurrence of each name kept,
    later values added to it in line order."""
    from pipelines.records.avro.event_writer import _first_names

    flat = [entry for row in rows for entry in row]
    names = np.frombuffer("".join(name for name, _ in flat).encode(), np.uint8)
    name_ends = np.cumsum([len(name) for name, _ in flat]).astype(np.int64)
    hashes = np.array([(len(name) % n_hashes) * -977 for name, _ in flat], np.int64)  # negative, as int64 hashes may be
    indptr = np.cumsum([0] + [len(row) for row in rows]).astype(np.int64)
    keep, summed = _first_names(indptr, hashes, names, name_ends, np.array([v for _, v in flat], np.float64))
    got = [{flat[k][0]: summed[k] for k in range(indptr[r], indptr[r + 1]) if keep[k]} for r in range(len(rows))]
    want = []
    for row in rows:
        first: dict = {}
        for name, value in row:
            first[name] = first[name] + value if name in first else value
        want.append(first)
    assert got == want
    assert [[flat[k][0] for k in range(indptr[r], indptr[r + 1]) if keep[k]] for r in range(len(rows))] == \
        [list(w) for w in want]  # kept in the order names first come
