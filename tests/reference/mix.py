"""Slow, literal reference of ``scinol-mix``: the Bayes mixture of the
bases' probabilities under the log loss (Cesa-Bianchi & Lugosi, "Prediction,
Learning, and Games", §3.3 and §9.2), over the bases' own references.

Each base is the literal reference of its family, stepped as if it ran
alone (it learns from the loss at its own score); the mixture keeps the
cumulative losses L_i in plain floats and predicts
p(c) = Σ_i π_i p_i(c), π_i = exp(-L_i) / Σ_j exp(-L_j), score = ln p(+1) - ln p(-1)
(logistic) or ln p(c) (softmax). It shares no code with learners/mixture.py.
"""

from __future__ import annotations

import math

from tests.reference.ogd_kt import ReferenceKT
from tests.reference.scinol import ReferenceScInOL, loss_grad


def sigmoid(s: float) -> float:
    if s >= 0:
        return 1.0 / (1.0 + math.exp(-s))
    e = math.exp(s)
    return e / (1.0 + e)


class Kotlowski1K:
    """Kotłowski 2017, Algorithm 1 with K outputs: s², t and d are shared
    (they see x only), each output k has its own h[j][k]."""

    def __init__(self, d: int, n_outputs: int, alpha: float = 1.5):
        self.alpha, self.K = alpha, n_outputs
        self.s2 = [0.0] * d
        self.h = [[0.0] * n_outputs for _ in range(d)]
        self.t = 0

    def offline(self, t):
        """The weights at trial t for an input that does not grow s² (x → 0)."""
        return self.weights([0.0] * len(self.s2), t)

    def weights(self, x, t):
        d = max(sum(1 for s in self.s2 if s > 0.0), 1)
        w = [[0.0] * self.K for _ in x]
        for i, xi in enumerate(x):
            s2 = self.s2[i] + xi * xi
            for k in range(self.K):
                h = self.h[i][k]
                if s2 > 0.0:
                    eta = math.exp((h * h + xi * xi) / (2.0 * self.alpha * s2)) / (self.alpha * t * d)
                    w[i][k] = eta * h / s2
        return w

    def step(self, x, y, loss, weight=1.0):
        w = self.weights(x, self.t + 1)
        yhat = [sum(x[i] * w[i][k] for i in range(len(x))) for k in range(self.K)]
        scale = [sum(abs(x[i] * w[i][k]) for i in range(len(x))) for k in range(self.K)]
        if math.isnan(y):
            return yhat, scale, math.nan
        value, g = loss_grad(loss, y, yhat)
        if weight == 0.0:
            return yhat, scale, value
        self.t += 1
        for i, xi in enumerate(x):
            self.s2[i] += xi * xi
            for k in range(self.K):
                self.h[i][k] -= weight * g[k] * xi
        return yhat, scale, value


class CentredScInOL2:
    """ScInOL2 on x_j - μ_j, μ_j the importance-weighted mean of the nonzero
    x_j of the earlier rows learned from, for the coordinates whose nonzero
    values learned from have not all been equal (the others, the bias among
    them, stay uncentred; absent and zero entries stay 0). When a
    coordinate's value first differs from its first value, its ScInOL2 state
    restarts. Kept as plain lists, in the order the text defines it: predict
    and learn with the old means, then update them."""

    def __init__(self, d, n_outputs, eps, bias=True):
        self.base, self.eps = ReferenceScInOL(2, d, n_outputs, eps), eps
        self.mu, self.n, self.values = [0.0] * d, [0.0] * d, [set() for _ in range(d)]

    def centre(self, x):
        return [v - self.mu[j] if v != 0.0 and len(self.values[j]) > 1 else v for j, v in enumerate(x)]

    def step(self, x, y, loss, weight=1.0):
        out = self.base.step(self.centre(x), y, loss, weight)
        if not math.isnan(y) and weight > 0.0:
            for j, v in enumerate(x):
                if v != 0.0:
                    if len(self.values[j]) == 1 and v not in self.values[j]:  # restart, centred
                        self.base.M[j] = 0.0
                        self.base.G[j] = [0.0] * self.base.K
                        self.base.S2[j] = [0.0] * self.base.K
                        self.base.B[j] = [self.eps] * self.base.K
                    self.values[j].add(v)
                    self.n[j] += weight
                    self.mu[j] += weight / self.n[j] * (v - self.mu[j])
        return out


