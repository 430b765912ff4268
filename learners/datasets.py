"""The paper's illustrative data set (Kempka et al. 2019, §4.1).

21 features x_i ~ N(0, σ_i²) with σ_i = 2^(i-11), i = 1..21 (scales 2^-10 to
2^10); labels y ∈ {-1, +1} with P(y = +1 | x) = sigmoid(xᵀu), u_i = ±1/σ_i
with random signs, so xᵀu is of order one whatever the feature scales.
"""

from __future__ import annotations

import numpy as np

N_FEATURES = 21
SIGMA = 2.0 ** (np.arange(1, N_FEATURES + 1) - 11)


def toy_comparator(seed: int) -> np.ndarray:
    """The u that generated the labels for ``seed``."""
    rng = np.random.default_rng([seed, 0])
    return rng.choice([-1.0, 1.0], size=N_FEATURES) / SIGMA


def toy_examples(n: int, seed: int, stream: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """n examples (X, y) labelled by ``toy_comparator(seed)``; different
    ``stream`` values give independent samples (e.g. train and test)."""
    rng = np.random.default_rng([seed, stream])
    X = rng.normal(size=(n, N_FEATURES)) * SIGMA
    p = 1.0 / (1.0 + np.exp(-(X @ toy_comparator(seed))))
    y = np.where(rng.random(n) < p, 1.0, -1.0)
    return X, y


def toy_dataset(n_train: int = 5000, n_test: int = 100_000, seed: int = 0):
    """(X_train, y_train, X_test, y_test) as in the paper's experiment."""
    return (*toy_examples(n_train, seed, 1), *toy_examples(n_test, seed, 2))
