"""Batches that say where they lie in their partition, and applying them in
offset order whatever order a runner delivers them in.

A :class:`Span` is what one batch of one partition covers: the offsets
``[start, end)``, where ``start`` is where the batch before it ended. Kafka
offsets have gaps (compaction, transaction markers, records of other
models), so the link is explicit: consecutive batches tile the offsets
with nothing between them, and ``origin`` is where this read of the
partition began (the first batch's ``start``). A span with ``start ==
end`` covers nothing: a *marker* (a control record of the reader's own
making) that belongs after every batch ending at or before ``end``.

A :class:`Chain` is one keyed step's view of its streams: per stream
(topic, partition), the offset it has applied up to (``applied``; what a
checkpoint records as covered), and the batches that arrived before an
earlier one and wait for it. :meth:`Chain.offer` takes a batch and returns
the batches now ready, in offset order: a batch that continues the chain;
one that overlaps what the state covers (a replay after a restore from a
checkpoint file: only its offsets from ``applied`` on are new); or the
first batch of a read (``start == origin``), which continues any state
that does not reach past it (a restart may begin beyond a model's last
event on a partition when it had none in between). A batch that ends at or
before ``applied`` was applied already (a runner's retry, a replay) and is
dropped and counted. Everything else waits, at most ``max_waiting``
messages per key: past that :class:`WaitingBoundExceeded` names the
partition, the missing offsets and the bound.

Across streams the chain applies batches as they come, unless told to
:meth:`~Chain.follow` an order: a list of (stream, up to offset) runs, the
order in which an earlier attempt applied (and committed) them. Then only
the current run's stream moves, up to its offset (a batch that straddles
it is split there); everything else waits, and is let through once the
runs are done. A restore re-applies what its state does not cover in the
order its committed output was computed in.

This is Beam's ordered-processing idea (per-key sequence numbers, early
events buffered in state) for batches of Kafka offsets: the sequence is
the offsets themselves, so a restart from a checkpoint file needs no
sequence state to continue, and a replay is told from a continuation by
the offsets it covers.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable, NamedTuple

from .offsets import Stream
"""(topic, partition)."""

DEFAULT_MAX_WAITING = 2_000_000
"""Messages a keyed step holds waiting for an earlier batch, per key: about
a gigabyte of decoded toy events, within a worker's memory."""


class Span(NamedTuple):
    """The offsets ``[start, end)`` of ``topic[partition]`` one batch covers;
    ``origin``: where the read of the partition began."""

    topic: str
    partition: int
    start: int
    end: int
    origin: int

    @property
    def stream(self) -> Stream:
        return self.topic, self.partition

    @property
    def is_marker(self) -> bool:
        return self.start == self.end

    def at(self, end: int) -> "Span":
        """A marker at ``end`` of the same read."""
        return self._replace(start=end, end=end)

    def before(self, start: int) -> "Span":
        """The span of the same read from ``start`` up to this one's start."""
        return self._replace(start=start, end=self.start)

    def describe(self) -> str:
        return f"{self.topic}[{self.partition}] offsets {self.start:,}-{self.end:,}"


class Ready(NamedTuple):
    """A batch to apply now. ``since``: apply only its offsets at or after
    this (``span.start``, unless it overlaps what the state covers; at or
    past ``span.end`` for a replay, which brings nothing new)."""

    span: Span
    payload: Any
    since: int

    @property
    def is_replay(self) -> bool:
        """Every offset of it was applied before (a runner's retry, a replay)."""
        return self.since >= self.span.end and not self.span.is_marker


class WaitingBoundExceeded(RuntimeError):
    """More messages wait for an earlier batch than a key may hold."""


class ChainConflict(RuntimeError):
    """Two different batches claim the same place in a partition's order."""


class Early(NamedTuple):
    """A batch that came before an earlier one of its partition, waiting."""

    span: Span
    payload: Any
    size: int


