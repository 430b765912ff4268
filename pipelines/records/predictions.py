"""Prediction records and progressive metrics, shared by the exact and the
sharded pipelines (no Beam here)."""

from __future__ import annotations

import math

import numpy as np

from learners.losses import BINARY_LOSSES, probabilities


def readings(loss: str, scores: np.ndarray) -> tuple[list, list]:
    """Per row of ``scores`` (n, n_outputs): the probability of the predicted
    class (None when the loss has none) and the predicted class (None for
    regression losses)."""
    n = scores.shape[0]
    if loss == "logistic":
        return probabilities(loss, scores).tolist(), [1 if s > 0 else -1 for s in scores[:, 0].tolist()]
    if loss == "softmax":
        p = probabilities(loss, scores)
        top = np.argmax(p, axis=1)
        return p[np.arange(n), top].tolist(), top.tolist()
    if loss in BINARY_LOSSES:
        return [None] * n, [1 if s > 0 else -1 for s in scores[:, 0].tolist()]
    return [None] * n, [None] * n


def reading_arrays(loss: str, scores: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """:func:`readings` as arrays, None for a column null in every row (the
    probability without a probabilistic loss, the class for regression)."""
    n = scores.shape[0]
    if loss == "logistic":
        return probabilities(loss, scores), np.where(scores[:, 0] > 0, 1, -1)
    if loss == "softmax":
        p = probabilities(loss, scores)
        top = np.argmax(p, axis=1)
        return p[np.arange(n), top], top
    if loss in BINARY_LOSSES:
        return None, np.where(scores[:, 0] > 0, 1, -1)
    return None, None


def millis(ts) -> float:
    """Avro timestamp-millis decodes to a datetime; raw longs stay numbers."""
    if hasattr(ts, "timestamp"):
        return ts.timestamp() * 1000.0
    return float(ts)


def prediction_record(event: dict, model: str, version: int, row: list, probability, klass, loss: float,
                      now_ms: float, source=None) -> dict:
    """A ``scinol.Prediction`` for ``event``; ``loss`` NaN when unlabelled;
    ``source``: where the event was read (anything with ``topic``,
    ``partition`` and ``offset``), None when unknown."""
    return {
        "event_id": event["id"], "model": model, "model_version": int(version),
        "score": row[0], "scores": row, "probability": probability, "predicted_class": klass,
        "label": event.get("label"), "loss": None if math.isnan(loss) else float(loss),
        "event_timestamp": millis(event["timestamp"]), "latency_ms": now_ms - millis(event["timestamp"]),
        "source_topic": None if source is None else source.topic,
        "source_partition": None if source is None else source.partition,
        "source_offset": None if source is None else source.offset,
    }


def prediction_key(event_id: str, source=None) -> bytes:
    """A prediction's Kafka key: the event message's key (``source``: where
    the event was read, None when unknown), or the event id when it had
    none, so predictions join their events by key."""
    return prediction_keys([event_id], [getattr(source, "key", None)])[0]


def prediction_keys(event_ids: list[str], keys: list) -> list[bytes]:
    """:func:`prediction_key` of each event, from its id and its message's key (None: it had none)."""
    return [key if key is not None else event_id.encode() for event_id, key in zip(event_ids, keys)]


def labelled_prediction(event_id: str, model: str, waiting, label: float, loss: float, probability,
                        klass) -> dict:
    """The ``scinol.Prediction`` of an event whose label came late: the
    prediction made when it arrived (``waiting``: a
    :class:`pipelines.records.labels.Waiting`), now with its label and loss."""
    row = waiting.scores.tolist()
    return {
        "event_id": event_id, "model": model, "model_version": int(waiting.version),
        "score": row[0], "scores": row, "probability": probability, "predicted_class": klass,
        "label": float(label), "loss": None if math.isnan(loss) else float(loss),
        "event_timestamp": int(waiting.ts_ms), "latency_ms": float(waiting.latency_ms),
        "source_topic": None if waiting.source is None else waiting.source.topic,
        "source_partition": None if waiting.source is None else waiting.source.partition,
        "source_offset": None if waiting.source is None else waiting.source.offset,
    }


class ProgressiveMetrics:
    """Mean progressive loss and accuracy over the labelled events seen."""

    def __init__(self, loss: str, loss_sum: float = 0.0, labelled: int = 0, correct: int = 0):
        self.loss = loss
        self.loss_sum, self.labelled, self.correct = loss_sum, labelled, correct

    def count(self, scores: np.ndarray, y: np.ndarray, losses: np.ndarray) -> None:
        labelled = ~np.isnan(y)
        if not labelled.any():
            return
        self.labelled += int(labelled.sum())
        self.loss_sum += float(losses[labelled].sum())
        if self.loss == "softmax":
            self.correct += int((np.argmax(scores[labelled], axis=1) == y[labelled]).sum())
        elif self.loss in BINARY_LOSSES:
            truth = np.where(y[labelled] > 0, 1.0, -1.0)
            self.correct += int((np.where(scores[labelled, 0] > 0, 1.0, -1.0) == truth).sum())

    @property
    def mean_loss(self) -> float:
        return self.loss_sum / self.labelled if self.labelled else math.nan

    @property
    def accuracy(self) -> float | None:
        if self.loss not in BINARY_LOSSES + ("softmax",) or not self.labelled:
            return None
        return self.correct / self.labelled

    def as_dict(self) -> dict:
        return {"loss_sum": self.loss_sum, "labelled": self.labelled, "correct": self.correct}
