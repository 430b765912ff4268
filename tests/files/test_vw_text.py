"""Vowpal Wabbit text input (pipelines/files/vw_text.py, vw_parse.py): the
format's rules line by line, the compiled reader against the Python parser
on random files, and VW files as events for `scinol produce`."""

import gzip
import math
import random

import numpy as np
import pytest

from learners.hashing import FeatureHasher
from learners.interactions import namespace_of
from pipelines.files import blocks
from pipelines.files.datafiles import DataError, guess_format, open_reader
from pipelines.files.vw_text import VwReader, feature_name, parse_vw_line, vw_rows
from pipelines.records.events import vw_events


def parse(text):
    return parse_vw_line("f.vw", 1, text)


@pytest.mark.parametrize("text,label,weight,tag", [
    ("1 |a x", 1.0, 1.0, None),
    ("-1 2.5 |a x", -1.0, 2.5, None),
    ("1 2 tag|a x", 1.0, 2.0, "tag"),
    ("1 'tag |a x", 1.0, 1.0, "tag"),
    ("1|a x", None, 1.0, "1"),  # VW: a word touching '|' is the tag, so this is unlabelled
    (" |a x", None, 1.0, None),
    ("'t|a x", None, 1.0, "t"),
    ("0 0 |a x", 0.0, 0.0, None),
    ("3.5", 3.5, 1.0, None),
])
def test_label_importance_and_tag(text, label, weight, tag):
    row = parse(text)
    assert (row.label, row.weight, row.tag) == (label, weight, tag)


def test_namespaces_features_and_values():
    row = parse("1 |a x:2 city:paris 13 |b:0.5 y y:3 |  z :4 q^r |ads w:0 v:-0")
    assert row.features == [("a^x", 2.0), ("a^city^paris", 1.0), ("a^13", 1.0), ("b^y", 0.5), ("b^y", 1.5),
                            ("z", 1.0), ("", 4.0), ("^q^r", 1.0)]
    assert [namespace_of(name) for name, _ in row.features] == [97, 97, 97, 98, 98, 32, 32, 32]
    assert feature_name("ads", "x") == "ads^x" and namespace_of("ads^x") == ord("a")
    assert parse("   \t ") is None


def test_hash_is_the_learner_hash_of_the_name():
    hasher = FeatureHasher(18, 0)
    # VW hashes default-namespace names the same way (murmur3, seed 0): its audit shows z at 170519
    assert hasher.slot("z")[0] == 170519


@pytest.mark.parametrize("text,col,message", [
    ("abc |a x", 1, "non-numeric label 'abc'"),
    ("nan |a x", 1, "non-finite label 'nan'"),
    ("1 x2 |a x", 3, "non-numeric importance weight 'x2'"),
    ("1 -2 |a x", 3, "negative importance weight '-2'"),
    ("1 1 3 |a x", 5, "a third number before '|' ('3', VW's initial prediction) is not supported"),
    ("1 1 3 4 |a x", 7, "too many words before the first '|' (expected [label [importance]] [tag])"),
    ("1 1 t |a x", 5, "unexpected word 't' before '|' (a tag must touch the '|' or start with ')"),
    ("1 |a x:nan", 6, "non-finite value 'nan' for feature 'x'"),
    ("1 |a  x:", 7, "malformed feature 'x:' (no value after ':')"),
    ("1 |a x:1:2", 6, "malformed feature 'x:1:2' (more than one ':')"),
    ("1 |a:z x", 6, "non-numeric namespace 'a' scale 'z'"),
    ("1 |^a x", 4, "namespace name '^a' starts with '^' (reserved for the default namespace)"),
    ("1 |a:1e300 x:1e300", 12, "value of feature 'a^x' overflows (1e+300 × 1e300)"),
])
def test_errors_name_line_and_column(text, col, message):
    with pytest.raises(DataError) as info:
        parse_vw_line("f.vw", 7, text)
    assert (info.value.line, info.value.column, info.value.message) == (7, col, message)
    assert str(info.value) == f"f.vw:7:{col}: {message}"


def test_vw_extension_and_format():
    assert guess_format("data.vw") == "vw" and guess_format("data.VW.gz") == "vw"


def python_rows(path, bits=18, seed=0):
    """The reference: every line parsed in Python, names hashed with FeatureHasher."""
    hasher = FeatureHasher(bits, seed)
    out = []
    for lineno, row in vw_rows(path):
        entries = []
        for name, value in row.features:
            index, sign = hasher.slot(name)
            entries.append((index, sign * value, namespace_of(name)))
        out.append((lineno, row.label, row.weight, row.tag, entries))
    return out


