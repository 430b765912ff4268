"""Random and adversarial test data."""

from __future__ import annotations

import numpy as np

BINARY = ("logistic", "hinge")
REGRESSION = ("absolute", "squared")


def features(rng, n: int, d: int, log10_scale=(-3.0, 3.0)) -> np.ndarray:
    """Columns on wildly different scales, a zero column, columns that first
    appear half-way, and ~30% zero entries."""
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(*log10_scale, size=d)
    X[rng.random((n, d)) < 0.3] = 0.0
    X[:, 1 % d] = 0.0
    X[: n // 2, 2 % d] = 0.0
    X[: 3 * n // 4, 3 % d] = 0.0
    return X


def labels(rng, X: np.ndarray, loss: str, n_classes: int = 3) -> np.ndarray:
    """Labels that depend on X in a scale-free way (through each column's sign)."""
    signs = np.sign(X)
    u = rng.normal(size=(X.shape[1], n_classes))
    z = signs @ u + rng.normal(size=(X.shape[0], n_classes))
    if loss == "softmax":
        return np.argmax(z, axis=1).astype(float)
    if loss in BINARY:
        return np.where(z[:, 0] > 0, 1.0, -1.0)
    return z[:, 0]


def to_csr(X: np.ndarray, rng=None):
    """CSR of the non-zeros of X; with rng, indices shuffled within rows."""
    rows, cols = np.nonzero(X)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=X.shape[0]))])
    cols = cols.astype(np.int64)
    if rng is not None:
        for i in range(X.shape[0]):
            lo, hi = indptr[i], indptr[i + 1]
            cols[lo:hi] = rng.permutation(cols[lo:hi])
    return indptr, cols, X[rows, cols] if rng is None else X[np.repeat(np.arange(X.shape[0]), np.diff(indptr)), cols]
