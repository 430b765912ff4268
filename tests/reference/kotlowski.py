"""Slow, literal per-example implementations of Kotłowski (2017), Kotłowski 2017.

Algorithm 1 (coordinate-wise) is written in plain Python floats over every
coordinate of a dense row, zeros included, with the bias as an explicit
column of ones; Algorithm 2 (full matrix) keeps S itself and recomputes S⁺
with ``numpy.linalg.pinv`` at every step. Neither shares code with the
compiled kernels (learners/math_kotlowski.py, learners/fullmatrix.py), so
agreement checks the kernels against the paper.

An unlabelled example (y NaN) is predicted as the paper would predict it
(after the "receive x" updates) but changes nothing.
"""

from __future__ import annotations

import math

import numpy as np

from tests.reference.scinol import loss_grad

ALPHA0 = 9.0 / 8.0


def gamma_of(alpha: float) -> float:
    """γ(α) = exp(1 / (2(α - α₀))) of Lemma 3."""
    return math.exp(1.0 / (2.0 * (alpha - ALPHA0)))


def psi1(t: int, d: float, h: float, s2: float, alpha: float) -> float:
    """Lemma 3's potential ψ_t(h, s) = (t d)⁻¹ exp(h² / (2α s²)) for s > 0, else 0."""
    if s2 <= 0.0:
        return 0.0
    return math.exp(h * h / (2.0 * alpha * s2)) / (t * d)


class ReferenceKotlowski1:
    """Algorithm 1 over d coordinates. ``dim`` > 0 is the paper's fixed d;
    ``dim`` = 0 uses the number of coordinates seen (s² > 0) before the
    example, at least 1 (the learner's ``dim=0`` convention)."""

    def __init__(self, d: int, alpha: float = 1.5, dim: float = 0.0):
        self.alpha, self.dim = alpha, dim
        self.s2 = [0.0] * d
        self.h = [0.0] * d
        self.t = 0

    def d_for_trial(self) -> float:
        if self.dim > 0:
            return self.dim
        return max(sum(1 for s in self.s2 if s > 0.0), 1)

    def weights(self, x: list[float]):
        """(w_t, s²_t) for input x at trial t = self.t + 1 (paper, eq. 5)."""
        t = self.t + 1
        d = self.d_for_trial()
        a = self.alpha
        w, s2_new = [], []
        for i, xi in enumerate(x):
            s2 = self.s2[i] + xi * xi  # s_i² ← s_i² + x_{t,i}²
            if s2 > 0.0:
                eta = math.exp((self.h[i] ** 2 + xi * xi) / (2.0 * a * s2)) / (a * t * d)
                w.append(eta * self.h[i] / s2)
            else:
                w.append(0.0)
            s2_new.append(s2)
        return w, s2_new

    def step(self, x: list[float], y: float, loss: str, weight: float = 1.0):
        """Predict, then (if y is not NaN and weight > 0) learn from weight · ℓ:
        h ← h - (weight g) x; s² and t count the example once.
        Returns (ŷ, Σ|x_i w_i|, ℓ, g, w)."""
        x, y = [float(v) for v in x], float(y)
        w, s2_new = self.weights(x)
        yhat = sum(xi * wi for xi, wi in zip(x, w))
        scale = sum(abs(xi * wi) for xi, wi in zip(x, w))
        if math.isnan(y):
            return yhat, scale, math.nan, math.nan, w
        value, (g,) = loss_grad(loss, y, [yhat])
        if weight == 0.0:
            return yhat, scale, value, g, w
        g = weight * g
        self.t += 1
        self.s2 = s2_new
        for i, xi in enumerate(x):
            self.h[i] -= g * xi
        return yhat, scale, value, g, w


class ReferenceKotlowski2:
    """Algorithm 2 over d coordinates, S⁺ = pinv(S) recomputed each step.

    ``rtol`` is pinv's cut-off for singular values relative to the largest;
    test data keep S's genuine eigenvalues far above it and its exact zeros
    (repeated or colinear inputs) far below it."""

    def __init__(self, d: int, alpha: float = 1.5, rtol: float = 1e-10):
        self.alpha, self.rtol = alpha, rtol
        self.S = np.zeros((d, d))
        self.h = np.zeros(d)
        self.gamma = 0.0
        self.t = 0

    def pinv(self, S: np.ndarray) -> np.ndarray:
        return np.linalg.pinv(S, rtol=self.rtol, hermitian=True)

    def eta(self, hSh: float) -> float:
        """η = exp((hᵀS⁺h - γ) / (2α)) / α."""
        return math.exp((hSh - self.gamma) / (2.0 * self.alpha)) / self.alpha

    def step(self, x, y: float, loss: str, weight: float = 1.0):
        """Predict, then (if y is not NaN and weight > 0) learn from weight · ℓ:
        h and γ see weight · g, S counts x xᵀ once. Returns (ŷ, Σ|x_j w_j|, ℓ, g)."""
        x, y = np.asarray(x, dtype=np.float64), float(y)
        S = self.S + np.outer(x, x)  # S ← S + x xᵀ
        Sp = self.pinv(S)
        w = self.eta(float(self.h @ Sp @ self.h)) * (Sp @ self.h)
        yhat = float(w @ x)
        scale = float(np.abs(w * x).sum())
        if math.isnan(y):
            return yhat, scale, math.nan, math.nan
        value, (g,) = loss_grad(loss, y, [yhat])
        if weight == 0.0:
            return yhat, scale, value, g
        g = weight * g
        self.S = S
        self.h = self.h - g * x
        self.gamma += g * g * float(x @ Sp @ x)
        self.t += 1
        return yhat, scale, value, g

    def Sinv(self) -> np.ndarray:
        return self.pinv(self.S)


class ReferenceKotlowski1Softmax(ReferenceKotlowski1):
    """Algorithm 1 for K outputs (the softmax loss): each (coordinate i,
    class k) weight is run as the paper runs coordinate i, with its own
    h_{i,k} and g_k = ∂ℓ/∂ŷ_k; s_i² (the input scale), t and d are the
    coordinate's and the trial's, shared by the classes."""

    def __init__(self, d: int, n_outputs: int, alpha: float = 1.5, dim: float = 0.0):
        super().__init__(d, alpha, dim)
        self.K = n_outputs
        self.hk = [[0.0] * n_outputs for _ in range(d)]

    def step(self, x: list[float], y: float, loss: str = "softmax", weight: float = 1.0):
        """Returns (ŷ, Σ_i |x_i w_{i,k}| per class, ℓ)."""
        t, d, a = self.t + 1, self.d_for_trial(), self.alpha
        w = [[0.0] * self.K for _ in x]
        s2_new = [s + xi * xi for s, xi in zip(self.s2, x)]
        for i, xi in enumerate(x):
            if s2_new[i] > 0.0:
                for k in range(self.K):
                    h = self.hk[i][k]
                    w[i][k] = math.exp((h * h + xi * xi) / (2.0 * a * s2_new[i])) / (a * t * d) * h / s2_new[i]
        yhat = [sum(xi * w[i][k] for i, xi in enumerate(x)) for k in range(self.K)]
        scale = [sum(abs(xi * w[i][k]) for i, xi in enumerate(x)) for k in range(self.K)]
        value, g = loss_grad(loss, y, yhat)
        self.t += 1
        self.s2 = s2_new
        for i, xi in enumerate(x):
            for k in range(self.K):
                self.hk[i][k] -= weight * g[k] * xi
        return yhat, scale, value
