"""Sharded mode's protocol for one model, without Beam.

    Router (per model)        numbers the model's events 1, 2, ... in arrival
                              order (the model's *sequence*) and splits each
                              event into K slices by hashed coordinate.
    ShardRunner (per shard)   holds its coordinates' state; predicts its slice
                              of the events in blocks of S + 1 (S = max
                              staleness), each block with the state after
                              every event before it and none of it; keeps the
                              slices and the weights it used until their
                              feedback comes back, and applies it once their
                              block has been predicted whole.
    Combiner (per model)      sums the K partial sums of event t in sequence
                              order: ŷ, the loss, g_t and the global scalars;
                              makes the Prediction and the Feedback record.

The three are joined by Beam (``pipelines.sharded.transforms``) and the
feedback goes back to the shards through Kafka. With S = 0 every shard
predicts event t with the state after events 1..t−1, exactly as one learner
would, so the result equals exact mode on the same sequence up to the
rounding of a dot product split into K partial sums; the Combiner adds
those in shard order, so a sharded run gives the same bits on every runner.
With S > 0 the state each event is predicted with is fixed by the sequence
alone (its block's start), never by when feedback happens to arrive, so the
bits are the same on every runner and every run too.

Ordering rule: the sequence is the order in which the Router receives the
model's events. Within one Kafka partition that is offset order. When a
model's events span several partitions it is the order in which the source
delivered batches: the same for every shard (they all follow the Router's
numbering), but it may differ between runs, as it does in exact mode. Key
events by model so that each model's events live in one partition when runs
must be reproducible.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from learners.losses import loss_code, prepare_labels
from learners.sharding import Shard, shards_of
from learners.state import LearnerState

from learners.interactions import expand
from learners.losses import losses_of
from pipelines.records.dead_letters import dead_letter
from pipelines.kafka.spans import DEFAULT_MAX_WAITING, Chain, Span
from pipelines.records.feedback import FeedbackColumns, FeedbackReader, feedback_batches
from pipelines.records.parts import EVENTS, LABELS, Part
from pipelines.records.events import learner_rows
from pipelines.kafka.consumer import KafkaMessage, StopRule
from pipelines.records.columnar import (ColumnarEvent, EventColumns, EventRows, LabelledEvent, prediction_keys_of,
                                        prediction_values)
from pipelines.records.held import Rows, take_csr
from pipelines.records.labels import EarlyLabel, Matched, PendingStore, Source, Waiting
from pipelines.records.strings import Strings
from pipelines.records.predictions import (ProgressiveMetrics, labelled_prediction, millis, prediction_key,
                                           prediction_record, reading_arrays, readings)

log = logging.getLogger(__name__)


class Slices(NamedTuple):
    """One shard's part of the consecutive events ``first``, ``first`` + 1...
    of a model, as CSR rows (a row may be empty: every shard sees every event)."""

    first: int  # sequence number of row 0
    event_ids: Strings
    indptr: np.ndarray
    coords: np.ndarray  # global coordinates owned by the shard (bias = coordinate 0)
    values: np.ndarray
    learning: np.ndarray  # per row: labelled, so the shard will get a g to update with
    heads: list | None  # shard 0 only, per row: (Position, event) or a LateHead, for the Combiner
    cut: int = 0  # shard 0 only: the sequence number at which the Router saved its part of a checkpoint cut

    @property
    def n(self) -> int:
        return len(self.event_ids)


class Partials(NamedTuple):
    """A shard's partial sums for the events ``first``, ``first`` + 1...: one
    row each (ŷ part, then the extras). Shard −1: the end of the input."""

    first: int
    shard: int
    sums: np.ndarray
    heads: list | None
    cut: int = 0  # see Slices.cut


SLICES, PARTIALS = "slices", "partials"
"""The kinds of the parts the route step sends the shards (beside FEEDBACK) and the shards the combine step."""


class Outbox:
    """Numbers what one keyed step sends each of the keys it feeds (the
    route step: a model's K shards; a shard: its model's combine step) as
    consecutive one-offset spans of a stream of its own, so the receiver
    applies them in the order they were sent (a :class:`Chain`) whatever
    order the runner delivers them in, and drops a repeat."""

    def __init__(self, name: str):
        self.name = name
        self.sent: dict[int, int] = {}

    def stamp(self, kind: str, payload, stream: int) -> Part:
        """``payload`` as the next part of this sender's stream number ``stream``."""
        at = self.sent.get(stream, 0)
        self.sent[stream] = at + 1
        return Part(Span(self.name, stream, at, at + 1, 0), kind, payload)


def label_partition(partition: int) -> int:
    """How a Feedback or skip record names a labels-topic partition: below
    -1 (control records use -1), so it never names an events partition."""
    return -2 - partition


class LateHead(NamedTuple):
    """Shard 0's head of a late-label event: the label's message (its
    position is what the event's learning covers) and the match."""

    message: KafkaMessage
    match: Matched
    dropped: tuple = ()  # ids of events that left the Router's pending store unlearned since the last head


