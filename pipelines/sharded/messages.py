"""What sharded mode's three roles send each other (the router's slices,
the shards' partial sums, a late label's head) and how each sender numbers
what it sends (:class:`Outbox`) so the receiver applies it in order."""

from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np

from pipelines.kafka.consumer import KafkaMessage
from pipelines.kafka.spans import Span
from pipelines.records.labels import Matched
from pipelines.records.parts import Part
from pipelines.records.strings import Strings


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
