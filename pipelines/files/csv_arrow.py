"""CSV rows through pyarrow's streaming CSV reader (compiled, multi-threaded
parsing and number conversion, exactly rounded like Python's float()).

pyarrow does not report line numbers, so the bytes it reads pass through a
compiled line counter first (:class:`_CountingFile`): without quotes in the
file, the i-th row pyarrow returns is the i-th non-empty line. Anything
this path is not sure about stops it (:class:`Fallback`) before the rows
concerned are handed out: a quote anywhere (a record may then span lines),
any pyarrow error (a bad or missing field, white space around a number,
``1_000``), a non-finite value. The reader then goes on with the Python
path from the first record not yet returned, which either reads it or
raises the located error, so values, line numbers and error texts are
those of the Python path.
"""

from __future__ import annotations

import io
import sys
import time
from typing import Iterator

import numpy as np

from learners.jit import njit

from .blocks import CR8, LF8, QUOTE8, has_byte, open_binary

_BOM = b"\xef\xbb\xbf"
ARROW_BLOCK_BYTES = 1 << 20
ARROW_LET_GO_SECONDS = 10.0
"""How long :func:`arrow_rows` waits, at most, for Arrow's I/O thread to drop the file."""


class Fallback(Exception):
    """The rows from here on must be read by the Python path."""


@njit(cache=True, nogil=True)
def _count_lines(buf, line, has_content, after_cr, out, n_out):
    """Walk buf: the number of each non-empty line that ends here goes to out.
    State across reads: the current line number, whether it has content yet,
    whether the last byte was a CR (so a following LF ends nothing).

    Eight bytes at a time: a word without LF, CR or quote is all content,
    and only the other words (about one in 30 on CSV rows of numbers) are
    walked a byte at a time."""
    n_words = buf.shape[0] // 8
    words = buf[:8 * n_words].view(np.uint64)
    quote = False
    for w in range(n_words):
        word = words[w]
        if not (has_byte(word, LF8) or has_byte(word, CR8) or has_byte(word, QUOTE8)):
            has_content, after_cr = True, False
            continue
        line, has_content, after_cr, n_out, q = _count_bytes(buf, 8 * w, 8 * w + 8, line, has_content, after_cr,
                                                             out, n_out)
        quote = quote or q
    line, has_content, after_cr, n_out, q = _count_bytes(buf, 8 * n_words, buf.shape[0], line, has_content,
                                                         after_cr, out, n_out)
    return line, has_content, after_cr, n_out, quote or q


@njit(cache=True, inline="always")
def _count_bytes(buf, start, end, line, has_content, after_cr, out, n_out):
    """:func:`_count_lines` over buf[start:end], a byte at a time."""
    quote = False
    for i in range(start, end):
        c = buf[i]
        if c == 10 or c == 13:
            if not (c == 10 and after_cr):
                if has_content:
                    out[n_out] = line
                    n_out += 1
                line += 1
                has_content = False
            after_cr = c == 13
            continue
        after_cr = False
        has_content = True
        if c == 34:
            quote = True
    return line, has_content, after_cr, n_out, quote


class _CountingFile(io.RawIOBase):
    """A binary file that notes the line number of each non-empty line it
    hands pyarrow, and whether it has seen a quote."""

    def __init__(self, raw, first_line: int):
        self.raw = raw
        self.line, self.has_content, self.after_cr = first_line, False, False
        self.lines = np.empty(1 << 16, dtype=np.int64)
        self.n_lines = 0
        self.taken = 0
        self.quote = False

    def readable(self):
        return True

    def readinto(self, buffer) -> int:
        n = self.raw.readinto(buffer)
        if n:
            self._count(np.frombuffer(buffer, dtype=np.uint8, count=n))
        elif self.has_content:  # the last line has no line break
            self._count(np.frombuffer(b"\n", dtype=np.uint8))
        return n

    def _count(self, data) -> None:
        if self.lines.shape[0] - self.n_lines < data.shape[0] + 1:
            kept = self.lines[self.taken:self.n_lines]
            self.lines = np.empty(max(2 * self.lines.shape[0], kept.shape[0] + data.shape[0] + 1), dtype=np.int64)
            self.lines[:kept.shape[0]] = kept
            self.n_lines, self.taken = kept.shape[0], 0
        self.line, self.has_content, self.after_cr, self.n_lines, quote = _count_lines(
            data, self.line, self.has_content, self.after_cr, self.lines, self.n_lines)
        self.quote = self.quote or quote

    def take(self, n: int) -> np.ndarray:
        """The line numbers of the next n rows."""
        if self.n_lines - self.taken < n:
            raise Fallback
        out = self.lines[self.taken:self.taken + n].copy()
        self.taken += n
        return out


def data_start(path: str, header_lines: int) -> tuple[int, int]:
    """(byte offset, line number) where the rows start: after a BOM and the
    first ``header_lines`` lines (line breaks LF, CR LF or CR)."""
    with open_binary(path) as f:
        head = f.read(1 << 16)
    offset = 3 if head.startswith(_BOM) else 0
    for _ in range(header_lines):
        breaks = [p for p in (head.find(b"\n", offset), head.find(b"\r", offset)) if p >= 0]
        if not breaks:
            raise Fallback  # a header this long: leave it to the Python path
        offset = min(breaks) + 1
        if head[offset - 1:offset + 1] == b"\r\n":
            offset += 1
        elif head[offset - 1:offset] == b"\r" and offset == len(head):
            raise Fallback
    return offset, header_lines + 1


def arrow_rows(path: str, delimiter: str, n_fields: int, header_lines: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(values (rows, n_fields), line numbers) chunks; raises Fallback where
    the Python path must take over (nothing of that chunk has been returned)."""
    import pyarrow as pa
    from pyarrow import csv

    offset, first_line = data_start(path, header_lines)
    names = [f"c{j}" for j in range(n_fields)]
    raw = open_binary(path)
    reader = None
    try:
        raw.seek(offset)
        counted = _CountingFile(raw, first_line)
        held = sys.getrefcount(counted)  # this frame's references, before Arrow takes its own
        try:
            reader = csv.open_csv(
                counted,
                read_options=csv.ReadOptions(column_names=names, block_size=ARROW_BLOCK_BYTES),
                parse_options=csv.ParseOptions(delimiter=delimiter, quote_char='"', newlines_in_values=False),
                convert_options=csv.ConvertOptions(column_types={name: pa.float64() for name in names},
                                                   null_values=[], strings_can_be_null=False,
                                                   quoted_strings_can_be_null=False))
            for chunk in reader:
                if counted.quote:
                    raise Fallback
                values = np.asarray(chunk.to_tensor(null_to_nan=False, row_major=True))  # one copy, row-major
                if not np.isfinite(values).all():
                    raise Fallback
                yield values, counted.take(chunk.num_rows)
        except pa.ArrowInvalid:
            raise Fallback from None
    finally:
        if reader is not None:
            reader.close()
            del reader
            # The reader's read-ahead can still be in flight on Arrow's I/O
            # thread after the last batch; when it ends, that thread drops the
            # reader and with it the Python file, which needs the GIL. At
            # interpreter exit the thread is then stopped inside a C++
            # destructor and the process aborts ("terminate called without an
            # active exception", exit 134; apache/arrow#34314): seen in about 1
            # of 40 runs of `scinol learn` on a 10-row CSV. So wait, the GIL
            # released, until Arrow has let go of the file.
            deadline = time.monotonic() + ARROW_LET_GO_SECONDS
            while sys.getrefcount(counted) > held and time.monotonic() < deadline:
                time.sleep(0.0005)
        raw.close()
