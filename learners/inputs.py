"""Turning user inputs into what the kernels take, with clear errors.

Accepted batch inputs:
- dense: a 2-D array-like (n, d) of numbers (1-D is one row);
- sparse CSR: any object with ``indptr``, ``indices``, ``data`` (a SciPy CSR
  matrix, :class:`CSRBatch`), or a tuple ``(indptr, indices, data)``;
- a list of dicts ``{feature: value}``; string names are hashed (see
  :mod:`learners.hashing`), integer keys are coordinates.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .hashing import FeatureHasher
from .jit import njit


class CSRBatch(NamedTuple):
    indptr: np.ndarray  # int64, n + 1
    indices: np.ndarray  # int64
    data: np.ndarray  # float64

    @property
    def n_rows(self) -> int:
        return self.indptr.shape[0] - 1

    def max_index(self) -> int:
        return int(self.indices.max()) if self.indices.size else -1


def _check_finite(values: np.ndarray, where) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        first = int(np.flatnonzero(bad.reshape(-1))[0])
        raise ValueError(f"non-finite feature value {float(values.reshape(-1)[first])!r} at {where(first)}")


_NEGATIVE, _NON_FINITE, _DUPLICATE = 1, 2, 3


@njit(cache=True)
def _first_bad_entry(indptr, indices, data, look_for_repeats):
    """(kind, position) of the first negative index, non-finite value or
    (if ``look_for_repeats``) repeated index within a row; (0, -1) when the
    batch is clean. One pass, sorting an unsorted row's indices in a small
    buffer."""
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    buf = np.empty(longest, dtype=np.int64)
    for i in range(indptr.shape[0] - 1):
        lo, hi = indptr[i], indptr[i + 1]
        for p in range(lo, hi):
            if indices[p] < 0:
                return _NEGATIVE, p
            if not np.isfinite(data[p]):
                return _NON_FINITE, p
        if not look_for_repeats:
            continue
        ascending = True  # the common case (sorted rows) needs no sort to rule out repeats
        for p in range(lo + 1, hi):
            if indices[p] <= indices[p - 1]:
                ascending = False
                break
        if not ascending:
            row = buf[: hi - lo]
            row[:] = indices[lo:hi]
            row.sort()
            for q in range(1, hi - lo):
                if row[q] == row[q - 1]:
                    for p in range(lo, hi):  # report the entry's position in the batch
                        if indices[p] == row[q]:
                            return _DUPLICATE, p
    return 0, -1


def dense_batch(X) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim == 1:
        X = X.reshape(1, -1)
    if X.ndim != 2:
        raise ValueError(f"dense input must be 2-D (rows, features), got shape {X.shape}")
    X = np.ascontiguousarray(X)
    d = X.shape[1]
    _check_finite(X, lambda p: f"row {p // d}, column {p % d}")
    return X


def csr_batch(indptr, indices, data, *, distinct: bool = False) -> CSRBatch:
    """The rows checked: ``indptr`` sane, no negative index, no non-finite
    value, no index twice in a row. ``distinct``: the caller has already
    merged each row's repeats (as the crosses do), so they are not looked
    for again; hashed rows are unsorted, and that look sorts each one."""
    indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    indices_in = np.asarray(indices)
    if indices_in.size and not np.issubdtype(indices_in.dtype, np.integer):
        raise ValueError(f"sparse indices must be integers, got dtype {indices_in.dtype}")
    indices = np.ascontiguousarray(indices_in, dtype=np.int64)
    data = np.ascontiguousarray(data, dtype=np.float64)
    if indptr.ndim != 1 or indptr.size == 0 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise ValueError("sparse indptr must start at 0 and never decrease")
    if indices.shape != data.shape or indptr[-1] != indices.shape[0]:
        raise ValueError(
            f"sparse batch has {indices.shape[0]} indices, {data.shape[0]} values and indptr ending at {indptr[-1]}; they must agree"
        )
    kind, p = _first_bad_entry(indptr, indices, data, not distinct)
    if kind:
        row = int(np.searchsorted(indptr, p, side="right") - 1)
        if kind == _NEGATIVE:
            raise ValueError(f"negative feature index {indices[p]} in row {row}")
        if kind == _NON_FINITE:
            raise ValueError(f"non-finite feature value {float(data[p])!r} at row {row}, feature index {indices[p]}")
        # A duplicate would be applied twice by the kernels, so it is an error, not a sum.
        raise ValueError(f"duplicate feature index {indices[p]} in row {row}")
    return CSRBatch(indptr, indices, data)


def dicts_batch(rows, hasher: FeatureHasher) -> CSRBatch:
    indptr = [0]
    indices: list[int] = []
    data: list[float] = []
    for r, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"row {r} is a {type(row).__name__}, expected a dict of feature -> value")
        for index, value in hasher.transform_one(row).items():
            indices.append(index)
            data.append(value)
        indptr.append(len(indices))
    return csr_batch(indptr, np.array(indices, dtype=np.int64), np.array(data, dtype=np.float64))


def as_batch(X, hasher: FeatureHasher):
    """A dense ndarray or a :class:`CSRBatch`, validated."""
    if isinstance(X, tuple) and len(X) == 3:
        return csr_batch(*X)
    if all(hasattr(X, a) for a in ("indptr", "indices", "data")):
        return csr_batch(X.indptr, X.indices, X.data)
    if isinstance(X, dict):
        return dicts_batch([X], hasher)
    if isinstance(X, (list, tuple)) and X and isinstance(X[0], dict):
        return dicts_batch(X, hasher)
    return dense_batch(X)
