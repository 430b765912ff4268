"""The compiled parser of Vowpal Wabbit's text format over byte blocks; the
rules are :mod:`pipelines.files.vw_text`'s, which parses in Python any line
this parser hands back (``PYTHON``): lines with non-ASCII bytes, numbers
:mod:`pipelines.files.numbers` leaves undecided, values Python's float()
might read differently (``1_0``, ``inf``), and every line with an error. So
both paths give the same rows, and errors come from one place.

Each feature comes out hashed as the learner hashes names
(:mod:`learners.hashing`: signed MurmurHash3 of the UTF-8 name), its name
built as ``ns^name`` (``name`` in the default namespace, ``^name`` there if
the name holds a ``^``; a string value ``v`` makes ``name^v`` with value 1),
with its namespace byte for :mod:`learners.interactions`.
"""

from __future__ import annotations

import math

import numpy as np

from learners.jit import njit

from learners.murmur import murmur3_bytes

from .libsvm_parse import DONE, PYTHON, ROWS_FULL, VALUES_FULL
from .numbers import OK, UNDECIDED, scan_decimal

__all__ = ["DONE", "PYTHON", "ROWS_FULL", "VALUES_FULL", "parse_vw"]

_BAR, _COLON, _CARET, _QUOTE = 124, 58, 94, 39
_DEFAULT_NAMESPACE = 32
_ROW, _BLANK = 1, 0


@njit(cache=True, inline="always")
def _blank(c):
    return c == 32 or c == 9


@njit(cache=True, inline="always")
def _line_end(c):
    return c == 10 or c == 13


@njit(cache=True, inline="always")
def _stops(c):
    return c == 32 or c == 9 or c == 10 or c == 13 or c == _BAR


@njit(cache=True)
def _python_might_read(buf, start, end):
    """Whether Python's float() might read buf[start:end] although the
    compiled syntax does not: digits with '_', or inf/infinity/nan."""
    for p in range(start, end):
        if buf[p] == 95:  # _
            return True
    if start < end and (buf[start] == 43 or buf[start] == 45):
        start += 1
    n = end - start
    if n != 3 and n != 8:
        return False
    word = 0
    for p in range(start, end):
        word = word * 256 + (buf[p] | 32)  # lower case
    return word == 0x696E66 or word == 0x6E616E or word == 0x696E66696E697479  # inf nan infinity


@njit(cache=True, inline="always")
def _copy(src, start, end, dst, at):
    for p in range(start, end):
        dst[at] = src[p]
        at += 1
    return at


@njit(cache=True, inline="always")
def _label_section(buf, i, n, starts, ends, pow5_hi, pow5_lo):
    """(ok, position after it, label, weight, tag start, tag end)."""
    words = 0
    while True:
        while i < n and _blank(buf[i]):
            i += 1
        if i == n or _line_end(buf[i]) or buf[i] == _BAR:
            break
        if words == starts.shape[0]:
            return False, i, 0.0, 0.0, -1, -1
        starts[words] = i
        while i < n and not _stops(buf[i]):
            if buf[i] >= 128:
                return False, i, 0.0, 0.0, -1, -1
            i += 1
        ends[words] = i
        words += 1
    tag_start, tag_end = -1, -1
    if words and buf[starts[words - 1]] == _QUOTE:
        words -= 1
        tag_start, tag_end = starts[words] + 1, ends[words]
    elif words and i < n and buf[i] == _BAR and ends[words - 1] == i:  # a word touching '|' is the tag
        words -= 1
        tag_start, tag_end = starts[words], ends[words]
    if words > 2:
        return False, i, 0.0, 0.0, -1, -1
    label, weight = np.nan, 1.0
    if words >= 1:
        status, label, stop = scan_decimal(buf, starts[0], ends[0], pow5_hi, pow5_lo)
        if status != OK or stop != ends[0]:
            return False, i, 0.0, 0.0, -1, -1
    if words == 2:
        status, weight, stop = scan_decimal(buf, starts[1], ends[1], pow5_hi, pow5_lo)
        if status != OK or stop != ends[1] or weight < 0:
            return False, i, 0.0, 0.0, -1, -1
    return True, i, label, weight, tag_start, tag_end


