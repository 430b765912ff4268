"""Slow, literal per-example references for projected OGD (Streeter & McMahan 2010) and KT
coin betting (Orabona & Pál 2016), for tests only.

Written from the papers' algorithm statements, over every coordinate of a
dense row (zeros included; the bias, when used, is an explicit column of
ones), in plain Python floats. The conventions the compiled kernels document
(learners/math_ogd.py, learners/math_kt.py) are restated here where the
seeds leave a choice:

- OGD (Streeter & McMahan 2010). Feasible set F = [-R, R]^n, so D_i = b_i - a_i = 2R and
  x_1 = 0 ∈ F. The loss f_t(w) = ℓ(y_t, ⟨x_t, w⟩) has gradient
  G_{t,j,k} = g_{t,k} x_{t,j} (g = dℓ/dŷ). Algorithm 1:
      η_{t,i} = scale · D_i / √(2 Σ_{s≤t} G_{s,i}²),  w_{t+1,i} = Π_[a_i,b_i](w_{t,i} − η_{t,i} G_{t,i}).
  Theorem 2 (one global rate):
      η_t = scale · D / √(2 Σ_{s≤t} ‖G_s‖²),  D = 2R√d,
  d the number of coordinates seen (non-zero) in the examples learned from
  so far, this one included (the paper's "diameter estimated online from the
  number of attributes seen so far"). A coordinate (or, for the global rate,
  a whole step) whose gradient sum is still 0 does not move: its step
  η · 0 is 0 whatever η is.
- KT (Orabona & Pál 2016). Loss vector ℓ_t = the gradient G_t above, clipped as a
  whole to ‖ℓ_t‖ ≤ 1 (Theorem 1's assumption). Algorithm 1, literally:
      w_t = −(1/t) (W_0 − Σ_{i<t} ⟨ℓ_i, w_i⟩) Σ_{i<t} ℓ_i
  with W_0 the initial wealth (the paper's 1). Algorithm 3's output
  w̄ = (1/T) Σ_t w_t, kept here as the list of every w_t and averaged when
  asked; the averaged learner predicts offline (unlabelled examples) with w̄
  and learns with w_t. Per-coordinate variant: coordinate (j, k) plays its
  own one-dimensional Algorithm 1 with loss clip(G_{t,j,k}, −1, 1), its own
  wealth, and t counting every trial (a coordinate absent from an example
  sees the loss 0 in that round).

Each ``step`` returns (ŷ, a magnitude per output, loss value); the
magnitude is what a rounding error in ŷ is relative to: Σ_j |x_j w_j| for
OGD, and for KT the same sum with each w_j replaced by the size of the terms
it is computed from, |θ_j| → Σ_i |ℓ_{i,j}| and Wealth → W_0 + Σ_i |⟨ℓ_i, w_i⟩|
term by term (a wealth near 0 is a cancellation, so ŷ ∝ Wealth is then only
as exact as the bets that nearly cancelled).
"""

from __future__ import annotations

import math

from tests.reference.scinol import loss_grad


def _zeros(d, K, value=0.0):
    return [[value] * K for _ in range(d)]


def _predict(x, w, K):
    yhat = [sum(x[j] * w[j][k] for j in range(len(x))) for k in range(K)]
    scale = [sum(abs(x[j] * w[j][k]) for j in range(len(x))) for k in range(K)]
    return yhat, scale


class ReferenceOGD:
    """Streeter & McMahan 2010, "Less Regret via Online Conditioning", Algorithm 1 (``global_rate=False``) or Theorem 2's global rate."""

    def __init__(self, d: int, n_outputs: int = 1, radius: float = 100.0, scale: float = 1.0,
                 global_rate: bool = False):
        self.d, self.K, self.R, self.scale, self.global_rate = d, n_outputs, radius, scale, global_rate
        self.w = _zeros(d, n_outputs)            # x_1 = 0 ∈ F
        self.sum_g2 = _zeros(d, n_outputs)       # Σ_s G_{s,i}² (Algorithm 1)
        self.total_g2 = 0.0                      # Σ_s ‖G_s‖² (Theorem 2)
        self.seen = [False] * d
        self.t = 0
        self.gradients = []                      # G_t, for regret checks
        self.played = []                         # w_t, for regret checks

    def step(self, x, y, loss, weight=1.0):
        """Importance weight h: the gradient of h ℓ, (h g_k) x_j, in every sum;
        the dimension seen and t count the example once."""
        yhat, scale = _predict(x, self.w, self.K)
        if math.isnan(y):
            return yhat, scale, math.nan
        value, g = loss_grad(loss, y, yhat)
        if weight == 0.0:
            return yhat, scale, value
        self.t += 1
        g = [weight * gk for gk in g]
        G = [[g[k] * x[j] for k in range(self.K)] for j in range(self.d)]
        self.gradients.append(G)
        self.played.append([row[:] for row in self.w])
        D_i = 2.0 * self.R
        if self.global_rate:
            for j in range(self.d):
                if x[j] != 0.0:
                    self.seen[j] = True
            D = D_i * math.sqrt(sum(self.seen))
            self.total_g2 += sum(G[j][k] ** 2 for j in range(self.d) for k in range(self.K))
        for j in range(self.d):
            for k in range(self.K):
                if self.global_rate:
                    s, diameter = self.total_g2, D
                else:
                    self.sum_g2[j][k] += G[j][k] ** 2
                    s, diameter = self.sum_g2[j][k], D_i
                if s == 0.0:  # no gradient yet: G = 0, the point does not move
                    continue
                eta = self.scale * diameter / math.sqrt(2.0 * s)
                step = self.w[j][k] - eta * G[j][k]
                self.w[j][k] = min(self.R, max(-self.R, step))  # Π onto [a_i, b_i] = [-R, R]
        return yhat, scale, value


