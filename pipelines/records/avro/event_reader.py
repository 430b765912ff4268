"""A whole batch of Confluent-framed ``scinol.Event`` messages read into
arrays in one compiled call (:func:`decode_events`, for
:class:`pipelines.records.event_decoder.EventDecoder`), and the parts the
Label reader shares: the writer layout of a message's header, the fast
label check, the fallback status.

The reader is deliberately narrow. It accepts a message only when it is
sure :meth:`schemas.codec.Codec.decode` followed by
:func:`pipelines.records.validation.validate_event` would accept it and
produce the same values; anything else (a short or wrong header, an id it
has no layout for, a truncated or over-long body, a union index out of
range, a negative block count, a varint longer than 64 bits, invalid UTF-8,
a value the checks would reject) gets status :data:`FALLBACK`, and the
caller sends that message through the per-event path, which decides the
outcome and the dead-letter text. The reader never has to reproduce an
error message, only to recognise the well-formed common case.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit
from learners.losses import BINARY_LOSSES

from .feature_reader import FEATURES, message_sizes, names_scratch, read_features, table_mask
from .primitives import read_long, read_optional_double, read_string, same_bytes

FALLBACK = 1
"""Per-message status of :func:`decode_events`: at least this for a
message the compiled reader did not take."""

LAYOUT_V1, LAYOUT_V2 = 1, 2
"""Event writer layouts, numbered as the schema versions: version 1 (no
weight), version 2 (weight last). The columns are those of version 2, the
current one; a version 3 needs its layout here before the compiled reader
may take it (until then its messages go the per-event way)."""

_EVENT_V1 = (("id", "string"), ("timestamp", "long/timestamp-millis"), ("model", "string"),
             ("features", FEATURES), ("label", "null|double"))
LAYOUTS = {("scinol.Event", LAYOUT_V1): _EVENT_V1,
           ("scinol.Event", LAYOUT_V2): _EVENT_V1 + (("weight", "null|double"),)}
"""(record, version) -> the fields :func:`_read_event` reads, in order, as
(name, type); checked against the schema files by a test."""

LABELS_FINITE, LABELS_BINARY, LABELS_SOFTMAX = 0, 1, 2
"""Which labels the loss surely accepts (the fast check of validate_event)."""


def label_kind(loss: str) -> int:
    """The LABELS_* of ``loss``."""
    if loss in BINARY_LOSSES:
        return LABELS_BINARY
    return LABELS_SOFTMAX if loss == "softmax" else LABELS_FINITE


@njit(cache=True, inline="always")
def label_ok(y, label_kind, n_classes):
    """validate_event's fast label check; NaN means unlabelled."""
    if y != y:
        return True
    if label_kind == LABELS_BINARY:
        return y == 1.0 or y == -1.0 or y == 0.0
    if label_kind == LABELS_SOFTMAX:
        return 0.0 <= y < n_classes and y == np.floor(y)
    return np.isfinite(y)


@njit(cache=True)
def _read_event(buf, pos, end, layout, params, labels, cols, i, indices, values, out, scratch, coords):
    """Reads the Event body at pos into row i of ``cols``; the number of
    feature entries written at ``out``, or -1 (a fallback)."""
    label_kind, n_classes = labels
    ts, id_s, id_e, model_s, model_e, label, has_label, weight, has_weight = cols
    s, e, pos = read_string(buf, pos, end)
    if pos < 0:
        return -1
    t, pos = read_long(buf, pos, end)
    if pos < 0:
        return -1
    ms, me, pos = read_string(buf, pos, end)
    if pos < 0:
        return -1
    nnz, pos = read_features(buf, pos, end, params, indices, values, out, scratch, coords[0], coords[1], i + 1)
    if pos < 0:
        return -1
    y, has_y, pos = read_optional_double(buf, pos, end)
    if pos < 0 or not label_ok(y, label_kind, n_classes):
        return -1
    w, has_w = np.nan, False
    if layout == LAYOUT_V2:
        w, has_w, pos = read_optional_double(buf, pos, end)
        if pos < 0 or (has_w and not (np.isfinite(w) and w > 0.0)):
            return -1
    if pos != end:
        return -1
    ts[i], id_s[i], id_e[i], model_s[i], model_e[i] = t, s, e, ms, me
    label[i], has_label[i], weight[i], has_weight[i] = y, has_y, w, has_w
    return nnz


@njit(cache=True)
def framed_layout(buf, start, end, sids, layouts, max_message_bytes):
    """The layout of the message's writer schema, 0 when the header is bad,
    the id has no compiled layout or the message is too large."""
    if end - start < 5 or end - start > max_message_bytes or buf[start] != 0:
        return 0
    sid = (np.int64(buf[start + 1]) << 24) | (np.int64(buf[start + 2]) << 16) | (np.int64(buf[start + 3]) << 8) \
        | np.int64(buf[start + 4])
    for k in range(sids.shape[0]):
        if sids[k] == sid:
            return layouts[k]
    return 0


@njit(cache=True)
def _model_code(buf, model_s, model_e, i, firsts, n_models, last):
    """The code of message i's model among the models seen in this batch
    (``firsts``: the first message of each); a new model gets the next code."""
    if last >= 0 and same_bytes(buf, model_s[i], model_e[i], model_s[firsts[last]], model_e[firsts[last]]):
        return last, n_models
    for c in range(n_models):
        f = firsts[c]
        if same_bytes(buf, model_s[i], model_e[i], model_s[f], model_e[f]):
            return c, n_models
    firsts[n_models] = i
    return n_models, n_models + 1


@njit(cache=True)
def decode_events(buf, starts, ends, sids, layouts, params, labels, max_message_bytes):
    """Every message buf[starts[i]:ends[i]] read as a framed Event (see the
    module doc). ``sids``/``layouts``: the writer schema ids with a compiled
    layout; ``params`` = (hash bits, hash seed, max features, max index);
    ``labels`` = (label kind, n_classes). Returns (status, cols, indptr,
    indices, values, model_code, model_firsts); status is minus the layout
    for a message read, positive (FALLBACK or more) for one to send through
    the per-event path, whose row is empty. Output space is bounded by the input's size: an accepted
    message holds at most one feature entry per 8 bytes."""
    n = starts.shape[0]
    total, room = message_sizes(starts, ends)
    indices = np.empty(total // 8 + 1, np.int64)
    values = np.empty(total // 8 + 1, np.float64)
    scratch = names_scratch(room)
    coords = (np.empty(table_mask(room) + 1, np.int64), np.zeros(table_mask(room) + 1, np.int64))
    cols = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(n, np.int64), np.full(n, np.nan), np.zeros(n, np.bool_), np.full(n, np.nan),
            np.zeros(n, np.bool_))
    status = np.full(n, FALLBACK, np.int8)
    indptr = np.zeros(n + 1, np.int64)
    model_code = np.full(n, -1, np.int32)
    firsts = np.empty(n, np.int64)
    n_models, last, out = 0, -1, 0
    for i in range(n):
        layout = framed_layout(buf, starts[i], ends[i], sids, layouts, max_message_bytes)
        status[i] = FALLBACK + layout  # unless read below
        if layout:
            nnz = _read_event(buf, starts[i] + 5, ends[i], layout, params, labels, cols, i, indices, values, out,
                              scratch, coords)
            if nnz >= 0:
                status[i] = -layout
                out += nnz
                last, n_models = _model_code(buf, cols[3], cols[4], i, firsts, n_models, last)
                model_code[i] = last
        indptr[i + 1] = out
    return status, cols, indptr, indices[:out], values[:out], model_code, firsts[:n_models]
