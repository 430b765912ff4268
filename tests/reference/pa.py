"""Slow, literal per-example references for Orabona 2020: implicit OGD, PA, aProx.

Written from the definitions, not from the kernels (learners/math_pa.py):

- implicit OGD (Orabona 2020, eq. (2)): w' = argmin_v ½(x·v - y)² + ‖v - w‖²/(2η),
  computed by solving its normal equations (I/η + x xᵀ) w' = w/η + y x with
  numpy.linalg.solve — an independent check of the closed form in eq. (3);
- PA, PA-I, PA-II (Crammer et al. 2006): τ = ℓ/‖x‖², min(C, ℓ/‖x‖²),
  ℓ/(‖x‖² + 1/(2C)); hinge: w' = w + τ y x; ε-insensitive:
  w' = w + τ sgn(y - ŷ) x;
- aProx (Orabona 2020, §3): w' = argmin_v max(ℓ + ⟨G, v - w⟩, ℓ_low) + ‖v - w‖²/(2η_t)
  with G the gradient of ℓ in w (g_k x per output k) and η_t = lr / t^power,
  found by bisection on the one-dimensional problem along -G (not the
  post's closed form).

Importance weight h > 0 (the factor on the example's loss), from the same
definitions: implicit OGD minimises h·½(x·v - y)² + ‖v - w‖²/(2η); PA-I and
PA-II price the slack at hC (Crammer et al. 2006 with C → hC); PA's hard
constraint ℓ(v) = 0 is the same under any h > 0; aProx minimises
h·max(ℓ + ⟨G, v - w⟩, ℓ_low) + ‖v - w‖²/(2η_t). The importance-aware
implicit update (Karampatziakis & Langford 2011, §4, squared loss) is
written from their closed form for the scaling factor,
s(h) = (ŷ - y)(1 - exp(-hη‖x‖²))/‖x‖², w' = w - s(h) x. h = 0 changes
nothing.

Every coordinate of a dense row is visited (zeros included); the bias is an
explicit leading 1 in x. Plain Python floats except for the linear solve.
Each reference also keeps, per weight, Σ_t |Δw| (``wscale``): a weight is
only as exact as the sum of the magnitudes of the steps that built it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from tests.reference.scinol import loss_grad as _loss_grad_other


def sgn(v: float) -> float:
    v = float(v)
    return float((v > 0) - (v < 0))


def loss_grad(loss: str, y: float, yhat: list[float], eps: float = 0.1) -> tuple[float, list[float]]:
    """(ℓ, dℓ/dŷ) straight from the definitions (learners/losses.py conventions)."""
    if loss == "hinge":
        (s,) = yhat
        return max(0.0, 1.0 - y * s), [-y if y * s <= 1.0 else 0.0]
    if loss == "epsilon_insensitive":
        (s,) = yhat
        value = max(0.0, abs(s - y) - eps)
        return value, [sgn(s - y) if value > 0.0 else 0.0]
    if loss == "squared":
        (s,) = yhat
        return 0.5 * (s - y) ** 2, [s - y]
    return _loss_grad_other(loss, y, yhat)


class _Linear:
    """K-output linear model over d coordinates, w[j][k]."""

    def __init__(self, d: int, n_outputs: int = 1):
        self.K = n_outputs
        self.w = [[0.0] * n_outputs for _ in range(d)]
        self.wscale = [[0.0] * n_outputs for _ in range(d)]
        self.t = 0

    def _predict(self, x):
        d = len(x)
        yhat = [sum(x[j] * self.w[j][k] for j in range(d)) for k in range(self.K)]
        scale = [sum(abs(x[j] * self.w[j][k]) for j in range(d)) for k in range(self.K)]
        return yhat, scale

    def _move(self, new_w):
        for j, row in enumerate(new_w):
            for k, v in enumerate(row):
                self.wscale[j][k] += abs(v - self.w[j][k])
                self.w[j][k] = v

    def step(self, x: list[float], y: float, weight: float = 1.0):
        """Predict, then (unless y is NaN or weight 0) learn from weight · ℓ.
        Returns (ŷ, Σ_j |x_j w_j|, ℓ)."""
        yhat, scale = self._predict(x)
        if math.isnan(y):
            return yhat, scale, math.nan
        if weight == 0.0:
            return yhat, scale, self.loss_value(y, yhat)
        self.t += 1
        value = self._learn(x, y, yhat, weight)
        return yhat, scale, value

    def weights(self) -> np.ndarray:
        return np.array(self.w)


class ReferenceImplicit(_Linear):
    """Implicit OGD on the squared loss with constant rate η = lr."""

    def __init__(self, d: int, lr: float = 0.1, importance_aware: float = 0.0):
        super().__init__(d)
        self.lr, self.aware = lr, importance_aware

    def loss_value(self, y, yhat):
        return loss_grad("squared", y, yhat)[0]

    def _learn(self, x, y, yhat, weight):
        value, (g,) = loss_grad("squared", y, yhat)
        d = len(x)
        if self.aware:
            x2 = sum(v * v for v in x)
            s = g * self.lr * weight if x2 == 0.0 else g * (1.0 - math.exp(-weight * self.lr * x2)) / x2
            self._move([[self.w[j][0] - s * x[j]] for j in range(d)])
            return value
        # h·½(x·v - y)² + ‖v - w‖²/(2η) is the unweighted problem with rate hη.
        eta = weight * self.lr
        # The argmin of ½(x·v - y)² + ‖v - w‖²/(2η): its gradient
        # x (x·v - y) + (v - w)/η vanishes, i.e. (I/η + x xᵀ) v = w/η + y x.
        A = np.eye(d) / eta + np.outer(x, x)
        b = np.array([self.w[j][0] / eta + y * x[j] for j in range(d)])
        v = np.linalg.solve(A, b)
        # A is as ill-conditioned as 1 + η‖x‖² (up to 1e9 here): refine with
        # residuals of the exact equations, computed in rational arithmetic.
        for _ in range(2):
            v = v + np.linalg.solve(A, _exact_residual(eta, x, self.w, y, v))
        self._move([[float(v[j])] for j in range(d)])
        return value


def _exact_residual(eta, x, w, y, v) -> np.ndarray:
    """w/η + y x - (I/η + x xᵀ) v, exactly, rounded once to floats."""
    F = Fraction
    inv_eta = 1 / F(eta)
    xv = sum(F(a) * F(b) for a, b in zip(x, v.tolist()))
    return np.array([float(F(w[j][0]) * inv_eta + F(y) * F(x[j]) - F(v[j]) * inv_eta - F(x[j]) * xv)
                     for j in range(len(x))])


class ReferencePA(_Linear):
    """PA ("pa"), PA-I ("pa1"), PA-II ("pa2") on hinge or ε-insensitive loss."""

    def __init__(self, variant: str, d: int, loss: str, C: float = 1.0, eps: float = 0.1):
        super().__init__(d)
        assert variant in ("pa", "pa1", "pa2") and loss in ("hinge", "epsilon_insensitive")
        self.variant, self.loss, self.C, self.eps = variant, loss, C, eps

    def tau(self, value: float, x2: float, weight: float = 1.0) -> float:
        if x2 == 0.0:  # nothing can move ŷ: stay (Crammer et al. assume x ≠ 0)
            return 0.0
        C = weight * self.C  # the slack's price, for h times the loss
        if self.variant == "pa":
            return value / x2
        if self.variant == "pa1":
            return min(C, value / x2)
        return value / (x2 + 1.0 / (2.0 * C))

    def loss_value(self, y, yhat):
        (s,) = yhat
        return max(0.0, 1.0 - y * s) if self.loss == "hinge" else max(0.0, abs(y - s) - self.eps)

    def _learn(self, x, y, yhat, weight):
        (s,) = yhat
        if self.loss == "hinge":
            value = max(0.0, 1.0 - y * s)
            direction = y
        else:
            value = max(0.0, abs(y - s) - self.eps)
            direction = sgn(y - s)
        tau = self.tau(value, sum(v * v for v in x), weight)
        self._move([[self.w[j][0] + tau * direction * x[j]] for j in range(len(x))])
        return value


class ReferenceAProx(_Linear):
    """aProx: the implicit (proximal) step on the truncated linear model."""

    def __init__(self, d: int, loss: str, n_outputs: int = 1, lr: float = 1.0, power: float = 0.5,
                 loss_low: float = 0.0, eps: float = 0.1):
        super().__init__(d, n_outputs)
        self.loss, self.lr, self.power, self.loss_low, self.eps = loss, lr, power, loss_low, eps

    def loss_value(self, y, yhat):
        return loss_grad(self.loss, y, yhat, self.eps)[0]

    def _learn(self, x, y, yhat, weight):
        value, g = loss_grad(self.loss, y, yhat, self.eps)
        eta = self.lr / self.t ** self.power
        d = len(x)
        G = [[g[k] * x[j] for k in range(self.K)] for j in range(d)]  # ∇_w ℓ
        G2 = sum(G[j][k] ** 2 for j in range(d) for k in range(self.K))
        s = truncated_prox_step(value, G2, self.loss_low, eta, weight)
        self._move([[self.w[j][k] - s * G[j][k] for k in range(self.K)] for j in range(d)])
        return value


def truncated_prox_step(value: float, G2: float, low: float, eta: float, weight: float = 1.0) -> float:
    """The s ≥ 0 with v = w - s G minimising h·max(ℓ + ⟨G, v - w⟩, ℓ_low) + ‖v - w‖²/(2η)
    (h = ``weight``).

    Only the component of v - w along G changes the model, so the minimiser
    is w - s G; s < 0 raises both terms, so s ≥ 0, and on s ≥ 0 the objective
    is φ(s) = h max(ℓ - s‖G‖², ℓ_low) + s²‖G‖²/(2η): convex, with right
    derivative ‖G‖² (s/η - h[ℓ - s‖G‖² > ℓ_low]), which is ≥ 0 at s = hη. The
    minimiser is the least s where it is ≥ 0; found by bisection.
    """
    if G2 == 0.0:
        return 0.0  # the model is constant: nothing to gain by moving

    def rising(s):  # φ'_+(s) ≥ 0, written without dividing
        return s >= (weight * eta if value - s * G2 > low else 0.0)

    lo, hi = 0.0, weight * eta
    if rising(lo):
        return 0.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return hi
        if rising(mid):
            hi = mid
        else:
            lo = mid


def run(ref: _Linear, X: np.ndarray, y: np.ndarray, bias: bool = True):
    """Feed dense rows (with a leading 1 when ``bias``): (scores, scales, losses)."""
    scores, scales, losses = [], [], []
    for row, label in zip(X, y):
        x = ([1.0] if bias else []) + [float(v) for v in row]
        yhat, scale, value = ref.step(x, float(label))
        scores.append(yhat)
        scales.append(scale)
        losses.append(value)
    return np.array(scores), np.array(scales), np.array(losses)
