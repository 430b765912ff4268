"""The learner contract's cases, learners, data and slow reference scores,
shared by the contract suite and the tests of weights and the mixture."""

import numpy as np

from learners import make_learner
from learners.algorithms import SPECS
from learners.registry import learner_names
from tests.reference import make_reference
from tests.support.gen import features, labels

NAMES = learner_names()
INVARIANT = {"scinol1", "scinol2", "kotlowski1", "kotlowski2", "nag", "scinol-mix"}
"""The learners whose predictions do not change when features are rescaled."""
SOFTMAX = {"scinol1", "scinol2", "ogd", "ogd-global", "kt", "kt-avg", "kt-coord", "sgd", "adagrad", "adam", "nag",
           "aprox", "kotlowski1", "scinol-mix"}
"""The learners defined for the softmax loss."""
PARAMS = {"scinol1": {"eps": 0.5}, "scinol2": {"eps": 0.5}, "ogd": {"radius": 10.0}, "ogd-global": {"scale": 0.5},
          "kt": {"wealth": 0.5}, "kt-avg": {"wealth": 2.0}, "kt-coord": {"wealth": 0.5}, "kotlowski1": {"alpha": 2.5},
          "kotlowski2": {"alpha": 2.5}, "implicit": {"lr": 0.2}, "pa1": {"C": 0.5}, "pa2": {"C": 2.0},
          "aprox": {"lr": 0.5}, "sgd": {"lr": 0.3}, "adagrad": {"lr": 0.3}, "adam": {"lr": 0.01}, "nag": {"lr": 0.3},
          "scinol-mix": {"eps": 0.5, "alpha": 2.0, "wealth": 2.0}}
"""Non-default parameters, so a saved learner must carry its own."""


def loss_for(name):
    spec = SPECS.get(name)
    return spec.losses[0] if spec is not None and spec.losses else "logistic"


def cases(names=NAMES, softmax=True):
    """(name, loss) pairs: each learner's first loss, and softmax where it has one."""
    out = [(n, loss_for(n)) for n in names]
    return out + [(n, "softmax") for n in names if softmax and n in SOFTMAX]


def model(name, loss, **kw):
    return make_learner(name, loss, n_classes=3 if loss == "softmax" else None, **kw)


def data(seed, loss, n=250, d=8, log10_scale=(-3.0, 3.0)):
    rng = np.random.default_rng(seed)
    X = features(rng, n, d, log10_scale=log10_scale)
    return rng, X, labels(rng, X, loss)


def reference_scores(name, X, y, loss):
    K = 3 if loss == "softmax" else 1
    ref = make_reference(name, X.shape[1] + 1, loss, K)
    rows = [ref.step([1.0] + x.tolist(), float(label)) for x, label in zip(X, y)]
    shape = (len(rows), K)
    return (np.array([r[0] for r in rows], dtype=float).reshape(shape),
            np.array([r[1] for r in rows], dtype=float).reshape(shape))