def compiled_rows(path, bits=18, seed=0, batch_size=5):
    out = []
    for b in open_reader(path, "vw", hash_bits=bits, hash_seed=seed).batches(batch_size):
        assert b.weights.dtype == np.float64 and b.namespaces.dtype == np.uint8
        assert b.namespaces.shape == b.indices.shape == b.data.shape
        for r in range(len(b.y)):
            lo, hi = b.indptr[r], b.indptr[r + 1]
            label = None if math.isnan(b.y[r]) else float(b.y[r])
            entries = list(zip(b.indices[lo:hi].tolist(), b.data[lo:hi].tolist(), b.namespaces[lo:hi].tolist()))
            out.append((int(b.lines[r]), label, float(b.weights[r]), b.tags[r] if b.tags else None, entries))
    return out


def outcome(fn, *args):
    try:
        return fn(*args)
    except DataError as exc:
        return str(exc)


NAMES = ["x", "y", "13", "price", "a^b", "w_1", "", "Ünï", "k-9"]
VALUES = ["", ":2", ":-0.5", ":1e-3", ":%.17g", ":0", ":paris", ":1_0", ":1e", ":.5", ":12345678901234567890123"]
ODD = ["x:inf", "x:", "x:1:2", "|^q", "1 2 3", "abc"]


def random_vw_text(rng, n_lines, odd=0.0):
    lines = []
    for _ in range(n_lines):
        if rng.random() < 0.04:
            lines.append(rng.choice(["", "  ", "\t"]))
            continue
        head = rng.choice(["1", "-1", "0.5 2", "1 0", "", "1 'id%d" % rng.randint(0, 9), "-1 3 t%d" % rng.randint(0, 9)])
        bare_tag = head[-2:-1] == "t"  # must touch the '|'
        touching = bare_tag or (head and rng.random() < 0.1)  # a number touching '|' becomes the tag, as in VW
        parts = [head + ("" if touching else " ")]
        for _ in range(rng.randint(1 if bare_tag else 0, 3)):
            space = rng.choice(["a", "b", "ads", "c:2", "b:-0.5", " ", ""])
            feats = []
            for _ in range(rng.randint(0, 5)):
                value = rng.choice(VALUES)
                if "%" in value:
                    value = value % rng.gauss(0, 3)
                feats.append(rng.choice(NAMES) + value)
            if rng.random() < odd:
                feats.append(rng.choice(ODD))
            parts.append("|" + space + " " + " ".join(feats) + rng.choice([" ", "", "\t"]))
        lines.append("".join(parts))
    ends = [rng.choice(["\n", "\r\n"]) if rng.random() < 0.1 else "\n" for _ in lines]
    return "".join(line + end for line, end in zip(lines, ends))


@pytest.mark.parametrize("seed", range(12))
def test_compiled_reader_equals_the_python_parser(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", rng.choice([64, 333, 1 << 14]))
    text = random_vw_text(rng, 300, odd=0.0 if seed % 3 == 0 else 0.02)
    path = str(tmp_path / ("d.vw.gz" if seed % 4 == 3 else "d.vw"))
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        f.write(text)
    bits, hash_seed = rng.choice([(18, 0), (10, 77)])
    want = outcome(python_rows, path, bits, hash_seed)
    got = outcome(compiled_rows, path, bits, hash_seed)
    assert got == want
    if seed % 3 == 0:
        assert isinstance(got, list) and len(got) > 250


def test_batch_fields(tmp_path):
    path = tmp_path / "d.vw"
    path.write_text("1 2 first|a x:2 |b y\n\n-1 |a x\n0 0 'third |a x y\n")
    (b,) = VwReader(str(path)).batches()
    assert b.y.tolist() == [1.0, -1.0, 0.0] and b.weights.tolist() == [2.0, 1.0, 0.0]
    assert b.lines.tolist() == [1, 3, 4] and b.tags == ["first", None, "third"]
    assert b.indptr.tolist() == [0, 2, 3, 5] and b.namespaces.tolist() == [97, 98, 97, 97, 97]
    path.write_text("1 |a x\n")
    (b,) = VwReader(str(path)).batches()
    assert b.tags is None


def test_a_bad_line_deep_in_a_file_is_located(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 100)
    path = tmp_path / "d.vw"
    path.write_text("".join(f"1 |a x:{i}\n" for i in range(1, 500)) + "1 |a x:1 y:z:3\n")
    with pytest.raises(DataError) as info:
        list(VwReader(str(path)).batches(64))
    assert str(info.value) == f"{path}:500:10: malformed feature 'y:z:3' (more than one ':')"


def test_vw_events_are_named_features(tmp_path):
    path = tmp_path / "d.vw"
    path.write_text("1 2 t1|a x:2 x:1 |b y\n-1 |  z\n0.5 0 |a x\n")
    events = list(vw_events(str(path), "m"))
    assert [e["id"] for e in events] == ["t1", "d.vw:2", "d.vw:3"]
    assert events[0]["features"] == {"values": {"a^x": 3.0, "b^y": 1.0}}
    assert (events[0]["label"], events[0]["weight"]) == (1.0, 2.0)
    assert (events[1]["label"], events[1]["weight"]) == (-1.0, None)
    assert (events[2]["label"], events[2]["weight"]) == (None, None)  # weight 0: VW learns nothing from it
    assert all(e["model"] == "m" for e in events)
