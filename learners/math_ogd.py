"""Projected online gradient descent with adaptive rates (Streeter & McMahan 2010).

Feasible set: the box [-R, R] per coordinate (D_i = 2R). Per-coordinate
rates (Algorithm 1): η_{t,i} = scale · D_i / √(2 Σ_{s≤t} g_{s,i}²).
Global rate (Theorem 2): η_t = scale · D / √(2 Σ_{s≤t} ‖g_s‖²) with
D = 2R√d, d the number of coordinates seen so far (the paper's experiments
estimate D online the same way). ``scale`` is the rate multiplier the
paper's experiments tune (0.6/R per-coordinate, 0.2/R global); 1 is the
theorem's rate.

Importance weight h: the gradient of h ℓ, h g x, is both the step and what
Σ(g x)² (Σ‖g‖²) accumulates; d and t count the example once. Weight k is not
k repeats: the squared sums grow by k² (g x)² rather than k (g x)², so the
rate after weight k is lower than after k repeats, and the projection and
the recomputed gradients make the repeats differ further.

Fields: P[j, k] = (w, Σ(g x)²); Q[j] = (seen,). prm = (R, scale).
glob = (t, Σ‖g‖², d).
"""

import math

from .codes import OGD_COORD
from .jit import njit

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")

W, SUMSQ = 0, 1


@jit
def global_extras(Q, j, x, ex):
    ex[0] += x * x
    if Q[j, 0] == 0.0:
        ex[1] += 1.0


@jit
def global_combine(prm, glob, yhat, ex, fb):
    n_out = yhat.shape[0]
    g2 = 0.0
    for k in range(n_out):
        g2 += fb[k] * fb[k]
    glob[1] += g2 * ex[0]
    glob[2] += ex[1]
    if glob[1] > 0.0:
        fb[n_out] = prm[1] * 2.0 * prm[0] * math.sqrt(glob[2]) / math.sqrt(2.0 * glob[1])
    else:
        fb[n_out] = 0.0


@jit
def update(a, prm, P, Q, j, x, fb, n_out):
    radius, scale = prm[0], prm[1]
    Q[j, 0] = 1.0
    for k in range(n_out):
        gx = fb[k] * x
        if a == OGD_COORD:
            P[j, k, SUMSQ] += gx * gx
            s = P[j, k, SUMSQ]
            eta = scale * 2.0 * radius / math.sqrt(2.0 * s) if s > 0.0 else 0.0
        else:
            eta = fb[n_out]
        w = P[j, k, W] - eta * gx
        P[j, k, W] = min(radius, max(-radius, w))
