"""A decoded batch's events as the pipelines' steps hand them on, with no
object per event: :class:`EventRows` (one model's events of a batch: row
numbers into the columns, offsets and keys), read as (Position,
:class:`ColumnarEvent`) pairs when a step needs records, and
:class:`LabelledEvent` (a row given a label that came apart); the
prediction keys and timestamps of either form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pipelines.kafka.consumer import Position
from pipelines.records.event_columns import EventColumns
from pipelines.records.predictions import prediction_keys
from pipelines.records.row_features import features_of
from pipelines.records.strings import Strings


_EVENT_KEYS = ("id", "timestamp", "model", "features", "label", "weight")
_FIELD_INDEX = {"id": 0, "timestamp": 1, "model": 2, "label": 3, "weight": 4}  # in EventColumns.fields()


class ColumnarEvent(Mapping):
    """Row ``i`` of an :class:`EventColumns`, read as the Event record the
    codec decodes, for steps that take records. The fields are read from
    the columns when asked for; ``features`` (the one that needs the
    original names) decodes the message again. :meth:`learner_rows` turns a
    list of them into learner rows without touching ``features``."""

    __slots__ = ("cols", "i")

    def __init__(self, cols: EventColumns, i: int):
        self.cols, self.i = cols, i

    def __getitem__(self, key):
        k = _FIELD_INDEX.get(key)
        if k is not None:
            return self.cols.fields()[k][self.i]
        if key == "features":
            return self.cols.record(self.i)["features"]
        raise KeyError(key)

    def get(self, key, default=None):
        k = _FIELD_INDEX.get(key)  # the common case without Mapping.get's exception handling
        return self.cols.fields()[k][self.i] if k is not None else Mapping.get(self, key, default)

    def __iter__(self):
        return iter(_EVENT_KEYS)

    def __len__(self) -> int:
        return len(_EVENT_KEYS)

    def __reduce__(self):
        return ColumnarEvent, (self.cols, self.i)

    @staticmethod
    def learner_rows(events: list, learner):
        """(rows, y) as :func:`pipelines.records.events.learner_rows` gives
        them, from the columns (:func:`features_of`); None when that path
        must decide (other events in the list, or see :func:`features_of`)."""
        if not events:
            return None
        cols = events[0].cols
        try:
            rows = np.fromiter((e.i for e in events if e.cols is cols), np.int64, len(events))
        except (AttributeError, ValueError):  # not all ColumnarEvents, or of other batches
            return None
        features = features_of(cols, rows, learner)
        return None if features is None else (features, own_labels(events, cols.label[rows])[0])

    def with_label(self, label: float, weight: float | None) -> "LabelledEvent":
        """This event with a label (and weight, None: its own) that came on a
        labels topic before it: still a row of the columns, so the batch
        keeps its compiled paths and ``features`` is never decoded again."""
        return LabelledEvent(self.cols, self.i, label, weight)


class LabelledEvent(ColumnarEvent):
    """A :class:`ColumnarEvent` whose label (and maybe weight) came apart."""

    __slots__ = ("label", "weight")

    def __init__(self, cols: EventColumns, i: int, label: float, weight: float | None):
        super().__init__(cols, i)
        self.label, self.weight = label, weight

    def __getitem__(self, key):
        if key == "label":
            return self.label
        if key == "weight" and self.weight is not None:
            return self.weight
        return ColumnarEvent.__getitem__(self, key)

    def get(self, key, default=None):
        if key == "label":
            return self.label
        if key == "weight" and self.weight is not None:
            return self.weight
        return ColumnarEvent.get(self, key, default)

    def __reduce__(self):
        return LabelledEvent, (self.cols, self.i, self.label, self.weight)


class EventRows(Sequence):
    """One model's valid events of one decoded batch of one partition, as
    arrays: their row numbers in the batch's columns, their offsets and
    keys. It reads as a list of (Position, :class:`ColumnarEvent`) pairs,
    made on demand, so a step that needs the pairs gets them; the learning
    steps read the arrays and make none. It crosses Beam's steps as those
    arrays (the columns pickled once). ``source``: (topic, partition)."""

    __slots__ = ("cols", "rows", "offsets", "keys", "source")

    def __init__(self, cols: EventColumns, rows: np.ndarray, offsets: np.ndarray, keys: list,
                 source: tuple[str, int]):
        self.cols, self.rows, self.offsets, self.keys = cols, rows, offsets, keys
        self.source = source

    def __len__(self) -> int:
        return self.rows.shape[0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return EventRows(self.cols, self.rows[i], self.offsets[i], self.keys[i], self.source)
        return Position(*self.source, int(self.offsets[i]), self.keys[i]), ColumnarEvent(self.cols, int(self.rows[i]))

    def __iter__(self):
        topic, partition = self.source
        cols = self.cols
        for o, k, i in zip(self.offsets.tolist(), self.keys, self.rows.tolist()):
            yield Position(topic, partition, o, k), ColumnarEvent(cols, i)

    def __reduce__(self):
        """Its rows alone when it holds some of its batch (one model's part
        of a batch of several models): each part crosses a step with its own
        events, not the whole batch's."""
        n = len(self.rows)
        if n < len(self.cols):
            return EventRows, (self.cols.take(self.rows), np.arange(n, dtype=np.int64), self.offsets, self.keys,
                               self.source)
        return EventRows, (self.cols, self.rows, self.offsets, self.keys, self.source)

    def learner_rows(self, learner):
        """(rows, y) as :meth:`ColumnarEvent.learner_rows` gives them for
        these events, straight from the arrays; None when that path must
        decide (:func:`features_of`)."""
        features = features_of(self.cols, self.rows, learner)
        return None if features is None else (features, self.cols.label[self.rows])

    def weights(self) -> np.ndarray | None:
        """The events' importance weights (none given: 1); None when all are none."""
        cols, rows = self.cols, self.rows
        given = cols.has_weight[rows]
        return np.where(given, cols.weight[rows], 1.0) if given.any() else None

    def event_ids(self) -> Strings:
        cols = self.cols
        return Strings(cols.buf, cols.id_start[self.rows], cols.id_end[self.rows])

    def covered(self) -> dict[tuple[str, int], int]:
        """The next offset of the partition after these events."""
        return {self.source: int(self.offsets[-1]) + 1} if len(self) else {}

    @staticmethod
    def split(cols: EventColumns, keep: np.ndarray, batch: list) -> list[tuple[str, "EventRows"]]:
        """(model, its EventRows) of the messages of ``batch`` (one partition,
        decoded as ``cols``) where ``keep``, the models in the order they first appear."""
        offsets = np.fromiter((m.offset for m in batch), np.int64, len(batch))
        index = np.flatnonzero(keep)
        codes = cols.model_code[index]
        found, first = np.unique(codes, return_index=True)
        out = []
        for code in found[np.argsort(first)].tolist():
            rows = index[codes == code] if found.shape[0] > 1 else index
            out.append((cols.models[code], EventRows(cols, rows, offsets[rows], [batch[i].key for i in rows.tolist()],
                                                     (batch[0].topic, batch[0].partition))))
        return out


