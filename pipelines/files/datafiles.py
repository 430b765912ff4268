"""Streaming readers for CSV, libsvm/svmlight and (:mod:`.vw_text`) Vowpal
Wabbit text files.

A reader turns a (possibly gzipped) file into CSR `Batch`es for an online
learner and reports bad content as `DataError("path:line:column: message")`.

The fast paths are compiled: libsvm lines through a parser over byte blocks
(:mod:`.libsvm_parse`), CSV through pyarrow's streaming reader
(:mod:`.csv_arrow`). Each hands anything it is not sure of to the Python
path here, which reads it or raises the precise error with its column, so
both paths give the same values, line numbers and messages.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import math
import re
from typing import Iterator

import numpy as np

from learners.jit import njit

from .textbase import (Batch, DataError, Reader, _is_float, _open_text, _read_errors, _RowBuffer,
                       block_batches)

__all__ = ["DataError", "Batch", "Reader", "CsvReader", "LibsvmReader",
           "guess_format", "open_reader"]

_CSV_EXTS = (".csv", ".tsv")
_LIBSVM_EXTS = (".libsvm", ".svm", ".svmlight", ".lsvm")
_VW_EXTS = (".vw",)
_MAX_INDEX = np.iinfo(np.int64).max
_INT_RE = re.compile(r"\s*[+-]?\d+\s*")


@njit(cache=True, nogil=True)
def _dense_rows(dense, columns):
    """CSR (indptr, indices, data) of ``dense[:, columns]``'s non-zero
    entries, row by row, indices ascending: what np.nonzero and a gather give
    in three passes and three temporaries (3x slower with half the values
    zero, 17x on full rows)."""
    n, m = dense.shape[0], columns.shape[0]
    indptr = np.empty(n + 1, np.int64)
    indices = np.empty(n * m, np.int64)
    data = np.empty(n * m, np.float64)
    indptr[0] = k = 0
    for i in range(n):
        for j in range(m):
            v = dense[i, columns[j]]
            if v != 0.0:
                indices[k] = j
                data[k] = v
                k += 1
        indptr[i + 1] = k
    return indptr, indices[:k].copy(), data[:k].copy()


def guess_format(path: str) -> str:
    name = str(path).lower()
    if name.endswith(".gz"):
        name = name[:-3]
    if name.endswith(_CSV_EXTS):
        return "csv"
    if name.endswith(_LIBSVM_EXTS):
        return "libsvm"
    if name.endswith(_VW_EXTS):
        return "vw"
    raise DataError(path, 0, 0, "cannot guess the format from the extension; pass --format csv|libsvm")


def open_reader(path, fmt=None, *, label=None, header="auto", delimiter=None, hash_bits=18, hash_seed=0,
                weight=None) -> "Reader":
    """A reader for csv, libsvm or vw (Vowpal Wabbit text, names hashed with
    hash_bits/hash_seed) files; the format from the extension if not given.
    ``weight``: the CSV column of importance weights (name or index)."""
    path = str(path)
    fmt = fmt or guess_format(path)
    if fmt == "csv":
        return CsvReader(path, label=label, header=header, delimiter=delimiter, weight=weight)
    if weight is not None:
        raise DataError(path, 0, 0, f"a weight column is for CSV files; {fmt} files carry their weights in the "
                                    "label (libsvm label:weight, VW label weight)")
    if fmt == "libsvm":
        return LibsvmReader(path)  # label/header/delimiter do not apply
    if fmt == "vw":
        from .vw_text import VwReader

        return VwReader(path, hash_bits, hash_seed)
    raise DataError(path, 0, 0, f"unknown format {fmt!r}; use csv, libsvm or vw")


# ----------------------------------------------------------------- helpers

class CsvReader(Reader):
    def __init__(self, path, *, label=None, header="auto", delimiter=None, weight=None):
        self.path = path = str(path)
        with _read_errors(path), _open_text(path) as f:
            first = next((text for text in f if text.strip()), None)
        if first is None:
            raise DataError(path, 0, 0, "empty file")
        if delimiter is None:  # the most frequent candidate; ties and "none found" go to ','
            delimiter = max([",", ";", "\t"], key=first.count)
        self._delim = {"\\t": "\t", "tab": "\t"}.get(delimiter, delimiter)

        with contextlib.closing(self._records()) as records:
            line, first_end, row = next(records)
        n = len(row)
        if header == "auto":
            has_header = not all(_is_float(field) for field in row)
        elif header in ("yes", True):
            has_header = True
        elif header in ("no", False):
            has_header = False
        else:
            raise ValueError(f"header must be 'auto', 'yes' or 'no', not {header!r}")
        names = [field.strip() for field in row] if has_header else None

        col = 0 if label is None else _column(path, line, "label", label, names, n)
        wcol = None if weight is None else _column(path, line, "weight", weight, names, n)
        if wcol is not None and wcol == col:
            raise DataError(path, line, 0, f"the weight column {weight!r} is the label column")

        self._n_fields, self._label_col, self._weight_col, self._has_header = n, col, wcol, has_header
        self._header_end = first_end if has_header else 0
        self._feature_cols = np.array([c for c in range(n) if c != col and c != wcol], dtype=np.int64)
        self._col_names = names if names is not None else list(range(n))  # for messages
        self.label_name = self._col_names[col]
        self.n_features = self._feature_cols.shape[0]
        self.feature_names = ([names[c] for c in self._feature_cols] if names is not None
                              else [f"c{j}" for j in range(self.n_features)])

    def _records(self):
        """Yield (first_line, last_line, fields) for each non-blank CSV record."""
        last = 0
        try:
            with _read_errors(self.path), _open_text(self.path, newline="") as f:
                # skipinitialspace so that `1, "a,b"` is read as a quoted field.
                reader = csv.reader(f, delimiter=self._delim, skipinitialspace=True)
                for row in reader:
                    start, last = last + 1, reader.line_num
                    if len(row) <= 1 and (not row or not row[0].strip()):
                        continue  # blank or whitespace-only line
                    yield start, last, row
        except csv.Error as e:
            raise DataError(self.path, last + 1, 0, f"malformed CSV: {e}") from e

    def batches(self, batch_size: int = 4096) -> Iterator[Batch]:
        """Through pyarrow's CSV reader while the file is plain
        (:mod:`pipelines.files.csv_arrow`), from the first record it is
        unsure of in Python."""
        from .csv_arrow import Fallback

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        done = 0
        try:
            for batch in self._arrow_batches(batch_size):
                yield batch
                done += batch.y.shape[0]
            return
        except Fallback:
            pass
        yield from self._python_batches(batch_size, done)

    def _arrow_batches(self, batch_size: int) -> Iterator[Batch]:
        from .csv_arrow import arrow_rows

        values, lines, count = [], [], 0
        with _read_errors(self.path):
            for chunk, chunk_lines in arrow_rows(self.path, self._delim, self._n_fields, self._header_end):
                values.append(chunk)
                lines.append(chunk_lines)
                count += chunk.shape[0]
                if count >= batch_size:
                    table, numbers = np.concatenate(values), np.concatenate(lines)
                    cut = count - count % batch_size
                    for a in range(0, cut, batch_size):
                        yield self._dense_batch(table[a:a + batch_size], numbers[a:a + batch_size])
                    values, lines, count = [table[cut:]], [numbers[cut:]], count - cut
        if count:
            yield self._dense_batch(np.concatenate(values), np.concatenate(lines))

    def _python_batches(self, batch_size: int, skip: int) -> Iterator[Batch]:
        """The records after the header and the first ``skip`` ones, read in Python."""
        n = self._n_fields
        rows, lines = [], []
        records = itertools.islice(self._records(), skip + self._has_header, None)
        for start, end, row in records:
            if len(row) != n:
                raise DataError(self.path, start, 0, f"expected {n} fields, found {len(row)}")
            try:
                values = list(map(float, row))
                total = sum(values)
                ok = total - total == 0  # False iff some value is nan/inf (or the sum overflows)
            except ValueError:
                ok = False
            if not ok:
                values = self._check_row(start, end, row)  # raises the precise error
            rows.append(values)
            lines.append(start)
            if len(rows) == batch_size:
                yield self._batch(rows, lines)
                rows, lines = [], []
        if rows:
            yield self._batch(rows, lines)

    def _batch(self, rows, lines) -> Batch:
        return self._dense_batch(np.array(rows, dtype=np.float64).reshape(len(rows), self._n_fields),
                                 np.array(lines, dtype=np.int64))

    def _dense_batch(self, dense: np.ndarray, lines: np.ndarray) -> Batch:
        indptr, indices, data = _dense_rows(dense, self._feature_cols)
        lines = np.asarray(lines, dtype=np.int64)
        weights = None
        if self._weight_col is not None:
            weights = dense[:, self._weight_col].copy()
            bad = np.flatnonzero(weights < 0)  # finite already: both paths refuse NaN and inf first
            if bad.size:
                i = int(bad[0])
                raise DataError(self.path, int(lines[i]), 0, f"bad weight {float(weights[i])!r} in column "
                                f"{self._col_names[self._weight_col]!r}: importance weights must be >= 0")
        return Batch(indptr, indices, data, dense[:, self._label_col].copy(), lines, weights)

    def _check_row(self, start, end, row) -> list[float]:
        for j, field in enumerate(row):
            text, name = field.strip(), self._col_names[j]
            if not text:
                message = f"empty value in column {name!r}"
            elif not _is_float(text):
                message = f"non-numeric value {text!r} in column {name!r}"
            elif not math.isfinite(float(text)):
                message = f"non-finite value {text!r} in column {name!r}"
            else:
                continue
            raise DataError(self.path, *self._locate(start, end, j), message)
        return [float(field) for field in row]  # all fine; only the fast check's sum overflowed

    def _locate(self, start, end, j):
        """(line, column) of field j of the record on lines start..end.

        The csv module does not report positions, so re-read the record (errors
        only) and rescan it, mirroring csv.reader's quoting rules.  The column
        points at the field's first non-blank character, or its start if blank.
        """
        with _read_errors(self.path), _open_text(self.path, newline="") as f:
            text = "".join(itertools.islice(f, start - 1, end))
        pos = _field_start(text, j, self._delim)
        k = pos
        while k < len(text) and text[k] in " \t" and text[k] != self._delim:
            k += 1
        if k < len(text) and text[k] not in (self._delim, "\r", "\n"):
            pos = k
        line_start = text.rfind("\n", 0, pos) + 1
        return start + text.count("\n", 0, pos), pos - line_start + 1


def _column(path, line, what, spec, names, n) -> int:
    """The index of the ``what`` column given by header name or 0-based index."""
    if isinstance(spec, int) or _INT_RE.fullmatch(spec):
        col = int(spec)
        if not -n <= col < n:
            raise DataError(path, line, 0, f"{what} column index {col} out of range (the file has {n} columns)")
        return col % n
    if names is None:
        raise DataError(path, line, 0, f"{what} column {spec!r} named but the file has no header; give its index instead")
    if spec not in names:
        raise DataError(path, line, 0, f"no {what} column {spec!r} in header (columns: {', '.join(names)})")
    return names.index(spec)


def _field_start(text: str, j: int, delim: str) -> int:
    """Offset of field j in the CSV record `text` (csv.reader's default dialect
    with skipinitialspace: a quote only opens a field at its start, "" inside
    quotes is a literal quote)."""
    field, state = 0, "start"
    for i, ch in enumerate(text):
        if field == j:
            return i
        if state == "quoted":
            state = "closed" if ch == '"' else "quoted"
        elif ch == delim:
            field, state = field + 1, "start"
            if field == j:
                return i + 1
        elif state == "start" and ch == " ":
            pass
        elif ch == '"' and state in ("start", "closed"):
            state = "quoted"
        else:
            state = "plain"
    return len(text)


# ------------------------------------------------------------------ libsvm

class LibsvmReader(Reader):
    """libsvm/svmlight text, parsed by the compiled block parser
    (:mod:`pipelines.files.libsvm_parse`); a line it hands back is parsed
    here in Python, which takes it or raises the located error."""

    def __init__(self, path):
        self.path = str(path)
        with _read_errors(self.path), _open_text(self.path) as f:
            f.read(1)  # surface open errors (missing file, not gzip, ...) now

    def batches(self, batch_size: int = 4096) -> Iterator[Batch]:
        from .blocks import parse_blocks

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        with _read_errors(self.path):
            yield from parse_blocks(self.path, lambda block, line: self._block_batches(block, line, batch_size))

    def _block_batches(self, block, line: int, batch_size: int) -> Iterator[Batch]:
        from .libsvm_parse import parse_libsvm
        from .numbers import POW5_HI, POW5_LO

        rows = _RowBuffer(batch_size)

        def parse(block, pos, line):
            status, pos, line, rows.n = parse_libsvm(block, pos, line, rows.y, rows.weights, rows.lines, rows.indptr,
                                                     rows.indices, rows.data, rows.n, POW5_HI, POW5_LO)
            return status, pos, line

        def python_row(line, text):
            parsed = _python_libsvm_row(self.path, line, text)
            if parsed is not None:
                rows.append(line, *parsed)

        return block_batches(block, line, rows, batch_size, parse, python_row)


def _python_libsvm_row(path, lineno, raw):
    """(label, indices, values, weight) of one line, sorted, zeros dropped;
    None if blank; DataError at its first bad token."""
    text = raw.partition("#")[0]
    tokens = text.split()
    if not tokens:
        return None
    try:
        label, colon, weight = tokens[0].partition(":")
        y, w = float(label), float(weight) if colon else 1.0
        idx, val = [], []
        for token in tokens[1:]:
            k, _, v = token.partition(":")
            if k != "qid":
                idx.append(int(k))
                val.append(float(v))
        total = y + w + sum(val)
        ok = (total - total == 0 and w >= 0 and len(set(idx)) == len(idx)
              and (not idx or (min(idx) >= 0 and max(idx) <= _MAX_INDEX)))
    except ValueError:
        ok = False
    if not ok:
        y, w, idx, val = _parse_libsvm_line(path, lineno, text)
    pairs = sorted((i, v) for i, v in zip(idx, val) if v != 0)
    return y, [i for i, _ in pairs], [v for _, v in pairs], w


def _parse_libsvm_line(path, lineno, text):
    """Slow, careful parse of one libsvm line; raises DataError at the first
    bad token (column = where the token starts)."""
    tokens = [(m.start() + 1, m.group()) for m in re.finditer(r"\S+", text)]
    col, label = tokens[0]
    label, colon, weight = label.partition(":")
    if not _is_float(label):
        raise DataError(path, lineno, col, f"non-numeric value {label!r} for the label")
    y = float(label)
    if not math.isfinite(y):
        raise DataError(path, lineno, col, f"non-finite value {label!r} for the label")
    w = _importance_weight(path, lineno, col + len(label) + 1, weight) if colon else 1.0
    idx, val, seen = [], [], set()
    for col, token in tokens[1:]:
        k, sep, v = token.partition(":")
        if k == "qid":
            continue
        if not (k and sep and v):
            raise DataError(path, lineno, col, f"malformed feature token {token!r} (expected index:value)")
        try:
            i = int(k)
        except ValueError:
            raise DataError(path, lineno, col, f"non-integer feature index {k!r}") from None
        if i < 0:
            raise DataError(path, lineno, col, f"negative feature index {i}")
        if i > _MAX_INDEX:
            raise DataError(path, lineno, col, f"feature index {i} too large")
        if not _is_float(v):
            raise DataError(path, lineno, col, f"non-numeric value {v!r} for feature {i}")
        x = float(v)
        if not math.isfinite(x):
            raise DataError(path, lineno, col, f"non-finite value {v!r} for feature {i}")
        if i in seen:
            raise DataError(path, lineno, col, f"duplicate feature index {i}")
        seen.add(i)
        idx.append(i)
        val.append(x)
    return y, w, idx, val


def _importance_weight(path, lineno, col, text) -> float:
    """An importance weight: a finite number ≥ 0 (DataError "bad weight ..." otherwise)."""
    w = float(text) if _is_float(text) else math.nan
    if not (math.isfinite(w) and w >= 0):
        raise DataError(path, lineno, col, f"bad weight {text!r}: importance weights must be finite numbers >= 0")
    return w
