"""Learners by name: ``make_learner("scinol2", loss="logistic", **params)``."""

from __future__ import annotations

from .scinol import ScInOL

ALGORITHMS = {
    "scinol1": lambda **p: ScInOL(1, **p),
    "scinol2": lambda **p: ScInOL(2, **p),
}


def make_algorithm(name: str, **params):
    try:
        factory = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown learner {name!r}; choose one of {', '.join(ALGORITHMS)}") from None
    try:
        return factory(**params)
    except TypeError as exc:
        raise ValueError(f"bad parameters for learner {name!r}: {exc}") from None


def make_learner(name: str = "scinol2", loss: str = "logistic", **kwargs):
    """An :class:`~learners.model.OnlineLearner` for the named algorithm."""
    from .model import OnlineLearner

    return OnlineLearner(name, loss, **kwargs)
