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
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from pipelines.kafka.consumer import KafkaMessage
from schemas.reasons import BAD_LABEL, LABEL_DUPLICATE, LABEL_EXPIRED, LABEL_UNKNOWN_EVENT

from .predictions import millis
from .strings import Strings
from .validation import check_label_and_weight

LABELLED, EXPIRED, TOO_LATE = 1, 2, 3  # what happened to an event that left the store


class Source(NamedTuple):
    """Where an event was read, and its message's key."""
    topic: str
    partition: int
    offset: int
    key: bytes | None = None


class Waiting(NamedTuple):
    """An unlabelled event, as predicted."""
    ts_ms: int
    version: int
    latency_ms: float
    scores: np.ndarray  # the prediction made on arrival (n_outputs,)
    indices: np.ndarray  # its features as a CSR row
    values: np.ndarray
    weight: float
    source: Source | None = None
    namespaces: np.ndarray | None = None  # each entry's namespace, when the learner crosses features


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


_WAITING_OVERHEAD = 600  # bytes of a held event besides its arrays: the Waiting, its ids, arrays' headers
_ENTRY_OVERHEAD = 200  # an early label or a remembered id


class PendingStore:
    """One model's events awaiting labels and labels awaiting events."""

    def __init__(self, ttl_ms: float, max_pending: int):
        self.ttl_ms, self.max_pending = float(ttl_ms), int(max_pending)
        self.events: OrderedDict[str, Waiting] = OrderedDict()
        self.labels: OrderedDict[str, EarlyLabel] = OrderedDict()
        self.gone: OrderedDict[str, int] = OrderedDict()  # recently left: LABELLED or EXPIRED
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

    def take_early_labels(self, ids: Strings, ts_ms: np.ndarray, unlabelled: np.ndarray) -> list[tuple[int, EarlyLabel]]:
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
        if hasattr(event, "with_label"):  # a row of decoded columns (pipelines.records.columnar)
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

    def approx_bytes(self) -> int:
        """About how much memory the store holds, in O(1): the waiting events
        at the mean size of those held so far, plus the labels and ids kept."""
        mean = self._held_bytes / self._held if self._held else _WAITING_OVERHEAD
        return int(len(self.events) * mean + (len(self.labels) + len(self.gone)) * _ENTRY_OVERHEAD)

    def add_label(self, event_id: str, ts_ms: int, label: float, weight: float,
                  message: KafkaMessage) -> Matched | None:
        """The match if the event waits; else the label waits for it, or
        (already learned, or expired) becomes an unmatched label."""
        self.label_clock = max(self.label_clock, ts_ms)
        waiting = self.events.pop(event_id, None)
        if waiting is not None and ts_ms - waiting.ts_ms > self.ttl_ms:
            self._too_late(message, event_id)
            self._forget(event_id, TOO_LATE)
            if self.dropped is not None:
                self.dropped.append(event_id)
        elif waiting is not None:
            self._forget(event_id, LABELLED)
            return Matched(event_id, waiting, label, weight)
        elif self.gone.get(event_id) in (LABELLED, TOO_LATE) or event_id in self.labels:
            self.unmatched_labels.append((message, LABEL_DUPLICATE, f"event {event_id!r} was already labelled"))
        elif self.gone.get(event_id) == EXPIRED:
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
        while self.events and next(iter(self.events.values())).ts_ms < self.label_clock - self.ttl_ms:
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

    def _forget(self, event_id: str, fate: int) -> None:
        self.gone[event_id] = fate
        self.gone.move_to_end(event_id)
        while len(self.gone) > self.max_pending:
            self.gone.popitem(last=False)

    def drain_unmatched(self) -> list[tuple[KafkaMessage, str, str]]:
        out, self.unmatched_labels = self.unmatched_labels, []
        return out

    # -- saved with the model

    def to_arrays(self) -> dict[str, np.ndarray]:
        ev = list(self.events.items())
        lab = list(self.labels.items())
        gone = list(self.gone.items())
        n_out = ev[0][1].scores.shape[0] if ev else 0
        out = {"pending_clock": np.array([self.event_clock, self.label_clock, self.expired_events], dtype=np.float64)}
        out.update(_ids("pending_event", [k for k, _ in ev]))
        out["pending_event_ts"] = np.array([w.ts_ms for _, w in ev], dtype=np.int64)
        out["pending_event_version"] = np.array([w.version for _, w in ev], dtype=np.int64)
        out["pending_event_latency"] = np.array([w.latency_ms for _, w in ev], dtype=np.float64)
        out["pending_event_weight"] = np.array([w.weight for _, w in ev], dtype=np.float64)
        out["pending_event_scores"] = np.array([w.scores for _, w in ev], dtype=np.float64).reshape(len(ev), n_out)
        out["pending_event_indptr"] = np.concatenate([[0], np.cumsum([w.indices.shape[0] for _, w in ev])]).astype(np.int64)
        out["pending_event_indices"] = np.concatenate([w.indices for _, w in ev] or [[]]).astype(np.int64)
        out["pending_event_values"] = np.concatenate([w.values for _, w in ev] or [[]]).astype(np.float64)
        out.update(_sources([w.source for _, w in ev]))
        if ev and ev[0][1].namespaces is not None:
            out["pending_event_namespaces"] = np.concatenate([w.namespaces for _, w in ev]).astype(np.uint8)
        out.update(_ids("pending_label", [k for k, _ in lab]))
        out["pending_label"] = np.array([[e.ts_ms, e.label, e.weight] for _, e in lab], dtype=np.float64).reshape(-1, 3)
        out["pending_label_position"] = np.array([[e.message.partition, e.message.offset, e.message.timestamp_ms]
                                                  for _, e in lab], dtype=np.int64).reshape(-1, 3)
        out.update(_ids("pending_label_message", [e.message.value for _, e in lab]))
        out.update(_ids("pending_gone", [k for k, _ in gone]))
        out["pending_gone_fate"] = np.array([f for _, f in gone], dtype=np.int8)
        return out

    @classmethod
    def from_arrays(cls, arrays: dict, ttl_ms: float, max_pending: int, labels_topic: str = "") -> "PendingStore":
        store = cls(ttl_ms, max_pending)
        if "pending_clock" not in arrays:
            return store
        clocks = arrays["pending_clock"]
        store.event_clock, store.label_clock, store.expired_events = float(clocks[0]), float(clocks[1]), int(clocks[2])
        indptr, scores = arrays["pending_event_indptr"], arrays["pending_event_scores"]
        sources = _sources_back(arrays)
        spaces = arrays.get("pending_event_namespaces")
        for i, event_id in enumerate(_names(arrays, "pending_event")):
            lo, hi = indptr[i], indptr[i + 1]
            store.events[event_id] = Waiting(int(arrays["pending_event_ts"][i]), int(arrays["pending_event_version"][i]),
                                             float(arrays["pending_event_latency"][i]), scores[i].copy(),
                                             arrays["pending_event_indices"][lo:hi].copy(),
                                             arrays["pending_event_values"][lo:hi].copy(),
                                             float(arrays["pending_event_weight"][i]), sources[i],
                                             None if spaces is None else spaces[lo:hi].copy())
        messages = _names(arrays, "pending_label_message", decode=False)
        rows = zip(_names(arrays, "pending_label"), arrays["pending_label"], arrays["pending_label_position"], messages)
        for event_id, (ts, label, weight), (partition, offset, kafka_ts), value in rows:
            message = KafkaMessage(labels_topic, int(partition), int(offset), int(kafka_ts), None, value)
            store.labels[event_id] = EarlyLabel(int(ts), float(label), float(weight), message)
        for event_id, fate in zip(_names(arrays, "pending_gone"), arrays["pending_gone_fate"]):
            store.gone[event_id] = int(fate)
        return store


