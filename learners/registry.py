"""Algorithms by name: ``make_algorithm("scinol2", **params)``, the list of
names and their descriptions. (The model around an algorithm and a loss is
:func:`learners.model.make_learner`.)"""

from __future__ import annotations

from .algorithms import SPECS, Algorithm

FULL_MATRIX = ("kotlowski2",)
"""Learners that are not coordinate-separable: classes of their own
(:mod:`learners.fullmatrix`), not entries of SPECS."""

MIXTURES = ("scinol-mix",)
"""Learners that run several SPECS side by side (:mod:`learners.mixture`)."""


def learner_names() -> list[str]:
    """Every learner :func:`make_algorithm` knows."""
    return [*SPECS, *FULL_MATRIX, *MIXTURES]


def make_algorithm(name: str, **params):
    if name == "kotlowski2":
        from .fullmatrix import Kotlowski2

        return Kotlowski2(**params)
    if name == "scinol-mix":
        from .mixture_learner import Mixture

        return Mixture(**params)
    try:
        spec = SPECS[name]
    except KeyError:
        raise ValueError(f"unknown learner {name!r}; choose one of {', '.join(learner_names())}") from None
    return Algorithm(spec, **params)


def describe_learners() -> list[dict]:
    """Name, default parameters, flags and a one-line summary of each learner."""
    out = []
    for name in learner_names():
        algo = make_algorithm(name)
        out.append({"name": name, "params": dict(algo.params), "parameter_free": algo.parameter_free,
                    "scale_invariant": algo.scale_invariant, "shardable": algo.shardable,
                    "summary": algo.summary})
    return out

