"""Implicit updates (Orabona 2020): implicit OGD, Passive-Aggressive, aProx.

All three move w by a multiple of the gradient, w ← w - m g x, with m set
by ``combine`` from the loss ℓ, g, |x|² (a partial sum like x·w) and the
example's importance weight h > 0:
- implicit OGD, squared loss:   m = hη / (1 + hη |x|²)
         (the proximal step argmin_v h ℓ(v) + ‖v - w‖²/(2η): η becomes hη);
         with ``importance_aware`` = 1 instead the importance-aware update of
         Karampatziakis & Langford 2011 (§4, squared loss):
         m = (1 - e^{-hη|x|²}) / |x|²  (hη when x = 0), the limit of n
         gradient steps of weight h/n, for which weight h₁ + h₂ equals weight
         h₁ then h₂ on the same example (their invariance property).
- PA:    m = ℓ / |x|²,  PA-I: min(hC, ℓ / |x|²),  PA-II: ℓ / (|x|² + 1/(2hC))
         (hinge: g = -y when ℓ > 0, so w ← w + τ y x; ε-insensitive alike).
         A weight h scales the slack's price C (Crammer et al. 2006, eqs. for
         PA-I/PA-II with C → hC); PA's hard constraint ℓ(v) = 0 does not
         change under h > 0, so plain PA ignores the weight.
- aProx: m = min(hη_t, (ℓ - ℓ_low)_+ / ‖g‖²), ‖g‖² = Σ_k g_k² |x|²,
         η_t = η / t^power (power 0: constant rate); no step when ℓ ≤ ℓ_low
         (the truncated model max(ℓ + ⟨g, v - w⟩, ℓ_low) is then flat at w).
         The prox step of h·max(ℓ + ⟨g, v - w⟩, ℓ_low): the gradient part
         scales by h, so the cap η_t becomes hη_t; the step to the floor,
         (ℓ - ℓ_low)/‖g‖², does not depend on h.
At h = 1 each is its unweighted update bit for bit (h·η, h·C are exact).
Weight k equals k repeats of the example (up to round-off) for:
importance-aware implicit OGD (any k, the invariance above); and PA, PA-I
and aProx at a constant rate (power 0) on the hinge and ε-insensitive
losses, which are linear in ŷ while positive, so each capped repeat lowers
ℓ by exactly its step τ|x|² and k of them move min(kC, ℓ/|x|²) (aProx:
min(kη, (ℓ - ℓ_low)/‖g‖²)), the weight-k step; a full PA step zeroes ℓ, so
PA's repeats add nothing. Not for plain implicit OGD or PA-II: k repeats
shrink the residual by (1 + a)^{-k} against 1/(1 + k a) for weight k
(a = η|x|², or 2C|x|² for PA-II), and n repeats of weight k/n tend to the
importance-aware e^{-ka} (tests/learners/test_weights.py checks the bound
0 ≤ (1 + a/n)^{-n} - e^{-a} ≤ e^{-a}(e^{a²/(2n)} - 1)). Nor for aProx
with a decaying rate (the repeats get η_{t+1}, η_{t+2}, ...) or on a
curved loss.
Fields: P[j, k] = (w,). prm = (η or C, power or importance_aware, ℓ_low).
"""

import math

from .codes import APROX, IMPLICIT, PA0, PA1
from .jit import njit

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")



@jit
def combine(a, prm, yhat, ex, value, h, fb, t):
    n_out = yhat.shape[0]
    x2 = ex[0]
    if a == IMPLICIT:
        rate = h * prm[0]
        if prm[1] == 0.0:
            m = rate / (1.0 + rate * x2)
        else:  # importance aware: -expm1 keeps the small-exponent digits
            m = -math.expm1(-rate * x2) / x2 if x2 > 0.0 else rate
    elif a == APROX:
        g2 = 0.0
        for k in range(n_out):
            g2 += fb[k] * fb[k]
        g2 *= x2
        rate = h * (prm[0] / t ** prm[1])
        # ℓ ≤ ℓ_low: the truncated model is flat at w, so its prox step is 0
        # (the paper's closed form assumes ℓ ≥ ℓ_low; (ℓ - ℓ_low)_+ in Asi & Duchi).
        m = min(rate, (value - prm[2]) / g2) if g2 > 0.0 and value > prm[2] else 0.0
    elif x2 == 0.0:
        m = 0.0
    elif a == PA0:
        m = value / x2
    elif a == PA1:
        m = min(h * prm[0], value / x2)
    else:
        m = value / (x2 + 0.5 / (h * prm[0]))
    fb[n_out] = m


@jit
def update(P, j, x, fb, n_out):
    m = fb[n_out]
    for k in range(n_out):
        P[j, k, 0] -= m * fb[k] * x
