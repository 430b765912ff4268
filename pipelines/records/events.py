"""Decoded ``Event`` records (schemas/event.avsc) as learner input rows."""

from __future__ import annotations

import math

import numpy as np

from learners.hashing import FeatureHasher


def event_rows(events: list[dict], hasher: FeatureHasher):
    """(indptr, indices, data, y) for a list of Event records, in order.

    Dense features are indices 0..n-1, sparse ones their own indices, named
    ones hashed with the learner's hasher. A missing label is NaN (the event
    is predicted, not learned from). Events are assumed validated
    (``schemas.codec.validate_event``): nothing here raises on bad values.
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
