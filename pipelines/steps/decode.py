"""Screening a batch of Kafka messages into each model's part of it and
dead letters: the decode step both pipeline shapes share."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from pipelines import telemetry
from pipelines.config import RunConfig
from pipelines.kafka.consumer import Position
from pipelines.kafka.spans import Span
from pipelines.records.event_decoder import EventDecoder
from pipelines.records.event_rows import EventRows
from pipelines.records.dead_letters import dead_letter, screen, screen_label
from pipelines.records.label_decoder import LabelDecoder
from pipelines.records.parts import EVENTS, LABELS, Decoded, Part
from schemas.reasons import TOO_MANY_MODELS

from .metrics import NAMESPACE


class ModelBatch(list):
    """One model's items of a batch of messages of one partition, in offset
    order; ``source``: (topic, partition) of every item, None if unknown."""

    def __init__(self, items=(), source: tuple[str, int] | None = None):
        super().__init__(items)
        self.source = source

    def __reduce__(self):
        return type(self), (list(self), self.source)


class EventBatch(ModelBatch):
    """(Position, Event record) pairs of one model, from the per-event
    decoder (the columnar one gives :class:`EventRows`)."""


class LabelBatch(ModelBatch):
    """(message, Label record) pairs of one model, from the labels topic."""


def span_of(batch: list) -> Span:
    """The span of a batch from the Kafka reader; a list made elsewhere (a
    test's) covers its own offsets and is the first of its read."""
    span = getattr(batch, "span", None)
    if span is not None:
        return span
    first, end = batch[0].offset, batch[-1].offset + 1
    return Span(batch[0].topic, batch[0].partition, first, end, first)


class DecodeEvents(beam.DoFn):
    """A batch of Kafka messages → ``((topic, partition), Decoded)``: one
    :class:`Part` per model with messages in it (its valid events, or its
    labels from the labels topic), for the sequencing step keyed by
    partition (:class:`pipelines.steps.sequence.SequenceParts`); every
    message that is not a valid Event (or Label) becomes a DeadLetter record
    (tag ``dead``) with its reason, original bytes, topic, partition and
    offset (limits: ``cfg.max_index``, ``cfg.max_message_bytes``; see
    :mod:`pipelines.records.dead_letters`)."""

    DEAD = "dead"

    def __init__(self, cfg: RunConfig, columnar: bool = False):
        self.cfg = cfg
        self.columnar = columnar
        """Decode each batch in one compiled call (:mod:`pipelines.records.event_decoder`):
        each model's events are then an :class:`EventRows` of the batch's arrays;
        a batch of labels is screened in one call too (:mod:`pipelines.records.label_decoder`)."""

    def setup(self):
        self.codec = self.cfg.codec()
        learner = self.cfg.learner
        self.decoder = EventDecoder(self.codec, learner.loss, learner.n_classes, hash_bits=learner.hash_bits,
                                    max_index=self.cfg.max_index, max_message_bytes=self.cfg.max_message_bytes)
        self.label_decoder = LabelDecoder(self.codec, learner.loss, learner.n_classes,
                                          max_message_bytes=self.cfg.max_message_bytes)
        self.events = Metrics.counter(NAMESPACE, "events")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")
        ratio = self.cfg.max_dead_letter_ratio
        self.guard = DeadLetterGuard(ratio) if ratio is not None else None
        self.models: set[str] = set()  # the model names this worker has accepted

    def _screen(self, msg):
        cfg = self.cfg
        event, problem = screen(self.codec, msg.value, cfg.learner.loss, cfg.learner.n_classes,
                                max_index=cfg.max_index, max_message_bytes=cfg.max_message_bytes)
        if problem is None and cfg.max_models is not None and event["model"] not in self.models:
            if len(self.models) >= cfg.max_models:
                return None, (TOO_MANY_MODELS, f"model {event['model'][:200]!r} would be model number "
                                               f"{len(self.models) + 1} of this worker; --max-models is {cfg.max_models}")
            self.models.add(event["model"])
        return event, problem

    def process(self, batch):
        if not batch:  # a batch that only closes a gap in the offsets: no model has a part of it
            yield batch.span.stream, Decoded(batch.span, [])
            return
        span = span_of(batch)
        if batch[0].topic == self.cfg.labels_topic:
            parts = yield from self._labels(batch)
        elif self.columnar:
            parts = yield from self._columnar(batch)
        else:
            parts = yield from self._per_event(batch)
        kind = LABELS if batch[0].topic == self.cfg.labels_topic else EVENTS
        yield span.stream, Decoded(span, [(model, Part(span, kind, items)) for model, items in parts])

    def _dead_letter(self, msg, reason: str, detail: str):
        self.dead.inc()
        Metrics.counter(NAMESPACE, f"dead_letters_{reason}").inc()
        return beam.pvalue.TaggedOutput(self.DEAD, dead_letter(msg, reason, detail))

    def _per_event(self, batch):
        """(model, its EventBatch) of ``batch``, decoding one message at a time."""
        by_model: dict[str, EventBatch] = {}
        source = (batch[0].topic, batch[0].partition)
        for msg in batch:
            event, problem = self._screen(msg)
            if problem is not None:
                yield self._dead_letter(msg, *problem)
                continue
            items = by_model.get(event["model"])
            if items is None:
                items = by_model[event["model"]] = EventBatch(source=source)
            items.append((Position(msg.topic, msg.partition, msg.offset, msg.key), event))
        self.events.inc(len(batch))
        decoded = sum(len(v) for v in by_model.values())
        telemetry.count("events", decoded)
        if self.guard is not None:
            self.guard.count(len(batch), len(batch) - decoded)
        return list(by_model.items())

    def _columnar(self, batch):
        """As :meth:`_per_event`, with the batch decoded and checked as arrays."""
        cols = self.decoder.decode([msg.value for msg in batch])
        dead = dict(cols.dead)
        if self.cfg.max_models is not None:
            dead.update(self._too_many_models(cols))
        for i in sorted(dead):
            yield self._dead_letter(batch[i], *dead[i])
        self.events.inc(len(batch))
        telemetry.count("events", len(batch) - len(dead))
        if self.guard is not None:
            self.guard.count(len(batch), len(dead))
        keep = np.ones(len(batch), dtype=bool)
        keep[list(dead)] = False
        return EventRows.split(cols, keep, batch)

    def _too_many_models(self, cols) -> dict[int, tuple[str, str]]:
        """The valid events of models beyond ``--max-models``: each model is
        judged where it first appears, as :meth:`_screen` judges them in order."""
        valid = np.flatnonzero(cols.ok)
        codes, first = np.unique(cols.model_code[valid], return_index=True)
        refused = {}
        for c in codes[np.argsort(first)].tolist():
            name = cols.models[c]
            if name in self.models:
                continue
            if len(self.models) < self.cfg.max_models:
                self.models.add(name)
                continue
            refused[c] = (TOO_MANY_MODELS, f"model {name[:200]!r} would be model number {len(self.models) + 1} "
                                           f"of this worker; --max-models is {self.cfg.max_models}")
        return {i: refused[c] for i, c in zip(valid.tolist(), cols.model_code[valid].tolist()) if c in refused}

    def _labels(self, batch):
        """(model, its LabelBatch) of a batch of the labels topic."""
        cfg = self.cfg
        by_model: dict[str, LabelBatch] = {}
        source = (batch[0].topic, batch[0].partition)
        if self.columnar:
            screened = self.label_decoder.screen([msg.value for msg in batch])
        else:
            screened = (screen_label(self.codec, msg.value, cfg.learner.loss, cfg.learner.n_classes,
                                     cfg.max_message_bytes) for msg in batch)
        for msg, (record, problem) in zip(batch, screened):
            if problem is not None:
                yield self._dead_letter(msg, *problem)
                continue
            by_model.setdefault(record["model"], LabelBatch(source=source)).append((msg, record))
        Metrics.counter(NAMESPACE, "labels").inc(len(batch))
        return list(by_model.items())


class DeadLetterRatioExceeded(RuntimeError):
    """More of the input became dead letters than ``--max-dead-letter-ratio`` allows."""


class DeadLetterGuard:
    """Judges the share of dead letters over tumbling windows of
    :attr:`WINDOW` messages, from the :attr:`MIN_MESSAGES`-th message of a
    window on; raises :class:`DeadLetterRatioExceeded` above ``max_ratio``,
    so that a run fed only what it cannot read stops instead of filling
    the dead-letter topic forever."""

    WINDOW = 1000
    MIN_MESSAGES = 100

    def __init__(self, max_ratio: float):
        self.max_ratio = max_ratio
        self.seen = self.dead = 0

    def count(self, seen: int, dead: int) -> None:
        self.seen += seen
        self.dead += dead
        if self.seen >= self.MIN_MESSAGES and self.dead > self.max_ratio * self.seen:
            raise DeadLetterRatioExceeded(
                f"{self.dead} of the last {self.seen} messages became dead letters, more than the "
                f"--max-dead-letter-ratio of {self.max_ratio:g}; stopping (see the dead-letter topic for why)")
        if self.seen >= self.WINDOW:
            self.seen = self.dead = 0
