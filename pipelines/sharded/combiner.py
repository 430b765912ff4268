"""The combine step's half of sharded mode for one model: sums the K
shards' partial sums of each event in sequence order (in shard order, for
the same bits on every runner), then ŷ, the loss, g_t and the global
scalars; makes the Prediction and the Feedback records."""

from __future__ import annotations

import functools
import logging
import math
import time

import numpy as np

from learners.losses import loss_code, losses_of, prepare_labels
from pipelines.kafka.spans import Chain
from pipelines.records.event_rows import EventRows, event_timestamps_of, prediction_keys_of
from pipelines.records.prediction_values import prediction_values
from pipelines.records.feedback import FeedbackColumns
from pipelines.records.labels import PendingStore, Source, Waiting
from pipelines.records.predictions import (ProgressiveMetrics, labelled_prediction, millis, prediction_key,
                                           prediction_record, reading_arrays, readings)
from pipelines.records.strings import Strings

from .messages import Cadence, LateHead, Partials, label_partition

log = logging.getLogger(__name__)


class PartialTable:
    """The shards' partial sums of the events not yet combined: row
    seq − ``base`` of each shard's array, filled a block at a time, in any
    order (a shard's partial that comes twice is written twice, counts once)."""

    def __init__(self, n_shards: int, base: int):
        self.base = base  # the sequence number of row 0: the next event to combine
        self.sums: list[np.ndarray | None] = [None] * n_shards
        self.got = np.zeros((n_shards, 0), dtype=bool)
        self.heads: list[tuple[int, list | EventRows]] = []
        """Shard 0's heads (Slices.heads) from ``base`` on, as (sequence
        number of the first, heads), in order, disjoint: a block's heads are
        kept as they came (an EventRows stays arrays)."""

    def put(self, block: Partials) -> None:
        skip = max(self.base - block.first, 0)  # rows of events already combined (a replay)
        if skip >= block.sums.shape[0]:
            return
        start = block.first + skip - self.base
        end = start + block.sums.shape[0] - skip
        self._grow(end, block.sums.shape[1])
        self.sums[block.shard][start:end] = block.sums[skip:]
        self.got[block.shard, start:end] = True
        if block.heads is not None:
            self._put_heads(block.first + skip, block.heads[skip:])

    def _put_heads(self, first: int, heads) -> None:
        """Keep the rows of ``heads`` (first at sequence number ``first``) no kept heads cover."""
        end, at, free = first + len(heads), first, []
        for f, kept in self.heads:
            if f > at:
                free.append((at, min(f, end)))
            at = max(at, f + len(kept))
            if at >= end:
                break
        if at < end:
            free.append((at, end))
        self.heads += [(a, heads[a - first:b - first]) for a, b in free if a < b]
        self.heads.sort(key=lambda kept: kept[0])

    def _grow(self, rows: int, width: int) -> None:
        have = self.got.shape[1]
        if rows <= have:
            return
        rows = max(rows, 2 * have)
        self.got = np.concatenate([self.got, np.zeros((self.got.shape[0], rows - have), dtype=bool)], axis=1)
        self.sums = [np.concatenate([np.zeros((have, width)) if a is None else a, np.zeros((rows - have, width))])
                     for a in self.sums]

    def ready(self) -> int:
        """How many events from ``base`` on have all K partials."""
        complete = self.got.all(axis=0)
        return int(complete.shape[0] if complete.all() else np.argmin(complete))

    def take(self, n: int) -> tuple[np.ndarray, list]:
        """The totals and heads (as the blocks brought them: a list of
        lists and EventRows) of the next n events, which leave the table.
        The K partial sums are added in shard order whatever order they came
        in: floating-point addition is not associative, and this makes a
        run's predictions the same bit for bit on every runner and replay."""
        if not n:
            return np.empty((0, 0)), []
        total = self.sums[0][:n].copy()
        for sums in self.sums[1:]:
            total += sums[:n]
        heads, end = [], self.base + n
        while self.heads and self.heads[0][0] < end:
            first, kept = self.heads.pop(0)
            if end - first < len(kept):
                self.heads.insert(0, (end, kept[end - first:]))
                kept = kept[:end - first]
            heads.append(kept)
        self.sums = [a[n:].copy() for a in self.sums]
        self.got, self.base = self.got[:, n:].copy(), self.base + n
        return total, heads


