"""ScInOL1 and ScInOL2 per coordinate (Kempka et al. 2019, Algorithms 1 and 2).

Fields: P[j, k] = (G, S², B) with B = β (ScInOL1) or η (ScInOL2); Q[j] = (M,).
``weight`` uses M_t = max(M, |x_t|) and β_t without storing them (predict
is pure); ``update`` stores them and applies g. Every visited coordinate has
M_t ≥ |x| > 0, so √(S² + M_t²) > 0; the paper's 0/0 = 0 only matters for a
never-seen coordinate, whose weight is 0.

Importance weight h (the factor on the example's loss): the kernel passes
the gradient of h ℓ, h g, so G ← G - h g x, S² ← S² + (h g x)² and ScInOL2's
reward η ← η - h g x w_t; M (max |x|) and t count the example once, unweighted,
so rescaling a feature still rescales M alone and the invariance holds.
Weight k is not k repeats: S² grows by k² (g x)² instead of about k (g x)²,
and each repeat would bet with the weights recomputed from the updated G, S²
and t (ScInOL1's β cap ε(S² + M²)/(x² t) too), so there is no identity to
first order; what holds is the bound of Kempka et al. 2019 for the loss
sequence h_t ℓ_t, whose gradients are at most max_t h_t in size (their
Lipschitz assumption |g| ≤ 1 becomes |h g| ≤ 1 for h ≤ 1).
"""

import math

from .codes import SCINOL1
from .jit import njit

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")

G, S2, B = 0, 1, 2
M = 0


@jit
def weight(a, prm, P, Q, j, k, x, t):
    ax = abs(x)
    m = Q[j, M] if Q[j, M] > ax else ax
    s2 = P[j, k, S2] + m * m
    if s2 == 0.0:
        return 0.0
    inv = 1.0 / math.sqrt(s2)
    theta = P[j, k, G] * inv
    if a == SCINOL1:
        # ε(S²+M²)/(x² t), as s2/x² ≥ 1 first so nothing overflows; x = 0
        # gives ∞ (the paper's c/0), leaving β as stored.
        beta = min(P[j, k, B], prm[0] * (s2 / (x * x)) / t)
        return math.copysign(beta * math.expm1(0.5 * abs(theta)) * 0.5 * inv, theta)
    clipped = theta if abs(theta) <= 1.0 else math.copysign(1.0, theta)
    return clipped * P[j, k, B] * 0.5 * inv


@jit
def update(a, prm, P, Q, j, x, t, fb, w, slot, n_out):
    ax = abs(x)
    if ax > Q[j, M]:
        Q[j, M] = ax
    m2 = Q[j, M] * Q[j, M]
    for k in range(n_out):
        gx = fb[k] * x
        if a == SCINOL1:
            P[j, k, B] = min(P[j, k, B], prm[0] * ((P[j, k, S2] + m2) / (x * x)) / t)
        else:
            P[j, k, B] -= gx * w[slot, k]
        P[j, k, G] -= gx
        P[j, k, S2] += gx * gx