@njit(cache=True, inline="always")
def _vw_line(buf, pos, words_start, words_end, indices, values, spaces, nnz, scratch, name_ends, mask, seed,
             pow5_hi, pow5_lo):
    """(kind, next line's position, nnz after the row, label, weight, tag
    start, tag end) for the line at pos; kind _ROW, _BLANK, PYTHON or
    VALUES_FULL. Each name is built in ``scratch`` to be hashed: at 0, or,
    when ``name_ends`` is not empty (names kept), after the previous entry's
    name, its end in ``name_ends`` and its value unsigned."""
    n, cap = buf.shape[0], indices.shape[0]
    keep = name_ends.shape[0] > 0
    i = pos
    while i < n and _blank(buf[i]):
        i += 1
    if i == n or _line_end(buf[i]):
        if i < n and buf[i] == 13 and i + 1 < n and buf[i + 1] == 10:
            i += 1
        return _BLANK, i + 1, nnz, 0.0, 0.0, -1, -1
    ok, i, label, weight, tag_start, tag_end = _label_section(buf, pos, n, words_start, words_end, pow5_hi, pow5_lo)
    if not ok:
        return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
    while i < n and buf[i] == _BAR:
        i += 1
        ns_start, ns_end, letter, scale = 0, -1, _DEFAULT_NAMESPACE, 1.0
        if i < n and not _stops(buf[i]):  # a namespace name[:scale]
            start, colon = i, -1
            while i < n and not _stops(buf[i]):
                if buf[i] >= 128:
                    return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
                if buf[i] == _COLON and colon < 0:
                    colon = i
                i += 1
            name_end = i
            if colon >= 0:
                name_end = colon
                status, scale, stop = scan_decimal(buf, colon + 1, i, pow5_hi, pow5_lo)
                if status != OK or stop != i:
                    return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
            if name_end > start:
                if buf[start] == _CARET:
                    return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
                ns_start, ns_end, letter = start, name_end, buf[start]
                if not keep:  # once for all its features, at the start of scratch
                    _copy(buf, start, name_end, scratch, 0)
                    scratch[name_end - start] = _CARET
        while True:
            while i < n and _blank(buf[i]):
                i += 1
            if i == n or _line_end(buf[i]) or buf[i] == _BAR:
                break
            start, colon, caret = i, -1, False
            while i < n and not _stops(buf[i]):
                c = buf[i]
                if c >= 128:
                    return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
                if c == _COLON:
                    if colon >= 0:
                        return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
                    colon = i
                elif c == _CARET:
                    caret = True
                i += 1
            name_end, value, text_value = i, 1.0, False
            if colon >= 0:
                name_end = colon
                if colon + 1 == i:
                    return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
                status, number, stop = scan_decimal(buf, colon + 1, i, pow5_hi, pow5_lo)
                if stop == i and status == OK:
                    value = number
                elif (stop == i and status == UNDECIDED) or _python_might_read(buf, colon + 1, i):
                    return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
                else:
                    text_value = True
            value *= scale
            if not math.isfinite(value):
                return PYTHON, pos, nnz, 0.0, 0.0, -1, -1
            if value == 0.0:
                continue
            if nnz == cap:
                return VALUES_FULL, pos, nnz, 0.0, 0.0, -1, -1
            at = name_ends[nnz - 1] if keep and nnz > 0 else 0
            if keep and at + (ns_end - ns_start) + (i - start) + 3 > scratch.shape[0]:
                return VALUES_FULL, pos, nnz, 0.0, 0.0, -1, -1
            length = at
            if ns_end >= 0 and not keep:
                length = ns_end - ns_start + 1
            elif ns_end >= 0:
                length = _copy(buf, ns_start, ns_end, scratch, length)
                scratch[length] = _CARET
                length += 1
            elif caret or text_value:
                scratch[length] = _CARET
                length += 1
            length = _copy(buf, start, name_end, scratch, length)
            if text_value:
                scratch[length] = _CARET
                length = _copy(buf, colon + 1, i, scratch, length + 1)
            h = murmur3_bytes(scratch, at, length, seed)
            indices[nnz] = np.int64(h) & mask
            if keep:
                values[nnz] = value
                name_ends[nnz] = length
            else:
                values[nnz] = -value if h >> np.uint64(31) else value
            spaces[nnz] = letter
            nnz += 1
    if i < n and buf[i] == 13 and i + 1 < n and buf[i + 1] == 10:
        i += 1
    return _ROW, i + 1, nnz, label, weight, tag_start, tag_end


@njit(cache=True, nogil=True, _nrt=False)
def parse_vw(buf, pos, line, labels, weights, lines, tags, indptr, indices, values, spaces, n_rows,
             scratch, name_ends, words, mask, seed, pow5_hi, pow5_lo):
    """Parse lines of buf from pos into rows n_rows, n_rows + 1, ... (as
    :func:`pipelines.files.libsvm_parse.parse_libsvm`); ``tags[r]`` is the
    (start, end) of row r's tag in buf, (-1, -1) without one. ``scratch``
    must hold twice the longest line. To keep the names (``scinol
    produce``), give ``name_ends`` as long as ``indices``: entry k's name is
    then scratch[name_ends[k - 1]:name_ends[k]] (from 0 for the first
    entry), its value unsigned, its index the hash & ``mask``; VALUES_FULL
    also when ``scratch`` is full. Else give an empty ``name_ends``.
    ``words`` is a (2, 4) int64 scratch for a label section's words: this
    function allocates nothing, so it compiles without reference counting."""
    n, rows_cap = buf.shape[0], labels.shape[0]
    words_start, words_end = words[0], words[1]
    while pos < n:
        if n_rows == rows_cap:
            return ROWS_FULL, pos, line, n_rows
        lo = indptr[n_rows]
        kind, next_pos, hi, label, weight, tag_start, tag_end = _vw_line(
            buf, pos, words_start, words_end, indices, values, spaces, lo, scratch, name_ends, mask, seed,
            pow5_hi, pow5_lo)
        if kind == PYTHON or kind == VALUES_FULL:
            return kind, pos, line, n_rows
        if kind == _ROW:
            labels[n_rows] = label
            weights[n_rows] = weight
            lines[n_rows] = line
            tags[n_rows, 0] = tag_start
            tags[n_rows, 1] = tag_end
            indptr[n_rows + 1] = hi
            n_rows += 1
        pos = next_pos
        line += 1
    return DONE, pos, line, n_rows
