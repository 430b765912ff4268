"""What the keyed steps of both pipeline shapes receive: one model's part of
a batch of one partition, with the batch's :class:`~pipelines.kafka.spans.Span`;
and how each model's parts of a partition are chained although most
batches hold nothing of most models.

The decode step splits a batch by model (:class:`Decoded`): each model gets
a :class:`Part` covering the whole batch's span (its events, labels or
feedback; the other models' messages and the dead letters in that span are
simply not its). A model absent from a batch gets nothing from it, so its
chain of parts would have a hole there. The :class:`Sequencer` closes those
holes: keyed by partition, it passes every part on at once and takes every
batch's :class:`Manifest` (span and models) in offset order, remembers
where each model's last part ended, and when a model appears again after
batches without it, sends that model a ``SKIP`` part over the offsets in
between (before the part that brought it back). Every model then receives a chain of
parts that tiles the partition from the read's origin, and applies it in
offset order (:class:`~pipelines.kafka.spans.Chain`) whatever order the
runner delivers parts and skips in. Marker spans (control records) take part
the same way: a model's skip up to a marker comes before the marker.
"""

from __future__ import annotations

import bisect
from typing import Any, NamedTuple

import numpy as np

from pipelines.kafka.spans import Chain, Span

EVENTS, LABELS, FEEDBACK, SKIP = "events", "labels", "feedback", "skip"


class Part(NamedTuple):
    """One model's share of the batch ``span``: ``kind`` says what
    ``payload`` is: EVENTS (an EventRows, or (Position, event) pairs),
    LABELS ((message, Label record) pairs), FEEDBACK ((offset,
    FeedbackColumns) pairs), SKIP (None: nothing of this model there)."""

    span: Span
    kind: str
    payload: Any = None

    @property
    def size(self) -> int:
        """Messages it holds (at least 1: what a waiting part counts for)."""
        return max(1, len(self.payload)) if self.payload is not None else 1

    def since(self, offset: int) -> "Part":
        """This part without its messages below ``offset``."""
        if self.payload is None or offset <= self.span.start:
            return self
        return self._replace(payload=_sliced(self.payload, _index(self.kind, self.payload, offset), None))

    def split(self, offset: int) -> tuple["Part", "Part"]:
        """(the part below ``offset``, the part from it on), each with its
        own span: to apply a part's offsets before ``offset`` now and the
        rest later."""
        head, tail = self.span._replace(end=offset), self.span._replace(start=offset)
        if self.payload is None:
            return self._replace(span=head), self._replace(span=tail)
        k = _index(self.kind, self.payload, offset)
        return (self._replace(span=head, payload=_sliced(self.payload, None, k)),
                self._replace(span=tail, payload=_sliced(self.payload, k, None)))


def _index(kind: str, payload, offset: int) -> int:
    """How many of ``payload``'s messages lie below ``offset``."""
    offsets = getattr(payload, "offsets", None)
    if offsets is not None:  # EventRows: its offsets array
        return int(np.searchsorted(offsets, offset))
    if kind == FEEDBACK:
        return bisect.bisect_left(payload, offset, key=lambda item: item[0])
    return bisect.bisect_left(payload, offset, key=lambda item: item[0].offset)


def _sliced(payload, start: int | None, stop: int | None):
    piece = payload[start:stop]
    if hasattr(payload, "source") and not hasattr(payload, "offsets"):  # a ModelBatch keeps its type and source
        piece = type(payload)(piece, source=payload.source)
    return piece


class Manifest(NamedTuple):
    """What a batch held: its span and the models with a part of it."""

    span: Span
    models: tuple[str, ...]


class Decoded(NamedTuple):
    """A decoded batch: its span and each model's part of it."""

    span: Span
    parts: list[tuple[str, Part]]

    @property
    def manifest(self) -> Manifest:
        return Manifest(self.span, tuple(model for model, _ in self.parts))


class Sequencer:
    """One partition's manifests in offset order (a :class:`Chain` of its
    own), and where each model's last part of it ended. :meth:`take` gives
    the SKIP parts that keep every model's chain whole."""

    def __init__(self):
        self.chain = Chain()
        self.last_end: dict[str, int] = {}
        """Per model: where its last part of this partition ended."""

    def take(self, manifest: Manifest) -> list[tuple[str, Part]]:
        """(model, SKIP part) for each model of the manifests now in order
        whose last part ended before the batch began."""
        out = []
        for ready in self.chain.offer(manifest.span, manifest):
            if ready.is_replay:
                continue
            span = ready.span
            for model in ready.payload.models:
                last = self.last_end.get(model, span.origin)
                if last < span.start:
                    out.append((model, Part(span.before(last), SKIP)))
                self.last_end[model] = max(last, span.end)
        return out

    def models(self) -> list[str]:
        """Every model with a part of this partition since the read began."""
        return sorted(self.last_end)


def waiting_report(chain: Chain) -> str:
    """One line: what a chain's waiting parts wait for."""
    gaps = ", ".join(f"{t}[{p}] offsets {'?' if have is None else f'{have:,}'}-{first:,}"
                     for (t, p), have, first in chain.missing())
    return f"{chain.waiting_messages:,} messages wait for offsets that never came: {gaps}"
