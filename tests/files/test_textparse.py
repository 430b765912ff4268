"""The compiled text parsers against slow references: decimal numbers against
Python's float(), the libsvm block reader against line-by-line Python
parsing of the same text (values, line numbers and error texts)."""

import gzip
import math
import random

import numpy as np
import pytest

from learners.jit import njit  # lazy, as the kernels it calls: numba's own would meet them uncompiled
from pipelines.files import blocks
from pipelines.files.datafiles import DataError, _python_libsvm_row, open_reader
from pipelines.files.numbers import NOT_A_NUMBER, OK, POW5_HI, POW5_LO, UNDECIDED, parse_decimal


@njit
def _parse_all(buf, starts, ends, status, values):
    for k in range(starts.shape[0]):
        status[k], values[k] = parse_decimal(buf, starts[k], ends[k], POW5_HI, POW5_LO)


def parse_many(tokens):
    data = " ".join(tokens).encode()
    lengths = np.array([len(t.encode()) for t in tokens], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
    status, values = np.empty(len(tokens), dtype=np.int64), np.empty(len(tokens))
    _parse_all(np.frombuffer(data, dtype=np.uint8), starts, starts + lengths, status, values)
    return status, values


def assert_like_float(tokens, min_decided=0.9):
    status, values = parse_many(tokens)
    assert set(status.tolist()) <= {OK, UNDECIDED}
    assert (status == OK).mean() >= min_decided
    for token, s, v in zip(tokens, status.tolist(), values.tolist()):
        if s == OK:
            want = float(token)
            assert v == want and math.copysign(1, v) == math.copysign(1, want), (token, v, want)


def test_decimals_round_like_python_float():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(100_000) * 10.0 ** rng.integers(-300, 300, 100_000)
    assert_like_float(["%.17g" % v for v in x])
    assert_like_float([repr(float(v)) for v in x])
    assert_like_float(["%.9g" % v for v in x])
    assert_like_float(["%.4f" % v for v in rng.standard_normal(20000) * 100], min_decided=1.0)


def test_decimals_from_random_bit_patterns():
    rng = np.random.default_rng(1)
    d = rng.integers(0, 2**64 - 1, 200_000, dtype=np.uint64, endpoint=True).view(np.float64)
    d = d[np.isfinite(d)]
    assert_like_float(["%.17g" % v for v in d], min_decided=0.99)  # subnormals are left to Python


def test_decimals_from_random_digit_strings():
    rng = random.Random(2)
    tokens = []
    for _ in range(100_000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 22)))
        point = rng.randint(0, len(digits))
        sign = rng.choice(["", "-", "+"])
        exp = rng.choice(["", f"e{rng.randint(-350, 330)}", f"E+{rng.randint(0, 40)}"])
        tokens.append(f"{sign}{digits[:point]}.{digits[point:]}{exp}")
    assert_like_float(tokens, min_decided=0.8)


def test_decimals_exactly_halfway_between_doubles_round_to_even():
    """Midpoints of doubles in [2^53, 2^63) are integers of at most 19 digits:
    the ties the rounding must send to the even neighbour."""
    rng = np.random.default_rng(3)
    tokens = []
    for e in range(53, 63):
        for v in rng.uniform(2.0 ** e, 2.0 ** (e + 1), 2000):
            mid = (int(v) + int(np.nextafter(v, np.inf))) // 2
            tokens.append(str(mid))
            zeros = len(str(mid)) - len(str(mid).rstrip("0"))
            if zeros:
                tokens.append(f"{mid // 10 ** zeros}e{zeros}")
    assert_like_float(tokens, min_decided=1.0)


@pytest.mark.parametrize("token", ["0", "-0", "+0.0e10", ".5", "5.", "1e23", "9007199254740993", "0.1",
                                   "1.7976931348623157e308", "2.2250738585072014e-308", "123456789012345678e-30",
                                   "00000000000000000000000000001", "1E5", "-1e-5"])
def test_decimal_edge_cases(token):
    assert_like_float([token], min_decided=1.0)


@pytest.mark.parametrize("token", ["", ".", "+", "-", "e5", "1e", "1e+", "1.5.2", "0x10", "inf", "nan", "1_0",
                                   "1,5", "1 ", "--1", "1e5x"])
def test_non_numbers(token):
    status, _ = parse_many([token])
    assert status[0] == NOT_A_NUMBER


@pytest.mark.parametrize("token", ["1e400", "1e-400", "4.9e-324", "1234567890123456789012"])
def test_out_of_range_and_long_numbers_are_left_to_python(token):
    status, _ = parse_many([token])
    assert status[0] == UNDECIDED


# ------------------------------------------------------------------ libsvm

