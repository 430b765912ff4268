"""One model of the stream: its learner, the stream position its state
covers, its progressive metrics and when to checkpoint it. No Beam here: the
stateful DoFn of :mod:`pipelines.transforms` holds one of these per model.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import numpy as np

from learners import OnlineLearner
from learners.losses import BINARY_LOSSES, probabilities

from .checkpoints import CheckpointStore
from .events import event_rows


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
        self.loss_sum = 0.0
        self.labelled = 0
        self.correct = 0
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
        indptr, indices, data, y = event_rows(events, self.learner.hasher)
        version = self.learner.n_examples
        scores, losses = self.learner.learn((indptr, indices, data), y, return_losses=True)
        scores = scores.reshape(len(events), -1)
        now_ms = time.time() * 1000.0
        out = []
        labelled = ~np.isnan(y)
        versions = version + np.concatenate([[0], np.cumsum(labelled)[:-1]])
        prob, klass = self._readings(scores)
        for i, ((msg, event), row) in enumerate(zip(items, scores.tolist())):
            label = event.get("label")
            loss = None if math.isnan(losses[i]) else float(losses[i])
            out.append({
                "event_id": event["id"], "model": self.model, "model_version": int(versions[i]),
                "score": row[0], "scores": row, "probability": prob[i], "predicted_class": klass[i],
                "label": label, "loss": loss, "event_timestamp": _millis(event["timestamp"]),
                "latency_ms": now_ms - _millis(event["timestamp"]),
            })
            self.offsets[(msg.topic, msg.partition)] = msg.offset + 1
        self._count(scores, y, losses, labelled)
        self.events += len(items)
        self._since_checkpoint += len(items)
        return out

    def _readings(self, scores):
        n = scores.shape[0]
        loss = self.learner.loss
        if loss == "logistic":
            p = probabilities(loss, scores)
            return p.tolist(), [1 if s > 0 else -1 for s in scores[:, 0].tolist()]
        if loss == "softmax":
            p = probabilities(loss, scores)
            top = np.argmax(p, axis=1)
            return p[np.arange(n), top].tolist(), top.tolist()
        if loss in BINARY_LOSSES:
            return [None] * n, [1 if s > 0 else -1 for s in scores[:, 0].tolist()]
        return [None] * n, [None] * n

    def _count(self, scores, y, losses, labelled):
        if not labelled.any():
            return
        self.labelled += int(labelled.sum())
        self.loss_sum += float(losses[labelled].sum())
        if self.learner.loss == "softmax":
            self.correct += int((np.argmax(scores[labelled], axis=1) == y[labelled]).sum())
        elif self.learner.loss in BINARY_LOSSES:
            truth = np.where(y[labelled] > 0, 1.0, -1.0)
            self.correct += int((np.where(scores[labelled, 0] > 0, 1.0, -1.0) == truth).sum())

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / self.labelled if self.labelled else math.nan

    @property
    def accuracy(self) -> float | None:
        if self.learner.loss not in BINARY_LOSSES + ("softmax",) or not self.labelled:
            return None
        return self.correct / self.labelled

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


def _millis(ts) -> float:
    """Avro timestamp-millis decodes to a datetime; raw longs stay numbers."""
    if hasattr(ts, "timestamp"):
        return ts.timestamp() * 1000.0
    return float(ts)
