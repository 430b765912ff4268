"""One decoded batch of Event messages as columns (:class:`EventColumns`),
what :class:`pipelines.records.event_decoder.EventDecoder` makes: features
as CSR rows, labels with a has-label mask, weights, timestamps, ids and
model names as offsets into the joined input bytes, and per message a
reason code (0 = a valid event); a part of it taken as a batch of its own,
and pickled as narrow arrays.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from fastavro import schemaless_reader

from pipelines.records.row_features import gather_rows
from schemas.catalog import current_version, load_schema
from schemas.codec import _reading_schema


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
        :class:`~pipelines.records.event_rows.ColumnarEvent` hands out
        field by field."""
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
