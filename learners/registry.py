"""Learners by name: ``make_learner("scinol2", loss="logistic", **params)``."""

from __future__ import annotations

from .algorithms import SPECS, Algorithm


def make_algorithm(name: str, **params) -> Algorithm:
    try:
        spec = SPECS[name]
    except KeyError:
        raise ValueError(f"unknown learner {name!r}; choose one of {', '.join(SPECS)}") from None
    return Algorithm(spec, **params)


def make_learner(name: str = "scinol2", loss: str = "logistic", **kwargs):
    """An :class:`~learners.model.OnlineLearner` for the named algorithm."""
    from .model import OnlineLearner

    return OnlineLearner(name, loss, **kwargs)
