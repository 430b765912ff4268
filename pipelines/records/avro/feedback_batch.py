"""Sharded mode's ``scinol.FeedbackBatch`` in compiled code: a message's
body read into columns (:func:`decode_feedback_batch`) and columns written
as a framed message (:func:`encode_feedback_batch`), for
:mod:`pipelines.records.feedback`.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit

from .primitives import (BOOLEAN, INT, LONG, STRING, read_array, read_doubles, read_long, read_string, write_double,
                         write_long, write_string)

LAYOUTS = {("scinol.FeedbackBatch", 1): (
    ("model", "string"), ("run_id", "string"), ("event_ids", "array<string>"), ("seqs", "array<long>"),
    ("partitions", "array<int>"), ("offsets", "array<long>"), ("learned", "array<boolean>"), ("g_width", "int"),
    ("g", "array<double>"), ("scalar_names", "array<string>"), ("scalars", "array<double>"),
    ("checkpoints", "array<boolean>"))}
"""(record, version) -> the fields both kernels read and write, in order,
as (name, type); checked against the schema files by a test."""


@njit(cache=True)
def decode_feedback_batch(buf, pos, end):
    """A FeedbackBatch body (current layout) at buf[pos:end]: (next position,
    or -1 when the compiled reader does not take it; n events; m scalars;
    strings as (start, end) pairs: model, run_id, the n event ids, then the
    m scalars' names; seqs, partitions, offsets, learned, checkpoints as the
    rows of one array; g_width; g; scalars)."""
    room = end - pos + 2
    starts, ends = np.zeros(room, np.int64), np.zeros(room, np.int64)
    columns, doubles = np.zeros((5, 0), np.int64), np.zeros(0)
    bad = (-1, 0, 0, starts, ends, columns, 0, doubles, doubles)
    for i in range(2):  # model, run_id
        starts[i], ends[i], pos = read_string(buf, pos, end)
        if pos < 0:
            return bad
    n, pos = read_array(buf, pos, end, STRING, starts, 2, ends)
    if pos < 0:
        return bad
    columns = np.zeros((5, n), np.int64)
    for row, kind in ((0, LONG), (1, INT), (2, LONG), (3, BOOLEAN)):  # seqs, partitions, offsets, learned
        count, pos = read_array(buf, pos, end, kind, columns[row], 0, ends)
        if pos < 0 or count != n:
            return bad
    width, pos = read_long(buf, pos, end)
    if pos < 0 or not -2147483648 <= width <= 2147483647:
        return bad
    g = np.empty((end - pos) // 8 + 1)
    n_g, pos = read_doubles(buf, pos, end, g, 0)
    if pos < 0:
        return bad
    m, pos = read_array(buf, pos, end, STRING, starts, 2 + n, ends)
    if pos < 0:
        return bad
    scalars = np.empty((end - pos) // 8 + 1)
    n_s, pos = read_doubles(buf, pos, end, scalars, 0)
    if pos < 0:
        return bad
    count, pos = read_array(buf, pos, end, BOOLEAN, columns[4], 0, ends)  # checkpoints
    if pos < 0 or count != n:
        return bad
    return pos, n, m, starts, ends, columns, width, g[:n_g], scalars[:n_s]


@njit(cache=True, inline="always")
def _write_longs(out, pos, col):
    """An array of long (or int): one block, then the empty block."""
    if col.shape[0]:
        pos = write_long(out, pos, col.shape[0])
        for v in col:
            pos = write_long(out, pos, v)
    out[pos] = 0
    return pos + 1


@njit(cache=True, inline="always")
def _write_booleans(out, pos, col):
    if col.shape[0]:
        pos = write_long(out, pos, col.shape[0])
        for v in col:
            out[pos] = 1 if v else 0
            pos += 1
    out[pos] = 0
    return pos + 1


@njit(cache=True, inline="always")
def _write_doubles(out, pos, col):
    if col.shape[0]:
        pos = write_long(out, pos, col.shape[0])
        for v in col:
            pos = write_double(out, pos, v)
    out[pos] = 0
    return pos + 1


@njit(cache=True, inline="always")
def _write_strings(out, pos, sbuf, ends, lo, hi):
    """Strings lo..hi−1 of ``sbuf`` (string k ends at ends[k]) as an array of string."""
    if hi > lo:
        pos = write_long(out, pos, hi - lo)
        for k in range(lo, hi):
            pos = write_string(out, pos, sbuf, ends[k - 1] if k else 0, ends[k])
    out[pos] = 0
    return pos + 1


@njit(cache=True)
def encode_feedback_batch(header, sbuf, ends, n, columns, width, g, scalars):
    """A framed ``scinol.FeedbackBatch`` (the inverse of
    :func:`decode_feedback_batch`): ``sbuf`` holds the UTF-8 of the model,
    the run id, the n event ids and the scalars' names back to back, string
    k ending at ends[k]; ``columns`` rows: seqs, partitions, offsets,
    learned, checkpoints; ``g`` and ``scalars`` flat, row-major."""
    m = ends.shape[0] - 2 - n
    out = np.empty(header.shape[0] + sbuf.shape[0] + 10 * (ends.shape[0] + 5 * n + 16)
                   + 8 * (g.shape[0] + scalars.shape[0]), np.uint8)
    out[:header.shape[0]] = header
    pos = write_string(out, header.shape[0], sbuf, 0, ends[0])
    pos = write_string(out, pos, sbuf, ends[0], ends[1])
    pos = _write_strings(out, pos, sbuf, ends, 2, 2 + n)
    pos = _write_longs(out, pos, columns[0])
    pos = _write_longs(out, pos, columns[1])
    pos = _write_longs(out, pos, columns[2])
    pos = _write_booleans(out, pos, columns[3])
    pos = write_long(out, pos, width)
    pos = _write_doubles(out, pos, g)
    pos = _write_strings(out, pos, sbuf, ends, 2 + n, 2 + n + m)
    pos = _write_doubles(out, pos, scalars)
    pos = _write_booleans(out, pos, columns[4])
    return out[:pos]
