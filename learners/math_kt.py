"""Krichevsky–Trofimov coin betting (Orabona & Pál 2016).

Algorithm 1 (OLO in a Hilbert space) for a linear model: the loss vector is
ℓ_t = g_t x_t, so ⟨ℓ_t, w_t⟩ = g_t ŷ_t and the wealth is one global scalar:
    w_t = θ_{t-1} Wealth_{t-1} / t,  θ = -Σ ℓ,  Wealth_t = Wealth_{t-1} - ⟨ℓ_t, w_t⟩.
Its bound needs ‖ℓ_t‖ ≤ 1: ``combine`` clips g so that ‖g x‖ ≤ 1
(‖g x‖² = Σ_k g_k² |x|²), scaling the whole loss vector down when it is
longer; the clipped g is what the coordinates and the wealth see.

Averaged iterate (Algorithms 2/3): the same run, and offline (unlabelled)
predictions use w̄_T = (1/T) Σ_t w_t. Kept exactly and lazily: with
C_t = Σ_{s≤t} Wealth_{s-1}/s, a coordinate whose θ last changed when C was
C_last has Σ w = acc + θ (C - C_last).

Per-coordinate variant: each coordinate bets its own wealth W_i on its own
1-D game with loss ℓ_{t,i} = clip(g x_i, -1, 1) (t counts all trials, as a
coordinate with x_i = 0 sees a zero loss):
    w_i = θ_i W_i / t,  W_i ← W_i - ℓ_{t,i} w_i,  θ_i ← θ_i - ℓ_{t,i}.

Importance weight h: the loss vector is the gradient of h ℓ, h g x, clipped
like any other (‖h g x‖ ≤ 1; per coordinate |h g x_i| ≤ 1), so a large
weight buys at most a full unit loss vector: the coin-betting bound needs it.
Weight k is not k repeats: each repeat is a bet of θ Wealth / t recomputed
after the last one (and t advances k times), and the clipping caps the
weight-k vector at norm 1 where k repeats could each spend up to 1.

Fields: P[j, k] = (θ, acc, C_last) for Algorithms 1/3, (θ, W_i) per
coordinate. glob = (t, Wealth, C).
"""

import math

from .codes import KT_AVG, KT_COORD
from .jit import njit

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")

THETA, ACC, C_LAST = 0, 1, 2
WEALTH_I = 1


@jit
def weight(a, prm, glob, P, j, k, t, learning):
    if a == KT_COORD:
        return P[j, k, THETA] * P[j, k, WEALTH_I] / t
    if a == KT_AVG and not learning:
        done = glob[0]
        if done == 0.0:
            return 0.0
        return (P[j, k, ACC] + P[j, k, THETA] * (glob[2] - P[j, k, C_LAST])) / done
    return P[j, k, THETA] * glob[1] / t


@jit
def combine(a, glob, yhat, ex, fb, t):
    n_out = yhat.shape[0]
    norm2 = 0.0
    for k in range(n_out):
        norm2 += fb[k] * fb[k]
    norm2 *= ex[0]
    if norm2 > 1.0:
        shrink = 1.0 / math.sqrt(norm2)
        for k in range(n_out):
            fb[k] *= shrink
    if a == KT_AVG:
        glob[2] += glob[1] / t  # C_t, with the wealth w_t was bet from
    for k in range(n_out):
        glob[1] -= fb[k] * yhat[k]


@jit
def update(a, glob, P, j, x, fb, w, slot, n_out):
    for k in range(n_out):
        if a == KT_COORD:
            loss = min(1.0, max(-1.0, fb[k] * x))
            P[j, k, WEALTH_I] -= loss * w[slot, k]
            P[j, k, THETA] -= loss
            continue
        if a == KT_AVG:
            P[j, k, ACC] += P[j, k, THETA] * (glob[2] - P[j, k, C_LAST])
            P[j, k, C_LAST] = glob[2]
        P[j, k, THETA] -= fb[k] * x
