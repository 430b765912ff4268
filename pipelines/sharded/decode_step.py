"""Sharded mode's decode step: batches of the events, labels and feedback
topics, each as every model's part of it."""

from __future__ import annotations

import logging

from apache_beam.metrics import Metrics

from pipelines.records.feedback import FeedbackReader
from pipelines.records.parts import FEEDBACK, Decoded, Part
from pipelines.steps import NAMESPACE, DecodeEvents, span_of
from schemas.codec import DecodeError

log = logging.getLogger(__name__)


class DecodeShardedInput(DecodeEvents):
    """Batches from the events, labels and feedback topics →
    ``((topic, partition), Decoded)``: each model's part (events, labels, or
    its FeedbackBatch records as (offset, FeedbackColumns) pairs; the
    records of events with no sequence place, model "", are no model's);
    bad events and labels to the ``dead`` tag."""

    def setup(self):
        super().setup()
        self.feedback_reader = FeedbackReader(self.codec)

    def process(self, batch):
        if not batch or batch[0].topic != self.cfg.feedback:
            yield from super().process(batch)
            return
        by_model: dict[str, list] = {}
        for msg in batch:
            try:
                part = self.feedback_reader.columns(msg.value)
            except DecodeError as exc:
                Metrics.counter(NAMESPACE, "feedback_undecodable").inc()
                log.warning("feedback topic %s[%d] offset %d: %s; ignored", msg.topic, msg.partition,
                            msg.offset, exc)
                continue
            if part.model:
                by_model.setdefault(part.model, []).append((msg.offset, part))
        span = span_of(batch)
        yield span.stream, Decoded(span, [(model, Part(span, FEEDBACK, records)) for model, records in by_model.items()])

