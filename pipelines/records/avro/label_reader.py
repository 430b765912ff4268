"""A whole batch of Confluent-framed ``scinol.Label`` messages read into
arrays in one compiled call (:func:`decode_labels`, for
:class:`pipelines.records.label_decoder.LabelDecoder`), as narrow as the
Event reader (:mod:`pipelines.records.avro.event_reader`): a message it is
not sure of goes the per-message way.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit

from .event_reader import FALLBACK, framed_layout, label_ok
from .primitives import read_double, read_long, read_optional_double, read_string

LAYOUTS = {("scinol.Label", 1): (("event_id", "string"), ("model", "string"), ("label", "double"),
                                 ("weight", "null|double"), ("timestamp", "long/timestamp-millis"))}
"""(record, version) -> the fields :func:`_read_label` reads, in order, as
(name, type); checked against the schema files by a test."""


@njit(cache=True)
def _read_label(buf, pos, end, labels, cols, i):
    """Reads the Label body at pos into row i of ``cols``; False (a
    fallback) unless it is well formed and its label and weight are sure
    to pass the checks."""
    label_kind, n_classes = labels
    ts, id_s, id_e, model_s, model_e, label, weight, has_weight = cols
    s, e, pos = read_string(buf, pos, end)
    if pos < 0:
        return False
    ms, me, pos = read_string(buf, pos, end)
    if pos < 0 or end - pos < 8:
        return False
    y = read_double(buf, pos)
    if y != y or not label_ok(y, label_kind, n_classes):  # a Label's label is never missing
        return False
    w, has_w, pos = read_optional_double(buf, pos + 8, end)
    if pos < 0 or (has_w and not (np.isfinite(w) and w > 0.0)):
        return False
    t, pos = read_long(buf, pos, end)
    if pos != end:
        return False
    ts[i], id_s[i], id_e[i], model_s[i], model_e[i] = t, s, e, ms, me
    label[i], weight[i], has_weight[i] = y, w, has_w
    return True


@njit(cache=True)
def decode_labels(buf, starts, ends, sids, labels, max_message_bytes):
    """Every message buf[starts[i]:ends[i]] read as a framed ``scinol.Label``
    (version 1, the only one) whose writer schema id is one of ``sids``, as
    :func:`~pipelines.records.avro.event_reader.decode_events` reads
    Events: (status, cols), status 0 for a message read, FALLBACK for one
    to send through the per-message path;
    cols = (timestamp, id start, id end, model start, model end, label,
    weight, has weight)."""
    n = starts.shape[0]
    cols = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(n, np.int64), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, np.bool_))
    status = np.full(n, FALLBACK, np.int8)
    layouts = np.ones(sids.shape[0], np.int8)
    for i in range(n):
        if framed_layout(buf, starts[i], ends[i], sids, layouts, max_message_bytes) \
                and _read_label(buf, starts[i] + 5, ends[i], labels, cols, i):
            status[i] = 0
    return status, cols