def python_libsvm(path):
    """The reference: text-mode lines (universal newlines, BOM dropped), each parsed in Python."""
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt", encoding="utf-8-sig") as f:
        for lineno, raw in enumerate(f, 1):
            row = _python_libsvm_row(path, lineno, raw)
            if row is not None:
                out.append((lineno, row[0], list(zip(row[1], row[2]))))
    return out


def compiled_libsvm(path, batch_size=7):
    out = []
    for b in open_reader(path, "libsvm").batches(batch_size):
        for r in range(len(b.y)):
            lo, hi = b.indptr[r], b.indptr[r + 1]
            out.append((int(b.lines[r]), float(b.y[r]), list(zip(b.indices[lo:hi].tolist(), b.data[lo:hi].tolist()))))
    return out


def outcome(fn, path):
    try:
        return fn(path)
    except DataError as exc:
        return str(exc)


ODD_TOKENS = ["qid:3", "qid", "#c 9:9", "# é", "3:1_0", "+4:1", "05:2", "1.5", "7:1e400", "8:-0", "9:0",
              "6:+.5e-3", "12345678901234567890:1", "4:inf", "2:1e-400", "3:\u00a05", "x", "11:4:4"]


def random_libsvm_text(rng, n_lines, odd=0.05):
    lines = []
    for _ in range(n_lines):
        if rng.random() < 0.05:
            lines.append(rng.choice(["", "   ", "# only a comment", "\t"]))
            continue
        label = rng.choice(["1", "-1", "0.25", "%.17g" % rng.gauss(0, 1), "+1"])
        idx = rng.sample(range(1, 60), rng.randint(0, 8))
        tokens = [f"{i}:{rng.choice(['%.9g', '%.17g', '%g'] ) % (rng.gauss(0, 1) * 10 ** rng.randint(-8, 8))}" for i in idx]
        if rng.random() < odd:
            tokens.insert(rng.randint(0, len(tokens)), rng.choice(ODD_TOKENS))
        sep = rng.choice([" ", "\t", "  ", " \v"]) if rng.random() < 0.2 else " "
        lines.append(sep.join([label] + tokens))
    ends = [rng.choice(["\n", "\r\n", "\r"]) if rng.random() < 0.1 else "\n" for _ in lines]
    return "".join(line + end for line, end in zip(lines, ends))


@pytest.mark.parametrize("seed", range(12))
def test_libsvm_reader_equals_line_by_line_python(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(blocks, "BLOCK_BYTES", rng.choice([64, 257, 4096]))  # lines cross block ends
    text = random_libsvm_text(rng, 400, odd=0.0 if seed % 3 == 0 else 0.03)
    if seed % 4 == 1:
        text = "\ufeff" + text
    path = str(tmp_path / ("d.svm.gz" if seed % 5 == 2 else "d.svm"))
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        f.write(text)
    want, got = outcome(python_libsvm, path), outcome(compiled_libsvm, path)
    assert got == want
    if seed % 3 == 0:
        assert isinstance(got, list) and len(got) > 300


def test_libsvm_without_final_newline_and_long_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(blocks, "BLOCK_BYTES", 16)
    path = tmp_path / "d.svm"
    path.write_text("1 " + " ".join(f"{i}:{i}.5" for i in range(1, 300)) + "\n-1 3:1")
    assert compiled_libsvm(str(path)) == python_libsvm(str(path))
    assert compiled_libsvm(str(path))[-1] == (2, -1.0, [(3, 1.0)])


@pytest.mark.parametrize("seed", range(3))
def test_libsvm_long_rows_out_of_order(tmp_path, seed):
    """Rows longer than any of the random ones, shuffled or reversed, are
    sorted in place as Python sorts them; a repeated index anywhere in a
    long row is Python's error, not a silently merged row."""
    rng = random.Random(seed)
    rows = [rng.sample(range(1, 5000), rng.randint(100, 2000)) for _ in range(20)]
    rows.append(list(range(3000, 0, -1)))
    path = tmp_path / "d.svm"
    path.write_text("".join("1 " + " ".join(f"{i}:{i % 7 - 3}.25" for i in idx) + "\n" for idx in rows))
    got = compiled_libsvm(str(path))
    assert got == python_libsvm(str(path))
    assert [[i for i, _ in row] for _, _, row in got] == [sorted(idx) for idx in rows]
    repeat = rows[0] + [rows[0][rng.randrange(len(rows[0]))]]
    rng.shuffle(repeat)
    path.write_text("1 3:1\n-1 " + " ".join(f"{i}:1" for i in repeat) + "\n")
    assert outcome(compiled_libsvm, str(path)) == outcome(python_libsvm, str(path))
    error = outcome(compiled_libsvm, str(path))
    assert ":2:" in error and "duplicate feature index" in error
