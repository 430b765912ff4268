"""Slow, literal per-example references for the tuned baselines, for tests only.

Written from the original papers, not from the kernels, in plain Python
floats over every coordinate of a dense row (zeros included; the bias, when
wanted, is an explicit leading column of ones):

- SGD      w ← w − (η/√t) g x                                  (t = 1, 2, … counts this example)
- AdaGrad  G ← G + (g x)²;  w ← w − η g x / √G                 (Duchi, Hazan & Singer 2011,
                                                                 diagonal, δ = 0; 0/0 = 0)
- Adam     m ← β1 m + (1−β1) g x;  v ← β2 v + (1−β2) (g x)²;
           w ← w − η m̂ / (√v̂ + ε),  m̂ = m/(1−β1^t), v̂ = v/(1−β2^t)   (Kingma & Ba 2014, Alg. 1)
- NAG      Ross, Mineiro & Langford 2013, "Normalized online learning", Algorithm 1:
             for each i with |x_i| > s_i:  w_i ← w_i s_i/|x_i|;  s_i ← |x_i|
             ŷ = Σ_i w_i x_i
             N ← N + Σ_i x_i²/s_i²
             for each i:  G_i ← G_i + (∂ℓ/∂w_i)²;
                          w_i ← w_i − η √(t/N) ∂ℓ/∂w_i / (s_i √G_i)
           with ∂ℓ/∂w_i = g x_i. The rescaling is by s_i/|x_i| (first power): w_i
           is a sum of steps each proportional to 1/s_i, so this makes the past
           steps as if they had been taken with the new scale. (The squared
           factor s_i²/|x_i|² belongs to the non-adaptive NG, whose steps carry
           1/s_i².)

The "lazy" convention (learners/math_baselines.py): coordinates with x_i = 0
are not touched. For SGD, AdaGrad and NAG this changes nothing (their update
of such a coordinate is exactly zero; never-seen coordinates with s_i = 0 or
G_i = 0 meet 0/0, read as 0), so the references below run literally over
every coordinate and agreement checks the kernels' skipping of zeros. For
Adam it is a real difference: dense Adam keeps decaying m and v of absent
features, and its momentum keeps moving their weights. ``ReferenceAdam`` is
lazy by default (``lazy=False`` gives literal dense Adam); the bias
correction uses the global example count t, as sparse "lazy Adam"
implementations do.

Round-off: the references form each coordinate's gradient g x_j first, as
the formulas read. That matters for SGD on features a thousand times apart:
its steps move ŷ by up to η x², far past the loss's curvature, and that map
amplifies a one-ulp difference, e.g. (η g)·x against η·(g x), to ~1e-11
relative within 160 examples: a property of the run, not of either code.

Predictions are pure: an unlabelled example (y NaN) is predicted and
changes nothing (for NAG, its larger |x_i| does not move s_i).

Each learner is for d coordinates and K outputs (K > 1: softmax, one weight
per (coordinate, class); NAG's s_i is per coordinate, shared by the
classes). ``step`` returns (ŷ, Σ_j |x_j w_j|, loss); ``mass[j][k]`` is
Σ |every change made to w_jk| (rescaled with it, for NAG), the magnitude
that bounds the round-off in w_jk.
"""

from __future__ import annotations

import math

from tests.reference.scinol import div, loss_grad


class _Reference:
    def __init__(self, d: int, n_outputs: int = 1):
        self.d, self.K = d, n_outputs
        self.w = [[0.0] * n_outputs for _ in range(d)]
        self.mass = [[0.0] * n_outputs for _ in range(d)]
        self.t = 0

    def _weights(self, x):
        """The weights used to predict x (no state change)."""
        return [row[:] for row in self.w]

    def step(self, x: list[float], y: float, loss: str, weight: float = 1.0):
        """Importance weight h > 0: learn from the gradient of h ℓ, (h g) x;
        t and NAG's s and N count the example once. h = 0: no change."""
        assert len(x) == self.d
        w = self._weights(x)
        yhat = [sum(x[j] * w[j][k] for j in range(self.d)) for k in range(self.K)]
        scale = [sum(abs(x[j] * w[j][k]) for j in range(self.d)) for k in range(self.K)]
        if math.isnan(y):
            return yhat, scale, math.nan
        value, g = loss_grad(loss, y, yhat)
        if weight == 0.0:
            return yhat, scale, value
        self.t += 1
        g = [weight * gk for gk in g]
        self._learn(x, g, w)
        return yhat, scale, value

    def _move(self, j, k, delta):
        self.w[j][k] -= delta
        self.mass[j][k] += abs(delta)


