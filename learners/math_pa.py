"""Implicit updates (Orabona 2020): implicit OGD, Passive-Aggressive, aProx.

All three move w by a multiple of the gradient, w ← w - m g x, with m set
by ``combine`` from the loss ℓ, g and |x|² (a partial sum like x·w):
- implicit OGD, squared loss:   m = η / (1 + η |x|²)
- PA:    m = ℓ / |x|²,  PA-I: min(C, ℓ / |x|²),  PA-II: ℓ / (|x|² + 1/(2C))
         (hinge: g = -y when ℓ > 0, so w ← w + τ y x; ε-insensitive alike)
- aProx: m = min(η_t, (ℓ - ℓ_low)_+ / ‖g‖²), ‖g‖² = Σ_k g_k² |x|²,
         η_t = η / t^power (power 0: constant rate); no step when ℓ ≤ ℓ_low
         (the truncated model max(ℓ + ⟨g, v - w⟩, ℓ_low) is then flat at w)
Fields: P[j, k] = (w,). prm = (η or C, power, ℓ_low).
"""

from numba import njit

from .codes import APROX, IMPLICIT, PA0, PA1

# Plain compiled functions, not numba-IR inlined: each is compiled once and
# LLVM inlines it into every kernel, which keeps compile times short.
jit = njit(cache=True, error_model="numpy")



@jit
def combine(a, prm, yhat, ex, value, y, loss, loss_prm, fb, t):
    n_out = yhat.shape[0]
    x2 = ex[0]
    if a == IMPLICIT:
        m = prm[0] / (1.0 + prm[0] * x2)
    elif a == APROX:
        g2 = 0.0
        for k in range(n_out):
            g2 += fb[k] * fb[k]
        g2 *= x2
        rate = prm[0] / t ** prm[1]
        # ℓ ≤ ℓ_low: the truncated model is flat at w, so its prox step is 0
        # (the paper's closed form assumes ℓ ≥ ℓ_low; (ℓ - ℓ_low)_+ in Asi & Duchi).
        m = min(rate, (value - prm[2]) / g2) if g2 > 0.0 and value > prm[2] else 0.0
    elif x2 == 0.0:
        m = 0.0
    elif a == PA0:
        m = value / x2
    elif a == PA1:
        m = min(prm[0], value / x2)
    else:
        m = value / (x2 + 0.5 / prm[0])
    fb[n_out] = m


@jit
def update(P, j, x, fb, n_out):
    m = fb[n_out]
    for k in range(n_out):
        P[j, k, 0] -= m * fb[k] * x
