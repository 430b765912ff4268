"""Batches of Kafka messages as arrays: the columnar twin of
:func:`pipelines.records.dead_letters.screen` (decode + validate) and
:meth:`schemas.codec.Codec.encode` for predictions.

:class:`EventDecoder` turns a list of Confluent-framed message values into
one :class:`EventColumns` with one compiled call
(:func:`pipelines.records.avro_kernels.decode_events`): features as CSR
rows (dense values at 0..n-1, sparse indices as given, named features
hashed exactly as :class:`learners.hashing.FeatureHasher` does), labels with
a has-label mask, weights, timestamps, ids and model names as offsets into
the joined input bytes, and per message a reason code (0 = a valid event).
The compiled reader covers every ``scinol.Event`` writer schema it knows a
layout for (catalog versions 1 and 2, and registry ids whose schema is one
of them); a message it does not take (another schema id, anything
malformed, anything the event checks reject) goes through ``screen`` on its
own, so results, dead-letter reasons and texts are those of the per-event
path by construction. :class:`EventRows` is one model's events of such a
batch as the pipelines' steps hand them on: row numbers into the columns,
offsets and keys, with no object per event.

:func:`encode_predictions` writes a batch of ``scinol.Prediction`` records
given as arrays into one buffer with offsets, byte for byte what the codec
writes for the same records.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from fastavro import schemaless_reader

from learners.interactions import DEFAULT_NAMESPACE, NamespacedRows
from learners.losses import loss_code
from pipelines.records.avro_kernels import (FALLBACK, LAYOUT_V1, LAYOUT_V2, decode_events, gather_rows, label_kind,
                                            read_namespaced)
from pipelines.kafka.consumer import Position
from pipelines.records.avro_kernels import encode_file_events, encode_named_events
from pipelines.records.avro_kernels import encode_predictions as _encode
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, DEFAULT_MAX_MESSAGE_BYTES, screen
from pipelines.records.events import dense_events, event_rows
from pipelines.records.framed import WriterIds, joined
from pipelines.records.predictions import prediction_keys
from pipelines.records.strings import Strings
from pipelines.records.validation import MAX_FEATURES
from schemas.catalog import current_version, load_schema
from schemas.codec import Codec, _prepare_event, _reading_schema
from schemas.reasons import REASONS

REASON_CODES = {reason: k + 1 for k, reason in enumerate(REASONS)}
"""Reason -> code in :attr:`EventColumns.reason`; 0 is a valid event."""


@dataclass
class EventColumns:
    """One decoded batch, aligned with the input messages. Row i of the CSR
    arrays holds message i's features (empty for a dead letter); ``label``
    is NaN where there is none (``has_label`` False) and where it is NaN;
    ``weight`` NaN where null. ``buf[id_start[i]:id_end[i]]`` is the UTF-8
    id; ``models[model_code[i]]`` the model (-1 for a dead letter).
    ``dead``: message index -> (reason, detail) as ``screen`` gives them."""

    buf: np.ndarray
    id_start: np.ndarray
    id_end: np.ndarray
    timestamp: np.ndarray
    model_code: np.ndarray
    models: list[str]
    label: np.ndarray
    has_label: np.ndarray
    weight: np.ndarray
    has_weight: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    reason: np.ndarray
    msg_start: np.ndarray | None = None
    msg_end: np.ndarray | None = None
    """Message i's value is ``buf[msg_start[i]:msg_end[i]]``."""
    layout: np.ndarray | None = None
    """Writer layout of the messages the compiled reader took (1, 2), 0 otherwise."""
    feature_start: np.ndarray | None = None
    """Where the features union of a message the compiled reader took starts in ``buf``."""
    records: dict[int, dict] = field(default_factory=dict)
    """The decoded records of valid messages the compiled reader did not take."""
    hashing: tuple[int, int] = (18, 0)
    """(bits, seed) of the FeatureHasher named features were hashed with."""
    dead: dict[int, tuple[str, str]] = field(default_factory=dict)
    fallbacks: int = 0
    """How many messages went through the per-event path."""

    def __len__(self) -> int:
        return self.reason.shape[0]

    def __getstate__(self) -> dict:
        """Without the Python values of :meth:`fields` (one object per
        event): a pickled batch stays arrays, and they are made again when
        asked for. Narrowed for the wire, as every step boundary on Flink
        copies these bytes several times: positions that fit stored as int32,
        and dense rows' column numbers (0 .. width-1 in every row) as their width."""
        state = dict(self.__dict__)
        state.pop("_fields", None)
        width = _dense_width(self.indptr, self.indices)
        if width is not None:
            state["indices"] = width
        for name in _NARROWED:
            a = state[name]
            if isinstance(a, np.ndarray) and a.dtype == np.int64 and (a.size == 0 or a.max() <= _INT32_MAX):
                state[name] = a.astype(np.int32)
        return state

    def __setstate__(self, state: dict) -> None:
        for name in _NARROWED:
            if isinstance(state[name], np.ndarray) and state[name].dtype == np.int32:
                state[name] = state[name].astype(np.int64)
        if isinstance(state["indices"], int):
            state["indices"] = np.tile(np.arange(state["indices"], dtype=np.int64), len(state["indptr"]) - 1)
        self.__dict__.update(state)

    @property
    def ok(self) -> np.ndarray:
        return self.reason == 0

    def take(self, rows: np.ndarray) -> "EventColumns":
        """Rows ``rows`` alone as a batch of their own (its row k is row
        ``rows[k]`` here): each row's message bytes (which hold its id and
        features) and its id where that lies elsewhere, every column gathered."""
        rows = np.asarray(rows, np.int64)
        per_row = {name: getattr(self, name)[rows] for name in _PER_ROW if getattr(self, name) is not None}
        indptr, indices, values = gather_rows(self.indptr, self.indices, self.values, rows)
        id_s, id_e = self.id_start[rows], self.id_end[rows]
        if self.msg_start is None:
            buf, new_id = _gathered(self.buf, id_s, id_e)
            moved = {}
        else:
            msg_s, msg_e = self.msg_start[rows], self.msg_end[rows]
            buf, new_msg = _gathered(self.buf, msg_s, msg_e)
            inside = (id_s >= msg_s) & (id_e <= msg_e)
            outside, new_out = _gathered(self.buf, id_s[~inside], id_e[~inside])
            new_id = np.where(inside, id_s - msg_s + new_msg, 0)
            new_id[~inside] = new_out + buf.shape[0]
            buf = np.concatenate([buf, outside])
            moved = {"msg_start": new_msg, "msg_end": new_msg + (msg_e - msg_s),
                     "feature_start": None if self.feature_start is None else self.feature_start[rows] - msg_s + new_msg}
        index = {int(r): k for k, r in enumerate(rows.tolist())} if self.records or self.dead else {}
        return EventColumns(buf=buf, id_start=new_id, id_end=new_id + (id_e - id_s), indptr=indptr, indices=indices,
                            values=values, models=self.models, hashing=self.hashing, fallbacks=self.fallbacks,
                            records={index[i]: r for i, r in self.records.items() if i in index},
                            dead={index[i]: d for i, d in self.dead.items() if i in index}, **per_row, **moved)

    def fields(self) -> tuple[list, list, list, list, list]:
        """(ids, timestamps, models, labels, weights) as Python values, one
        per message (None where null), made once per batch: what
        :class:`ColumnarEvent` hands out field by field."""
        py = self.__dict__.get("_fields")
        if py is None:
            raw = self.buf.tobytes()
            ids = [raw[a:b].decode() for a, b in zip(self.id_start.tolist(), self.id_end.tolist())]
            models = [self.models[c] if c >= 0 else None for c in self.model_code.tolist()]
            labels = [v if h else None for v, h in zip(self.label.tolist(), self.has_label.tolist())]
            weights = [v if h else None for v, h in zip(self.weight.tolist(), self.has_weight.tolist())]
            py = self._fields = (ids, self.timestamp.tolist(), models, labels, weights)
        return py

    def event_id(self, i: int) -> str:
        return self.buf[self.id_start[i]:self.id_end[i]].tobytes().decode()

    def record(self, i: int) -> dict:
        """Valid message i as the codec decodes it (named features by name)."""
        if i in self.records:
            return self.records[i]
        writer, reader = _readers(int(self.layout[i]))
        fo = io.BytesIO(self.buf[self.msg_start[i] + 5:self.msg_end[i]].tobytes())
        return schemaless_reader(fo, writer, reader)