class Run:
    """Consecutive events the Combiner combined, as the combine step writes
    them: their Predictions' Kafka keys and values, and their Feedback as
    columns. ``values`` is None when the Predictions could not be encoded in
    one call: the step then encodes :attr:`predictions` one by one."""

    __slots__ = ("keys", "values", "feedback", "_predictions", "event_ms")

    def __init__(self, keys: list[bytes], values: list[bytes] | None, feedback: FeedbackColumns, predictions,
                 event_ms: np.ndarray | None = None):
        self.keys, self.values, self.feedback, self._predictions = keys, values, feedback, predictions
        self.event_ms = event_ms
        """The events' timestamps (ms), for the latency metric; None for a late label's prediction."""

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def predictions(self) -> list[dict]:
        """The Prediction records, made on first use when the values were
        encoded from arrays (the pipeline never needs them then)."""
        if callable(self._predictions):
            self._predictions = self._predictions()
        return self._predictions

    def encoded(self, encode) -> list[bytes]:
        """The Prediction values: :attr:`values`, or each record through ``encode``."""
        return self.values if self.values is not None else [encode(p) for p in self.predictions]


def _prediction_records(loss: str, model: str, heads, versions: np.ndarray, scores: np.ndarray,
                        losses: np.ndarray, now_ms: float) -> list[dict]:
    prob, klass = readings(loss, scores)
    return [prediction_record(event, model, version, row, prob[i], klass[i], value, now_ms, pos)
            for i, ((pos, event), version, row, value)
            in enumerate(zip(heads, versions.tolist(), scores.tolist(), losses.tolist()))]


def _head_columns(heads) -> tuple[Strings, np.ndarray, np.ndarray]:
    """(event ids, partitions, offsets) of a run's heads: (Position, event)
    pairs, or an :class:`EventRows` read as its arrays."""
    if isinstance(heads, EventRows):
        return heads.event_ids(), np.full(len(heads), heads.source[1], np.int64), heads.offsets
    return (Strings.of(e["id"] for _, e in heads), np.array([p.partition for p, _ in heads], np.int64),
            np.array([p.offset for p, _ in heads], np.int64))


