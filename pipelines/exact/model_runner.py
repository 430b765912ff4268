"""One model of the stream: its learner, the stream position its state
covers, the events awaiting labels, its progressive metrics and when to
checkpoint it. No Beam here: the stateful DoFn of
:mod:`pipelines.exact.transforms` holds one of these per model.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import numpy as np

from learners import OnlineLearner
from learners.interactions import NamespacedRows
from learners.state import LearnerState
from learners.losses import losses_of, prepare_labels
from pipelines import telemetry
from pipelines.kafka.offsets import offsets_records, offsets_from_records
from pipelines.kafka.spans import DEFAULT_MAX_WAITING, Chain
from pipelines.records.parts import Part
from pipelines.records.dead_letters import dead_letter
from pipelines.records.event_rows import EventRows
from pipelines.records.prediction_values import labelled_values, prediction_values
from pipelines.records.events import learner_rows
from pipelines.records.held import Rows, take_csr
from pipelines.records.labels import PendingStore, Source, Waiting
from pipelines.records.predictions import (ProgressiveMetrics, labelled_prediction, millis, prediction_record,
                                           reading_arrays, readings)
from pipelines.state.checkpoints import CheckpointStore
from schemas.codec import Codec


def event_weights(events: list[dict]) -> np.ndarray | None:
    """The events' importance weights for ``learn`` (None when all are 1).
    Validation (:mod:`pipelines.records.validation`) has already sent events
    with a NaN, infinite or non-positive weight to the dead letters."""
    weights = [e.get("weight") for e in events]
    if all(w is None for w in weights):
        return None
    return np.array([1.0 if w is None else w for w in weights], dtype=np.float64)


def _records(events) -> list:
    """Events as records: an EventRows's as ColumnarEvents, a list as it is."""
    return [e for _, e in events] if isinstance(events, EventRows) else events


def _split(part: Part, offset: int) -> tuple[tuple[Part, int], tuple[Part, int]]:
    """A part cut at ``offset``, each piece with its size (the Chain's splitter)."""
    head, tail = part.split(offset)
    return (head, head.size), (tail, tail.size)


KEPT_CLASSES = (LearnerState,)
"""What :meth:`ModelRunner.parts` is made of, besides arrays and plain values."""


class LabelSettings(NamedTuple):
    """Delayed labels: where they come from, and how long and how many wait."""
    topic: str
    ttl_ms: float
    max_pending: int


class Learned(NamedTuple):
    """Held events learned from as their labels came: ids, their rows as
    held (:class:`pipelines.records.held.Rows`, ``topic`` indexing
    ``topics``), the labels, the scores predicted on arrival and the losses."""
    ids: list[str]
    rows: Rows
    topics: list[str]
    labels: list[float]
    scores: np.ndarray
    losses: np.ndarray

    def waiting(self, k: int) -> Waiting:
        """Event k as a :class:`Waiting` (for its Prediction record)."""
        return self.rows.waiting(k, self.topics)


