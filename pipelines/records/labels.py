"""Delayed labels: events that arrived without a label wait here, with the
prediction made when they arrived, until their ``scinol.Label`` comes on the
labels topic; then the model learns from them, in label-arrival order.

A label may also come before its event (the two topics are read
independently): it waits the same way for its event.

The TTL (``ttl_ms``) is in event time, judged from the records' own
timestamps so that a replay decides as the live run did, however the two
topics interleave: a label counts when its timestamp is at most the TTL
after its event's. An event stops waiting once the labels topic has moved
past its timestamp plus the TTL (the newest label timestamp seen is that
topic's clock), a label once the events topic has (likewise); at most
``max_pending`` of each wait per model, the oldest go first. What leaves
without a match is counted, and a label that cannot be used becomes a dead
letter: ``label_unknown_event`` (no such event within the TTL),
``label_expired`` (it came more than the TTL after its event),
``label_duplicate`` (its event was already learned from, or labelled twice).

Progressive metrics with delays: the loss of an event is the loss of the
prediction made when the event arrived, counted when its label arrives. The
model learns from the labelled events in the order their labels arrive, so
a stream with delayed labels trains the same model as the same examples
with their labels inline, reordered to label-arrival order.

The store is saved with the model (:meth:`to_arrays`, as aux arrays of the
checkpoint file) and restored with it, so a restart keeps pending events.
"""

from __future__ import annotations

import math
from array import array
from collections import OrderedDict
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from pipelines.kafka.consumer import KafkaMessage
from schemas.reasons import BAD_LABEL, LABEL_DUPLICATE, LABEL_EXPIRED, LABEL_UNKNOWN_EVENT

from .held import HeldEvents, Rows, Source, Waiting, take_csr  # noqa: F401 - Source: sharded mode imports it from here
from .predictions import millis
from .strings import Strings
from .validation import check_label_and_weight

LABELLED, EXPIRED, TOO_LATE = 1, 2, 3  # what happened to an event that left the store
UNKNOWN = 4  # or to a label that left it without finding its event


class EarlyLabel(NamedTuple):
    """A label whose event has not come yet, and its message (for a dead letter)."""
    ts_ms: int
    label: float
    weight: float  # NaN: the event's own
    message: KafkaMessage


class Matched(NamedTuple):
    """An event and its label, ready to learn from."""
    event_id: str
    event: Waiting
    label: float
    weight: float


def check_label(record: dict, loss: str, n_classes: int | None) -> tuple[str, str] | None:
    """``(reason, detail)`` for a Label record that cannot be used, else None."""
    label = record.get("label")
    if label is None or label != label:
        return BAD_LABEL, f"label is {label!r}; a Label record must carry a label"
    return check_label_and_weight(record, loss, n_classes)


