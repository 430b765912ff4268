"""The compiled libsvm/svmlight line parser over byte blocks.

``label index:value ...`` per line, ``#`` starts a comment, ``qid:...``
tokens are skipped. The label may carry an importance weight,
``label:weight`` (as XGBoost's libsvm text reads it); without one it is 1. The parser fills CSR arrays for whole lines, rows
sorted by index with zero values dropped. Any line it does not fully
understand (an odd token, a duplicate index, bytes outside ASCII, a number
:mod:`pipelines.files.numbers` leaves undecided) is handed back untouched
(``PYTHON``): the reader parses that one line in Python, which either takes
it or raises the precise error. So the compiled path only ever speeds up
lines whose meaning is plain.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit

from .numbers import OK, scan_decimal

DONE, ROWS_FULL, VALUES_FULL, PYTHON = 0, 1, 2, 3
_INDEX_DIGITS = 18  # below int64's maximum; longer indices go to Python


@njit(cache=True, inline="always")
def is_blank(c):
    return c == 32 or c == 9 or c == 11 or c == 12  # space, tab, \v, \f


@njit(cache=True, inline="always")
def is_line_end(c):
    return c == 10 or c == 13


@njit(cache=True, inline="always")
def needs_python(c):
    """Bytes Python's str.split() may treat as white space, and non-ASCII."""
    return 28 <= c <= 31 or c >= 128


@njit(cache=True, inline="always")
def _sift_down(indices, values, lo, root, end):
    """Restore the max-heap (by index) at lo + root over lo..lo + end."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and indices[lo + child + 1] > indices[lo + child]:
            child += 1
        if indices[lo + root] >= indices[lo + child]:
            return
        a, b = lo + root, lo + child
        indices[a], indices[b] = indices[b], indices[a]
        values[a], values[b] = values[b], values[a]
        root = child


@njit(cache=True, _nrt=False)
def sort_row(indices, values, lo, hi):
    """Sort entries lo..hi by index, in place (a heap sort: the parsers
    allocate nothing, so they run without numba's reference counting);
    False if an index repeats. Not stable, and need not be: a row with a
    repeated index goes to Python whole."""
    ordered = True
    for p in range(lo + 1, hi):
        if indices[p] <= indices[p - 1]:
            ordered = False
            break
    if ordered:
        return True
    n = hi - lo
    for root in range(n // 2 - 1, -1, -1):
        _sift_down(indices, values, lo, root, n)
    for end in range(n - 1, 0, -1):
        indices[lo], indices[lo + end] = indices[lo + end], indices[lo]
        values[lo], values[lo + end] = values[lo + end], values[lo]
        _sift_down(indices, values, lo, 0, end)
    for p in range(lo + 1, hi):
        if indices[p] == indices[p - 1]:
            return False
    return True


@njit(cache=True, inline="always")
def drop_zeros(indices, values, lo, hi):
    """Compact entries lo..hi without exact zeros; the new end."""
    out = lo
    for p in range(lo, hi):
        if values[p] != 0.0:
            indices[out] = indices[p]
            values[out] = values[p]
            out += 1
    return out


@njit(cache=True, inline="always")
def ends_token(c):
    return is_blank(c) or is_line_end(c) or c == 35  # 35: '#', a comment


@njit(cache=True, inline="always")
def _is_qid(buf, start, end):
    return end - start == 3 and buf[start] == 113 and buf[start + 1] == 105 and buf[start + 2] == 100


@njit(cache=True, _nrt=False)
def _parse_line(buf, pos, indices, values, nnz, pow5_hi, pow5_lo):
    """(kind, next line's position, nnz after the row, label, weight) for the
    line at pos, in one pass: kind 1 a row, 0 a blank line, or PYTHON / VALUES_FULL."""
    n, cap = buf.shape[0], indices.shape[0]
    i, tokens, label, weight = pos, 0, 0.0, 1.0
    while True:
        while i < n and is_blank(buf[i]):
            i += 1
        if i == n or is_line_end(buf[i]) or buf[i] == 35:
            break
        if tokens == 0:
            status, label, i = scan_decimal(buf, i, n, pow5_hi, pow5_lo)
            if status == OK and i < n and buf[i] == 58:  # label:weight; a bad weight is Python's to report
                status, weight, i = scan_decimal(buf, i + 1, n, pow5_hi, pow5_lo)
                if not weight >= 0.0:
                    return PYTHON, pos, nnz, 0.0, 1.0
            if status != OK or (i < n and not ends_token(buf[i])):
                return PYTHON, pos, nnz, 0.0, 1.0
            tokens = 1
            continue
        start = i
        index = 0
        while i < n and 48 <= buf[i] <= 57:
            index = index * 10 + (buf[i] - 48)
            i += 1
        if i == n or buf[i] != 58 or i == start or i - start > _INDEX_DIGITS:
            while i < n and not (ends_token(buf[i]) or buf[i] == 58):
                i += 1
            if not _is_qid(buf, start, i):
                return PYTHON, pos, nnz, 0.0, 1.0
            while i < n and not ends_token(buf[i]):  # qid:... is skipped
                i += 1
            continue
        status, value, i = scan_decimal(buf, i + 1, n, pow5_hi, pow5_lo)
        if status != OK or (i < n and not ends_token(buf[i])):
            return PYTHON, pos, nnz, 0.0, 1.0
        if nnz == cap:
            return VALUES_FULL, pos, nnz, 0.0, 1.0
        indices[nnz] = index
        values[nnz] = value
        nnz += 1
    while i < n and not is_line_end(buf[i]):  # a comment: Python checks non-ASCII text
        if needs_python(buf[i]):
            return PYTHON, pos, nnz, 0.0, 1.0
        i += 1
    if i < n and buf[i] == 13 and i + 1 < n and buf[i + 1] == 10:
        i += 1
    return (1 if tokens else 0), i + 1, nnz, label, weight


@njit(cache=True, nogil=True, _nrt=False)
def parse_libsvm(buf, pos, line, labels, weights, lines, indptr, indices, values, n_rows, pow5_hi, pow5_lo):
    """Parse lines of buf from pos into rows n_rows, n_rows + 1, ... of the
    output arrays (indptr[n_rows] is where the next row's entries start).

    Returns (status, pos, line, n_rows): DONE at the end of buf; ROWS_FULL
    when the row arrays are full; VALUES_FULL when a row did not fit in
    indices/values (pos is that line's start: grow them and call again);
    PYTHON when the line at pos must be parsed in Python. ``line`` is the
    1-based number of the line at pos.
    """
    n, rows_cap = buf.shape[0], labels.shape[0]
    while pos < n:
        if n_rows == rows_cap:
            return ROWS_FULL, pos, line, n_rows
        lo = indptr[n_rows]
        kind, next_pos, hi, label, weight = _parse_line(buf, pos, indices, values, lo, pow5_hi, pow5_lo)
        if kind == PYTHON or kind == VALUES_FULL:
            return kind, pos, line, n_rows
        if kind == 1:
            if not sort_row(indices, values, lo, hi):
                return PYTHON, pos, line, n_rows
            labels[n_rows] = label
            weights[n_rows] = weight
            lines[n_rows] = line
            indptr[n_rows + 1] = drop_zeros(indices, values, lo, hi)
            n_rows += 1
        pos = next_pos
        line += 1
    return DONE, pos, line, n_rows
