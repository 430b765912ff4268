"""Kotłowski (2017), Algorithm 1: coordinate-wise scale-invariant learning.

    s_i² ← s_i² + x_i²;  if s_i² > 0:
        η_i = exp((h_i² + x_i²) / (2α s_i²)) / (α t d),  w_i = η_i h_i / s_i²   (else w_i = 0)
    after g:  h_i ← h_i - g x_i
with α > 9/8. d is the dimension: the parameter ``dim`` when given, else the
number of coordinates seen before this example (at least 1), so that the
model needs no dimension up front and stays shardable.

Importance weight ω: h ← h - ω g x_i (the gradient of ω ℓ); s² (the input
scale), t and d count the example once, so scale invariance holds with
weights. Weight k is not k repeats: k repeats add k x_i² to s² and k to t,
and re-evaluate w (hence g) between them; with weights > 1 the potential
exp(h²/(2α s²)) can grow past what the paper's bound (for |g| ≤ 1) allows.

Fields: P[j, k] = (h,); Q[j] = (s²,). prm = (α, dim). glob = (t, d_seen).
"""

import math

from .jit import njit

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")


@jit
def weight(prm, glob, P, Q, j, k, x, t):
    s2 = Q[j, 0] + x * x
    h = P[j, k, 0]
    if s2 == 0.0 or h == 0.0:
        return 0.0
    alpha = prm[0]
    d = prm[1] if prm[1] > 0.0 else max(glob[1], 1.0)
    eta = math.exp((h * h + x * x) / (2.0 * alpha * s2)) / (alpha * t * d)
    return eta * h / s2


@jit
def extras(Q, j, ex):
    if Q[j, 0] == 0.0:
        ex[1] += 1.0


@jit
def combine(prm, glob, ex):
    glob[1] += ex[1]


@jit
def update(P, Q, j, x, fb, n_out):
    Q[j, 0] += x * x
    for k in range(n_out):
        P[j, k, 0] -= fb[k] * x