def prediction_keys_of(items) -> list[bytes]:
    """The Prediction key of each event of (Position, event) pairs or an
    :class:`EventRows` (:func:`pipelines.records.predictions.prediction_key`)."""
    if isinstance(items, EventRows):
        if None not in items.keys:
            return list(items.keys)
        return [key if key is not None else raw for raw, key in zip(items.event_ids().encoded(), items.keys)]
    return prediction_keys([e["id"] for _, e in items], [getattr(p, "key", None) for p, _ in items])


def event_timestamps_of(items) -> np.ndarray:
    """The timestamp (ms, -1: none) of each event of (Position, event) pairs or an :class:`EventRows`."""
    if isinstance(items, EventRows):
        return items.cols.timestamp[items.rows]
    return np.array([e["timestamp"] for _, e in items], dtype=np.int64)


def own_labels(events: list, label: np.ndarray, has_label: np.ndarray | None = None):
    """``label`` (the columns' labels of ``events``) with the labels of
    :class:`LabelledEvent` rows put in, as copies."""
    late = [(k, e.label) for k, e in enumerate(events) if type(e) is LabelledEvent]
    if not late:
        return label, has_label
    label = label.copy()
    has_label = None if has_label is None else has_label.copy()
    for k, value in late:
        label[k] = value
        if has_label is not None:
            has_label[k] = True
    return label, has_label
