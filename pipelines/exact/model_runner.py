"""One model of the stream: its learner, the stream position its state
covers, its progressive metrics and when to checkpoint it. No Beam here: the
stateful DoFn of :mod:`pipelines.exact.transforms` holds one of these per model.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np

from learners import OnlineLearner

from pipelines.state.checkpoints import CheckpointStore
from pipelines.records.events import learner_rows
from pipelines.records.predictions import ProgressiveMetrics, prediction_record, readings


class ModelRunner:
    def __init__(self, model: str, make_learner: Callable[[], OnlineLearner], store: CheckpointStore | None = None,
                 every_events: int | None = None, every_seconds: float | None = None):
        self.model = model
        self.store = store
        self.every_events = every_events
        self.every_seconds = every_seconds
        ckpt = store.latest(model) if store is not None else None
        self.learner = ckpt.learner if ckpt else make_learner()
        self.offsets: dict[tuple[str, int], int] = dict(ckpt.offsets) if ckpt else {}
        """Next offset per (topic, partition) that the state covers."""
        self.events = ckpt.event_count if ckpt else 0
        self.restored_from = ckpt.path if ckpt else None
        self.metrics = ProgressiveMetrics(self.learner.loss)
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        self._last_manifest: dict | None = None

    def process(self, items: list[tuple]) -> list[dict]:
        """Predict then learn each (message, event) in order; returns one
        Prediction record per event not already covered by the state."""
        items = [(m, e) for m, e in items if m.offset >= self.offsets.get((m.topic, m.partition), 0)]
        if not items:
            return []
        events = [e for _, e in items]
        rows, y = learner_rows(events, self.learner)
        version = self.learner.n_examples
        scores, losses = self.learner.learn(rows, y, return_losses=True)
        scores = scores.reshape(len(events), -1)
        now_ms = time.time() * 1000.0
        labelled = ~np.isnan(y)
        versions = version + np.concatenate([[0], np.cumsum(labelled)[:-1]])
        prob, klass = readings(self.learner.loss, scores)
        out = [prediction_record(event, self.model, versions[i], row, prob[i], klass[i], losses[i], now_ms)
               for i, ((_, event), row) in enumerate(zip(items, scores.tolist()))]
        for msg, _ in items:
            self.offsets[(msg.topic, msg.partition)] = msg.offset + 1
        self.metrics.count(scores, y, losses)
        self.events += len(items)
        self._since_checkpoint += len(items)
        return out

    @property
    def labelled(self) -> int:
        return self.metrics.labelled

    @property
    def mean_loss(self) -> float:
        return self.metrics.mean_loss

    @property
    def accuracy(self) -> float | None:
        return self.metrics.accuracy

    def checkpoint_due(self) -> bool:
        if self.store is None or self._since_checkpoint == 0:
            return False
        if self.every_events and self._since_checkpoint >= self.every_events:
            return True
        return bool(self.every_seconds) and time.monotonic() - self._last_checkpoint >= self.every_seconds

    @property
    def unsaved(self) -> bool:
        """Events learned since the last checkpoint written or loaded."""
        return self._since_checkpoint > 0 or (self.restored_from is None and self.events > 0
                                               and self._last_manifest is None)

    def checkpoint(self) -> dict | None:
        """Write a checkpoint now; returns its manifest (None without a store)."""
        if self.store is None:
            return None
        manifest = self._last_manifest = self.store.save(self.model, self.learner, self.offsets, self.events)
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        return manifest

