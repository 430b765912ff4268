"""CSV through pyarrow (pipelines/files/csv_arrow.py) against the Python
path on random files: the same batches, line numbers and error texts,
whichever path reads which rows."""

import gzip
import random

import numpy as np
import pytest

from pipelines.files import csv_arrow
from pipelines.files.datafiles import CsvReader, DataError, open_reader


def batches_of(reader, batch_size, python_only=False):
    try:
        parts = reader._python_batches(batch_size, 0) if python_only else reader.batches(batch_size)
        return [(b.indptr.tolist(), b.indices.tolist(), b.data.tolist(), b.y.tolist(), b.lines.tolist()) for b in parts]
    except DataError as exc:
        return str(exc)


def random_csv(rng, n_rows, n_cols, odd):
    lines = []
    if rng.random() < 0.5:
        lines.append(",".join(["y"] + [f"x{j}" for j in range(1, n_cols)]))
    for _ in range(n_rows):
        if rng.random() < 0.03:
            lines.append("")
        fields = [rng.choice(["%.17g", "%.6g", "%d", "0%.0s"]) % (rng.gauss(0, 1) * 10 ** rng.randint(-5, 5))
                  for _ in range(n_cols)]
        if rng.random() < odd:
            j = rng.randrange(n_cols)
            fields[j] = rng.choice([" 3", "nan", "1_000", '"4"', "", "x", "inf", "1e400", "  "])
        lines.append(",".join(fields))
    end = rng.choice(["\n", "\r\n", "\r"])
    return end.join(lines) + rng.choice([end, ""])


@pytest.mark.parametrize("seed", range(16))
def test_arrow_path_equals_python_path(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    monkeypatch.setattr(csv_arrow, "ARROW_BLOCK_BYTES", rng.choice([512, 4096, 1 << 20]))
    text = random_csv(rng, 600, rng.randint(1, 6), odd=0.0 if seed % 2 == 0 else 0.003)
    if seed % 5 == 1:
        text = "\ufeff" + text
    path = str(tmp_path / ("d.csv.gz" if seed % 4 == 3 else "d.csv"))
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        f.write(text)
    reader = open_reader(path)
    batch_size = rng.choice([7, 100, 4096])
    got = batches_of(reader, batch_size)
    assert got == batches_of(reader, batch_size, python_only=True)
    if seed % 2 == 0:
        assert isinstance(got, list) and sum(len(b[3]) for b in got) == 600


def test_a_plain_file_is_read_by_arrow_alone(tmp_path, monkeypatch):
    path = tmp_path / "d.csv"
    path.write_text("y,a,b\n" + "".join(f"{i % 2},{i}.5,{-i}\n" for i in range(5000)))
    monkeypatch.setattr(CsvReader, "_python_batches", lambda *a: (_ for _ in ()).throw(AssertionError("python path")))
    batches = list(open_reader(str(path), label="y").batches(1000))
    assert [len(b.y) for b in batches] == [1000] * 5
    assert batches[-1].lines[-1] == 5001 and batches[0].data[:2].tolist() == [0.5, 1.5]


def test_quotes_hand_over_to_python_where_arrow_stopped(tmp_path):
    path = tmp_path / "d.csv"
    rows = [f"{i},{i}" for i in range(3000)] + ['1,"2"', "5,6", "1,oops"]
    path.write_text("\n".join(rows) + "\n")
    reader = open_reader(str(path))
    with pytest.raises(DataError) as info:
        list(reader.batches(100))
    assert str(info.value) == f"{path}:3003:3: non-numeric value 'oops' in column 1"
    first = next(iter(reader.batches(3001)))
    assert np.array_equal(first.y, np.r_[np.arange(3000.0), 1.0]) and first.lines[-1] == 3001



def test_arrow_has_let_go_of_the_file_when_arrow_rows_ends(tmp_path, monkeypatch):
    """Arrow's read-ahead may still hold the file when the rows end (here:
    the reader stopped after one batch while slow reads of the next blocks
    are in flight); Arrow then drops it from its own thread, which needs the
    GIL, and at interpreter exit that aborted the process (exit 134).
    arrow_rows waits for Arrow to let go before it returns."""
    import gc
    import time
    import weakref

    path = tmp_path / "d.csv"
    path.write_text("".join(f"{i},{i * 0.5}\n" for i in range(2000)))
    files, read = [], csv_arrow._CountingFile.readinto

    def slow(self, buffer):
        if not files:
            files.append(weakref.ref(self))
        else:
            time.sleep(0.1)  # every read after the first
        return read(self, buffer)

    monkeypatch.setattr(csv_arrow._CountingFile, "readinto", slow)
    monkeypatch.setattr(csv_arrow, "ARROW_BLOCK_BYTES", 4096)
    rows = csv_arrow.arrow_rows(str(path), ",", 2, 0)
    values, _ = next(rows)
    assert values.shape[0] > 0
    rows.close()
    gc.collect()
    assert files[0]() is None  # nothing holds the file: Arrow let go of it before arrow_rows returned


def _count_lines_slowly(data: bytes, line: int, has_content: bool, after_cr: bool):
    """The line counter's contract, a byte at a time in Python."""
    ended, quote = [], False
    for c in data:
        if c in (10, 13):
            if not (c == 10 and after_cr):
                if has_content:
                    ended.append(line)
                line += 1
                has_content = False
            after_cr = c == 13
        else:
            after_cr, has_content = False, True
            quote = quote or c == 34
    return line, has_content, after_cr, ended, quote


@pytest.mark.parametrize("seed", range(10))
def test_the_line_counter_agrees_with_a_byte_at_a_time_walk_across_reads(seed):
    """Words of eight bytes with and without breaks, CR LF split between
    reads and between words, empty lines, quotes, odd read lengths."""
    from pipelines.files.csv_arrow import _count_lines

    rng = np.random.default_rng(seed)
    weights = np.array([7.0] * 10 + [5.0] * 4 + [3.0, 3.0, 0.1 * (seed % 2), 5.0])  # digits .,e- LF CR quote space
    text = rng.choice(np.frombuffer(b'1234567890.,e-\n\r" ', np.uint8), size=5000, p=weights / weights.sum())
    state, slow, got = (1, False, False), (1, False, False), []
    out = np.zeros(len(text) + 1, np.int64)
    pos = 0
    while pos < len(text):
        n = int(rng.integers(0, 40))
        chunk = text[pos:pos + n]
        pos += n
        line, has_content, after_cr, n_out, quote = _count_lines(chunk, *state, out, 0)
        state = (line, has_content, after_cr)
        got.append((list(out[:n_out]), bool(quote)))
        s_line, s_content, s_cr, ended, s_quote = _count_lines_slowly(bytes(chunk), *slow)
        slow = (s_line, s_content, s_cr)
        assert (state, got[-1]) == ((s_line, s_content, s_cr), (ended, s_quote))
