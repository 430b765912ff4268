"""Slow, literal references of every learner, written from the papers, one
module per family; :func:`make_reference` builds the one for a learner name."""

from __future__ import annotations

from . import baselines, kotlowski, mix, ogd_kt, pa, scinol

_KT_VARIANT = {"kt": "alg1", "kt-avg": "avg", "kt-coord": "coord"}


class _WithLoss:
    """A reference whose ``step(x, y, loss)`` takes the loss, bound to one."""

    def __init__(self, ref, loss: str):
        self.ref, self.loss = ref, loss

    def step(self, x, y, weight=1.0):
        return self.ref.step(x, y, self.loss, weight)[:3]


def make_reference(name: str, d: int, loss: str, n_outputs: int = 1, **params):
    """The reference of learner ``name`` over ``d`` coordinates (the bias
    included); ``step(x, y, weight=1.0) -> (ŷ, Σ_j |x_j w_j|, ℓ)``, ŷ a list
    per output or a number for the single-output-only references. ``weight``
    is the example's importance weight h ≥ 0, the factor on its loss: each
    reference learns from h·ℓ as its family's docstring says, and h = 0
    changes nothing (not even t)."""
    if name in ("scinol1", "scinol2"):
        return _WithLoss(scinol.ReferenceScInOL(int(name[-1]), d, n_outputs, **params), loss)
    if name in ("ogd", "ogd-global"):
        return _WithLoss(ogd_kt.ReferenceOGD(d, n_outputs, global_rate=name == "ogd-global", **params), loss)
    if name in _KT_VARIANT:
        return _WithLoss(ogd_kt.ReferenceKT(_KT_VARIANT[name], d, n_outputs, **params), loss)
    if name == "kotlowski1":
        return _WithLoss(kotlowski.ReferenceKotlowski1(d, **params), loss)
    if name == "kotlowski2":
        return _WithLoss(kotlowski.ReferenceKotlowski2(d, **params), loss)
    if name in baselines.REFERENCES:
        return _WithLoss(baselines.REFERENCES[name](d, n_outputs, **params), loss)
    if name == "implicit":
        return pa.ReferenceImplicit(d, **params)
    if name in ("pa", "pa1", "pa2"):
        return pa.ReferencePA(name, d, loss, **params)
    if name == "scinol-mix":
        return mix.ReferenceMix(d, loss, n_outputs, **params)
    if name == "aprox":
        return pa.ReferenceAProx(d, loss, n_outputs, **params)
    raise KeyError(f"no slow reference for learner {name!r}")
