"""What every text-file reader shares: the located error (DataError), the
batch it yields (Batch), the reader interface, opening (gzip, BOM) and
read errors, and the row buffer the compiled parsers fill."""

from __future__ import annotations

import contextlib
import gzip
import zlib
from typing import Iterator, NamedTuple

import numpy as np


class DataError(ValueError):
    """Bad input file content, located as path:line:column (1-based).

    line/column are 0 when not applicable; a 0 part is left out of the
    message, so str(e) is "path:line:col: msg", "path:line: msg" or
    "path: msg".
    """

    def __init__(self, path, line: int, column: int, message: str):
        self.path, self.line, self.column, self.message = str(path), line, column, message
        where = self.path
        if line:
            where += f":{line}" + (f":{column}" if column else "")
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # keep picklable (e.g. across multiprocessing)
        return (type(self), (self.path, self.line, self.column, self.message))


class Batch(NamedTuple):
    indptr: np.ndarray   # int64, len n+1
    indices: np.ndarray  # int64 feature indices, sorted within each row (VW: as read, may repeat)
    data: np.ndarray     # float64 values, exact zeros dropped
    y: np.ndarray        # float64 labels, len n (NaN: unlabelled, VW only)
    lines: np.ndarray    # int64 1-based line number of each example
    weights: np.ndarray | None = None     # float64 importance weights ≥ 0 (VW, libsvm label:weight, CSV
                                          # weight column); None: all 1
    namespaces: np.ndarray | None = None  # VW: uint8 namespace byte of each entry (learners.interactions)
    tags: list | None = None              # VW: each example's tag or None; None if the batch has no tag


def _open_text(path: str, newline=None):
    # utf-8-sig: a BOM (as written by Excel) must not end up in the first header name.
    if path.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8-sig", newline=newline)
    return open(path, encoding="utf-8-sig", newline=newline)


@contextlib.contextmanager
def _read_errors(path: str):
    """Turn I/O and decoding failures (also those surfacing mid-file, e.g. a
    truncated or non-gzip .gz) into DataError(path, 0, 0, "cannot read: ...")."""
    try:
        yield
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise DataError(path, 0, 0, f"cannot read: {reason}") from e


def _is_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


class Reader:
    """Common interface of CsvReader and LibsvmReader."""

    path: str
    feature_names: list[str] | None = None
    n_features: int | None = None
    label_name: str | int | None = None

    def batches(self, batch_size: int = 4096) -> Iterator[Batch]:
        raise NotImplementedError


# --------------------------------------------------------------------- CSV

class _RowBuffer:
    """The rows of the batch being filled, in arrays the compiled parsers
    write into (``n`` rows so far; entries of row i at indptr[i]:indptr[i+1])."""

    def __init__(self, capacity: int, values: int = 1 << 16):
        self.y = np.empty(capacity)
        self.weights = np.ones(capacity)
        self.lines = np.empty(capacity, dtype=np.int64)
        self.indptr = np.zeros(capacity + 1, dtype=np.int64)
        self.indices = np.empty(values, dtype=np.int64)
        self.data = np.empty(values)
        self.n = 0

    def grow(self, at_least: int = 0) -> None:
        size = max(2 * self.indices.shape[0], at_least)
        self.indices = np.resize(self.indices, size)
        self.data = np.resize(self.data, size)

    def append(self, line: int, y: float, indices, values, weight: float = 1.0) -> None:
        """One row parsed in Python."""
        lo = self.indptr[self.n]
        hi = lo + len(indices)
        if hi > self.indices.shape[0]:
            self.grow(hi)
        self.indices[lo:hi] = indices
        self.data[lo:hi] = values
        self.y[self.n], self.lines[self.n], self.weights[self.n] = y, line, weight
        self.n += 1
        self.indptr[self.n] = hi

    def take(self) -> Batch:
        """The filled rows as a Batch of fresh arrays (weights None when all
        are 1); the buffer starts over."""
        n, nnz = self.n, self.indptr[self.n]
        weighted = bool(np.any(self.weights[:n] != 1.0))
        batch = Batch(self.indptr[:n + 1].copy(), self.indices[:nnz].copy(), self.data[:nnz].copy(),
                      self.y[:n].copy(), self.lines[:n].copy(), self.weights[:n].copy() if weighted else None)
        self.weights[:n] = 1.0
        self.n = 0
        return batch


def _line_text(block: np.ndarray, start: int, end: int) -> str:
    return bytes(block[start:end]).decode("utf-8")


def block_batches(block: np.ndarray, line: int, rows: _RowBuffer, batch_size: int, parse, python_row) -> Iterator[Batch]:
    """The batches of one block of whole lines, its first line numbered
    ``line``. ``parse(block, pos, line)`` runs a compiled parser from pos and
    returns (status, pos, line) as :mod:`.libsvm_parse` defines them, filling
    ``rows``; ``python_row(line, text)`` adds the line it hands back (or raises
    the located error)."""
    from .blocks import line_end
    from .libsvm_parse import DONE, PYTHON, ROWS_FULL, VALUES_FULL

    pos = 0
    while True:
        status, pos, line = parse(block, pos, line)
        if status == DONE:
            break
        if status == VALUES_FULL:
            rows.grow()
        elif status == PYTHON:
            text_end, next_pos = line_end(block, pos)
            python_row(line, _line_text(block, pos, text_end))
            pos, line = next_pos, line + 1
        if status == ROWS_FULL or rows.n == batch_size:
            yield rows.take()
    if rows.n:
        yield rows.take()
