"""One feature shard of one model in sharded mode: its coordinates'
state, the events it predicted and awaits the feedback of, and the
feedback held until its block may be applied (see the package docstring)."""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import NamedTuple

import numpy as np

from learners.sharding import Shard
from learners.state import LearnerState
from pipelines.kafka.offsets import offsets_records
from pipelines.kafka.spans import Chain
from pipelines.records.event_rows import EventRows
from pipelines.records.feedback import FeedbackColumns
from pipelines.records.strings import Strings

from .messages import Outbox, Partials, Slices

log = logging.getLogger(__name__)


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
                  "offsets": offsets_records(self.offsets),
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