class Chain:
    """Applies batches of several streams in each stream's offset order.

    ``applied`` is shared with the owner (a model's covered offsets) and
    updated in place; ``waiting`` holds what came early, per stream by start
    offset (markers by their offset, several allowed)."""

    def __init__(self, applied: dict | None = None, max_waiting: int = DEFAULT_MAX_WAITING,
                 split: Callable | None = None):
        self.applied: dict[Stream, int] = applied if applied is not None else {}
        self.max_waiting = max_waiting
        self.split = split
        """``split(payload, offset)`` -> ((head, size), (tail, size)): a payload
        cut at ``offset``; needed only to :meth:`follow` an order."""
        self.runs: deque[tuple[Stream, int]] | None = None
        """The order being followed (:meth:`follow`), its current run first; None: none."""
        self.waiting: dict[Stream, dict[int, Early]] = {}
        self.markers: dict[Stream, list[Early]] = {}
        self.waiting_messages = 0
        self.replayed = 0
        """Batches dropped because the state had applied them already."""
        self.waited = 0
        """Batches that came before an earlier one and waited for it."""
        self.changed = False
        """Whether the waiting batches changed since the owner last cleared this."""

    def __setstate__(self, state: dict) -> None:
        # A Chain kept in a runner's state by an earlier release (a savepoint
        # taken before an upgrade) lacks the attributes added since.
        self.__dict__.update({"split": None, "runs": None, **state})

    def __len__(self) -> int:
        """How many batches wait."""
        return sum(map(len, self.waiting.values())) + sum(map(len, self.markers.values()))

    def offer(self, span: Span, payload: Any, size: int = 1) -> list[Ready]:
        """The batches ready after ``span`` arrived, in order (maybe none);
        a replay comes back at once, marked as one (:attr:`Ready.is_replay`)."""
        out = self._offer(span, payload, size)
        return out + self._advance() if self.runs is not None and out else out

    def follow(self, runs: list[tuple[Stream, int]]) -> list[Ready]:
        """From now on apply the streams in the order ``runs`` gives: each
        (stream, offset) run applies ``stream`` up to ``offset`` while the
        other streams wait; after the last run, everything goes as it comes.
        Returns the batches ready at once (some may have waited already)."""
        if runs and self.split is None:
            raise TypeError("a Chain that follows an order needs a split function")
        self.runs = deque(runs)
        return self._advance()

    def _offer(self, span: Span, payload: Any, size: int, counted: bool = True) -> list[Ready]:
        since = self._since(span)
        if since is None:
            return self._wait(span, payload, size, counted)
        if span.is_marker:
            return [Ready(span, payload, span.end)]
        if since >= span.end:
            self.replayed += 1
            return [Ready(span, payload, since)]
        limit = self._limit(span.stream)
        if limit is not None and span.end > limit:
            if since >= limit:  # another stream's turn: this one waits
                return self._wait(span, payload, size, counted)
            (payload, size), (tail, tail_size) = self.split(payload, limit)
            self._wait(span._replace(start=limit), tail, tail_size, counted)
            span = span._replace(end=limit)
        self.applied[span.stream] = span.end
        return [Ready(span, payload, since), *self._ready_markers(span.stream), *self._drain(span.stream)]

    def _limit(self, stream: Stream) -> int | None:
        """How far ``stream`` may be applied now (None: as far as it goes)."""
        if self.runs is None:
            return None
        if self.runs and self.runs[0][0] == stream:
            return self.runs[0][1]
        return self.applied.get(stream, -1)

    def _advance(self) -> list[Ready]:
        """The waiting batches the order lets through now: each run's stream
        up to its offset, in turn; all of them once the runs are done."""
        out = []
        while self.runs:
            stream, end = self.runs[0]
            if self.applied.get(stream, -1) < end:
                out += self._offer_again(stream)
                if self.applied.get(stream, -1) < end and not self._read_begins_past(stream, end):
                    return out  # the run's batches have not all come yet
            self.runs.popleft()
        self.runs = None
        for stream in sorted({*self.waiting, *self.markers}):
            out += self._offer_again(stream)
        return out

    def _read_begins_past(self, stream: Stream, end: int) -> bool:
        """Whether this read of ``stream`` began at or past ``end`` (nothing
        before it will come): a run up to ``end`` has nothing left to wait for."""
        return any(w.span.start == w.span.origin >= end for w in self.waiting.get(stream, {}).values())

    def _offer_again(self, stream: Stream) -> list[Ready]:
        """Offer ``stream``'s waiting batches again, in offset order."""
        early = sorted(self.waiting.pop(stream, {}).values(), key=lambda w: w.span.start)
        early += self.markers.pop(stream, [])
        self.waiting_messages -= sum(w.size for w in early)
        self.changed = self.changed or bool(early)
        out = []
        for item in early:
            out += self._offer(item.span, item.payload, item.size, counted=False)
        return out

    def _since(self, span: Span) -> int | None:
        """Where ``span`` starts to apply, None if an earlier batch is missing."""
        have = self.applied.get(span.stream)
        if span.is_marker and have is None:
            have = span.origin  # nothing of this read applied yet: the chain stands at its origin
        elif span.start == span.origin and not span.is_marker:
            have = span.origin if have is None else max(have, span.origin)
        if have is None or have < span.start:
            return None
        return have

    def _wait(self, span: Span, payload: Any, size: int, counted: bool = True) -> list[Ready]:
        item = Early(span, payload, max(size, 1))
        if span.is_marker:
            self.markers.setdefault(span.stream, []).append(item)
        else:
            mine = self.waiting.setdefault(span.stream, {})
            there = mine.get(span.start)
            if there is not None:
                if there.span != span:
                    raise ChainConflict(f"two batches of {span.topic}[{span.partition}] both start at offset "
                                        f"{span.start:,} ({there.span.describe()} and {span.describe()}): is the "
                                        f"partition read twice?")
                self.replayed += 1  # the same batch twice, both early
                return [Ready(span, payload, span.end)]
            mine[span.start] = item
        self.waited += counted
        self.waiting_messages += item.size
        self.changed = True
        if self.waiting_messages > self.max_waiting:
            raise WaitingBoundExceeded(self._bound_message(span.stream))
        return []

    def _bound_message(self, stream: Stream) -> str:
        topic, partition = stream
        have = self.applied.get(stream)
        early = [*self.waiting.get(stream, {}).values(), *self.markers.get(stream, [])]
        first = min(w.span.start for w in early)
        since = have if have is not None else min(w.span.origin for w in early)
        missing = f"offsets {since:,}-{first:,}"
        return (f"{self.waiting_messages:,} messages wait for {topic}[{partition}] {missing}, more than "
                f"--max-waiting {self.max_waiting:,}: the runner delivers that partition too far out of order "
                f"(raise --max-waiting, or give the workers more memory)")

    def _drain(self, stream: Stream) -> list[Ready]:
        """The waiting batches of ``stream`` that now follow in order."""
        out = []
        mine = self.waiting.get(stream)
        while mine:
            have = self.applied[stream]
            item = mine.pop(have, None)
            if item is None:
                item = self._overlapping(mine, have)
                if item is None:
                    break
            self.waiting_messages -= item.size
            self.changed = True
            if item.span.end <= have:
                self.replayed += 1
                out.append(Ready(item.span, item.payload, have))
                continue
            limit = self._limit(stream)
            if limit is not None and item.span.end > limit:
                if limit <= have:  # another stream's turn
                    self._wait(item.span, item.payload, item.size, counted=False)
                    break
                (head, size), (tail, tail_size) = self.split(item.payload, limit)
                self._wait(item.span._replace(start=limit), tail, tail_size, counted=False)
                item = Early(item.span._replace(end=limit), head, size)
            self.applied[stream] = item.span.end
            out += [Ready(item.span, item.payload, max(have, item.span.start)), *self._ready_markers(stream)]
        if mine is not None and not mine:
            del self.waiting[stream]
        return out

    @staticmethod
    def _overlapping(mine: dict, have: int) -> Early | None:
        """A waiting batch that starts before ``have`` (a replay overlapping
        what was applied), taken out; None if there is none."""
        for start in sorted(mine):
            if start >= have:
                return None
            return mine.pop(start)
        return None

    def _ready_markers(self, stream: Stream) -> list[Ready]:
        marks = self.markers.get(stream)
        if not marks:
            return []
        have = self.applied[stream]
        ready = [m for m in marks if m.span.end <= have]
        if not ready:
            return []
        self.markers[stream] = [m for m in marks if m.span.end > have]
        if not self.markers[stream]:
            del self.markers[stream]
        self.waiting_messages -= sum(m.size for m in ready)
        self.changed = True
        return [Ready(m.span, m.payload, m.span.end) for m in sorted(ready, key=lambda m: m.span.end)]

    def missing(self) -> list[tuple[Stream, int | None, int]]:
        """Per stream with batches waiting: (stream, applied up to, first
        waiting offset): the offsets that never came."""
        out = []
        for stream in sorted({*self.waiting, *self.markers}):
            early = [*self.waiting.get(stream, {}).values(), *self.markers.get(stream, [])]
            out.append((stream, self.applied.get(stream), min(w.span.start for w in early)))
        return out

    def waiting_items(self) -> list[tuple[Span, Any, int]]:
        """Every waiting batch as (span, payload, size), for the owner's state store."""
        return [(w.span, w.payload, w.size) for mine in self.waiting.values() for w in mine.values()] + \
               [(w.span, w.payload, w.size) for marks in self.markers.values() for w in marks]

    def restore_waiting(self, items) -> None:
        """Put back what :meth:`waiting_items` gave (after a restore)."""
        self.waiting, self.markers, self.waiting_messages = {}, {}, 0
        for span, payload, size in items:
            item = Early(span, payload, size)
            if span.is_marker:
                self.markers.setdefault(span.stream, []).append(item)
            else:
                self.waiting.setdefault(span.stream, {})[span.start] = item
            self.waiting_messages += size
        self.changed = False
