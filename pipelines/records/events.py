"""``Event`` records (schemas/event.v2.avsc): decoded ones as learner input
rows, and new ones made from arrays, data files and generated data (for
``scinol produce`` and the demo). Event ids are stable (the same file gives
the same ids), so predictions can be joined back to rows."""

from __future__ import annotations

import math
import os
import time
from typing import Iterator

import numpy as np

from learners.datasets import toy_examples
from learners.hashing import FeatureHasher
from learners.interactions import DEFAULT_NAMESPACE, NamespacedRows, namespace_of


def event_rows(events: list[dict], hasher: FeatureHasher):
    """(indptr, indices, data, y) for a list of Event records, in order.

    Dense features are indices 0..n-1, sparse ones their own indices, named
    ones hashed with the learner's hasher. A missing label is NaN (the event
    is predicted, not learned from). Events are assumed validated
    (:func:`pipelines.records.validation.validate_event`): nothing here raises on bad values.
    """
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    y = np.empty(len(events))
    for i, event in enumerate(events):
        features = event["features"]
        values = features["values"]
        if isinstance(values, dict):
            for index, value in hasher.transform_one(values).items():
                indices.append(index)
                data.append(value)
        elif "indices" in features:
            indices.extend(features["indices"])
            data.extend(values)
        else:
            indices.extend(range(len(values)))
            data.extend(values)
        indptr.append(len(indices))
        label = event.get("label")
        y[i] = math.nan if label is None else label
    return (np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int64),
            np.array(data, dtype=np.float64), y)


def learner_rows(events: list[dict], learner):
    """(rows, y) for ``learner.learn``: CSR rows, or namespaced rows (every
    entry with its namespace, :mod:`learners.interactions`) when the learner
    crosses features. Events of a decoded batch of columns
    (:class:`pipelines.records.event_rows.ColumnarEvent`) bring their rows
    ready-made: gathered from the batch's arrays, no per-event work."""
    fast = getattr(type(events[0]), "learner_rows", None) if events else None
    if fast is not None:
        rows = fast(events, learner)
        if rows is not None:
            return rows
    if not learner.interactions:
        indptr, indices, data, y = event_rows(events, learner.hasher)
        return (indptr, indices, data), y
    hasher = learner.hasher
    indptr, indices, data, spaces = [0], [], [], []
    y = np.empty(len(events))
    for i, event in enumerate(events):
        features = event["features"]
        values = features["values"]
        if isinstance(values, dict):
            for name, value in values.items():
                index, sign = hasher.slot(name)
                indices.append(index)
                data.append(sign * value)
                spaces.append(namespace_of(name))
        else:
            indices.extend(features["indices"] if "indices" in features else range(len(values)))
            data.extend(values)
            spaces.extend([DEFAULT_NAMESPACE] * len(values))
        indptr.append(len(indices))
        label = event.get("label")
        y[i] = math.nan if label is None else label
    rows = NamespacedRows(np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int64),
                          np.array(data, dtype=np.float64), np.array(spaces, dtype=np.uint8))
    return rows, y


def dense_events(X: np.ndarray, y, id_prefix: str, model: str = "default",
                 start_ms: int | None = None) -> Iterator[dict]:
    """One Event per row of X (labels y; NaN = unlabelled)."""
    start_ms = int(time.time() * 1000) if start_ms is None else start_ms
    for i, (row, label) in enumerate(zip(np.asarray(X, dtype=float).tolist(), np.asarray(y, dtype=float).tolist())):
        yield {"id": f"{id_prefix}{i}", "timestamp": start_ms + i, "model": model,
               "features": {"values": row}, "label": None if label != label else label, "weight": None}


def file_events(reader, model: str = "default", passes: int = 1) -> Iterator[dict]:
    """Events from a :mod:`pipelines.files.datafiles` reader: CSV rows as dense
    features, libsvm rows as sparse ones, VW text as named ones
    (:func:`vw_events`); ids ``<file>:<line>``."""
    from pipelines.files.vw_text import VwReader

    if isinstance(reader, VwReader):
        yield from vw_events(reader.path, model, passes)
        return
    name = os.path.basename(reader.path)
    dense = reader.n_features is not None
    for p in range(passes):
        suffix = f"#{p}" if passes > 1 else ""
        for batch in reader.batches():
            now = int(time.time() * 1000)
            for i in range(batch.y.shape[0]):
                lo, hi = batch.indptr[i], batch.indptr[i + 1]
                idx, val = batch.indices[lo:hi], batch.data[lo:hi]
                if dense:
                    row = np.zeros(reader.n_features)
                    row[idx] = val
                    features = {"values": row.tolist()}
                else:
                    features = {"indices": idx.tolist(), "values": val.tolist()}
                label, weight = float(batch.y[i]), 1.0 if batch.weights is None else float(batch.weights[i])
                if weight == 0:  # as for VW files below: event weights are > 0
                    label = None
                yield {"id": f"{name}:{int(batch.lines[i])}{suffix}", "timestamp": now, "model": model,
                       "features": features, "label": label, "weight": None if weight in (0, 1) else weight}


def vw_events(path: str, model: str = "default", passes: int = 1) -> Iterator[dict]:
    """Events from a Vowpal Wabbit text file (:mod:`pipelines.files.vw_text`):
    features as NamedFeatures (``ns^name``; a repeated name adds up), the
    label, the importance weight (null when 1; weight 0, which VW learns
    nothing from, makes the event unlabelled, since event weights are > 0).
    The id is the VW tag when the line has one (VW reports tags with its
    predictions; keep them unique), else ``<file>:<line>``."""
    from pipelines.files.vw_text import vw_rows

    name = os.path.basename(path)
    for p in range(passes):
        suffix = f"#{p}" if passes > 1 else ""
        for lineno, row in vw_rows(path):
            event_id = f"{row.tag}{suffix}" if row.tag is not None else f"{name}:{lineno}{suffix}"
            yield vw_event(row, event_id, model, int(time.time() * 1000))


def vw_event(row, event_id: str, model: str, timestamp: int) -> dict:
    """The event of one parsed VW row (:func:`vw_events`)."""
    values: dict[str, float] = {}
    for feature, value in row.features:
        values[feature] = values[feature] + value if feature in values else value
    label, weight = row.label, row.weight
    if weight == 0:
        label, weight = None, None
    return {"id": event_id, "timestamp": timestamp, "model": model, "features": {"values": values},
            "label": label, "weight": None if weight == 1 else weight}


def generated_events(name: str, n: int, seed: int, model: str = "default") -> Iterator[dict]:
    if name != "toy":
        raise ValueError(f"unknown generator {name!r}; available: toy")
    X, y = toy_examples(n, seed)
    return dense_events(X, y, f"toy-{seed}-", model)