def _sources(sources: list) -> dict[str, np.ndarray]:
    """Where each waiting event was read: its topic (one per run, kept once),
    partition, offset and key (absent keys flagged)."""
    topics = sorted({s.topic for s in sources if s is not None})
    rows = [(-1, -1, -1, 0) if s is None else (topics.index(s.topic), s.partition, s.offset, s.key is not None)
            for s in sources]
    return {**_ids("pending_source_topic", topics), **_ids("pending_source_key", [
                (s.key or b"") if s is not None else b"" for s in sources]),
            "pending_source": np.array(rows, dtype=np.int64).reshape(len(rows), 4)}


def _sources_back(arrays: dict) -> list:
    if "pending_source" not in arrays:
        return [None] * len(arrays["pending_event_ts"])
    topics, keys = _names(arrays, "pending_source_topic"), _names(arrays, "pending_source_key", decode=False)
    return [None if t < 0 else Source(topics[t], int(p), int(o), keys[i] if has_key else None)
            for i, (t, p, o, has_key) in enumerate(arrays["pending_source"])]


def _ids(prefix: str, ids: list) -> dict[str, np.ndarray]:
    """Strings (or bytes) as numeric arrays (the state file holds numbers only): bytes and offsets."""
    raw = [i.encode("utf-8") if isinstance(i, str) else bytes(i) for i in ids]
    return {f"{prefix}_id_bytes": np.frombuffer(b"".join(raw), dtype=np.uint8).copy(),
            f"{prefix}_id_offsets": np.concatenate([[0], np.cumsum([len(r) for r in raw])]).astype(np.int64)}


def _names(arrays: dict, prefix: str, decode: bool = True) -> list:
    data, offsets = arrays[f"{prefix}_id_bytes"].tobytes(), arrays[f"{prefix}_id_offsets"]
    parts = [data[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]
    return [p.decode("utf-8") for p in parts] if decode else parts
