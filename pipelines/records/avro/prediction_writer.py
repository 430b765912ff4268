"""A batch of ``scinol.Prediction`` records, given as columns, written
into one buffer in one compiled call (:func:`encode_predictions`, for
:func:`pipelines.records.prediction_values.encode_predictions`), byte for
byte what the codec writes.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit

from .primitives import long_size, write_double, write_long, write_optional_double, write_string

LAYOUTS = {("scinol.Prediction", 2): (
    ("event_id", "string"), ("model", "string"), ("model_version", "long"), ("score", "double"),
    ("scores", "array<double>"), ("probability", "null|double"), ("predicted_class", "null|long"),
    ("label", "null|double"), ("loss", "null|double"), ("event_timestamp", "long/timestamp-millis"),
    ("latency_ms", "double"), ("source_topic", "null|string"), ("source_partition", "null|int"),
    ("source_offset", "null|long"))}
"""(record, version) -> the fields :func:`_write_prediction` writes, in
order, as (name, type); checked against the schema files by a test."""


@njit(cache=True)
def _prediction_size(i, header, strs, longs, flags, doubles):
    id_s, id_e, model_s, model_e, topic_s, topic_e = strs
    version, klass, ts, partition, offset = longs
    has_prob, has_klass, has_label, has_partition, has_offset = flags
    scores, prob, label, loss, latency = doubles
    k = scores.shape[1]
    size = header.shape[0] + long_size(id_e[i] - id_s[i]) + id_e[i] - id_s[i]
    size += long_size(model_e[i] - model_s[i]) + model_e[i] - model_s[i] + long_size(version[i]) + 8
    size += (long_size(k) + 8 * k + 1) if k else 1
    size += 1 + 8 * has_prob[i] + 1 + (long_size(klass[i]) if has_klass[i] else 0) + 1 + 8 * has_label[i]
    size += 1 + (8 if loss[i] == loss[i] else 0) + long_size(ts[i]) + 8
    size += 1 + (long_size(topic_e[i] - topic_s[i]) + topic_e[i] - topic_s[i] if topic_s[i] >= 0 else 0)
    size += 1 + (long_size(partition[i]) if has_partition[i] else 0)
    size += 1 + (long_size(offset[i]) if has_offset[i] else 0)
    return size


@njit(cache=True)
def _write_prediction(out, pos, i, header, sbuf, strs, longs, flags, doubles):
    id_s, id_e, model_s, model_e, topic_s, topic_e = strs
    version, klass, ts, partition, offset = longs
    has_prob, has_klass, has_label, has_partition, has_offset = flags
    scores, prob, label, loss, latency = doubles
    out[pos:pos + header.shape[0]] = header
    pos = write_string(out, pos + header.shape[0], sbuf, id_s[i], id_e[i])
    pos = write_string(out, pos, sbuf, model_s[i], model_e[i])
    pos = write_double(out, write_long(out, pos, version[i]), scores[i, 0])
    k = scores.shape[1]
    if k:
        pos = write_long(out, pos, k)
        for j in range(k):
            pos = write_double(out, pos, scores[i, j])
    out[pos] = 0
    pos += 1
    pos = write_optional_double(out, pos, has_prob[i], prob[i])
    out[pos] = 2 if has_klass[i] else 0
    pos = write_long(out, pos + 1, klass[i]) if has_klass[i] else pos + 1
    pos = write_optional_double(out, pos, has_label[i], label[i])
    pos = write_optional_double(out, pos, loss[i] == loss[i], loss[i])
    pos = write_double(out, write_long(out, pos, ts[i]), latency[i])
    out[pos] = 2 if topic_s[i] >= 0 else 0
    pos = write_string(out, pos + 1, sbuf, topic_s[i], topic_e[i]) if topic_s[i] >= 0 else pos + 1
    out[pos] = 2 if has_partition[i] else 0
    pos = write_long(out, pos + 1, partition[i]) if has_partition[i] else pos + 1
    out[pos] = 2 if has_offset[i] else 0
    return write_long(out, pos + 1, offset[i]) if has_offset[i] else pos + 1


@njit(cache=True)
def encode_predictions(header, sbuf, strs, longs, flags, doubles):
    """Framed ``scinol.Prediction`` (version 2 layout) records, row i of the
    columns (``strs``: start/end in sbuf of the event id, model and source
    topic, topic start -1 for null; ``longs``: model version, predicted
    class, event timestamp, source partition and offset; ``flags``: which of
    probability, class, label, partition, offset are present; ``doubles``:
    scores (n, k), probability, label, loss (NaN = null), latency) written
    back to back: (buffer, offsets), record i at buffer[offsets[i]:offsets[i + 1]]."""
    n = strs[0].shape[0]
    offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + _prediction_size(i, header, strs, longs, flags, doubles)
    out = np.empty(offsets[n], np.uint8)
    for i in range(n):
        _write_prediction(out, offsets[i], i, header, sbuf, strs, longs, flags, doubles)
    return out, offsets