class ModelRunner:
    """One model; it starts from ``snapshot`` (bytes of :meth:`snapshot`, or
    :meth:`parts` as the runner's state store kept them) when given, else
    from the newest checkpoint in ``store``, else fresh."""

    def __init__(self, model: str, make_learner: Callable[[], OnlineLearner], store: CheckpointStore | None = None,
                 every_events: int | None = None, every_seconds: float | None = None,
                 labels: LabelSettings | None = None, snapshot: bytes | tuple | None = None,
                 max_waiting: int = DEFAULT_MAX_WAITING):
        self.model, self.store, self.labels, self.max_waiting = model, store, labels, max_waiting
        self.every_events, self.every_seconds = every_events, every_seconds
        self._last_checkpoint = time.monotonic()
        self._last_manifest: dict | None = None
        if snapshot is not None:
            learner = OnlineLearner.load(snapshot) if isinstance(snapshot, bytes) else OnlineLearner.from_parts(*snapshot)
            self._start(learner, learner.loaded_header.get("checkpointed"))
            return
        ckpt = store.latest(model) if store is not None else None
        self._start(ckpt.learner if ckpt else make_learner(), ckpt.path if ckpt else None)

    def _start(self, learner: OnlineLearner, checkpointed: str | None) -> None:
        header = learner.loaded_header
        self.learner = learner
        self.offsets = offsets_from_records(header.get("offsets", []))
        """Next offset per (topic, partition), events and labels topics, that the state covers."""
        self.events = int(header.get("event_count", 0))
        self.labels_learned = int(header.get("labels_learned", 0))
        self.restored_from = checkpointed
        """The newest checkpoint file of this model's state (None: none yet)."""
        self.pending = self._pending(learner.loaded_aux)
        self.metrics = ProgressiveMetrics(learner.loss, **header.get("metrics", {}))
        self._since_checkpoint = int(header.get("since_checkpoint", 0))
        self.chain = Chain(self.offsets, self.max_waiting, split=_split)
        """Applies each partition's parts in offset order; ``offsets`` is its record of what is applied."""
        self.applied_ms: float | None = header.get("applied_ms")
        """Wall time when the state last applied a part (None: not known)."""
        self.skipped = 0
        """Events left out as covered by the state (a replay overlapping it)."""

    def snapshot(self) -> bytes:
        """The whole of this model's state (learner, position, events awaiting
        labels, metrics) as bytes: :meth:`parts` encoded as a model file."""
        return self.learner.to_bytes(*self._extra_and_aux())

    def parts(self) -> tuple:
        """The whole of this model's state as the learner's state (live, not
        a copy), header and auxiliary arrays: what a runner's state store
        keeps, its large arrays as the rows that changed
        (:mod:`pipelines.steps.row_deltas`)."""
        return self.learner.parts(*self._extra_and_aux())

    def _extra_and_aux(self) -> tuple[dict, dict | None]:
        extra = {"model": self.model, "event_count": self.events, "labels_learned": self.labels_learned,
                 "offsets": offsets_records(self.offsets),
                 "metrics": self.metrics.as_dict(), "since_checkpoint": self._since_checkpoint,
                 "checkpointed": (self._last_manifest or {}).get("uri") or self.restored_from,
                 "applied_ms": self.applied_ms}
        return extra, self.pending.to_arrays() if self.pending is not None else None

    def _pending(self, aux: dict) -> PendingStore | None:
        if self.labels is None:
            return None
        return PendingStore.from_arrays(aux, self.labels.ttl_ms, self.labels.max_pending, self.labels.topic)

    def take(self, part: Part) -> list[Part]:
        """The parts that are now in order, ``part`` and those it let
        through (:class:`~pipelines.kafka.spans.Chain`), each without what
        the state covers; SKIP parts too (nothing to apply, but they moved
        the chain). A replay of what was applied gives nothing."""
        return self._to_apply(self.chain.offer(part.span, part, part.size))

    def follow(self, runs: list) -> list[Part]:
        """Apply the partitions in the order ``runs`` gives ((topic,
        partition), up to offset) each: the order in which the output that
        was committed past this state was computed. Returns the parts ready now."""
        return self._to_apply(self.chain.follow(runs))

    def _to_apply(self, readies) -> list[Part]:
        out = []
        for ready in readies:
            if ready.is_replay:
                continue
            trimmed = ready.payload.since(ready.since)
            if trimmed.payload is not None:
                self.skipped += len(ready.payload.payload) - len(trimmed.payload)
            out.append(trimmed)
        if out:
            self.applied_ms = time.time() * 1000.0
        return out

    def state_time_ms(self, mtime) -> float | None:
        """When this state was made: the wall time it last applied a part,
        else when its checkpoint file was written (``mtime(path)``, seconds)."""
        if self.applied_ms is not None:
            return self.applied_ms
        written = mtime(self.restored_from) if self.restored_from else math.inf
        return written * 1000.0 if math.isfinite(written) else None

    def process(self, items: list[tuple]) -> list[dict]:
        """Predict then learn each (position, event) in order; returns one
        Prediction record per event, in order. With delayed labels, an unlabelled event
        waits for its label (or takes the one that came first)."""
        done = self._predict_learn(items)
        if done is None:
            return []
        fresh, events, p = done
        events = _records(events)
        prob, klass = readings(self.learner.loss, p["scores"])
        return [prediction_record(event, self.model, p["versions"][i], row, prob[i], klass[i], p["losses"][i],
                                  p["now_ms"], pos)
                for i, ((pos, _), event, row) in enumerate(zip(fresh, events, p["scores"].tolist()))]

    def process_encoded(self, items: list[tuple], codec: Codec, topic: str | None) -> list[bytes]:
        """:meth:`process`, the Prediction records encoded for ``topic`` as
        ``codec.encode`` encodes them; the whole batch in one compiled call
        (:func:`pipelines.records.prediction_values.prediction_values`) unless that
        cannot give the same bytes, then record by record."""
        done = self._predict_learn(items)
        if done is None:
            return []
        fresh, events, p = done
        prob, klass = reading_arrays(self.learner.loss, p["scores"])
        values = prediction_values(codec, topic, self.model, fresh, events, probability=prob, klass=klass, **p)
        if values is not None:
            return values
        events = _records(events)
        prob, klass = readings(self.learner.loss, p["scores"])
        return [codec.encode("scinol.Prediction", prediction_record(
                    event, self.model, p["versions"][i], row, prob[i], klass[i], p["losses"][i], p["now_ms"], pos),
                    topic)
                for i, ((pos, _), event, row) in enumerate(zip(fresh, events, p["scores"].tolist()))]

    def _predict_learn(self, items: list[tuple]) -> tuple[list, list, dict] | None:
        """Predict then learn the events of ``items``; returns (those items,
        their events, with any early label (an EventRows: itself), and the
        columns of their predictions: scores, versions, losses, now_ms),
        None when there are none."""
        if not items:
            return None
        gathered = items.learner_rows(self.learner) if isinstance(items, EventRows) else None
        if gathered is not None or isinstance(items, EventRows) and self.pending is None:
            # the arrays, no object per event (but one per early label)
            events = items
            rows, y = gathered if gathered is not None else learner_rows(_records(items), self.learner)
            weights = items.weights()
            if self.pending is not None:
                events, y, weights = self._take_early_labels(items, y, weights)
        else:
            events = [e for _, e in items]
            if self.pending is not None:
                events = [self.pending.with_early_label(e) for e in events]
            rows, y = learner_rows(events, self.learner)
            weights = event_weights(events)
        version = self.learner.n_examples
        scores, losses = self.learner.learn(rows, y, weights, return_losses=True)
        scores = scores.reshape(len(events), -1)
        now_ms = time.time() * 1000.0
        labelled = ~np.isnan(y)
        versions = version + np.concatenate([[0], np.cumsum(labelled)[:-1]])
        if self.pending is not None and isinstance(items, EventRows):
            self._hold_unlabelled_rows(items, labelled, versions, now_ms, scores, rows)
        elif self.pending is not None:
            self._hold_unlabelled(items, events, versions, now_ms, scores, rows)
        self.metrics.count(scores, y, losses)
        self.events += len(items)
        self._since_checkpoint += len(items)
        return items, events, {"scores": scores, "versions": versions, "losses": losses, "now_ms": now_ms}

    def _take_early_labels(self, items: EventRows, y: np.ndarray, weights: np.ndarray | None):
        """(events, y, weights) of ``items`` with the labels that came before
        their events put in (as :meth:`PendingStore.with_early_label` does
        event by event): the EventRows itself when none did."""
        cols, at = items.cols, items.rows
        taken = self.pending.take_early_labels(items.event_ids(), cols.timestamp[at], ~cols.has_label[at])
        if not taken:
            return items, y, weights
        events, y = _records(items), y.copy()
        weights = np.ones(len(items)) if weights is None else weights.copy()
        for i, early in taken:
            own = early.weight != early.weight  # NaN: the label brings no weight, the event's stays
            events[i] = events[i].with_label(early.label, None if own else early.weight)
            y[i] = early.label
            weights[i] = weights[i] if own else early.weight
        return events, y, weights

    def _hold_unlabelled_rows(self, items: EventRows, labelled: np.ndarray, versions, now_ms, scores, rows) -> None:
        """:meth:`_hold_unlabelled` for an EventRows: the unlabelled events
        held as columns (:meth:`PendingStore.add_events`), no object per event."""
        wait = np.flatnonzero(~labelled)
        cols, at = items.cols, items.rows[wait]
        indptr, entries = take_csr(rows[0], wait)
        ts = cols.timestamp[at].astype(np.int64)
        self.pending.add_events(items.event_ids().take(wait).tolist(), Rows(
            ts, versions[wait].astype(np.int64), now_ms - ts, np.where(cols.has_weight[at], cols.weight[at], 1.0),
            scores[wait], indptr, rows[1][entries], rows[2][entries], rows[3][entries] if len(rows) > 3 else None,
            None, None, None, None), *items.source, items.offsets[wait], [items.keys[i] for i in wait.tolist()])
        self.pending.expire()

    def _hold_unlabelled(self, items, events, versions, now_ms, scores, rows) -> None:
        indptr, indices, data = rows[:3]
        spaces = rows[3] if len(rows) > 3 else None  # namespaces, when the learner crosses features
        for i, event in enumerate(events):
            if event.get("label") is None:
                lo, hi = indptr[i], indptr[i + 1]
                self.pending.add_event(event["id"], Waiting(
                    int(millis(event["timestamp"])), int(versions[i]), now_ms - millis(event["timestamp"]),
                    scores[i].copy(), indices[lo:hi].copy(), data[lo:hi].copy(), event.get("weight") or 1.0,
                    Source(*items[i][0][:3], getattr(items[i][0], "key", None)),
                    None if spaces is None else spaces[lo:hi].copy()))
        self.pending.expire()

    def process_labels(self, items: list[tuple]) -> tuple[list[dict], list[bytes], list, list[dict]]:
        """Learn from the events whose labels are in ``items`` ((message, Label
        record) pairs), in order; returns (the labelled Prediction records,
        with the predictions made when the events arrived; their Kafka keys;
        the label message each answers; dead letters of labels that cannot be used)."""
        learned, keys, answering, dead = self._learn_labels(items)
        if learned is None:
            return [], keys, answering, dead
        return self._labelled_records(learned), keys, answering, dead

    def process_labels_encoded(self, items: list[tuple], codec: Codec,
                               topic: str | None) -> tuple[list[bytes], list[bytes], list, list[dict]]:
        """:meth:`process_labels`, the Prediction records encoded for ``topic``
        as ``codec.encode`` encodes them; in one compiled call
        (:func:`pipelines.records.prediction_values.labelled_values`) unless that cannot
        give the same bytes, then record by record."""
        learned, keys, answering, dead = self._learn_labels(items)
        if learned is None:
            return [], keys, answering, dead
        prob, klass = reading_arrays(self.learner.loss, learned.scores)
        values = labelled_values(codec, topic, self.model, learned, prob, klass)
        if values is None:
            values = [codec.encode("scinol.Prediction", r, topic) for r in self._labelled_records(learned)]
        return values, keys, answering, dead

    def _labelled_records(self, learned: "Learned") -> list[dict]:
        prob, klass = readings(self.learner.loss, learned.scores)
        return [labelled_prediction(event_id, self.model, learned.waiting(k), learned.labels[k], learned.losses[k],
                                    prob[k], klass[k]) for k, event_id in enumerate(learned.ids)]

    def _learn_labels(self, items: list[tuple]) -> tuple["Learned | None", list[bytes], list, list[dict]]:
        """Match the labels of ``items`` to their events and learn from them:
        (what was learned, None if nothing; the Kafka keys of its
        predictions; the label message each answers; dead letters)."""
        labels = [(record["event_id"], int(millis(record["timestamp"])), record["label"],
                   math.nan if record.get("weight") is None else record["weight"], msg) for msg, record in items]
        found, rows, topics = self.pending.add_labels(labels)
        self.pending.expire()
        learned = self._learn_matched([labels[k] for k in found], rows, topics) if found else None
        self.labels_learned += len(found)
        self._since_checkpoint += len(items)
        dead = self.dropped_labels()
        if learned is None:
            return None, [], [], dead
        keys = [key if key is not None else event_id.encode() for key, event_id in zip(rows.keys, learned.ids)]
        return learned, keys, [labels[k][4] for k in found], dead

    def dropped_labels(self) -> list[dict]:
        """Dead letters of the labels that left the store without their event
        (expired: the events topic moved past them)."""
        if self.pending is None:
            return []
        return [dead_letter(msg, reason, detail) for msg, reason, detail in self.pending.drain_unmatched()]

    def _learn_matched(self, matched: list[tuple], rows: Rows, topics: list[str]) -> "Learned":
        """Learn from the held events ``rows`` with the labels ``matched``
        ((event id, timestamp, label, weight, message) each)."""
        if self.learner.interactions:  # the rows again with their namespaces, to be crossed as on arrival
            batch = NamespacedRows(rows.indptr, rows.indices, rows.values, rows.namespaces)
        else:
            batch = (rows.indptr, rows.indices, rows.values)
        labels = [m[2] for m in matched]
        y = prepare_labels(self.learner.loss, labels, self.learner.n_classes or 1)
        # the label's weight when it has one (NaN: none), else the event's
        given = np.fromiter((m[3] for m in matched), np.float64, len(matched))
        self.learner.learn(batch, y, np.where(np.isnan(given), rows.weight, given))
        scores = rows.scores  # the predictions made when the events arrived
        losses = losses_of(self.learner.loss, y, scores, self.learner.loss_param)
        self.metrics.count(scores, y, losses)
        return Learned([m[0] for m in matched], rows, topics, labels, scores, losses)

    def approx_bytes(self) -> int:
        """About how much memory this model holds (its learner's arrays and the
        events awaiting labels), in O(1) of the number waiting."""
        state = getattr(self.learner, "state", None)
        arrays = sum(a.nbytes for a in state.arrays.values()) if state is not None else 0
        return arrays + (self.pending.approx_bytes() if self.pending is not None else 0)

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
    def never_saved(self) -> bool:
        """Learned something but has no checkpoint yet (written nor loaded)."""
        return self.store is not None and self.restored_from is None and self._last_manifest is None \
            and self.events + self.labels_learned > 0

    @property
    def unsaved(self) -> bool:
        """Events learned since the last checkpoint written or loaded."""
        return self._since_checkpoint > 0 or (self.restored_from is None and self.events > 0
                                               and self._last_manifest is None)

    def checkpoint(self) -> dict | None:
        """Write a checkpoint now (with the events awaiting labels); returns
        its manifest (None without a store)."""
        if self.store is None:
            return None
        aux = self.pending.to_arrays() if self.pending is not None else None
        manifest = self._last_manifest = self.store.save(self.model, self.learner, self.offsets, self.events,
                                                         aux=aux, labels_learned=self.labels_learned)
        self._since_checkpoint = 0
        self._last_checkpoint = time.monotonic()
        telemetry.checkpoint_written(self.model, self.events)
        return manifest
