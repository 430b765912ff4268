"""The checks an event must pass before a learner sees it. Each failure is
``(reason, detail)``: the reason one of :data:`schemas.reasons.EVENT_REASONS`,
the detail a sentence naming what was wrong and where."""

from __future__ import annotations

import math

from learners.losses import BINARY_LOSSES, LabelError, loss_code, prepare_labels
from schemas.reasons import (BAD_LABEL, BAD_WEIGHT, DUPLICATE_INDEX, INDEX_OUT_OF_RANGE, LENGTH_MISMATCH,
                             NEGATIVE_INDEX, NON_FINITE_FEATURE, NON_FINITE_WEIGHT, OVERSIZED)

MAX_FEATURES = 1_000_000
"""Default bound on the number of feature entries in one event."""
MAX_INDEX = 1 << 40
"""Default bound (exclusive) on a sparse feature index and on the number of
dense values. A learner holds state for every coordinate up to the largest
index it has seen (32 bytes each for ScInOL2): the pipeline passes a much
tighter bound (``pipelines.dead_letters.DEFAULT_MAX_INDEX``)."""



def _first_non_finite(values) -> int:
    for i, v in enumerate(values):
        if not math.isfinite(v):
            return i
    return -1


def _label_ok_fast(loss: str, n_classes: int, y: float) -> bool:
    """True only for labels prepare_labels surely accepts (a shortcut for the
    common case; every rejection goes through prepare_labels)."""
    if loss in BINARY_LOSSES:
        return y == 1.0 or y == -1.0 or y == 0.0
    if loss == "softmax":
        return 0.0 <= y < n_classes and float(y).is_integer()
    return math.isfinite(y)


def validate_event(
    event: dict,
    loss: str,
    n_classes: int | None = None,
    *,
    max_features: int = MAX_FEATURES,
    max_index: int = MAX_INDEX,
) -> tuple[str, str] | None:
    """``(reason, detail)`` for a decoded ``Event`` the learner must not see,
    or None when it is fine. Checks, in this order: size (``oversized``),
    sparse structure (``length_mismatch``, ``negative_index``,
    ``index_out_of_range``), values (``non_finite_feature``), ``duplicate_index``, the weight,
    then the label against ``loss`` (``n_classes`` is required for softmax)."""
    loss_code(loss)  # ValueError for an unknown loss
    if loss == "softmax" and (n_classes is None or n_classes < 2):
        raise ValueError(f"softmax loss needs n_classes >= 2, got {n_classes!r}")

    features = event["features"]
    if isinstance(features, tuple):
        features = features[1]
    values = features["values"]
    indices = features.get("indices")
    if indices is not None:
        problem = _sparse_problem(indices, values, max_features, max_index)
    elif isinstance(values, dict):
        problem = _named_problem(values, max_features)
    else:
        problem = _dense_problem(values, max_features, max_index)
    if problem is not None:
        return problem
    return check_label_and_weight(event, loss, n_classes)


def _sparse_problem(indices, values, max_features: int, max_index: int) -> tuple[str, str] | None:
    n, m = len(values), len(indices)
    if n > max_features or m > max_features:
        return OVERSIZED, f"{max(n, m)} sparse feature entries, more than the limit of {max_features}"
    if m != n:
        return LENGTH_MISMATCH, f"{m} sparse indices but {n} values"
    if not n:
        return None
    lo = min(indices)
    if lo < 0:
        return NEGATIVE_INDEX, f"negative feature index {lo} at position {indices.index(lo)}"
    hi = max(indices)
    if hi >= max_index:
        return (INDEX_OUT_OF_RANGE,
                f"feature index {hi} at position {indices.index(hi)} is not below the limit of {max_index}")
    if not math.isfinite(sum(values)):  # a NaN or inf makes the sum non-finite
        p = _first_non_finite(values)
        if p >= 0:  # else finite values whose sum overflowed: no problem here
            return NON_FINITE_FEATURE, f"non-finite value {values[p]!r} for feature index {indices[p]} (position {p})"
    if n > 1 and len(set(indices)) != n:
        seen = set()
        for p, i in enumerate(indices):
            if i in seen:
                return DUPLICATE_INDEX, f"feature index {i} appears twice (again at position {p})"
            seen.add(i)
    return None


def _named_problem(values: dict, max_features: int) -> tuple[str, str] | None:
    n = len(values)
    if n > max_features:
        return OVERSIZED, f"{n} named features, more than the limit of {max_features}"
    if n and not math.isfinite(sum(values.values())):
        for name, v in values.items():
            if not math.isfinite(v):
                return NON_FINITE_FEATURE, f"non-finite value {v!r} for feature {name!r}"
    return None


def _dense_problem(values, max_features: int, max_index: int) -> tuple[str, str] | None:
    n = len(values)
    if n > max_features:
        return OVERSIZED, f"{n} dense feature values, more than the limit of {max_features}"
    if n > max_index:
        return INDEX_OUT_OF_RANGE, f"{n} dense feature values, more than the index limit of {max_index}"
    if n and not math.isfinite(sum(values)):
        p = _first_non_finite(values)
        if p >= 0:
            return NON_FINITE_FEATURE, f"non-finite value {values[p]!r} for feature index {p}"
    return None


def check_label_and_weight(record: dict, loss: str, n_classes: int | None = None) -> tuple[str, str] | None:
    """The weight and label checks of an event, also those of a ``scinol.Label``
    record (whose label is never null: a NaN label there is ``bad_label``)."""
    weight = record.get("weight")
    if weight is not None:
        if not math.isfinite(weight):
            return NON_FINITE_WEIGHT, f"weight is {weight!r}, not a finite number"
        if weight <= 0:
            return BAD_WEIGHT, f"weight is {weight!r}; weights must be > 0"

    y = record.get("label")
    if y is not None and y == y and not _label_ok_fast(loss, n_classes or 1, y):
        try:
            prepare_labels(loss, [y], n_classes or 1)
        except LabelError as exc:
            return BAD_LABEL, f"label {exc.detail}"
    return None