class ReferenceMix:
    def __init__(self, d: int, loss: str, n_outputs: int = 1, eps: float = 1.0, alpha: float = 1.5,
                 wealth: float = 1.0, kt: float = 0.0, scinol1: float = 0.0, kotlowski1: float = 0.0,
                 average: float = 0.0, center: float = 1.0, wide: float = 1.0, bias: bool = True):
        self.loss, self.K = loss, n_outputs
        self.bases = [ReferenceScInOL(2, d, n_outputs, eps), ReferenceScInOL(1, d, n_outputs, eps),
                      ReferenceKT("coord", d, n_outputs, wealth), Kotlowski1K(d, n_outputs, alpha),
                      CentredScInOL2(d, n_outputs, eps, bias), ReferenceScInOL(2, d, n_outputs, 10.0 * eps)]
        # the last is the zero predictor
        self.on = [True, scinol1 != 0.0, kt != 0.0, kotlowski1 != 0.0, center != 0.0, wide != 0.0, True]
        self.L = [0.0] * 7
        # average=1: Σ_t of each base's weights at every trial learned from
        # (offline, x → 0), kept in full; unlabelled rows use their mean.
        self.average, self.T, self.d = average != 0.0, 0, d
        self.sums = [[[0.0] * n_outputs for _ in range(d)] for _ in range(6)]

    def offline_weights(self, b, t):
        base = self.bases[b]
        if b == 4:
            base = base.base
        if b <= 1 or b >= 4:
            return base._weights([0.0] * self.d, t)[0]
        return base.current(t) if b == 2 else base.offline(t)

    def posterior(self) -> list[float]:
        best = min(L for L, on in zip(self.L, self.on) if on)
        e = [math.exp(-(L - best)) if on else 0.0 for L, on in zip(self.L, self.on)]
        return [v / sum(e) for v in e]

    def mixed_score(self, scores: list[list[float]]) -> list[float]:
        pi = self.posterior()
        if self.loss == "logistic":
            plus = sum(p * sigmoid(s[0]) for p, s in zip(pi, scores))
            minus = sum(p * sigmoid(-s[0]) for p, s in zip(pi, scores))
            return [math.log(plus) - math.log(minus)]
        mixed = [0.0] * self.K
        for p, s in zip(pi, scores):
            top = max(s)
            z = sum(math.exp(v - top) for v in s)
            for c in range(self.K):
                mixed[c] += p * math.exp(s[c] - top) / z
        return [math.log(v) for v in mixed]

    def _averaged(self, b, x):
        """Base b's score with its mean weights (0 before any learning)."""
        if b == 4:  # on the features centred by the current means
            x = self.bases[4].centre(x)
        T = max(self.T, 1)
        w = [[self.sums[b][j][k] / T for k in range(self.K)] for j in range(self.d)]
        yhat = [sum(x[j] * w[j][k] for j in range(self.d)) for k in range(self.K)]
        return yhat, [sum(abs(x[j] * w[j][k]) for j in range(self.d)) for k in range(self.K)], math.nan

    def step(self, x, y, weight=1.0):
        """(ŷ, a rounding scale, ℓ(y, ŷ)); the bases learn as they would alone."""
        learns = not math.isnan(y) and weight > 0.0
        if learns and self.average:
            self.T += 1
            for b in range(6):
                if self.on[b]:
                    w = self.offline_weights(b, self.T)
                    for j in range(self.d):
                        for k in range(self.K):
                            self.sums[b][j][k] += w[j][k]
        if math.isnan(y) and self.average:
            outs = [self._averaged(b, x) if on else ([0.0] * self.K, [0.0] * self.K, 0.0)
                    for b, on in enumerate(self.on[:6])]
        else:
            outs = [b.step(x, y, self.loss, weight) if on else ([0.0] * self.K, [0.0] * self.K, 0.0)
                    for b, on in zip(self.bases, self.on)]
        scores = [list(o[0]) for o in outs] + [[0.0] * self.K]
        yhat = self.mixed_score(scores)
        # |Δ mixed score| ≤ max_i |Δ score_i| (the mixture's logit is a
        # contraction of the bases'), plus round-off in L_i of order L.
        scale = max(max(o[1]) for o in outs) + 1.0 + max(abs(v) for v in self.L)
        if math.isnan(y):
            return yhat, [scale] * self.K, math.nan
        value, _ = loss_grad(self.loss, y, yhat)
        if weight > 0.0:
            for i, o in enumerate(outs):
                if self.on[i]:
                    self.L[i] += weight * o[2]
            self.L[6] += weight * loss_grad(self.loss, y, [0.0] * self.K)[0]
        return yhat, [scale] * self.K, value
