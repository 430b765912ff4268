"""Batches of Kafka messages decoded as Events in one compiled call: the
columnar twin of :func:`pipelines.records.dead_letters.screen` (decode +
validate).

:class:`EventDecoder` turns a list of Confluent-framed message values into
one :class:`pipelines.records.event_columns.EventColumns` with one compiled
call (:func:`pipelines.records.avro.event_reader.decode_events`), named
features hashed exactly as :class:`learners.hashing.FeatureHasher` does.
The compiled reader covers every ``scinol.Event`` writer schema it knows a
layout for (catalog versions 1 and 2, and registry ids whose schema is one
of them); a message it does not take (another schema id, anything
malformed, anything the event checks reject) goes through ``screen`` on its
own, so results, dead-letter reasons and texts are those of the per-event
path by construction.
"""

from __future__ import annotations

import numpy as np

from learners.losses import loss_code
from pipelines.records.avro.event_reader import FALLBACK, LAYOUT_V1, LAYOUT_V2, decode_events, label_kind
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, DEFAULT_MAX_MESSAGE_BYTES, screen
from pipelines.records.event_columns import EventColumns
from pipelines.records.events import event_rows
from pipelines.records.framed import WriterIds, joined
from pipelines.records.validation import MAX_FEATURES
from schemas.codec import Codec
from schemas.reasons import REASONS


REASON_CODES = {reason: k + 1 for k, reason in enumerate(REASONS)}
"""Reason -> code in :attr:`EventColumns.reason`; 0 is a valid event."""


class EventDecoder:
    """Screens batches of message values like ``screen(codec, value, loss,
    n_classes, max_index=..., max_message_bytes=...)`` does one by one, with
    named features hashed by ``FeatureHasher(hash_bits, hash_seed)``."""

    def __init__(self, codec: Codec, loss: str, n_classes: int | None = None, *, hash_bits: int = 18,
                 hash_seed: int = 0, max_index: int = DEFAULT_MAX_INDEX, max_features: int = MAX_FEATURES,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES):
        from learners.hashing import FeatureHasher

        loss_code(loss)  # ValueError for an unknown loss
        self.codec, self.loss, self.n_classes = codec, loss, n_classes
        self.hasher = FeatureHasher(hash_bits, hash_seed)
        self.max_index, self.max_features, self.max_message_bytes = max_index, max_features, max_message_bytes
        self.params = (np.int64(hash_bits), np.int64(hash_seed), np.int64(max_features),
                       np.int64(min(max_index, 1 << 62)))
        self.labels = (np.int64(label_kind(loss)), np.float64(n_classes or 1))
        self.writers = WriterIds(codec, "scinol.Event", (LAYOUT_V1, LAYOUT_V2))

    def decode(self, values) -> EventColumns:
        """The batch ``values`` (bytes, or None for a tombstone) as columns."""
        values = values if isinstance(values, list) else list(values)
        buf, starts, ends = joined(values)
        status, cols, indptr, indices, data, code, firsts = decode_events(
            buf, starts, ends, self.writers.ids, self.writers.versions, self.params, self.labels,
            self.max_message_bytes)
        ts, id_s, id_e, model_s, model_e, label, has_label, weight, has_weight = cols
        models = [buf[model_s[f]:model_e[f]].tobytes().decode() for f in firsts]
        out = EventColumns(buf, id_s, id_e, ts, code, models, label, has_label, weight, has_weight, indptr, indices,
                           data, np.zeros(len(values), np.int8), msg_start=starts, msg_end=ends,
                           layout=np.maximum(-status, 0), hashing=(self.hasher.bits, self.hasher.seed),
                           feature_start=model_e)  # the union follows the model's string
        slow = np.flatnonzero(status >= FALLBACK)
        if slow.size:
            out.fallbacks = int(slow.size)
            self._fallback(out, values, slow)
        return out

    def _fallback(self, out: EventColumns, values: list, slow: np.ndarray) -> None:
        """The messages the compiled reader did not take, one by one through
        the per-event path; valid ones are spliced into the columns."""
        extra, rows = bytearray(), {}
        models = {m: c for c, m in enumerate(out.models)}
        for i in slow.tolist():
            event, problem = screen(self.codec, values[i], self.loss, self.n_classes, max_index=self.max_index,
                                    max_message_bytes=self.max_message_bytes)
            if problem is not None:
                out.reason[i] = REASON_CODES[problem[0]]
                out.dead[i] = problem
                continue
            name = event["id"].encode()
            out.id_start[i] = out.buf.shape[0] + len(extra)
            extra += name
            out.id_end[i] = out.id_start[i] + len(name)
            out.model_code[i] = models.setdefault(event["model"], len(models))
            out.timestamp[i] = event["timestamp"]
            label, weight = event.get("label"), event.get("weight")
            out.has_label[i], out.label[i] = label is not None, np.nan if label is None else label
            out.has_weight[i], out.weight[i] = weight is not None, np.nan if weight is None else weight
            out.records[i] = event
            indptr, indices, data, _ = event_rows([event], self.hasher)
            rows[i] = (indices, data)
        out.models = list(models)
        self.writers.refresh()  # a registry may have taught the codec new ids
        if extra:
            out.buf = np.concatenate([out.buf, np.frombuffer(bytes(extra), np.uint8)])
        if rows:
            _splice(out, rows)


def _splice(out: EventColumns, rows: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
    """Rows of the per-event path put into the (empty) rows they belong to."""
    ptr, counts = out.indptr, np.diff(out.indptr)
    pieces_i, pieces_v, prev = [], [], 0
    for i in sorted(rows):
        pieces_i += [out.indices[ptr[prev]:ptr[i]], rows[i][0]]
        pieces_v += [out.values[ptr[prev]:ptr[i]], rows[i][1]]
        counts[i] = rows[i][0].shape[0]
        prev = i + 1
    pieces_i.append(out.indices[ptr[prev]:])
    pieces_v.append(out.values[ptr[prev]:])
    out.indices, out.values = np.concatenate(pieces_i), np.concatenate(pieces_v)
    out.indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