class GoneIds(Mapping):
    """Ids of events that left the store, with their fate (LABELLED, EXPIRED
    or TOO_LATE; UNKNOWN: a label that found no event), oldest first, the
    newest ``limit`` of them: an ordered map whose ids also sit, as UTF-8,
    in one growing buffer, so that saving it
    (:meth:`arrays`, at every bundle of a pipeline) is a few array
    operations, not one per id. Forgetting an id again moves it to the end."""

    def __init__(self, limit: int):
        self.limit = limit
        self._at: dict[str, int] = {}  # id -> its entry
        self._buf = bytearray()  # the entries' ids, end to end
        self._ends = array("q")  # entry k's id ends there
        self._fate = bytearray()
        self._live = bytearray()  # 0: the entry was dropped or moved to the end
        self._head = 0  # the oldest entry that may be live

    def __getitem__(self, event_id: str) -> int:
        return self._fate[self._at[event_id]]

    def get(self, event_id: str, default=None):
        k = self._at.get(event_id)
        return default if k is None else self._fate[k]

    def __iter__(self):
        return iter(self._at)  # a dict keeps insertion order, and a moved id is inserted again

    def __len__(self) -> int:
        return len(self._at)

    def forget(self, event_id: str, fate: int) -> None:
        """Remember ``event_id`` as the newest, with ``fate``; drop the oldest past the limit."""
        k = self._at.pop(event_id, None)
        if k is not None:
            self._live[k] = 0
        self._append(event_id.encode(), fate)
        self._at[event_id] = len(self._fate) - 1
        while len(self._at) > self.limit:
            self._drop_oldest()
        if self._head > 4096 and self._head > len(self._fate) // 2:
            self._compact()

    def _append(self, raw: bytes, fate: int) -> None:
        self._buf += raw
        self._ends.append(len(self._buf))
        self._fate.append(fate)
        self._live.append(1)

    def _drop_oldest(self) -> None:
        while not self._live[self._head]:
            self._head += 1
        k = self._head
        start = self._ends[k - 1] if k else 0
        del self._at[self._buf[start:self._ends[k]].decode()]
        self._live[k] = 0
        self._head += 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the live ids' UTF-8 bytes end to end, their offsets (n + 1), their
        fates as int8), oldest first: what a checkpoint keeps."""
        ends = np.frombuffer(self._ends, np.int64) if len(self._ends) else np.zeros(0, np.int64)
        live = np.frombuffer(bytes(self._live), np.bool_)
        lengths = np.diff(ends, prepend=0)
        # a mask of one byte per byte of the buffer, not an index of eight (a million 29-byte ids: 1 s -> 0.05 s)
        raw = np.frombuffer(bytes(self._buf), np.uint8)[np.repeat(live, lengths)]
        lengths = lengths[live]
        offsets = np.zeros(lengths.shape[0] + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return raw, offsets, np.frombuffer(bytes(self._fate), np.int8)[live].copy()

    def _compact(self) -> None:
        raw, offsets, fates = self.arrays()
        # The map's order is the live entries' order (an id forgotten again is popped and inserted again as
        # its entry is appended), so its keys are the compacted entries' ids: none is decoded again.
        self._restore(raw.tobytes(), offsets, fates, ids=list(self._at))

    def restore(self, raw: bytes, offsets: np.ndarray, fates: np.ndarray) -> None:
        """Fill an empty one with what :meth:`arrays` gave."""
        if self._at or self._fate:
            raise ValueError("restore() fills an empty GoneIds")
        self._restore(raw, offsets, fates)

    def _restore(self, raw: bytes, offsets: np.ndarray, fates: np.ndarray, ids: list[str] | None = None) -> None:
        n = len(fates)
        self._buf = bytearray(raw)
        self._ends = array("q", np.asarray(offsets[1:], np.int64).tobytes())
        self._fate = bytearray(np.asarray(fates, np.int8).tobytes())
        self._live = bytearray(b"\x01" * n)
        self._head = 0
        if ids is None:
            at = offsets.tolist()
            ids = [raw[a:b].decode() for a, b in zip(at[:-1], at[1:])]
        self._at = dict(zip(ids, range(n)))


_WAITING_OVERHEAD = 600  # bytes of a held event besides its arrays: the Waiting, its ids, arrays' headers
_ENTRY_OVERHEAD = 200  # an early label or a remembered id


class PendingStore:
    """One model's events awaiting labels and labels awaiting events."""

    def __init__(self, ttl_ms: float, max_pending: int):
        self.ttl_ms, self.max_pending = float(ttl_ms), int(max_pending)
        self.events = HeldEvents()  # id -> Waiting, in arrival order
        self.labels: OrderedDict[str, EarlyLabel] = OrderedDict()
        self.gone = GoneIds(self.max_pending)  # recently left: LABELLED, EXPIRED, TOO_LATE or UNKNOWN
        self.event_clock = -math.inf  # the newest event timestamp seen (ms)
        self.label_clock = -math.inf  # the newest label timestamp seen (ms)
        self.expired_events = 0
        self.unmatched_labels: list[tuple[KafkaMessage, str, str]] = []  # (message, reason, detail), for dead letters
        self._held, self._held_bytes = 0, 0  # events ever held and their size: approx_bytes's mean
        self.dropped: list[str] | None = None
        """A list to collect the ids of events that leave unlearned (expired, or their label too late), for
        whoever keeps more of them elsewhere (sharded mode's combine step); None: not collected."""

    def __len__(self) -> int:
        return len(self.events) + len(self.labels)

    def take_early_label(self, event_id: str, ts_ms: int) -> EarlyLabel | None:
        """The label that came before event ``event_id`` (now arriving), if
        any and in time: the event is then learned from at once, as if
        labelled inline. A label too late for it is a dead letter."""
        self.event_clock = max(self.event_clock, ts_ms)
        early = self.labels.pop(event_id, None)
        if early is None:
            return None
        if early.ts_ms - ts_ms > self.ttl_ms:
            self._too_late(early.message, event_id)
            self._forget(event_id, TOO_LATE)
            return None
        self._forget(event_id, LABELLED)
        return early

    def take_early_labels(self, ids: Strings, ts_ms: np.ndarray,
                          unlabelled: np.ndarray) -> list[tuple[int, EarlyLabel]]:
        """:meth:`take_early_label` for each event of a batch, in order, where
        ``unlabelled`` (the others take none): (position, label) of those that
        got one. ``ids`` and ``ts_ms`` are the batch's, as arrays; no id is
        made a Python string unless a label waits."""
        at = np.flatnonzero(unlabelled)
        if at.size == 0:
            return []
        self.event_clock = max(self.event_clock, int(ts_ms[at].max()))
        if not self.labels:
            return []
        taken = []
        for i, event_id, ts in zip(at.tolist(), ids.take(at).tolist(), ts_ms[at].tolist()):
            early = self.take_early_label(event_id, int(ts))
            if early is not None:
                taken.append((i, early))
        return taken

    def with_early_label(self, event: dict) -> dict:
        """``event`` with the label that came before it, if one did in time
        (its weight too when it has one: NaN means none), else ``event``."""
        if event.get("label") is not None:
            return event
        early = self.take_early_label(event["id"], int(millis(event["timestamp"])))
        if early is None:
            return event
        weight = None if early.weight != early.weight else early.weight
        if hasattr(event, "with_label"):  # a row of decoded columns (pipelines.records.event_rows)
            return event.with_label(early.label, weight)
        return {**event, "label": early.label, **({} if weight is None else {"weight": weight})}

    def add_event(self, event_id: str, waiting: Waiting) -> None:
        """Hold an unlabelled event (predicted) until its label comes (unless
        its label came already, too late)."""
        self.event_clock = max(self.event_clock, waiting.ts_ms)
        if self.gone.get(event_id) in (LABELLED, TOO_LATE):
            return
        self.events[event_id] = waiting
        self._held += 1
        self._held_bytes += _WAITING_OVERHEAD + waiting.indices.nbytes + waiting.values.nbytes + waiting.scores.nbytes
        self._bound()

    def add_events(self, ids: list[str], rows: Rows, topic: str, partition: int, offsets: np.ndarray,
                   keys: list) -> None:
        """:meth:`add_event` for a batch's unlabelled events, in order, as
        columns: ``rows`` (whose source fields are not read) of events read
        from ``topic`` and ``partition`` at ``offsets``, with message ``keys``."""
        if not ids:
            return
        self.event_clock = max(self.event_clock, int(rows.ts_ms.max()))
        gone = self.gone
        keep = [k for k, event_id in enumerate(ids) if gone.get(event_id) not in (LABELLED, TOO_LATE)]
        if len(keep) < len(ids):
            at = np.array(keep, np.int64)
            indptr, entries = take_csr(rows.indptr, at)
            rows = rows._replace(ts_ms=rows.ts_ms[at], version=rows.version[at], latency_ms=rows.latency_ms[at],
                                 weight=rows.weight[at], scores=rows.scores[at], indptr=indptr,
                                 indices=rows.indices[entries], values=rows.values[entries],
                                 namespaces=None if rows.namespaces is None else rows.namespaces[entries])
            ids, offsets, keys = [ids[k] for k in keep], offsets[at], [keys[k] for k in keep]
        if len(self.events) + len(ids) > self.max_pending and len(set(ids)) < len(ids):
            # The oldest leave as these come, and an id twice in the batch may
            # come back after leaving: event by event, as add_event would.
            n = len(ids)
            rows = rows._replace(topic=np.zeros(n, np.int64), partition=np.full(n, partition, np.int64),
                                 offset=offsets, keys=keys)
            for k, event_id in enumerate(ids):
                self.add_event(event_id, rows.waiting(k, [topic]))
            return
        self.events.append(ids, rows, topic, np.full(len(ids), partition, np.int64), offsets, keys)
        self._held += len(ids)
        self._held_bytes += (len(ids) * _WAITING_OVERHEAD + rows.indices[:rows.indptr[-1]].nbytes
                             + rows.values[:rows.indptr[-1]].nbytes + rows.scores.nbytes)
        self._bound()

    def approx_bytes(self) -> int:
        """About how much memory the store holds, in O(1): the waiting events
        at the mean size of those held so far, plus the labels and ids kept."""
        mean = self._held_bytes / self._held if self._held else _WAITING_OVERHEAD
        return int(len(self.events) * mean + (len(self.labels) + len(self.gone)) * _ENTRY_OVERHEAD)

    def add_label(self, event_id: str, ts_ms: int, label: float, weight: float,
                  message: KafkaMessage) -> Matched | None:
        """The match if the event waits; else the label waits for it, or
        (already learned, or expired) becomes an unmatched label."""
        row = self._match(event_id, ts_ms, label, weight, message)
        return None if row is None else Matched(event_id, self.events.waiting_of(row), label, weight)

    def add_labels(self, labels: list[tuple[str, int, float, float, KafkaMessage]]) -> tuple[list[int], Rows, list]:
        """:meth:`add_label` for each (event id, timestamp, label, weight,
        message) of a batch, in order, without a :class:`Waiting` per match:
        (the positions in ``labels`` of those that found their event; those
        events' rows, in that order; the topic names the rows' ``topic`` indexes)."""
        found, taken = [], []
        for k, (event_id, ts_ms, label, weight, message) in enumerate(labels):
            row = self._match(event_id, ts_ms, label, weight, message)
            if row is not None:
                found.append(k)
                taken.append(row)
        return (found, *self.events.rows_of(taken))

    def _match(self, event_id: str, ts_ms: int, label: float, weight: float, message: KafkaMessage):
        """:meth:`add_label`'s decision: the held event's row (:meth:`HeldEvents.take`) if it matches."""
        self.label_clock = max(self.label_clock, ts_ms)
        row = self.events.take(event_id)
        if row is not None:
            if ts_ms - self.events.ts_of(row) <= self.ttl_ms:
                self._forget(event_id, LABELLED)
                return row
            self._too_late(message, event_id)
            self._forget(event_id, TOO_LATE)
            if self.dropped is not None:
                self.dropped.append(event_id)
            return None
        fate = self.gone.get(event_id)
        if fate in (LABELLED, TOO_LATE) or event_id in self.labels:
            self.unmatched_labels.append((message, LABEL_DUPLICATE, f"event {event_id!r} was already labelled"))
        elif fate == UNKNOWN:
            # as if the first label were still held: what a label counts as does not depend on how topics interleave
            self.unmatched_labels.append((message, LABEL_DUPLICATE, f"a label of event {event_id!r} came before "
                                                                    "and found no event"))
        elif fate == EXPIRED:
            self._too_late(message, event_id)
            self._forget(event_id, TOO_LATE)  # labelled now: a second label is a duplicate
        else:
            self.labels[event_id] = EarlyLabel(ts_ms, label, weight, message)
            self._bound()
        return None

    def _too_late(self, message: KafkaMessage, event_id: str) -> None:
        self.unmatched_labels.append((message, LABEL_EXPIRED, f"the label of event {event_id!r} came more than the "
                                                              f"label TTL ({self.ttl_ms / 1000:g} s) after the event, "
                                                              f"or the event was pushed out by the maximum "
                                                              f"({self.max_pending:,} waiting)"))

    def expire(self) -> None:
        """Drop what no match can come for any more: events the labels
        topic has moved more than the TTL past, labels the events topic has
        (in arrival order, which a topic's timestamps roughly follow)."""
        while self.events and self.events.first_ts() < self.label_clock - self.ttl_ms:
            self._drop_event()
        while self.labels and next(iter(self.labels.values())).ts_ms < self.event_clock - self.ttl_ms:
            self._drop_label()

    def _bound(self) -> None:
        while len(self.events) > self.max_pending:
            self._drop_event()
        while len(self.labels) > self.max_pending:
            self._drop_label()

    def _drop_event(self) -> None:
        event_id, _ = self.events.popitem(last=False)
        self.expired_events += 1
        if self.dropped is not None:
            self.dropped.append(event_id)
        self._forget(event_id, EXPIRED)

    def _drop_label(self) -> None:
        event_id, early = self.labels.popitem(last=False)
        self.unmatched_labels.append((early.message, LABEL_UNKNOWN_EVENT,
                                      f"no event {event_id!r} arrived within the label TTL "
                                      f"({self.ttl_ms / 1000:g} s) or the maximum ({self.max_pending:,} waiting)"))
        self._forget(event_id, UNKNOWN)  # a second label for it is a duplicate, as while this one waited

    def _forget(self, event_id: str, fate: int) -> None:
        self.gone.forget(event_id, fate)

    def drain_unmatched(self) -> list[tuple[KafkaMessage, str, str]]:
        out, self.unmatched_labels = self.unmatched_labels, []
        return out

    # -- saved with the model

    def to_arrays(self) -> dict[str, np.ndarray]:
        rows, topics = self.events.columns()
        lab = list(self.labels.items())
        n = len(rows.ts_ms)
        out = {"pending_clock": np.array([self.event_clock, self.label_clock, self.expired_events], dtype=np.float64)}
        out.update(_ids("pending_event", list(self.events)))
        out["pending_event_ts"] = rows.ts_ms
        out["pending_event_version"] = rows.version
        out["pending_event_latency"] = rows.latency_ms
        out["pending_event_weight"] = rows.weight
        out["pending_event_scores"] = rows.scores if n else np.zeros((0, 0))
        out["pending_event_indptr"] = rows.indptr
        out["pending_event_indices"] = rows.indices
        out["pending_event_values"] = rows.values
        out.update(_sources(rows, topics))
        if n and rows.namespaces is not None:
            out["pending_event_namespaces"] = rows.namespaces
        out.update(_ids("pending_label", [k for k, _ in lab]))
        out["pending_label"] = np.array([[e.ts_ms, e.label, e.weight] for _, e in lab], dtype=np.float64).reshape(-1, 3)
        out["pending_label_position"] = np.array([[e.message.partition, e.message.offset, e.message.timestamp_ms]
                                                  for _, e in lab], dtype=np.int64).reshape(-1, 3)
        out.update(_ids("pending_label_message", [e.message.value for _, e in lab]))
        raw, offsets, fates = self.gone.arrays()
        out.update({"pending_gone_id_bytes": raw, "pending_gone_id_offsets": offsets, "pending_gone_fate": fates})
        return out

    @classmethod
    def from_arrays(cls, arrays: dict, ttl_ms: float, max_pending: int, labels_topic: str = "") -> "PendingStore":
        store = cls(ttl_ms, max_pending)
        if "pending_clock" not in arrays:
            return store
        clocks = arrays["pending_clock"]
        store.event_clock, store.label_clock, store.expired_events = float(clocks[0]), float(clocks[1]), int(clocks[2])
        ids = _names(arrays, "pending_event")
        if ids:
            topics, codes, partitions, offsets, keys = _sources_back(arrays)
            store.events.restore(ids, Rows(
                arrays["pending_event_ts"], arrays["pending_event_version"], arrays["pending_event_latency"],
                arrays["pending_event_weight"], arrays["pending_event_scores"], arrays["pending_event_indptr"],
                arrays["pending_event_indices"], arrays["pending_event_values"],
                arrays.get("pending_event_namespaces"), codes, partitions, offsets, keys), topics)
        messages = _names(arrays, "pending_label_message", decode=False)
        rows = zip(_names(arrays, "pending_label"), arrays["pending_label"], arrays["pending_label_position"], messages)
        for event_id, (ts, label, weight), (partition, offset, kafka_ts), value in rows:
            message = KafkaMessage(labels_topic, int(partition), int(offset), int(kafka_ts), None, value)
            store.labels[event_id] = EarlyLabel(int(ts), float(label), float(weight), message)
        store.gone.restore(arrays["pending_gone_id_bytes"].tobytes(),
                           arrays["pending_gone_id_offsets"].astype(np.int64), arrays["pending_gone_fate"])
        return store


