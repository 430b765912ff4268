"""Comparing a compiled learner with a slow reference, shared by the tests."""

from __future__ import annotations

import numpy as np


def run_reference(ref, X, y, loss, bias=True):
    """Feed rows to a reference's ``step(x, y, loss) -> (ŷ, Σ|x_j w_j|, ℓ)``
    (the bias as an explicit leading 1); returns (scores, scales)."""
    scores, scales = [], []
    for row, label in zip(X, y):
        yhat, scale, _ = ref.step(([1.0] if bias else []) + row.tolist(), float(label), loss)
        scores.append(yhat)
        scales.append(scale)
    return np.array(scores), np.array(scales)


def assert_scores_match(got, want, scale, rtol=1e-12):
    """|ŷ - ŷ_ref| within rtol of Σ_j |x_j w_j|: a dot product is only as
    exact as the magnitude of its terms."""
    got = np.asarray(got).reshape(want.shape)
    err = np.abs(got - want)
    bound = rtol * np.asarray(scale).reshape(want.shape) + 1e-300
    worst = np.unravel_index(np.argmax(err / bound), err.shape)
    assert np.all(err <= bound), f"row {worst[0]}: kernel {got[worst]!r} vs reference {want[worst]!r}"