def clip_norm(vec):
    """Scale a loss vector (list of lists) down to norm 1 if it is longer."""
    norm = math.sqrt(sum(v * v for row in vec for v in row))
    if norm > 1.0:
        return [[v / norm for v in row] for row in vec]
    return vec


class ReferenceKT:
    """Orabona & Pál 2016, "Parameter-Free Convex Learning through Coin Betting": ``variant`` "alg1" (Algorithm 1), "avg" (Algorithm 3's
    averaged iterate for offline predictions) or "coord" (per coordinate).
    ``clip=False`` feeds the raw gradients (outside Theorem 1's assumption),
    only to show what the clipping prevents."""

    def __init__(self, variant: str, d: int, n_outputs: int = 1, wealth: float = 1.0, clip: bool = True):
        self.variant, self.d, self.K, self.W0, self.clip = variant, d, n_outputs, wealth, clip
        self.t = 0
        # Algorithm 1: Σ_i ℓ_i and Σ_i ⟨ℓ_i, w_i⟩ over the rounds so far.
        self.sum_loss = _zeros(d, n_outputs)
        self.sum_inner = 0.0
        self.iterates = []                       # every w_t played (Algorithm 3 averages them)
        self.losses = []                         # every ℓ_t (clipped)
        # Per coordinate: each (j, k) its own Σ ℓ and Σ ℓ w.
        self.sum_inner_i = _zeros(d, n_outputs)
        # Magnitudes of the terms of those sums, for rounding tolerances only.
        self.abs_loss = _zeros(d, n_outputs)
        self.abs_inner = 0.0
        self.abs_inner_i = _zeros(d, n_outputs)
        self.magnitudes = []                     # the magnitude of every w_t played

    # -- the point played ------------------------------------------------------
    def wealth(self):
        return self.W0 - self.sum_inner

    def wealth_i(self):
        return [[self.W0 - self.sum_inner_i[j][k] for k in range(self.K)] for j in range(self.d)]

    def current(self, t=None):
        """w_t for the next trial t = self.t + 1 (Algorithm 1 line 2)."""
        t = self.t + 1 if t is None else t
        if self.variant == "coord":
            W = self.wealth_i()
            return [[-(1.0 / t) * W[j][k] * self.sum_loss[j][k] for k in range(self.K)] for j in range(self.d)]
        W = self.wealth()
        return [[-(1.0 / t) * W * self.sum_loss[j][k] for k in range(self.K)] for j in range(self.d)]

    def averaged(self):
        """w̄_T = (1/T) Σ_{t≤T} w_t (Algorithm 3 line 7); 0 before any trial."""
        T = len(self.iterates)
        if T == 0:
            return _zeros(self.d, self.K)
        return [[sum(w[j][k] for w in self.iterates) / T for k in range(self.K)] for j in range(self.d)]

    def offline(self):
        """The weights an unlabelled example is scored with."""
        return self.averaged() if self.variant == "avg" else self.current()

    def magnitude(self, offline=False):
        """Entrywise size of the terms the (offline) weights are computed from."""
        if offline and self.variant == "avg":
            T = len(self.magnitudes)
            if T == 0:
                return _zeros(self.d, self.K)
            return [[sum(m[j][k] for m in self.magnitudes) / T for k in range(self.K)] for j in range(self.d)]
        t = self.t + 1
        return [[(self.W0 + (self.abs_inner_i[j][k] if self.variant == "coord" else self.abs_inner))
                 * self.abs_loss[j][k] / t for k in range(self.K)] for j in range(self.d)]

    # -- one example -------------------------------------------------------------
    def step(self, x, y, loss, weight=1.0):
        """Importance weight h: the loss vector is the gradient of h ℓ,
        (h g_k) x_j, clipped like any other (so h > 1 buys at most ‖ℓ_t‖ = 1)."""
        if math.isnan(y):
            yhat, _ = _predict(x, self.offline(), self.K)
            return yhat, _predict([abs(v) for v in x], self.magnitude(offline=True), self.K)[0], math.nan
        w = self.current()
        mag = self.magnitude()
        yhat, _ = _predict(x, w, self.K)
        scale, _ = _predict([abs(v) for v in x], mag, self.K)
        value, g = loss_grad(loss, y, yhat)
        if weight == 0.0:
            return yhat, scale, value
        self.t += 1
        g = [weight * gk for gk in g]
        G = [[g[k] * x[j] for k in range(self.K)] for j in range(self.d)]
        if self.variant == "coord":
            ell = [[min(1.0, max(-1.0, G[j][k])) if self.clip else G[j][k] for k in range(self.K)]
                   for j in range(self.d)]
            for j in range(self.d):
                for k in range(self.K):
                    self.sum_inner_i[j][k] += ell[j][k] * w[j][k]
                    self.abs_inner_i[j][k] += abs(ell[j][k]) * mag[j][k]
        else:
            ell = clip_norm(G) if self.clip else G
            self.sum_inner += sum(ell[j][k] * w[j][k] for j in range(self.d) for k in range(self.K))
            self.abs_inner += sum(abs(ell[j][k]) * mag[j][k] for j in range(self.d) for k in range(self.K))
        for j in range(self.d):
            for k in range(self.K):
                self.sum_loss[j][k] += ell[j][k]
                self.abs_loss[j][k] += abs(ell[j][k])
        self.iterates.append(w)
        self.magnitudes.append(mag)
        self.losses.append(ell)
        return yhat, scale, value