class Cadence:
    """When the next checkpoint cut is due: every ``checkpoint_every`` events
    or ``checkpoint_seconds`` seconds (of a run configuration). Kept with the
    object that asks for cuts, so a restored one keeps its count."""

    def __init__(self):
        self.restart()

    def restart(self) -> None:
        self.since, self.last = 0, time.monotonic()

    def due(self, cfg) -> bool:
        if cfg.checkpoint_every and self.since >= cfg.checkpoint_every:
            return True
        return bool(cfg.checkpoint_seconds) and time.monotonic() - self.last >= cfg.checkpoint_seconds


class Router:
    """Sequence numbers and slices for one model's events. With delayed
    labels (``pending``) it also joins labels to the events awaiting them:
    an unlabelled event is routed at once (predicted, not learned) and its
    hashed features kept; when its label comes the event is routed again,
    labelled, under a new sequence number (:meth:`route_labels`), so the
    model learns in label-arrival order as exact mode does."""

    def __init__(self, n_shards: int, hasher, bias: bool, seq: int = 0,
                 offsets: dict[tuple[str, int], int] | None = None, interactions: tuple[str, ...] = (),
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
                "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.offsets.items())]}

    def restore(self, header: dict, aux: dict, labels_topic: str) -> None:
        """Back to a part of :meth:`part` (the pending store keeps its settings)."""
        ttl, most = self.pending.ttl_ms, self.pending.max_pending
        self.pending = PendingStore.from_arrays(aux, ttl, most, labels_topic)
        self.pending.dropped = list(header.get("dropped", []))
        for o in header["offsets"]:
            key = (o["topic"], int(o["partition"]))
            self.offsets[key] = max(self.offsets.get(key, 0), int(o["offset"]))
            self.restored[key] = self.offsets[key]

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


class Flight(NamedTuple):
    """Consecutive events a shard predicted together (one compiled call) and
    awaits the feedback of; popped when the last one's is applied."""

    first: int  # sequence number of row 0
    event_ids: Strings
    indptr: np.ndarray  # row offsets into slots and values
    slots: np.ndarray
    values: np.ndarray
    memo: object  # the weights predict used, which the update needs (Algorithm.predict_rows)
    learning: np.ndarray
    heads: list | None  # shard 0: each row's head (Slices.heads), its Kafka position first
    since: float

    @property
    def last(self) -> int:
        return self.first + len(self.event_ids) - 1


class ShardRunner:
    """One feature shard of one model: its state and the events in flight.
    Events are predicted in blocks, as many as the staleness allows, and
    updated in runs of consecutive feedback: one compiled call each, in
    sequence order, the same arithmetic as one event at a time."""

    def __init__(self, algorithm, n_outputs: int, shard: int, staleness: int, scalars: dict,
                 state: LearnerState | None = None, coords: np.ndarray | None = None, applied: int = 0,
                 offsets: dict | None = None, learned: int = 0, feedback_timeout: float = 30.0):
        self.algorithm, self.shard_no, self.staleness = algorithm, shard, staleness
        self.feedback_timeout = feedback_timeout
        self.shard = Shard(algorithm, n_outputs, state, coords)
        self.scalars = dict(scalars)
        """The global scalars as of the last feedback applied."""
        self.applied = applied
        """Sequence number of the last event whose feedback was applied (or given up)."""
        self.offsets = dict(offsets or {})
        """Shard 0 (which sees every event's position): the next offset per
        (topic, partition) that events 1..applied cover."""
        self.learned = learned  # labelled events among 1..applied (the model version)
        self.queue: deque[list] = deque()  # [Slices, rows of it already predicted]
        self.queued = 0  # rows in the queue not yet predicted
        self.in_flight: deque[Flight] = deque()
        self.duplicates = 0
        self.missing: list[tuple[int, str]] = []
        self.unexpected = 0
        self.held: deque[tuple[int, FeedbackColumns | None, int, int]] = deque()
        """Feedback that came for events whose block is not predicted whole
        yet, in runs: (first event, message, its rows lo..hi); message None:
        the events' feedback never came (given up when their turn comes)."""
        self.known = applied
        """The last event whose feedback was applied, held or given up."""
        self.inbox = Chain()  # what the route step sent, in the order it sent it
        self.outbox = Outbox("shard")  # to the combine step: stream number = this shard's


    @property
    def predicted(self) -> int:
        """Sequence number of the last event predicted."""
        return self.in_flight[-1].last if self.in_flight else self.applied

    def _block_start(self, seq: int) -> int:
        """The last event before ``seq``'s block: the state ``seq`` is predicted with is the state after it."""
        return (seq - 1) // (self.staleness + 1) * (self.staleness + 1)

    def add(self, blocks: list[Slices], on_cut=None) -> list[Partials]:
        for block in blocks:
            taken = self.predicted + self.queued + 1 - block.first  # rows of a replay already taken
            if taken < block.n:
                self.queue.append([block, max(taken, 0)])
                self.queued += block.n - max(taken, 0)
        return self._predict_ready(on_cut)

    def _predict_ready(self, on_cut=None) -> list[Partials]:
        """Predict what the state allows: the events of a block of S + 1
        (staleness S) with the state after every event before the block and
        none of it, in as few compiled calls as the queued slices allow."""
        out = []
        now = time.monotonic()
        while self.queue:
            first = self.predicted + 1
            start = self._block_start(first)
            self._apply_held(start, on_cut)
            if self.applied < start:
                break  # the block before has feedback still to come
            entry = self.queue[0]
            block, lo = entry
            hi = lo + min(block.n - lo, start + self.staleness + 1 - first + 1)
            a, b = block.indptr[lo], block.indptr[hi]
            slots = self.shard.local_indices(block.coords[a:b])
            values, indptr, learning = block.values[a:b], block.indptr[lo:hi + 1] - a, block.learning[lo:hi]
            sums, memo = self.algorithm.predict_rows(self.shard.state, indptr, slots, values, self.scalars, learning)
            heads = None if block.heads is None else block.heads[lo:hi]
            self.in_flight.append(Flight(first, block.event_ids[lo:hi], indptr, slots, values, memo, learning, heads,
                                         now))
            out.append(Partials(first, self.shard_no, sums, heads, block.cut if first <= block.cut < block.first + hi
                                else 0))
            self.queued -= hi - lo
            if hi == block.n:
                self.queue.popleft()
            else:
                entry[1] = hi
        return out

    def feedback(self, parts: list[FeedbackColumns], on_cut=None) -> list[Partials]:
        """Take feedback (FeedbackBatch messages as columns,
        :mod:`pipelines.records.feedback`), applied in sequence order once
        the block of its event has been predicted whole; returns the
        partials now predictable. ``on_cut(seq)`` is called right after
        applying an event's feedback that asks for a checkpoint cut, while
        the state is exactly the cut's."""
        out = []
        for part in parts:
            out += self._feedback(part, on_cut)
        self._apply_held(self._block_start(self.predicted + 1), on_cut)
        return out + self._predict_ready(on_cut)

    def _feedback(self, part: FeedbackColumns, on_cut) -> list[Partials]:
        """Hold the rows of one message, a run of consecutive events at a
        time (no Python per event): the control records act at once."""
        out = []
        control, seqs = part.event_ids.empty(), part.seqs
        for lo, hi in _runs(seqs, control):
            if control[lo]:  # a control record of the feedback reader (FeedbackWatch)
                if part.checkpoints[lo]:  # end of input: nothing more will come
                    self.give_up_all(on_cut)
                    if on_cut is not None and self.applied:
                        on_cut(self.applied)
                else:
                    out += self.expire(on_cut)
                continue
            first, last = int(seqs[lo]), int(seqs[hi - 1])
            if last <= self.known:
                self.duplicates += hi - lo  # already applied, given up or held: a redelivery
                continue
            if first <= self.known:
                self.duplicates += self.known + 1 - first
                lo, first = lo + self.known + 1 - first, self.known + 1
            if last > self.predicted:
                self.unexpected += last - max(first - 1, self.predicted)  # feedback for events never predicted
                log.warning("shard %d: feedback for events #%d-#%d, which it has not predicted; ignored",
                            self.shard_no, max(first, self.predicted + 1), last)
                hi, last = hi - (last - max(first - 1, self.predicted)), max(first - 1, self.predicted)
                if last < first:
                    continue
            if first > self.known + 1:  # it comes in order: the events before it never got theirs
                self.held.append((self.known + 1, None, 0, first - self.known - 1))
            self.held.append((first, part, lo, hi))
            self.known = last
        return out

    def _apply_held(self, upto: int, on_cut) -> None:
        """Apply the feedback held for the events up to ``upto``, in order,
        a run of consecutive rows of one message per compiled call (split
        at flights and cuts); a gap (feedback that never came) is given up."""
        while self.held and self.applied < upto:
            first, part, lo, hi = self.held[0]
            flight = self.in_flight[0]
            end = min(first + hi - lo - 1, upto, flight.last)  # the last event of this step
            if part is None:
                self._give_up(flight, end + 1)
            else:
                cuts = np.flatnonzero(part.checkpoints[lo:lo + end - first + 1])
                if cuts.size:
                    end = first + int(cuts[0])
                self._apply(part, lo, lo + end - first + 1)
                if cuts.size and on_cut is not None:
                    on_cut(end)
            if end == first + hi - lo - 1:
                self.held.popleft()
            else:
                self.held[0] = (end + 1, part, lo + end + 1 - first, hi)

    def _apply(self, part: FeedbackColumns, i: int, end: int) -> None:
        """Rows i..end−1 of ``part``: the next events of the oldest flight."""
        flight = self.in_flight[0]
        lo = int(part.seqs[i]) - flight.first
        names, scalars = part.scalar_names, part.scalars[i:end]
        has = part.learned[i:end]
        if has.any():
            order = [names.index(name) for name in self.algorithm.scalar_names]
            self.algorithm.update_rows(self.shard.state, flight.indptr[lo:lo + end - i + 1], flight.slots,
                                       flight.values, scalars[:, order], part.g[i:end], has, flight.memo, lo)
        self.scalars = dict(zip(names, scalars[-1].tolist()))
        self._done(flight, int(part.seqs[end - 1]) + 1)

    def _done(self, flight: Flight, until: int) -> None:
        """The events of ``flight`` up to ``until`` (exclusive) are applied."""
        lo, hi = self.applied + 1 - flight.first, until - flight.first
        self.applied = until - 1
        self.learned += int(flight.learning[lo:hi].sum())
        if flight.heads is not None:
            heads = flight.heads[lo:hi]
            if isinstance(heads, EventRows):
                self.offsets.update(heads.covered())
            else:
                for pos, *_ in heads:
                    self.offsets[(pos.topic, pos.partition)] = pos.offset + 1
        if self.applied == flight.last:
            self.in_flight.popleft()

    def _give_up(self, flight: Flight, until: int) -> None:
        for seq in range(self.applied + 1, until):
            event_id = flight.event_ids[seq - flight.first]
            self.missing.append((seq, event_id))
            log.warning("shard %d: the feedback of event #%d (%s) is missing; its update is skipped",
                        self.shard_no, seq, event_id)
        self._done(flight, until)

    def expire(self, on_cut=None) -> list[Partials]:
        """Give up on feedback awaited longer than the feedback timeout, so a
        lost record cannot stall the shard; returns what is then predictable."""
        now = time.monotonic()
        stale = [f for f in self.in_flight if now - f.since > self.feedback_timeout]
        if not stale or stale[-1].last <= self.known:
            return []
        self.held.append((self.known + 1, None, 0, stale[-1].last - self.known))
        self.known = stale[-1].last
        self._apply_held(self._block_start(self.predicted + 1), on_cut)
        return self._predict_ready(on_cut)

    def restart_clocks(self) -> None:
        """After a restore in another process (a runner's failover): the
        feedback awaited is timed from now, so the time the runner took to
        restart does not give it up."""
        now = time.monotonic()
        self.in_flight = deque(flight._replace(since=now) for flight in self.in_flight)

    def approx_bytes(self) -> int:
        """About how much memory this shard holds: its state arrays, and the events queued or in flight."""
        arrays = sum(a.nbytes for a in self.shard.state.arrays.values())
        return arrays + self.shard.coords.nbytes + 256 * (self.queued + self.predicted - self.applied)

    def give_up_all(self, on_cut=None) -> None:
        """The input has ended: apply all the feedback held, give up the rest."""
        if self.predicted > self.known:
            self.held.append((self.known + 1, None, 0, self.predicted - self.known))
            self.known = self.predicted
        self._apply_held(self.predicted, on_cut)

    def part(self) -> tuple[np.ndarray, LearnerState, dict]:
        """What this shard's part of a checkpoint cut holds: its coordinates,
        their state with the global scalars, and (header) the sequence
        number, event offsets and model version the state is at. Shard 0's
        header is also what the combine and route steps restart from."""
        coords, state = self.shard.owned()
        state.scalars = dict(self.scalars)
        header = {"seq": self.applied, "learned": self.learned,
                  "offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(self.offsets.items())],
                  "missing_feedback": len(self.missing), "duplicate_feedback": self.duplicates}
        return coords, state, header


def _runs(seqs: np.ndarray, control: np.ndarray) -> list[tuple[int, int]]:
    """Row ranges [lo, hi) of consecutive sequence numbers, each control row alone."""
    n = seqs.shape[0]
    if not n:
        return []
    breaks = np.flatnonzero((np.diff(seqs) != 1) | control[1:] | control[:-1]) + 1
    edges = [0, *breaks.tolist(), n]
    return list(zip(edges[:-1], edges[1:]))


class PartialTable:
    """The shards' partial sums of the events not yet combined: row
    seq − ``base`` of each shard's array, filled a block at a time, in any
    order (a shard's partial that comes twice is written twice, counts once)."""

    def __init__(self, n_shards: int, base: int):
        self.base = base  # the sequence number of row 0: the next event to combine
        self.sums: list[np.ndarray | None] = [None] * n_shards
        self.got = np.zeros((n_shards, 0), dtype=bool)
        self.heads: list[tuple[int, list | EventRows]] = []
        """Shard 0's heads (Slices.heads) from ``base`` on, as (sequence
        number of the first, heads), in order, disjoint: a block's heads are
        kept as they came (an EventRows stays arrays)."""

    def put(self, block: Partials) -> None:
        skip = max(self.base - block.first, 0)  # rows of events already combined (a replay)
        if skip >= block.sums.shape[0]:
            return
        start = block.first + skip - self.base
        end = start + block.sums.shape[0] - skip
        self._grow(end, block.sums.shape[1])
        self.sums[block.shard][start:end] = block.sums[skip:]
        self.got[block.shard, start:end] = True
        if block.heads is not None:
            self._put_heads(block.first + skip, block.heads[skip:])

    def _put_heads(self, first: int, heads) -> None:
        """Keep the rows of ``heads`` (first at sequence number ``first``) no kept heads cover."""
        end, at, free = first + len(heads), first, []
        for f, kept in self.heads:
            if f > at:
                free.append((at, min(f, end)))
            at = max(at, f + len(kept))
            if at >= end:
                break
        if at < end:
            free.append((at, end))
        self.heads += [(a, heads[a - first:b - first]) for a, b in free if a < b]
        self.heads.sort(key=lambda kept: kept[0])

    def _grow(self, rows: int, width: int) -> None:
        have = self.got.shape[1]
        if rows <= have:
            return
        rows = max(rows, 2 * have)
        self.got = np.concatenate([self.got, np.zeros((self.got.shape[0], rows - have), dtype=bool)], axis=1)
        self.sums = [np.concatenate([np.zeros((have, width)) if a is None else a, np.zeros((rows - have, width))])
                     for a in self.sums]

    def ready(self) -> int:
        """How many events from ``base`` on have all K partials."""
        complete = self.got.all(axis=0)
        return int(complete.shape[0] if complete.all() else np.argmin(complete))

    def take(self, n: int) -> tuple[np.ndarray, list]:
        """The totals and heads (as the blocks brought them: a list of
        lists and EventRows) of the next n events, which leave the table.
        The K partial sums are added in shard order whatever order they came
        in: floating-point addition is not associative, and this makes a
        run's predictions the same bit for bit on every runner and replay."""
        if not n:
            return np.empty((0, 0)), []
        total = self.sums[0][:n].copy()
        for sums in self.sums[1:]:
            total += sums[:n]
        heads, end = [], self.base + n
        while self.heads and self.heads[0][0] < end:
            first, kept = self.heads.pop(0)
            if end - first < len(kept):
                self.heads.insert(0, (end, kept[end - first:]))
                kept = kept[:end - first]
            heads.append(kept)
        self.sums = [a[n:].copy() for a in self.sums]
        self.got, self.base = self.got[:, n:].copy(), self.base + n
        return total, heads


class Run:
    """Consecutive events the Combiner combined, as the combine step writes
    them: their Predictions' Kafka keys and values, and their Feedback as
    columns. ``values`` is None when the Predictions could not be encoded in
    one call: the step then encodes :attr:`predictions` one by one."""

    __slots__ = ("keys", "values", "feedback", "_predictions")

    def __init__(self, keys: list[bytes], values: list[bytes] | None, feedback: FeedbackColumns, predictions):
        self.keys, self.values, self.feedback, self._predictions = keys, values, feedback, predictions

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def predictions(self) -> list[dict]:
        """The Prediction records, made on first use when the values were
        encoded from arrays (the pipeline never needs them then)."""
        if callable(self._predictions):
            self._predictions = self._predictions()
        return self._predictions

    def encoded(self, encode) -> list[bytes]:
        """The Prediction values: :attr:`values`, or each record through ``encode``."""
        return self.values if self.values is not None else [encode(p) for p in self.predictions]


def _prediction_records(loss: str, model: str, heads, versions: np.ndarray, scores: np.ndarray,
                        losses: np.ndarray, now_ms: float) -> list[dict]:
    prob, klass = readings(loss, scores)
    return [prediction_record(event, model, version, row, prob[i], klass[i], value, now_ms, pos)
            for i, ((pos, event), version, row, value)
            in enumerate(zip(heads, versions.tolist(), scores.tolist(), losses.tolist()))]


def _head_columns(heads) -> tuple[Strings, np.ndarray, np.ndarray]:
    """(event ids, partitions, offsets) of a run's heads: (Position, event)
    pairs, or an :class:`EventRows` read as its arrays."""
    if isinstance(heads, EventRows):
        return heads.event_ids(), np.full(len(heads), heads.source[1], np.int64), heads.offsets
    return (Strings.of(e["id"] for _, e in heads), np.array([p.partition for p, _ in heads], np.int64),
            np.array([p.offset for p, _ in heads], np.int64))


class Combiner:
    """The per-example scalar work of one model, in sequence order."""

    def __init__(self, algorithm, loss: str, loss_param: float, n_outputs: int, n_shards: int, model: str,
                 run_id: str, scalars: dict, seq: int = 0, learned: int = 0):
        self.algorithm, self.loss, self.loss_param = algorithm, loss, loss_param
        self._loss = loss_code(loss)
        self.n_outputs, self.n_shards, self.model, self.run_id = n_outputs, n_shards, model, run_id
        self.scalars = dict(scalars)
        self.seq = seq  # last event combined
        self.cadence = Cadence()  # of the cuts the Combiner asks for, without delayed labels
        self.learned = learned
        self.metrics = ProgressiveMetrics(loss)
        self.table = PartialTable(n_shards, seq + 1)
        self.predicted: dict[str, Waiting] | None = None
        """With delayed labels: the prediction made when each unlabelled
        event arrived, by event id, until its label comes (its loss is the
        progressive loss) or the Router drops the event."""

        self.cut_at: set[int] = set()  # sequence numbers the Router asked a cut at
        self.inbox = Chain()  # each shard's partial sums in the order it sent them
        self.parts: list[tuple[int, dict]] = []
        """(seq, the predictions held right after event seq): this Combiner's parts of those cuts, to write."""

    def hold_predictions(self, aux: dict | None = None) -> "Combiner":
        """Keep each unlabelled event's prediction for its label (``aux``:
        those of a cut's Combiner part, :meth:`_part`)."""
        held = PendingStore.from_arrays(aux or {}, math.inf, 1)
        self.predicted = dict(held.events)
        return self

    def _part(self) -> dict:
        held = PendingStore(math.inf, 1)
        held.events.update(self.predicted)
        return held.to_arrays()

    def add(self, blocks: list[Partials], encode_for: tuple | None = None) -> list[Run]:
        """The events now combinable, in sequence order, as runs. ``encode_for``:
        (codec, topic) to encode their Prediction records with, a run in
        one compiled call (:func:`pipelines.records.columnar.prediction_values`)."""
        for p in blocks:
            if p.shard < 0:  # the end of the input: a last cut at p.first, which this Combiner is at
                if self.predicted is not None and p.first == self.seq:
                    self.parts.append((p.first, self._part()))
                continue
            self.table.put(p)
            if p.cut > self.seq:
                self.cut_at.add(p.cut)
        totals, blocks = self.table.take(self.table.ready())
        if not blocks:
            return []
        y = self._labels(blocks)
        # the scalars advance event by event in one compiled call (on a copy: self.scalars follows the runs)
        rows = self.algorithm.combine_rows(dict(self.scalars), totals, y, self._loss, self.loss_param,
                                           np.concatenate([self._weights(heads) for heads in blocks]))
        out, at = [], 0
        for heads in blocks:
            for lo, hi in self._segments(heads):
                part = [r[at + lo:at + hi] for r in rows]
                if isinstance(heads[lo], LateHead):
                    out.append(self._late(heads[lo], float(y[at + lo]), part))
                else:
                    out.append(self._run(heads[lo:hi], y[at + lo:at + hi], part, encode_for))
                if self.seq in self.cut_at:  # the held predictions exactly after this event
                    self.cut_at.discard(self.seq)
                    self.parts.append((self.seq, self._part()))
            at += len(heads)
        return out

    def _segments(self, heads) -> list[tuple[int, int]]:
        """The runs of ``heads`` to write as one: each late label alone (its
        record is made apart), the others up to each cut the Router asked for."""
        cuts = {seq - self.seq for seq in self.cut_at}
        if isinstance(heads, EventRows):  # no late labels
            edges = [0, *sorted(c for c in cuts if 0 < c < len(heads)), len(heads)]
            return list(zip(edges, edges[1:]))
        out, lo = [], 0
        for i, head in enumerate(heads):
            if isinstance(head, LateHead) and lo < i:
                out.append((lo, i))
                lo = i
            if isinstance(head, LateHead) or i + 1 in cuts:
                out.append((lo, i + 1))
                lo = i + 1
        return out + ([(lo, len(heads))] if lo < len(heads) else [])

    @staticmethod
    def _weights(heads) -> np.ndarray:
        """The events' importance weights (validated finite and ≥ 0 upstream):
        a late label's own, else its event's; none means 1."""
        if isinstance(heads, EventRows):
            weights = heads.weights()
            return np.ones(len(heads)) if weights is None else weights
        return np.array([Combiner._weight(h) for h in heads], np.float64)

    @staticmethod
    def _weight(head) -> float:
        if isinstance(head, LateHead):
            match = head.match
            weight = match.event.weight if match.weight != match.weight else match.weight
        else:
            weight = head[1].get("weight")
        return 1.0 if weight is None else float(weight)

    def _labels(self, blocks: list) -> np.ndarray:
        """The labels of these blocks' events in the loss's domain (NaN: none)."""
        raw = [heads.cols.label[heads.rows] if isinstance(heads, EventRows) else
               np.array([math.nan if v is None else v for v in
                         (h.match.label if isinstance(h, LateHead) else h[1].get("label") for h in heads)], np.float64)
               for heads in blocks]
        return prepare_labels(self.loss, np.concatenate(raw), self.n_outputs)

    def _advance(self, learned: np.ndarray, globs: np.ndarray) -> np.ndarray:
        """Move past events combined with these rows of ``combine_rows``;
        the model version each was predicted with."""
        versions = self.learned + np.cumsum(learned) - learned
        self.learned += int(learned.sum())
        self.seq += len(learned)
        self.scalars = dict(zip(self.algorithm.scalar_names, globs[-1].tolist()))
        return versions

    def _feedback(self, ids: Strings, partitions, offsets, g: np.ndarray, learned: np.ndarray,
                  globs: np.ndarray) -> FeedbackColumns:
        """The Feedback of the last ``len(ids)`` events of the sequence."""
        n = len(ids)
        return FeedbackColumns(self.model, self.run_id, ids, np.arange(self.seq - n + 1, self.seq + 1),
                               np.asarray(partitions, np.int64), np.asarray(offsets, np.int64), learned.copy(),
                               np.where(learned[:, None], g, 0.0), list(self.algorithm.scalar_names),
                               globs.copy(), np.zeros(n, dtype=bool))

    def _run(self, heads, y: np.ndarray, rows: list, encode_for: tuple | None) -> Run:
        """Consecutive events' records from their rows of ``combine_rows``;
        ``heads``: their (Position, event) pairs, or an EventRows."""
        yhats, losses, g, learned, globs = rows
        ids, partitions, offsets = _head_columns(heads)
        versions = self._advance(learned, globs)
        self.metrics.count(yhats, y, losses)
        now_ms = time.time() * 1000.0
        feedback = self._feedback(ids, partitions, offsets, g, learned, globs)
        values = None if encode_for is None else self._encoded(heads, versions, yhats, losses, now_ms, *encode_for)
        if self.predicted is not None:
            self._hold(ids, heads, versions, yhats, now_ms)
        return Run(prediction_keys_of(heads), values, feedback, functools.partial(_prediction_records, self.loss, self.model, heads,
                                                             versions, yhats, losses, now_ms))

    def _hold(self, ids: Strings, heads, versions, scores, now_ms: float) -> None:
        """Keep each unlabelled event's prediction for its label to come."""
        for i, (pos, event) in enumerate(heads):
            if event.get("label") is None:
                ts = millis(event["timestamp"])
                self.predicted[ids[i]] = Waiting(
                    ts, int(versions[i]), now_ms - ts, scores[i].copy(), np.empty(0, dtype=np.int64),
                    np.empty(0), 1.0, Source(pos.topic, pos.partition, pos.offset, getattr(pos, "key", None)))

    def _late(self, head: LateHead, y: float, rows: list) -> Run:
        """Learn an event whose label came late; its record carries the
        prediction made when it arrived, and the loss of that."""
        msg, match = head.message, head.match
        for event_id in head.dropped:
            self.predicted.pop(event_id, None)
        yhats, _, g, learned, globs = rows
        self._advance(learned, globs)
        feedback = self._feedback(Strings.of([match.event_id]), [label_partition(msg.partition)], [msg.offset], g,
                                  learned, globs)
        arrived = self.predicted.pop(match.event_id, None)
        if arrived is None:  # not held (a part lost with its cut): the prediction made now stands in
            log.warning("model %r: no prediction held for event %r; its loss is that of the model now",
                        self.model, match.event_id)
            arrived = match.event._replace(scores=np.asarray(yhats[0], dtype=np.float64), version=self.learned - 1)
        scores = arrived.scores.reshape(1, -1)
        losses = losses_of(self.loss, np.array([y]), scores, self.loss_param)
        self.metrics.count(scores, np.array([y]), losses)
        prob, klass = readings(self.loss, scores)
        record = labelled_prediction(match.event_id, self.model, arrived, match.label, losses[0], prob[0], klass[0])
        return Run([prediction_key(match.event_id, match.event.source)], None, feedback, [record])

    def _encoded(self, heads, versions, scores, losses, now_ms, codec, topic) -> list[bytes] | None:
        """The Prediction records of these events as Kafka values, byte for
        byte what the codec writes for them, or None when that cannot be had
        in one call (the caller then encodes them one by one)."""
        prob, klass = reading_arrays(self.loss, scores)
        events = heads if isinstance(heads, EventRows) else [e for _, e in heads]
        return prediction_values(codec, topic, self.model, heads, events, versions=versions.astype(np.int64),
                                 scores=scores, losses=losses, probability=prob, klass=klass, now_ms=now_ms)


def state_classes() -> tuple[type, ...]:
    """Every class a Router, ShardRunner or Combiner is made of: what their
    state bytes may name when read back (pipelines.steps.unpickle_sharing)."""
    from collections import OrderedDict

    from pipelines.kafka.spans import Early
    from pipelines.steps import EventBatch, LabelBatch, Position

    return (Router, ShardRunner, Combiner, PartialTable, Cadence, Flight, Slices, Partials, LateHead, Chain, Outbox,
            Span, Part, Early, EventBatch, LabelBatch, FeedbackColumns,
            Shard, LearnerState, ProgressiveMetrics, PendingStore, Waiting, EarlyLabel, Matched, Source, KafkaMessage,
            Position, ColumnarEvent, LabelledEvent, EventColumns, EventRows, Strings, OrderedDict)


class FeedbackWatch(StopRule):
    """The feedback reader's rule: keeps the shards from waiting forever,
    and ends bounded runs.

    * Heartbeats: after ``heartbeat_seconds`` without feedback it emits, for
      every model it has seen, a control record (event id "", no
      ``checkpoint``); a shard that gets one gives up feedback it has awaited
      longer than its feedback timeout, so a lost record cannot stall it
      even when nothing else arrives.
    * Coverage (``targets`` given: {partition: (start, stop)} of the events
      topic): done when every one of those event offsets has had a feedback
      record (or a dead letter's record), i.e. every event up to the end
      offsets seen at start was predicted and fed back; or when nothing new
      is covered for ``idle_timeout`` seconds, reporting what is missing.
      Its last batch is one end marker per model (a control record with
      ``checkpoint`` set): each shard gives up what is still in flight and
      writes its part of a final checkpoint cut.
    """

    def __init__(self, run_id: str, heartbeat_seconds: float, targets: dict[int, tuple[int, int]] | None = None,
                 idle_timeout: float = 60.0, registry=None, linger_seconds: float = 0.0, linger_min_bytes: int = 0):
        self.run_id, self.heartbeat_seconds, self.registry = run_id, heartbeat_seconds, registry
        self.linger_seconds, self.linger_min_bytes = linger_seconds, linger_min_bytes
        self.targets = None if targets is None else {p: (a, b) for p, (a, b) in targets.items() if b > a}
        self.idle_timeout = idle_timeout
        self._seen: dict[int, np.ndarray] | None = None
        self._left = 0
        self._codec = self._reader = None
        self._last_seq: dict[str, int] = {}
        self._last_progress = self._last_beat = 0.0

    def _start(self):
        from schemas.codec import Codec

        self._codec = Codec(self.registry)
        self._reader = FeedbackReader(self._codec)
        targets = self.targets or {}
        self._seen = {p: np.zeros(b - a, dtype=bool) for p, (a, b) in targets.items()}
        self._left = sum(b - a for a, b in targets.values())
        self._last_progress = self._last_beat = time.monotonic()

    def linger_after(self, batch: list) -> float:
        """Linger only after feedback of at least ``linger_min_bytes`` (many
        events: a busy stream, whose next feedback comes within a round
        trip); after a few events' feedback (a quiet stream) the wait would
        only hold back the next events."""
        size = sum(len(m.value) for m in batch if m.value is not None)
        return self.linger_seconds if size >= self.linger_min_bytes else 0.0

    def observe(self, batch) -> bool:
        if self._seen is None:
            self._start()
        self._last_beat = time.monotonic()
        before = self._left
        for msg in batch:
            try:
                part = self._reader.columns(msg.value)
            except Exception as exc:  # noqa: BLE001 - a foreign record on the feedback topic
                log.warning("feedback topic offset %d: not a FeedbackBatch record (%s); ignored", msg.offset, exc)
                continue
            if part.run_id != self.run_id or not part.n:
                continue
            if part.model:
                self._last_seq[part.model] = max(int(part.seqs.max()), self._last_seq.get(part.model, 0))
            self._cover(part.partitions, part.offsets)
        if self._left < before:
            self._last_progress = time.monotonic()
        return self.targets is not None and self._left == 0

    def _cover(self, partitions: np.ndarray, offsets: np.ndarray) -> None:
        """Count the target event offsets these feedback records cover."""
        for partition, (first, end) in (self.targets or {}).items():
            mine = offsets[(partitions == partition) & (offsets >= first) & (offsets < end)] - first
            seen = self._seen[partition]
            new = np.unique(mine[~seen[mine]])
            seen[new] = True
            self._left -= len(new)

    def idle(self) -> bool:
        if self._seen is None:
            self._start()
        if self.targets is None:
            return False
        if self._left == 0:
            return True
        if time.monotonic() - self._last_progress < self.idle_timeout:
            return False
        gaps = [(p, int(a + i)) for p, (a, _) in self.targets.items() for i in np.flatnonzero(~self._seen[p])[:5]]
        log.warning("no feedback for %d event(s) after %.0f s, e.g. (partition, offset) %s; stopping the read",
                    self._left, self.idle_timeout, gaps)
        return True

    def _control(self, topic, partition, checkpoint: bool) -> list:

        out = []
        for model, seq in sorted(self._last_seq.items()):
            record = {"event_id": "", "model": model, "run_id": self.run_id, "seq": seq, "partition": -1,
                      "offset": -1, "g": [], "scalars": {}, "checkpoint": checkpoint}
            out.append(KafkaMessage(topic, partition, -1, -1, model.encode(),
                                    self._codec.encode("scinol.FeedbackBatch", feedback_batches([record])[0], topic)))
        return out

    def heartbeat(self, topic: str, partition: int) -> list:
        if time.monotonic() - self._last_beat < self.heartbeat_seconds:
            return []
        self._last_beat = time.monotonic()
        return self._control(topic, partition, checkpoint=False)

    def last_batch(self, topic: str, partition: int) -> list:
        return self._control(topic, partition, checkpoint=True)
