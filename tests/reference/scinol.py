"""Slow, literal per-example implementations, for tests only.

Written straight from Kempka et al. 2019 (Algorithms 1 and 2) and docs/architecture.md, over
every coordinate of a dense row (zeros included) with the paper's conventions
0/0 = 0 and c/0 = ∞, in plain Python floats. They share no code with the
compiled kernels, so agreement checks the kernels (and their skipping of
zero entries) against the paper.
"""

from __future__ import annotations

import math


def div(a: float, b: float) -> float:
    """a / b with 0/0 = 0 and c/0 = ±∞."""
    if b == 0.0:
        return 0.0 if a == 0.0 else math.copysign(math.inf, a)
    return a / b


def sgn(v: float) -> float:
    return (v > 0) - (v < 0)


def loss_grad(loss: str, y: float, yhat: list[float]) -> tuple[float, list[float]]:
    if loss == "softmax":
        top = max(yhat)
        exps = [math.exp(v - top) for v in yhat]
        z = sum(exps)
        g = [e / z for e in exps]
        g[int(y)] -= 1.0
        return math.log(z) + top - yhat[int(y)], g
    (s,) = yhat
    if loss == "logistic":
        m = y * s
        value = math.log1p(math.exp(-m)) if m > -700 else -m
        grad = -y / (1.0 + math.exp(m)) if m < 700 else 0.0
        return value, [grad]
    if loss == "hinge":
        return max(0.0, 1.0 - y * s), [-y if y * s <= 1.0 else 0.0]
    if loss == "absolute":
        return abs(s - y), [float(sgn(s - y))]
    if loss == "squared":
        return 0.5 * (s - y) ** 2, [s - y]
    raise ValueError(loss)


class ReferenceScInOL:
    """ScInOL1 (variant 1) or ScInOL2 (variant 2) over d coordinates, K outputs."""

    def __init__(self, variant: int, d: int, n_outputs: int = 1, eps: float = 1.0):
        self.variant, self.eps, self.K = variant, eps, n_outputs
        self.M = [0.0] * d
        self.G = [[0.0] * n_outputs for _ in range(d)]
        self.S2 = [[0.0] * n_outputs for _ in range(d)]
        self.B = [[eps] * n_outputs for _ in range(d)]  # β (ScInOL1) or η (ScInOL2)
        self.t = 0

    def _weights(self, x: list[float], t: int):
        """(w, M_t, β_t) at trial t for input x, without changing the state."""
        d = len(x)
        Mt = [max(self.M[j], abs(x[j])) for j in range(d)]
        beta = [row[:] for row in self.B]
        w = [[0.0] * self.K for _ in range(d)]
        for j in range(d):
            for k in range(self.K):
                sq = self.S2[j][k] + Mt[j] ** 2
                root = math.sqrt(sq)
                theta = div(self.G[j][k], root)
                if self.variant == 1:
                    if x[j] != 0.0:  # docs/architecture.md: skip where x = 0
                        beta[j][k] = min(self.B[j][k], self.eps * div(sq, x[j] ** 2) / t)
                    w[j][k] = div(beta[j][k] * sgn(theta) * math.expm1(abs(theta) / 2), 2 * root)
                else:
                    w[j][k] = div(sgn(theta) * min(abs(theta), 1.0) * self.B[j][k], 2 * root)
        return w, Mt, beta

    def step(self, x: list[float], y: float, loss: str, weight: float = 1.0):
        """Predict, then (if y is not NaN and weight > 0) learn from
        weight · ℓ: its gradient weight · g goes into G, S² and the reward
        (η), while M (the input scale) and t count the example once.
        Returns (ŷ, Σ_j |x_j w_j|, ℓ)."""
        w, Mt, beta = self._weights(x, self.t + 1)
        yhat = [sum(x[j] * w[j][k] for j in range(len(x))) for k in range(self.K)]
        scale = [sum(abs(x[j] * w[j][k]) for j in range(len(x))) for k in range(self.K)]
        if math.isnan(y):
            return yhat, scale, math.nan
        value, g = loss_grad(loss, y, yhat)
        if weight == 0.0:
            return yhat, scale, value
        self.t += 1
        g = [weight * gk for gk in g]
        self.M = Mt
        for j in range(len(x)):
            for k in range(self.K):
                gx = g[k] * x[j]
                if self.variant == 1:
                    self.B[j][k] = beta[j][k]
                else:
                    self.B[j][k] -= gx * w[j][k]
                self.G[j][k] -= gx
                self.S2[j][k] += gx * gx
        return yhat, scale, value
