"""The tuned baselines the seeds compare against, per coordinate.

- SGD:     w ← w - (η/√t) g x
- AdaGrad: G2 ← G2 + (g x)²;  w ← w - η g x / √G2           (Duchi et al. 2011, diagonal)
- Adam:    m ← β1 m + (1-β1) g x;  v ← β2 v + (1-β2)(g x)²;
           w ← w - η m̂ / (√v̂ + ε), m̂ = m/(1-β1^t), v̂ = v/(1-β2^t)   (Kingma & Ba 2014)
- NAG:     normalised adaptive gradient (Ross, Mineiro & Langford 2013, Algorithm 1):
           on x: where |x_i| > s_i, w_i ← w_i s_i/|x_i|, s_i ← |x_i|;  N ← N + Σ_i x_i²/s_i²;
           after g: G_i ← G_i + (g x_i)²;  w_i ← w_i - η √(t/N) g x_i / (s_i √G_i)
           (N is a global scalar: its per-example share Σ_i x_i²/s_i² is a partial sum).
           The rescaling is by s_i/|x_i|, not its square: g x_i/√G_i is free of
           feature i's units, so each step is ∝ 1/s_i, and the rescaling makes the
           past steps as if taken at the new scale; the squared factor belongs to
           the non-adaptive NG, whose steps carry 1/s_i². (Vowpal Wabbit's
           normalized+adaptive update rescales by s_i/|x_i| likewise.)
Only coordinates with x_i ≠ 0 are touched ("lazy" updates, as sparse
implementations do): for Adam this differs from dense Adam, whose momentum
keeps moving weights of absent features. Adam's bias correction uses the
global example count t (as lazy/sparse Adam implementations do).

Importance weight h: every rule gets the gradient of h ℓ, h g x (the step
and G2, m, v); t, NAG's s and N count the example once. Weight k equals k
repeats for none: AdaGrad's and NAG's G2 and Adam's v grow by k² (g x)² rather
than k (g x)²; for SGD at a constant rate on the squared loss, k repeats
shrink the residual ŷ - y by (1 - a)^k, a = η|x|² ≤ 1, and weight k by
1 - k a, at most k(k - 1) a²/2 apart (and with η/√t the rates differ too).

Fields: P[j, k] = (w, G2 or m, v); Q[j] = (s,) for NAG.
prm: SGD/AdaGrad/NAG (η,), Adam (η, β1, β2, ε). glob = (t, N).
"""

import math

from .codes import ADAGRAD, NAG, SGD
from .jit import njit

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")



@jit
def nag_weight(P, Q, j, k, x):
    s = Q[j, 0]
    ax = abs(x)
    if ax > s:  # a larger scale: past steps, each ∝ 1/s, as if taken with s = |x|
        return P[j, k, 0] * (s / ax)
    return P[j, k, 0]


@jit
def nag_extras(Q, j, x, ex):
    s = max(Q[j, 0], abs(x))
    ex[0] += (x / s) * (x / s)


@jit
def update(a, prm, glob, P, Q, j, x, t, fb, w, slot, n_out):
    lr = prm[0]
    if a == NAG:
        ax = abs(x)
        if ax > Q[j, 0]:
            for k in range(n_out):
                P[j, k, 0] = w[slot, k]  # the rescaled weight predict used
            Q[j, 0] = ax
        s = Q[j, 0]
        step = fb[n_out]  # η √(t/N), from combine
        for k in range(n_out):
            gx = fb[k] * x
            P[j, k, 1] += gx * gx
            if P[j, k, 1] > 0.0:
                P[j, k, 0] -= step * gx / (s * math.sqrt(P[j, k, 1]))
        return
    for k in range(n_out):
        gx = fb[k] * x
        if a == SGD:
            P[j, k, 0] -= fb[n_out] * gx
        elif a == ADAGRAD:
            P[j, k, 1] += gx * gx
            if P[j, k, 1] > 0.0:
                P[j, k, 0] -= lr * gx / math.sqrt(P[j, k, 1])
        else:
            b1, b2, eps = prm[1], prm[2], prm[3]
            P[j, k, 1] = b1 * P[j, k, 1] + (1.0 - b1) * gx
            P[j, k, 2] = b2 * P[j, k, 2] + (1.0 - b2) * gx * gx
            m_hat = P[j, k, 1] / (1.0 - b1**t)
            v_hat = P[j, k, 2] / (1.0 - b2**t)
            P[j, k, 0] -= lr * m_hat / (math.sqrt(v_hat) + eps)