_PER_ROW = ("timestamp", "model_code", "label", "has_label", "weight", "has_weight", "reason", "layout")
"""Columns of one value per message, beside the positions in ``buf`` and the CSR rows."""


def _gathered(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The byte ranges [starts, ends) of ``buf`` laid end to end, and where each now starts."""
    lengths = ends - starts
    new_starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=new_starts[1:])
    total = int(lengths.sum())
    source = np.repeat(starts - new_starts, lengths) + np.arange(total, dtype=np.int64)
    return buf[source], new_starts


_NARROWED = ("id_start", "id_end", "msg_start", "msg_end", "feature_start", "indptr", "indices")
"""Non-negative int64 columns of positions, pickled as int32 when they fit."""
_INT32_MAX = np.iinfo(np.int32).max


def _dense_width(indptr: np.ndarray, indices: np.ndarray) -> int | None:
    """w when every row holds columns 0 .. w-1 in order (w >= 1), else None."""
    rows = indptr.shape[0] - 1
    if rows < 1 or indices.shape[0] == 0 or indptr[0] != 0 or indices.shape[0] % rows:
        return None
    width = indices.shape[0] // rows
    if not np.array_equal(indptr, np.arange(0, indices.shape[0] + 1, width)):
        return None
    pattern = indices.reshape(rows, width)
    return width if np.array_equal(pattern, np.broadcast_to(np.arange(width), pattern.shape)) else None


@lru_cache(maxsize=None)
def _readers(layout: int) -> tuple:
    """(writer, reader) fastavro schemas of an Event layout, as the codec reads them."""
    writer = _reading_schema(load_schema("scinol.Event", layout))  # layout n is the layout of version n
    return (writer, None) if layout == current_version("scinol.Event") else (
        writer, _reading_schema(load_schema("scinol.Event")))


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


# ---------------------------------------------------------------- predictions


def _flag(values, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) for an optional column: None means absent in every row."""
    if values is None:
        return np.zeros(n), np.zeros(n, np.bool_)
    return values, np.ones(n, np.bool_)


def encode_predictions(codec: Codec, topic: str | None, *, buf: np.ndarray, id_start: np.ndarray,
                       id_end: np.ndarray, model: str, model_version: np.ndarray, scores: np.ndarray,
                       label: np.ndarray, has_label: np.ndarray, loss: np.ndarray, event_timestamp: np.ndarray,
                       latency_ms: np.ndarray, probability: np.ndarray | None = None,
                       predicted_class: np.ndarray | None = None, source_topic: str | None = None,
                       source_partition: np.ndarray | None = None,
                       source_offset: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``scinol.Prediction`` records of one model's batch, framed as
    ``codec.encode("scinol.Prediction", record, topic)`` frames them:
    (buffer, offsets), record i at buffer[offsets[i]:offsets[i + 1]].
    Event ids are ``buf[id_start[i]:id_end[i]]`` (UTF-8, as in
    :class:`EventColumns`); ``loss`` NaN is null (unlabelled); a label is
    written where ``has_label`` (NaN included); optional columns given as
    None are null in every row, ``source_topic`` is one topic for the batch.
    Raises :class:`schemas.codec.EncodeError` for a partition outside int."""
    from schemas.codec import EncodeError

    header, _, prepare = codec._writer("scinol.Prediction", topic)
    if prepare is not None:  # the registry's writer is an older version: the compiled layout does not apply
        raise EncodeError(f"the registered scinol.Prediction schema for {topic!r} is not the current version")
    n = len(id_start)
    names = (model.encode(), b"" if source_topic is None else source_topic.encode())
    sbuf = np.concatenate([np.asarray(buf, np.uint8), np.frombuffer(names[0] + names[1], np.uint8)])
    at = np.int64(len(buf))
    model_s = np.full(n, at, np.int64)
    topic_s = np.full(n, at + len(names[0]) if source_topic is not None else -1, np.int64)
    prob, has_prob = _flag(probability, n)
    klass, has_klass = _flag(predicted_class, n)
    partition, has_partition = _flag(source_partition, n)
    offset, has_offset = _flag(source_offset, n)
    partition = np.asarray(partition, np.int64)
    if has_partition.any() and ((partition < -(1 << 31)) | (partition >= 1 << 31)).any():
        raise EncodeError("cannot encode scinol.Prediction: source_partition outside the Avro int range")
    strs = (np.asarray(id_start, np.int64), np.asarray(id_end, np.int64), model_s, model_s + len(names[0]),
            topic_s, topic_s + len(names[1]))
    longs = tuple(np.asarray(a, np.int64) for a in (model_version, klass, event_timestamp, partition, offset))
    flags = (has_prob, has_klass, np.asarray(has_label, np.bool_), has_partition, has_offset)
    scores = np.ascontiguousarray(scores, np.float64).reshape(n, -1)
    if scores.shape[1] == 0:
        raise ValueError("a prediction needs at least one score")
    doubles = (scores,) + tuple(np.ascontiguousarray(a, np.float64) for a in (prob, label, loss, latency_ms))
    return _encode(np.frombuffer(header, np.uint8), sbuf, strs, longs, flags, doubles)


def file_values(reader, model: str, codec: Codec, topic: str | None) -> Iterator[bytes]:
    """The framed ``scinol.Event`` values of
    :func:`pipelines.records.events.file_events` (same ids, timestamps,
    labels and weights, byte for byte what ``codec.encode`` writes). CSV and
    libsvm rows and VW text are parsed and encoded a batch per compiled
    call, in a thread ahead of the caller (both release the GIL: the caller
    produces on one core while the next batches are read on another); a
    registry whose Event schema is an older version goes record by record."""
    from pipelines.records.events import file_events
    from pipelines.records.prefetch import prefetch
    from pipelines.records.vw_text import VwReader

    header, _, prepare = codec._writer("scinol.Event", topic)
    if prepare is not _prepare_event:
        yield from (codec.encode("scinol.Event", e, topic) for e in file_events(reader, model))
        return
    if isinstance(reader, VwReader):
        batches = _vw_batches(reader, model, header, codec, topic)
    else:
        batches = _file_batches(reader, model, header)
    for values in prefetch(batches):
        yield from values


def _file_batches(reader, model: str, header: bytes) -> Iterator[list[bytes]]:
    """Per batch of ``reader``, its framed Event values (:func:`file_values`)."""
    header, name = np.frombuffer(header, np.uint8), np.frombuffer(model.encode(), np.uint8)
    prefix = np.frombuffer(f"{os.path.basename(reader.path)}:".encode(), np.uint8)
    width = -1 if reader.n_features is None else reader.n_features
    for batch in reader.batches():
        now = int(time.time() * 1000)
        n = batch.y.shape[0]
        w = np.ones(n) if batch.weights is None else np.asarray(batch.weights, np.float64)
        buf, offsets = encode_file_events(header, prefix, np.asarray(batch.lines, np.int64), now, name, width,
                                          batch.indptr, batch.indices,
                                          np.ascontiguousarray(batch.data, np.float64), batch.y, w != 0,
                                          w, (w != 0) & (w != 1))
        data, ends = buf.tobytes(), offsets.tolist()
        yield [data[a:b] for a, b in zip(ends, ends[1:])]


def _vw_batches(reader, model: str, header: bytes, codec: Codec, topic: str | None) -> Iterator[list[bytes]]:
    """Per batch of a VW file, its framed Event values (:func:`file_values`);
    the few lines parsed in Python are encoded by ``codec``."""
    from pipelines.records.events import vw_event

    header, name = np.frombuffer(header, np.uint8), np.frombuffer(model.encode(), np.uint8)
    file_name = os.path.basename(reader.path)
    prefix = np.frombuffer(f"{file_name}:".encode(), np.uint8)
    for batch in reader.named_batches():
        now, w = int(time.time() * 1000), batch.weights
        skip = np.zeros(w.shape[0], np.bool_)
        skip[list(batch.python_rows)] = True
        buf, offsets = encode_named_events(header, prefix, batch.lines, now, name, batch.block, batch.tag_spans,
                                           batch.indptr, batch.hashes, batch.names, batch.name_ends, batch.values,
                                           batch.y, ~np.isnan(batch.y) & (w != 0), w, (w != 0) & (w != 1), skip)
        data, ends = buf.tobytes(), offsets.tolist()
        values = [data[a:b] for a, b in zip(ends, ends[1:])]
        for r, row in batch.python_rows.items():
            event_id = row.tag if row.tag is not None else f"{file_name}:{int(batch.lines[r])}"
            values[r] = codec.encode("scinol.Event", vw_event(row, event_id, model, now), topic)
        yield values


def dense_values(codec: Codec, X: np.ndarray, y: np.ndarray, id_prefix: str, *, first: int = 0,
                 model: str = "default", topic: str | None = None) -> list[bytes]:
    """The framed ``scinol.Event`` values of dense rows ``X`` (labels ``y``,
    NaN = unlabelled), ids ``id_prefix`` + ``first + i``, all stamped now:
    what ``codec.encode`` writes for each, in one compiled call. For load
    generators, which must offer events faster than the pipeline takes them."""
    header, _, prepare = codec._writer("scinol.Event", topic)
    now, n, width = int(time.time() * 1000), X.shape[0], X.shape[1]
    labelled = ~np.isnan(np.asarray(y, np.float64))
    if prepare is not _prepare_event:  # a registry whose Event schema is an older version
        return [codec.encode("scinol.Event", {**e, "id": f"{id_prefix}{first + i}", "timestamp": now}, topic)
                for i, e in enumerate(dense_events(X, y, id_prefix, model))]
    buf, offsets = encode_file_events(
        np.frombuffer(header, np.uint8), np.frombuffer(id_prefix.encode(), np.uint8),
        np.arange(first, first + n, dtype=np.int64), now, np.frombuffer(model.encode(), np.uint8), width,
        np.arange(0, n * width + 1, width, dtype=np.int64), np.tile(np.arange(width, dtype=np.int32), n),
        np.ascontiguousarray(X, np.float64).ravel(), np.asarray(y, np.float64), labelled,
        np.ones(n), np.zeros(n, np.bool_))
    data, ends = buf.tobytes(), offsets.tolist()
    return [data[a:b] for a, b in zip(ends, ends[1:])]


# ---------------------------------------------------------------- events for the record-based steps

_EVENT_KEYS = ("id", "timestamp", "model", "features", "label", "weight")
_FIELD_INDEX = {"id": 0, "timestamp": 1, "model": 2, "label": 3, "weight": 4}  # in EventColumns.fields()


class ColumnarEvent(Mapping):
    """Row ``i`` of an :class:`EventColumns`, read as the Event record the
    codec decodes, for steps that take records. The fields are read from
    the columns when asked for; ``features`` (the one that needs the
    original names) decodes the message again. :func:`columnar_rows` turns a
    list of them into learner rows without touching ``features``."""

    __slots__ = ("cols", "i")

    def __init__(self, cols: EventColumns, i: int):
        self.cols, self.i = cols, i

    def __getitem__(self, key):
        k = _FIELD_INDEX.get(key)
        if k is not None:
            return self.cols.fields()[k][self.i]
        if key == "features":
            return self.cols.record(self.i)["features"]
        raise KeyError(key)

    def get(self, key, default=None):
        k = _FIELD_INDEX.get(key)  # the common case without Mapping.get's exception handling
        return self.cols.fields()[k][self.i] if k is not None else Mapping.get(self, key, default)

    def __iter__(self):
        return iter(_EVENT_KEYS)

    def __len__(self) -> int:
        return len(_EVENT_KEYS)

    def __reduce__(self):
        return ColumnarEvent, (self.cols, self.i)

    @staticmethod
    def learner_rows(events: list, learner):
        """(rows, y) as :func:`pipelines.records.events.learner_rows` gives
        them, from the columns (:func:`_features_of`); None when that path
        must decide (other events in the list, or see :func:`_features_of`)."""
        if not events:
            return None
        cols = events[0].cols
        try:
            rows = np.fromiter((e.i for e in events if e.cols is cols), np.int64, len(events))
        except (AttributeError, ValueError):  # not all ColumnarEvents, or of other batches
            return None
        features = _features_of(cols, rows, learner)
        return None if features is None else (features, _own_labels(events, cols.label[rows])[0])

    def with_label(self, label: float, weight: float | None) -> "LabelledEvent":
        """This event with a label (and weight, None: its own) that came on a
        labels topic before it: still a row of the columns, so the batch
        keeps its compiled paths and ``features`` is never decoded again."""
        return LabelledEvent(self.cols, self.i, label, weight)


class LabelledEvent(ColumnarEvent):
    """A :class:`ColumnarEvent` whose label (and maybe weight) came apart."""

    __slots__ = ("label", "weight")

    def __init__(self, cols: EventColumns, i: int, label: float, weight: float | None):
        super().__init__(cols, i)
        self.label, self.weight = label, weight

    def __getitem__(self, key):
        if key == "label":
            return self.label
        if key == "weight" and self.weight is not None:
            return self.weight
        return ColumnarEvent.__getitem__(self, key)

    def get(self, key, default=None):
        if key == "label":
            return self.label
        if key == "weight" and self.weight is not None:
            return self.weight
        return ColumnarEvent.get(self, key, default)

    def __reduce__(self):
        return LabelledEvent, (self.cols, self.i, self.label, self.weight)


class EventRows(Sequence):
    """One model's valid events of one decoded batch of one partition, as
    arrays: their row numbers in the batch's columns, their offsets and
    keys. It reads as a list of (Position, :class:`ColumnarEvent`) pairs,
    made on demand, so a step that needs the pairs gets them; the learning
    steps read the arrays and make none. It crosses Beam's steps as those
    arrays (the columns pickled once). ``source``: (topic, partition)."""

    __slots__ = ("cols", "rows", "offsets", "keys", "source")

    def __init__(self, cols: EventColumns, rows: np.ndarray, offsets: np.ndarray, keys: list,
                 source: tuple[str, int]):
        self.cols, self.rows, self.offsets, self.keys = cols, rows, offsets, keys
        self.source = source

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return EventRows(self.cols, self.rows[i], self.offsets[i], self.keys[i], self.source)
        return Position(*self.source, int(self.offsets[i]), self.keys[i]), ColumnarEvent(self.cols, int(self.rows[i]))

    def __iter__(self):
        topic, partition = self.source
        cols = self.cols
        for o, k, i in zip(self.offsets.tolist(), self.keys, self.rows.tolist()):
            yield Position(topic, partition, o, k), ColumnarEvent(cols, i)

    def __reduce__(self):
        """Its rows alone when it holds some of its batch (one model's part
        of a batch of several models): each part crosses a step with its own
        events, not the whole batch's."""
        n = len(self.rows)
        if n < len(self.cols):
            return EventRows, (self.cols.take(self.rows), np.arange(n, dtype=np.int64), self.offsets, self.keys,
                               self.source)
        return EventRows, (self.cols, self.rows, self.offsets, self.keys, self.source)

    def learner_rows(self, learner):
        """(rows, y) as :meth:`ColumnarEvent.learner_rows` gives them for
        these events, straight from the arrays; None when that path must
        decide (:func:`_features_of`)."""
        features = _features_of(self.cols, self.rows, learner)
        return None if features is None else (features, self.cols.label[self.rows])

    def weights(self) -> np.ndarray | None:
        """The events' importance weights (none given: 1); None when all are none."""
        cols, rows = self.cols, self.rows
        given = cols.has_weight[rows]
        return np.where(given, cols.weight[rows], 1.0) if given.any() else None

    def event_ids(self) -> Strings:
        cols = self.cols
        return Strings(cols.buf, cols.id_start[self.rows], cols.id_end[self.rows])

    def covered(self) -> dict[tuple[str, int], int]:
        """The next offset of the partition after these events."""
        return {self.source: int(self.offsets[-1]) + 1} if len(self) else {}

    @staticmethod
    def split(cols: EventColumns, keep: np.ndarray, batch: list) -> list[tuple[str, "EventRows"]]:
        """(model, its EventRows) of the messages of ``batch`` (one partition,
        decoded as ``cols``) where ``keep``, the models in the order they first appear."""
        offsets = np.fromiter((m.offset for m in batch), np.int64, len(batch))
        index = np.flatnonzero(keep)
        codes = cols.model_code[index]
        found, first = np.unique(codes, return_index=True)
        out = []
        for code in found[np.argsort(first)].tolist():
            rows = index[codes == code] if found.shape[0] > 1 else index
            out.append((cols.models[code], EventRows(cols, rows, offsets[rows], [batch[i].key for i in rows.tolist()],
                                                     (batch[0].topic, batch[0].partition))))
        return out


def prediction_keys_of(items) -> list[bytes]:
    """The Prediction key of each event of (Position, event) pairs or an
    :class:`EventRows` (:func:`pipelines.records.predictions.prediction_key`)."""
    if isinstance(items, EventRows):
        if None not in items.keys:
            return list(items.keys)
        return [key if key is not None else raw for raw, key in zip(items.event_ids().encoded(), items.keys)]
    return prediction_keys([e["id"] for _, e in items], [getattr(p, "key", None) for p, _ in items])


def event_timestamps_of(items) -> np.ndarray:
    """The timestamp (ms, -1: none) of each event of (Position, event) pairs or an :class:`EventRows`."""
    if isinstance(items, EventRows):
        return items.cols.timestamp[items.rows]
    return np.array([e["timestamp"] for _, e in items], dtype=np.int64)


def _features_of(cols: EventColumns, rows: np.ndarray, learner):
    """The learner's input for ``rows`` of the columns, without a Python
    object per event: CSR rows gathered from the decoded arrays; for a
    learner that crosses namespaces, namespaced rows read again from the
    messages' bytes in one compiled call (the decoded rows have colliding
    names summed already, the crosses need them apart). None when the
    per-event path must decide: another hasher, or crosses over a row the
    compiled reader did not take (its record has the names)."""
    hasher = learner.hasher
    if not learner.interactions:
        if cols.hashing != (hasher.bits, hasher.seed):
            return None
        return gather_rows(cols.indptr, cols.indices, cols.values, rows)
    if cols.feature_start is None or (cols.records and np.isin(rows, list(cols.records)).any()):
        return None
    indptr, indices, values, spaces = read_namespaced(cols.buf, cols.feature_start[rows], cols.msg_end[rows],
                                                      hasher.bits, hasher.seed, DEFAULT_NAMESPACE)
    return None if indptr.size == 0 else NamespacedRows(indptr, indices, values, spaces)


def _own_labels(events: list, label: np.ndarray, has_label: np.ndarray | None = None):
    """``label`` (the columns' labels of ``events``) with the labels of
    :class:`LabelledEvent` rows put in, as copies."""
    late = [(k, e.label) for k, e in enumerate(events) if type(e) is LabelledEvent]
    if not late:
        return label, has_label
    label = label.copy()
    has_label = None if has_label is None else has_label.copy()
    for k, value in late:
        label[k] = value
        if has_label is not None:
            has_label[k] = True
    return label, has_label


# ---------------------------------------------------------------- a model's batch of predictions as Kafka values


def event_arrays(events: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(buf, id_start, id_end, timestamp in ms as float, label, has_label)
    of a list of Event records (or an :class:`EventRows`), what :func:`encode_predictions` takes:
    slices of the batch's columns when all are :class:`ColumnarEvent` of
    one batch, else read record by record (events given a label that came
    before them, or records of the per-event decoder)."""
    if isinstance(events, EventRows):
        cols, rows = events.cols, events.rows
        return _row_arrays(cols, rows, cols.label[rows], cols.has_label[rows])
    cols = getattr(events[0], "cols", None) if events else None
    if cols is not None:
        try:
            rows = np.fromiter((e.i for e in events if e.cols is cols), np.int64, len(events))
        except (AttributeError, ValueError):  # not all ColumnarEvents, or of other batches
            rows = None
        if rows is not None:
            return _row_arrays(cols, rows, *_own_labels(events, cols.label[rows], cols.has_label[rows]))
    from pipelines.records.predictions import millis

    ids = [e["id"].encode() for e in events]
    ends = np.cumsum(np.fromiter(map(len, ids), np.int64, len(ids)))
    labels = [e.get("label") for e in events]
    has_label = np.fromiter((v is not None for v in labels), np.bool_, len(labels))
    label = np.array([np.nan if v is None else v for v in labels], np.float64)
    ts = np.array([millis(e["timestamp"]) for e in events], np.float64)
    return np.frombuffer(b"".join(ids), np.uint8), ends - np.diff(ends, prepend=0), ends, ts, label, has_label


def _row_arrays(cols: EventColumns, rows: np.ndarray, label: np.ndarray, has_label: np.ndarray) -> tuple:
    return (cols.buf, cols.id_start[rows], cols.id_end[rows], cols.timestamp[rows].astype(np.float64), label,
            has_label)


def prediction_values(codec: Codec, topic: str | None, model: str, items: list, events: list, *,
                      versions: np.ndarray, scores: np.ndarray, losses: np.ndarray, probability, klass,
                      now_ms: float) -> list[bytes] | None:
    """The Kafka values of ``prediction_record(events[i], model, versions[i],
    scores[i], probability[i], klass[i], losses[i], now_ms, items[i][0])``
    for every i, byte for byte as ``codec.encode("scinol.Prediction", ...,
    topic)`` writes them, made in one compiled call; None when that call
    cannot make the same bytes (events read from several topics, a registry
    whose Prediction schema is not the current one, a partition outside
    int): the caller encodes the records one by one then. ``items`` may be
    an :class:`EventRows` (``events`` the same), read as its arrays."""
    from schemas.codec import EncodeError

    if isinstance(items, EventRows):  # one partition: its arrays
        n, topics = len(items), {items.source[0]}
        partitions, offsets = np.full(n, items.source[1], np.int64), items.offsets
    else:
        n, topics = len(items), {pos.topic for pos, _ in items}
        partitions = np.fromiter((p.partition for p, _ in items), np.int64, n)
        offsets = np.fromiter((p.offset for p, _ in items), np.int64, n)
    if len(topics) != 1:
        return None
    buf, id_start, id_end, ts, label, has_label = event_arrays(events)
    try:
        out, offsets = encode_predictions(
            codec, topic, buf=buf, id_start=id_start, id_end=id_end, model=model, model_version=versions,
            scores=scores, label=label, has_label=has_label, loss=losses,
            event_timestamp=ts.astype(np.int64), latency_ms=now_ms - ts, probability=probability,
            predicted_class=klass, source_topic=topics.pop(), source_partition=partitions, source_offset=offsets)
    except EncodeError:
        return None
    return _split(out, offsets)


def labelled_values(codec: Codec, topic: str | None, model: str, learned, probability, klass) -> list[bytes] | None:
    """The Kafka values of the labelled Prediction records of ``learned`` (a
    :class:`pipelines.exact.model_runner.Learned`: held events and their
    late labels), byte for byte as ``codec.encode`` writes
    ``labelled_prediction``'s records, made in one compiled call; None when
    that call cannot make the same bytes (held events read from several
    topics or from none known, or see :func:`prediction_values`)."""
    from schemas.codec import EncodeError

    rows, n = learned.rows, len(learned.ids)
    codes = np.unique(rows.topic)
    if codes.shape[0] != 1 or codes[0] < 0:
        return None
    ids = Strings.of(learned.ids)
    try:
        out, offsets = encode_predictions(
            codec, topic, buf=ids.buf, id_start=ids.starts, id_end=ids.ends, model=model, model_version=rows.version,
            scores=learned.scores, label=np.array(learned.labels, np.float64), has_label=np.ones(n, np.bool_),
            loss=learned.losses, event_timestamp=rows.ts_ms, latency_ms=rows.latency_ms, probability=probability,
            predicted_class=klass, source_topic=learned.topics[int(codes[0])], source_partition=rows.partition,
            source_offset=rows.offset)
    except EncodeError:
        return None
    return _split(out, offsets)


def _split(buf: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Record i of an encoded batch is ``buf[offsets[i]:offsets[i + 1]]``."""
    raw, at = buf.tobytes(), offsets.tolist()
    return [raw[a:b] for a, b in zip(at[:-1], at[1:])]