class ReferenceSGD(_Reference):
    def __init__(self, d, n_outputs=1, lr=0.1):
        super().__init__(d, n_outputs)
        self.lr = lr

    def _learn(self, x, g, w):
        rate = self.lr / math.sqrt(self.t)
        for j in range(self.d):
            for k in range(self.K):
                self._move(j, k, rate * (g[k] * x[j]))  # η_t ∂ℓ/∂w_jk


class ReferenceAdaGrad(_Reference):
    def __init__(self, d, n_outputs=1, lr=0.1):
        super().__init__(d, n_outputs)
        self.lr = lr
        self.G = [[0.0] * n_outputs for _ in range(d)]

    def _learn(self, x, g, w):
        for j in range(self.d):
            for k in range(self.K):
                gx = g[k] * x[j]
                self.G[j][k] += gx * gx
                self._move(j, k, self.lr * div(gx, math.sqrt(self.G[j][k])))


class ReferenceAdam(_Reference):
    def __init__(self, d, n_outputs=1, lr=0.001, beta1=0.9, beta2=0.999, eps=1e-8, lazy=True):
        super().__init__(d, n_outputs)
        self.lr, self.b1, self.b2, self.eps, self.lazy = lr, beta1, beta2, eps, lazy
        self.m = [[0.0] * n_outputs for _ in range(d)]
        self.v = [[0.0] * n_outputs for _ in range(d)]
        self.m_mass = [[0.0] * n_outputs for _ in range(d)]  # m with |g x| for g x: bounds m's round-off

    def _learn(self, x, g, w):
        t = self.t
        for j in range(self.d):
            if self.lazy and x[j] == 0.0:
                continue  # the lazy convention: an absent feature's m, v, w stay put
            for k in range(self.K):
                gx = g[k] * x[j]
                self.m[j][k] = self.b1 * self.m[j][k] + (1.0 - self.b1) * gx
                self.m_mass[j][k] = self.b1 * self.m_mass[j][k] + (1.0 - self.b1) * abs(gx)
                self.v[j][k] = self.b2 * self.v[j][k] + (1.0 - self.b2) * gx * gx
                m_hat = self.m[j][k] / (1.0 - self.b1**t)
                v_hat = self.v[j][k] / (1.0 - self.b2**t)
                self._move(j, k, self.lr * m_hat / (math.sqrt(v_hat) + self.eps))


class ReferenceNAG(_Reference):
    def __init__(self, d, n_outputs=1, lr=0.1):
        super().__init__(d, n_outputs)
        self.lr = lr
        self.s = [0.0] * d
        self.G = [[0.0] * n_outputs for _ in range(d)]
        self.N = 0.0

    def _weights(self, x):
        w = [row[:] for row in self.w]
        for j in range(self.d):
            if abs(x[j]) > self.s[j]:  # 2(a)i: rescale as if the new scale had been the scale
                for k in range(self.K):
                    w[j][k] = w[j][k] * self.s[j] / abs(x[j])
        return w

    def _learn(self, x, g, w):
        for j in range(self.d):
            if abs(x[j]) > self.s[j]:
                for k in range(self.K):
                    self.mass[j][k] *= self.s[j] / abs(x[j])
                self.s[j] = abs(x[j])  # 2(a)ii
        self.w = w
        self.N += sum(div(x[j] * x[j], self.s[j] * self.s[j]) for j in range(self.d))  # 2(c)
        rate = self.lr * math.sqrt(self.t / self.N)
        for j in range(self.d):
            for k in range(self.K):
                gx = g[k] * x[j]  # ∂ℓ/∂w_jk
                self.G[j][k] += gx * gx  # 2(d)i
                u = div(gx, self.s[j] * math.sqrt(self.G[j][k]))
                if u != 0.0:  # (the whole row zero and no bias: N = 0, t/N = ∞, and nothing moves)
                    self._move(j, k, rate * u)  # 2(d)ii


REFERENCES = {"sgd": ReferenceSGD, "adagrad": ReferenceAdaGrad, "adam": ReferenceAdam, "nag": ReferenceNAG}