def _sources(rows: Rows, topics: list[str]) -> dict[str, np.ndarray]:
    """Where each waiting event was read: its topic (one per run, kept once),
    partition, offset and key (absent keys flagged); -1s where unknown."""
    named = sorted({topics[c] for c in np.unique(rows.topic).tolist() if c >= 0})
    code = np.array([named.index(t) if t in named else -1 for t in topics] + [-1], np.int64)[rows.topic]
    has_key = np.fromiter((k is not None for k in rows.keys), np.int64, len(rows.keys))
    return {**_ids("pending_source_topic", named), **_ids("pending_source_key", [k or b"" for k in rows.keys]),
            "pending_source": np.stack([code, rows.partition, rows.offset, has_key], axis=1).reshape(-1, 4)}


def _sources_back(arrays: dict) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, list]:
    """(topic names, each event's index into them (-1: unknown), partitions,
    offsets, keys) as :func:`_sources` saved them."""
    n = len(arrays["pending_event_ts"])
    if "pending_source" not in arrays:
        return [], *(np.full(n, -1, np.int64) for _ in range(3)), [None] * n
    table = arrays["pending_source"].astype(np.int64)
    keys = _names(arrays, "pending_source_key", decode=False)
    return (_names(arrays, "pending_source_topic"), table[:, 0], table[:, 1], table[:, 2],
            [key if has else None for key, has in zip(keys, table[:, 3].tolist())])


def _ids(prefix: str, ids: list) -> dict[str, np.ndarray]:
    """Strings (or bytes) as numeric arrays (the state file holds numbers only): bytes and offsets."""
    raw = [i.encode("utf-8") if isinstance(i, str) else bytes(i) for i in ids]
    return {f"{prefix}_id_bytes": np.frombuffer(b"".join(raw), dtype=np.uint8).copy(),
            f"{prefix}_id_offsets": np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64)}


def _names(arrays: dict, prefix: str, decode: bool = True) -> list:
    data, offsets = arrays[f"{prefix}_id_bytes"].tobytes(), arrays[f"{prefix}_id_offsets"]
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    return [p.decode("utf-8") for p in parts] if decode else parts
