"""The route step's half of sharded mode for one model: numbers the
model's events 1, 2, ... (the model's *sequence*) in the order it applies
them and splits each event into K slices by hashed coordinate; with delayed
labels, joins each label to its waiting event and routes the event again,
labelled (see the package docstring for the whole protocol)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from learners.interactions import expand
from learners.sharding import shards_of
from pipelines.kafka.offsets import Offsets, offsets_records, offsets_from_records, advance_offsets
from pipelines.kafka.spans import DEFAULT_MAX_WAITING, Chain
from pipelines.records.dead_letters import dead_letter
from pipelines.records.events import learner_rows
from pipelines.records.event_rows import EventRows
from pipelines.records.held import Rows, take_csr
from pipelines.records.labels import PendingStore, Source, Waiting
from pipelines.records.parts import EVENTS, LABELS, Part
from pipelines.records.predictions import millis
from pipelines.records.strings import Strings

from .messages import Cadence, LateHead, Outbox, Slices


class Router:
    """Sequence numbers and slices for one model's events. With delayed
    labels (``pending``) it also joins labels to the events awaiting them:
    an unlabelled event is routed at once (predicted, not learned) and its
    hashed features kept; when its label comes the event is routed again,
    labelled, under a new sequence number (:meth:`route_labels`), so the
    model learns in label-arrival order as exact mode does."""

    def __init__(self, n_shards: int, hasher, bias: bool, seq: int = 0,
                 offsets: Offsets | None = None, interactions: tuple[str, ...] = (),
                 pending: PendingStore | None = None, max_waiting: int = DEFAULT_MAX_WAITING):
        self.n_shards, self.hasher, self.bias = n_shards, hasher, bias
        self.pending = pending
        if pending is not None:
            pending.dropped = []
        self.interactions = interactions
        """Feature crosses (learners.interactions), made here before the features are split."""
        self.seq = seq
        self.cadence = Cadence()  # of the cuts the Router asks for, with delayed labels
        self.offsets = dict(offsets or {})
        """Next offset per (topic, partition) already in the sequence: events
        before it were learned before a restart and are skipped."""
        self.chain = Chain(self.offsets, max_waiting)
        """Takes each partition's parts (events, labels, feedback) in offset order; keeps ``offsets``."""
        self.restored = dict(self.offsets)
        """What the state this run began from covers: the events and labels
        below it get no feedback in this run (their skip records say so)."""
        self.outbox = Outbox("route")  # a stream to each shard

    def take(self, part: Part) -> tuple[list[Part], list]:
        """(the parts now in order, ``part`` and those it let through, each
        without what was routed before; the positions of the events and
        labels left out that the state this run began from covers: they get
        no feedback in this run. A repeat of what this run routed gets none
        either: its first delivery's feedback is coming)."""
        ready_parts, skipped = [], []
        for ready in self.chain.offer(part.span, part, part.size):
            whole = ready.payload
            if whole.kind in (EVENTS, LABELS):
                before = whole.since(self.restored.get(whole.span.stream, whole.span.start))
                skipped += [pos for pos, _ in whole.payload[:len(whole.payload) - len(before.payload)]]
            if not ready.is_replay:
                ready_parts.append(whole.since(ready.since))
        return ready_parts, skipped

    def route(self, items) -> list[list[Slices]]:
        """Slices per shard for a batch of (Position, event) pairs or an :class:`EventRows`."""
        per_shard: list[list[Slices]] = [[] for _ in range(self.n_shards)]
        if not items:
            return per_shard
        if self.pending is not None:
            items = self._with_early_labels(items)
        if isinstance(items, EventRows):  # arrays all the way: no object per event
            rows = items.learner_rows(self)
            indptr, indices, data, y = self._crossed(*rows) if rows is not None else self._rows(list(items))
            ids = items.event_ids()
        else:
            ids = Strings.of(e["id"] for _, e in items)
            indptr, indices, data, y = self._rows([e for _, e in items])
        coords = indices.astype(np.int64) + self.bias
        learning = ~np.isnan(y)
        if isinstance(items, EventRows):
            if self.pending is not None:
                self._hold_rows(items, indptr, coords, data, learning)
        else:
            self._take_in(items, indptr, coords, data, learning)
        self._split(per_shard, ids, indptr, coords, data, learning, items)
        if self.pending is not None:
            self.pending.expire()
        return per_shard

    def _with_early_labels(self, items):
        """``items`` with the labels that came before their events put in
        (:meth:`PendingStore.with_early_label`); an EventRows stays one, its
        label and weight columns copied with those labels (and their weights,
        if any) in place."""
        if not isinstance(items, EventRows):
            return [(pos, self.pending.with_early_label(event)) for pos, event in items]
        cols, at = items.cols, items.rows
        taken = self.pending.take_early_labels(items.event_ids(), cols.timestamp[at], ~cols.has_label[at])
        if not taken:
            return items
        label, has_label, weight, has_weight = (a.copy() for a in (cols.label, cols.has_label, cols.weight,
                                                                   cols.has_weight))
        for i, early in taken:
            r = at[i]
            label[r], has_label[r] = early.label, True
            if early.weight == early.weight:  # NaN: the label brings no weight, the event's stays
                weight[r], has_weight[r] = early.weight, True
        cols = dataclasses.replace(cols, label=label, has_label=has_label, weight=weight, has_weight=has_weight)
        return EventRows(cols, items.rows, items.offsets, items.keys, items.source)

    def _hold_rows(self, items: EventRows, indptr, coords, data, learning) -> None:
        """:meth:`_hold` for the unlabelled events of an EventRows, as
        columns (:meth:`PendingStore.add_events`): no object per event."""
        wait = np.flatnonzero(~learning)
        if not wait.size:
            return
        cols, at = items.cols, items.rows[wait]
        held_ptr, entries = take_csr(indptr, wait)
        n = wait.shape[0]
        self.pending.add_events(items.event_ids().take(wait).tolist(), Rows(
            cols.timestamp[at].astype(np.int64), np.full(n, -1, np.int64), np.zeros(n),
            np.where(cols.has_weight[at], cols.weight[at], 1.0), np.empty((n, 0)), held_ptr, coords[entries],
            np.asarray(data, np.float64)[entries], None, None, None, None, None),
            *items.source, items.offsets[wait], [items.keys[i] for i in wait.tolist()])

    def _take_in(self, items: list, indptr, coords, data, learning) -> None:
        """Keep the unlabelled events of (Position, event) pairs for their labels."""
        if self.pending is None:
            return
        for i, (pos, event) in enumerate(items):
            if not learning[i]:
                lo, hi = indptr[i], indptr[i + 1]
                self._hold(pos, event, coords[lo:hi], data[lo:hi])

    def mark_cut(self, per_shard) -> dict:
        """Ask for a checkpoint cut at the last event routed (the flag rides
        on its shard-0 slice to the Combiner); returns this Router's part of
        it, its state exactly there: the events and labels waiting, and the
        offsets of both topics it has taken in (early labels and dead
        letters included, which no event's feedback covers)."""
        last = per_shard[0][-1]
        per_shard[0][-1] = last._replace(cut=last.first + last.n - 1)
        return self.part()

    def part(self) -> dict:
        return {"seq": self.seq, "aux": self.pending.to_arrays(), "dropped": list(self.pending.dropped),
                "offsets": offsets_records(self.offsets)}

    def restore(self, header: dict, aux: dict, labels_topic: str) -> None:
        """Back to a part of :meth:`part` (the pending store keeps its settings)."""
        ttl, most = self.pending.ttl_ms, self.pending.max_pending
        self.pending = PendingStore.from_arrays(aux, ttl, most, labels_topic)
        self.pending.dropped = list(header.get("dropped", []))
        restored = offsets_from_records(header["offsets"])
        advance_offsets(self.offsets, restored)
        self.restored.update((stream, self.offsets[stream]) for stream in restored)

    def _split(self, per_shard, event_ids: Strings, indptr: np.ndarray, coords: np.ndarray, values: np.ndarray,
               learning: np.ndarray, heads: list) -> None:
        """CSR rows (global coordinates) as the next sequence numbers, one
        Slices per shard (shard 0's with the heads), with numpy over the
        whole batch: each row's entries keep their order, the constant
        feature (coordinate 0) first in the shard that owns it."""
        n = len(event_ids)
        if not n:
            return
        first, self.seq = self.seq + 1, self.seq + n
        if self.bias:
            indptr, coords, values = _with_bias(indptr, coords, values)
        row = np.repeat(np.arange(n), np.diff(indptr))
        shard = shards_of(coords, self.n_shards)
        for s in range(self.n_shards):
            take = np.flatnonzero(shard == s)  # in row order already: no sort
            shard_indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(row[take], minlength=n), out=shard_indptr[1:])
            per_shard[s].append(Slices(first, event_ids, shard_indptr, coords[take], values[take], learning,
                                       heads if s == 0 else None))

    def _hold(self, pos, event: dict, coords: np.ndarray, values: np.ndarray) -> None:
        """Keep an unlabelled event's hashed (and crossed) coordinates for
        when its label comes; its prediction is kept by the Combiner."""
        self.pending.add_event(event["id"], Waiting(
            int(millis(event["timestamp"])), -1, 0.0, np.empty(0), coords.copy(), values.copy(),
            event.get("weight") or 1.0, Source(*pos[:3], getattr(pos, "key", None))))

    def route_labels(self, items: list[tuple]) -> tuple[list[list[Slices]], list[dict], list]:
        """(slices per shard, dead letters, label messages no event is
        routed for) for (message, Label record) pairs: each label whose
        event waits routes the event again, labelled, under the next
        sequence number; labels that cannot be used are dead letters with
        the exact mode's reasons; the others wait for their event (or were
        taken in before a restart: :meth:`take` leaves those out)."""
        per_shard: list[list[Slices]] = [[] for _ in range(self.n_shards)]
        unrouted, heads = [], []
        for msg, record in items:
            weight = math.nan if record.get("weight") is None else record["weight"]
            match = self.pending.add_label(record["event_id"], int(millis(record["timestamp"])), record["label"],
                                           weight, msg)
            self.pending.expire()
            if match is not None:
                heads.append(LateHead(msg, match, tuple(self.pending.dropped)))
                self.pending.dropped.clear()
            else:
                unrouted.append(msg)
        if heads:
            held = [h.match.event for h in heads]
            indptr = np.zeros(len(heads) + 1, dtype=np.int64)
            np.cumsum([e.indices.shape[0] for e in held], out=indptr[1:])
            self._split(per_shard, [h.match.event_id for h in heads], indptr,
                        np.concatenate([e.indices for e in held]).astype(np.int64),
                        np.concatenate([e.values for e in held]).astype(np.float64), np.ones(len(heads), dtype=bool),
                        heads)
        return per_shard, self.dropped_labels(), unrouted

    def dropped_labels(self) -> list[dict]:
        """Dead letters of the labels that left the store without their event."""
        return [dead_letter(msg, reason, detail) for msg, reason, detail in self.pending.drain_unmatched()]


    def _rows(self, events):
        """(indptr, indices, data, y) of events (gathered from the columns for
        events of a decoded batch, ColumnarEvent), crossed with interactions."""
        return self._crossed(*learner_rows(events, self))

    def _crossed(self, rows, y):
        """(indptr, indices, data, y): ``rows`` crossed, with interactions."""
        if self.interactions:
            rows = expand(rows, self.interactions, self.hasher.bits, self.hasher.seed)
        return (*rows, y)


def _with_bias(indptr: np.ndarray, coords: np.ndarray, values: np.ndarray):
    """CSR rows with the constant feature (coordinate 0, value 1) put first in each."""
    starts = indptr[:-1]
    return (indptr + np.arange(indptr.shape[0]), np.insert(coords, starts, 0),
            np.insert(np.asarray(values, np.float64), starts, 1.0))
