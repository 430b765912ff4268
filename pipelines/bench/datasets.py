"""The real data sets of the accuracy benchmark that need no download.

scikit-learn bundles breast cancer, wine, iris and digits; River (if
installed) bundles Phishing, Bananas, Image Segments and an anomaly-detection
cut of Shuttle. Features are used raw, unnormalised: that is the point of a
scale-invariant learner, and every tool gets the same numbers. Labels are
class indices 0..K-1. Sets without a test set are split 2/3 train, 1/3 test
at random, once (seed 0), as the paper does (§4.2); runs differ in the order
of the training examples, not in the split.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from pipelines.bench.optional import INSTALL_HINT, have

SPLIT_SEED = 0


@dataclass
class Dataset:
    name: str
    source: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    epochs: int
    """Default passes over the training set (small sets get more)."""
    split: str

    @property
    def n_features(self) -> int:
        return self.X_train.shape[1]


def class_indices(labels) -> tuple[np.ndarray, int]:
    """Any labels → 0..K-1 (sorted order: False/True → 0/1, -1/+1 → 0/1)."""
    classes, idx = np.unique(np.asarray(labels), return_inverse=True)
    return idx.astype(np.int64), len(classes)


def random_split(name, source, X, labels, epochs) -> Dataset:
    y, k = class_indices(labels)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    cut = (2 * len(y)) // 3
    tr, te = order[:cut], order[cut:]
    X = np.asarray(X, dtype=np.float64)
    return Dataset(name, source, X[tr], y[tr], X[te], y[te], k, epochs, "random 2/3 train, 1/3 test (seed 0)")


def _sklearn(loader_name: str):
    def load(name, epochs):
        import sklearn.datasets

        X, y = getattr(sklearn.datasets, loader_name)(return_X_y=True)
        return random_split(name, "scikit-learn", X, y, epochs)
    return load


def _river(class_name: str):
    def load(name, epochs):
        import river.datasets

        rows = list(getattr(river.datasets, class_name)())
        keys = sorted({k for x, _ in rows for k in x}, key=str)
        X = np.array([[float(x.get(k, 0.0) or 0.0) for k in keys] for x, _ in rows])
        return random_split(name, "River", X, [y for _, y in rows], epochs)
    return load


# name → (loader, package it needs, default epochs). More passes on the
# smallest sets, few on the 49k-row one, to fit the 15-minute budget.
BUNDLED = {
    "breast-cancer": (_sklearn("load_breast_cancer"), "sklearn", 10),
    "wine": (_sklearn("load_wine"), "sklearn", 10),
    "iris": (_sklearn("load_iris"), "sklearn", 10),
    "digits": (_sklearn("load_digits"), "sklearn", 5),
    "phishing": (_river("Phishing"), "river", 10),
    "bananas": (_river("Bananas"), "river", 5),
    "image-segments": (_river("ImageSegments"), "river", 5),
    "shuttle-anomaly": (_river("Shuttle"), "river", 2),
}


def available(names=None) -> tuple[list[str], list[str]]:
    """(names whose package is installed, messages about the others)."""
    chosen = list(BUNDLED) if names is None else list(names)
    ok, missing = [], []
    for name in chosen:
        if name not in BUNDLED:
            raise ValueError(f"unknown data set {name!r}; bundled: {', '.join(BUNDLED)}")
        package = BUNDLED[name][1]
        if not have(package):
            missing.append(f"{name}: needs the {package} package ({INSTALL_HINT}), skipped")
        else:
            ok.append(name)
    return ok, missing


@lru_cache(maxsize=None)
def load_bundled(name: str) -> Dataset:
    loader, _, epochs = BUNDLED[name]
    return loader(name, epochs)