class Combiner:
    """The per-example scalar work of one model, in sequence order."""

    def __init__(self, algorithm, loss: str, loss_param: float, n_outputs: int, n_shards: int, model: str,
                 run_id: str, scalars: dict, seq: int = 0, learned: int = 0):
        self.algorithm, self.loss, self.loss_param = algorithm, loss, loss_param
        self._loss = loss_code(loss)
        self.n_outputs, self.n_shards, self.model, self.run_id = n_outputs, n_shards, model, run_id
        self.scalars = dict(scalars)
        self.seq = seq  # last event combined
        self.cadence = Cadence()  # of the cuts the Combiner asks for, without delayed labels
        self.learned = learned
        self.metrics = ProgressiveMetrics(loss)
        self.table = PartialTable(n_shards, seq + 1)
        self.predicted: dict[str, Waiting] | None = None
        """With delayed labels: the prediction made when each unlabelled
        event arrived, by event id, until its label comes (its loss is the
        progressive loss) or the Router drops the event."""

        self.cut_at: set[int] = set()  # sequence numbers the Router asked a cut at
        self.inbox = Chain()  # each shard's partial sums in the order it sent them
        self.parts: list[tuple[int, dict]] = []
        """(seq, the predictions held right after event seq): this Combiner's parts of those cuts, to write."""

    def hold_predictions(self, aux: dict | None = None) -> "Combiner":
        """Keep each unlabelled event's prediction for its label (``aux``:
        those of a cut's Combiner part, :meth:`_part`)."""
        held = PendingStore.from_arrays(aux or {}, math.inf, 1)
        self.predicted = dict(held.events)
        return self

    def _part(self) -> dict:
        held = PendingStore(math.inf, 1)
        held.events.update(self.predicted)
        return held.to_arrays()

    def add(self, blocks: list[Partials], encode_for: tuple | None = None) -> list[Run]:
        """The events now combinable, in sequence order, as runs. ``encode_for``:
        (codec, topic) to encode their Prediction records with, a run in
        one compiled call (:func:`pipelines.records.prediction_values.prediction_values`)."""
        for p in blocks:
            if p.shard < 0:  # the end of the input: a last cut at p.first, which this Combiner is at
                if self.predicted is not None and p.first == self.seq:
                    self.parts.append((p.first, self._part()))
                continue
            self.table.put(p)
            if p.cut > self.seq:
                self.cut_at.add(p.cut)
        totals, blocks = self.table.take(self.table.ready())
        if not blocks:
            return []
        y = self._labels(blocks)
        # the scalars advance event by event in one compiled call (on a copy: self.scalars follows the runs)
        rows = self.algorithm.combine_rows(dict(self.scalars), totals, y, self._loss, self.loss_param,
                                           np.concatenate([self._weights(heads) for heads in blocks]))
        out, at = [], 0
        for heads in blocks:
            for lo, hi in self._segments(heads):
                part = [r[at + lo:at + hi] for r in rows]
                if isinstance(heads[lo], LateHead):
                    out.append(self._late(heads[lo], float(y[at + lo]), part))
                else:
                    out.append(self._run(heads[lo:hi], y[at + lo:at + hi], part, encode_for))
                if self.seq in self.cut_at:  # the held predictions exactly after this event
                    self.cut_at.discard(self.seq)
                    self.parts.append((self.seq, self._part()))
            at += len(heads)
        return out

    def _segments(self, heads) -> list[tuple[int, int]]:
        """The runs of ``heads`` to write as one: each late label alone (its
        record is made apart), the others up to each cut the Router asked for."""
        cuts = {seq - self.seq for seq in self.cut_at}
        if isinstance(heads, EventRows):  # no late labels
            edges = [0, *sorted(c for c in cuts if 0 < c < len(heads)), len(heads)]
            return list(zip(edges, edges[1:]))
        out, lo = [], 0
        for i, head in enumerate(heads):
            if isinstance(head, LateHead) and lo < i:
                out.append((lo, i))
                lo = i
            if isinstance(head, LateHead) or i + 1 in cuts:
                out.append((lo, i + 1))
                lo = i + 1
        return out + ([(lo, len(heads))] if lo < len(heads) else [])

    @staticmethod
    def _weights(heads) -> np.ndarray:
        """The events' importance weights (validated finite and ≥ 0 upstream):
        a late label's own, else its event's; none means 1."""
        if isinstance(heads, EventRows):
            weights = heads.weights()
            return np.ones(len(heads)) if weights is None else weights
        return np.array([Combiner._weight(h) for h in heads], np.float64)

    @staticmethod
    def _weight(head) -> float:
        if isinstance(head, LateHead):
            match = head.match
            weight = match.event.weight if match.weight != match.weight else match.weight
        else:
            weight = head[1].get("weight")
        return 1.0 if weight is None else float(weight)

    def _labels(self, blocks: list) -> np.ndarray:
        """The labels of these blocks' events in the loss's domain (NaN: none)."""
        raw = [heads.cols.label[heads.rows] if isinstance(heads, EventRows) else
               np.array([math.nan if v is None else v for v in
                         (h.match.label if isinstance(h, LateHead) else h[1].get("label") for h in heads)], np.float64)
               for heads in blocks]
        return prepare_labels(self.loss, np.concatenate(raw), self.n_outputs)

    def _advance(self, learned: np.ndarray, globs: np.ndarray) -> np.ndarray:
        """Move past events combined with these rows of ``combine_rows``;
        the model version each was predicted with."""
        versions = self.learned + np.cumsum(learned) - learned
        self.learned += int(learned.sum())
        self.seq += len(learned)
        self.scalars = dict(zip(self.algorithm.scalar_names, globs[-1].tolist()))
        return versions

    def _feedback(self, ids: Strings, partitions, offsets, g: np.ndarray, learned: np.ndarray,
                  globs: np.ndarray) -> FeedbackColumns:
        """The Feedback of the last ``len(ids)`` events of the sequence."""
        n = len(ids)
        return FeedbackColumns(self.model, self.run_id, ids, np.arange(self.seq - n + 1, self.seq + 1),
                               np.asarray(partitions, np.int64), np.asarray(offsets, np.int64), learned.copy(),
                               np.where(learned[:, None], g, 0.0), list(self.algorithm.scalar_names),
                               globs.copy(), np.zeros(n, dtype=bool))

    def _run(self, heads, y: np.ndarray, rows: list, encode_for: tuple | None) -> Run:
        """Consecutive events' records from their rows of ``combine_rows``;
        ``heads``: their (Position, event) pairs, or an EventRows."""
        yhats, losses, g, learned, globs = rows
        ids, partitions, offsets = _head_columns(heads)
        versions = self._advance(learned, globs)
        self.metrics.count(yhats, y, losses)
        now_ms = time.time() * 1000.0
        feedback = self._feedback(ids, partitions, offsets, g, learned, globs)
        values = None if encode_for is None else self._encoded(heads, versions, yhats, losses, now_ms, *encode_for)
        if self.predicted is not None:
            self._hold(ids, heads, versions, yhats, now_ms)
        records = functools.partial(_prediction_records, self.loss, self.model, heads, versions, yhats, losses, now_ms)
        return Run(prediction_keys_of(heads), values, feedback, records, event_timestamps_of(heads))

    def _hold(self, ids: Strings, heads, versions, scores, now_ms: float) -> None:
        """Keep each unlabelled event's prediction for its label to come."""
        for i, (pos, event) in enumerate(heads):
            if event.get("label") is None:
                ts = millis(event["timestamp"])
                self.predicted[ids[i]] = Waiting(
                    ts, int(versions[i]), now_ms - ts, scores[i].copy(), np.empty(0, dtype=np.int64),
                    np.empty(0), 1.0, Source(pos.topic, pos.partition, pos.offset, getattr(pos, "key", None)))

    def _late(self, head: LateHead, y: float, rows: list) -> Run:
        """Learn an event whose label came late; its record carries the
        prediction made when it arrived, and the loss of that."""
        msg, match = head.message, head.match
        for event_id in head.dropped:
            self.predicted.pop(event_id, None)
        yhats, _, g, learned, globs = rows
        self._advance(learned, globs)
        feedback = self._feedback(Strings.of([match.event_id]), [label_partition(msg.partition)], [msg.offset], g,
                                  learned, globs)
        arrived = self.predicted.pop(match.event_id, None)
        if arrived is None:  # not held (a part lost with its cut): the prediction made now stands in
            log.warning("model %r: no prediction held for event %r; its loss is that of the model now",
                        self.model, match.event_id)
            arrived = match.event._replace(scores=np.asarray(yhats[0], dtype=np.float64), version=self.learned - 1)
        scores = arrived.scores.reshape(1, -1)
        losses = losses_of(self.loss, np.array([y]), scores, self.loss_param)
        self.metrics.count(scores, np.array([y]), losses)
        prob, klass = readings(self.loss, scores)
        record = labelled_prediction(match.event_id, self.model, arrived, match.label, losses[0], prob[0], klass[0])
        return Run([prediction_key(match.event_id, match.event.source)], None, feedback, [record])

    def _encoded(self, heads, versions, scores, losses, now_ms, codec, topic) -> list[bytes] | None:
        """The Prediction records of these events as Kafka values, byte for
        byte what the codec writes for them, or None when that cannot be had
        in one call (the caller then encodes them one by one)."""
        prob, klass = reading_arrays(self.loss, scores)
        events = heads if isinstance(heads, EventRows) else [e for _, e in heads]
        return prediction_values(codec, topic, self.model, heads, events, versions=versions.astype(np.int64),
                                 scores=scores, losses=losses, probability=prob, klass=klass, now_ms=now_ms)
