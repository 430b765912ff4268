"""ScInOL1 and ScInOL2 (Kempka, Kotłowski & Warmuth, ICML 2019; seed 000).

Parameter-free, scale-invariant: multiplying feature i by any a_i > 0
leaves every prediction unchanged. The only parameter, ε (default 1),
affects constants in the regret bound, not the units.
"""

from __future__ import annotations

import math

import numpy as np

from . import scinol_kernels as K
from .losses import loss_and_grad
from .state import LearnerState

_LOSS_NAMES = {0: "logistic", 1: "hinge", 2: "absolute", 3: "squared", 4: "softmax"}


class ScInOL:
    """One of the two ScInOL algorithms; ``variant`` is 1 or 2."""

    parameter_free = True
    scale_invariant = True
    shardable = True

    def __init__(self, variant: int, eps: float = 1.0):
        if variant not in (1, 2):
            raise ValueError(f"ScInOL variant must be 1 or 2, not {variant!r}")
        eps = float(eps)
        if not (eps > 0 and math.isfinite(eps)):
            raise ValueError(f"eps must be a positive finite number, not {eps!r}")
        self.variant = variant
        self.eps = eps
        self.name = f"scinol{variant}"
        self.params = {"eps": eps}
        self._b_name = "beta" if variant == 1 else "eta"

    def init_state(self, n_coords: int, n_outputs: int) -> LearnerState:
        z = lambda: np.zeros((n_coords, n_outputs))  # noqa: E731
        arrays = {"G": z(), "S2": z(), "M": np.zeros(n_coords), self._b_name: np.full((n_coords, n_outputs), self.eps)}
        return LearnerState(arrays, {"t": 0.0}, {self._b_name: self.eps})

    def _arrays(self, state):
        a = state.arrays
        return a["G"], a["S2"], a["M"], a[self._b_name]

    # -- fused single-shard kernels ------------------------------------------
    def learn_csr(self, state, indptr, indices, data, bias, y, loss, scores, losses):
        state.scalars["t"] = K.learn_csr(
            self.variant, self.eps, *self._arrays(state), state.scalars["t"],
            indptr, indices, data, bias, y, loss, scores, losses,
        )

    def learn_dense(self, state, X, bias, y, loss, scores, losses):
        state.scalars["t"] = K.learn_dense(
            self.variant, self.eps, *self._arrays(state), state.scalars["t"],
            X, bias, y, loss, scores, losses,
        )

    # -- the shard protocol ---------------------------------------------------
    def predict(self, state, indices, data, bias, scalars):
        n_out = state.arrays["G"].shape[1]
        yhat = np.empty(n_out)
        w = np.empty((indices.shape[0] + 1, n_out))
        K.predict_row(self.variant, self.eps, *self._arrays(state), indices, data, bias, scalars["t"] + 1.0, yhat, w)
        return yhat, w

    def combine(self, scalars, total, y, loss):
        if math.isnan(y):
            return total, math.nan, None
        scalars["t"] += 1.0
        value, g = loss_and_grad(_LOSS_NAMES[loss], y, total)
        return total, value, g

    def update(self, state, indices, data, bias, scalars, feedback, memo):
        K.update_row(self.variant, self.eps, *self._arrays(state), indices, data, bias, scalars["t"], feedback, memo)

    def weights(self, state):
        return K.current_weights(self.variant, *self._arrays(state))


def scinol1(eps: float = 1.0) -> ScInOL:
    return ScInOL(1, eps)


def scinol2(eps: float = 1.0) -> ScInOL:
    return ScInOL(2, eps)


__all__ = ["ScInOL", "scinol1", "scinol2"]
