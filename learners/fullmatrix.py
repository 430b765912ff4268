"""Kotłowski (2017), Algorithm 2: the full-matrix scale-invariant learner.

    S ← S + x xᵀ
    η = exp((hᵀS⁺h - γ) / (2α)) / α,   w = η S⁺h,   ŷ = wᵀx
    after g:  h ← h - g x,   γ ← γ + g² xᵀS⁺x          (S⁺ is S_t⁺ throughout)

An example of importance weight ω > 0 feeds g ← ω g (the gradient of its
weighted loss) to h and γ; S, like ScInOL's M, measures the inputs and stays
unweighted (so the invariance to x → A x is untouched). Weight 0 is a no-op.

with α > 9/8 and S⁺ the pseudo-inverse. The predictions are invariant to
replacing every x by A x for any invertible A (seed, Appendix D). It is not
coordinate-separable (S⁺ couples every pair of coordinates), so it runs on one
shard only, O(d²) per example (O(d r) with r the rank of S).

**The rank-one update (seed, Appendix E).** S itself is never needed. With
u = S⁺x, β = 1 + xᵀu and x⊥ = (I - S S⁺) x the part of x outside the range of
S (all before this example):

- x⊥ = 0 (Sherman-Morrison):  S⁺ ← S⁺ - u uᵀ/β;
- x⊥ ≠ 0:                     S⁺ ← S⁺ - (u x⊥ᵀ + x⊥ uᵀ)/|x⊥|² + β x⊥x⊥ᵀ/|x⊥|⁴.

The same identities give what the prediction needs from the state *before*
the update (h lies in the range of S, so hᵀx⊥ = 0):

- x⊥ = 0:  hᵀS⁺_t h = hᵀS⁺h - (hᵀu)²/β,  xᵀS⁺_t h = hᵀu/β,  xᵀS⁺_t x = xᵀu/β;
- x⊥ ≠ 0:  hᵀS⁺_t h = hᵀS⁺h,             xᵀS⁺_t h = 0,      xᵀS⁺_t x = 1;

so an unlabelled example is predicted without touching the state, and a
labelled one is predicted from the same numbers, then learned from.

**Numerics: a square-root factor, in normalised units.** Two choices keep the
floating-point run as invariant as the mathematics (tests/test_kotlowski.py
measures both):

1. S⁺ is kept as a factor F with S⁺ = F Fᵀ, and the two cases update F:
   Sherman-Morrison becomes Potter's square-root update
   F ← F (I - σ a aᵀ), a = Fᵀx, σ = 1/(β + √β) (so that (I - σaaᵀ)² = I - aaᵀ/β),
   and the second case F ← [F - v aᵀ, v] with v = x⊥/|x⊥|² (one more column).
   Every quantity the algorithm uses is then a dot product of Fᵀ-images
   (xᵀS⁺x = |Fᵀx|², hᵀS⁺h = |Fᵀh|², ...), with rounding error of order
   ε·cond(F) = ε·√cond(S) instead of ε·cond(S) for the explicit matrix, whose
   Sherman-Morrison downdates cancel. Replacing x by A x multiplies cond(S) by
   up to cond(A)²: with cond(A) = 10⁴ the explicit S⁺ drifts by up to 10⁻⁴
   relative in the predictions, the factor by ~10⁻⁹.
2. Feature j is measured in units of c_j, the magnitude of its first non-zero
   value (fixed from then on; the bias has c = 1): the learner runs on
   z = D x, D = diag(1/c). That is Algorithm 2 on a fixed invertible linear
   map of the inputs, so by Appendix D the predictions are the paper's. It
   matters because the pseudo-inverse is defined by Euclidean geometry, which
   is not unit-free: with features 10⁻⁶ and 10⁶ side by side a genuine new
   direction carried by the small one is 10⁻¹² of |x| and indistinguishable
   from round-off. In units of c every feature is O(1), and rescaling a
   feature rescales c with it, leaving z (and every decision below) the same.
   The state therefore holds S⁺ of z (= (DSD)⁺), not of x. D (DSD)⁺ D is a
   symmetric generalised inverse of S (S G S = S): equal to S⁺ whenever S is
   invertible, and giving the same xᵀG y for x, y in the range of S — all the
   algorithm and its predictions ever use — when it is not.

**"x⊥ = 0" is a relative test,** |x⊥|² ≤ ε |x|² with ε = 2⁻⁵² the
double-precision unit (x in units of c). The range of S is kept as an
orthonormal basis Q (one column per second-case update); x⊥ = x - Q Qᵀx is
computed twice over ("twice is enough" Gram-Schmidt) so that it is orthogonal
to the range to working precision. A computed x⊥ is never exactly zero: for an
x in the range (a repeated or colinear input) its round-off is a few ε |x|,
growing like √d, so an exact test would take every repeated input for a new
direction and blow S⁺ up by 1/round-off². An absolute threshold would depend
on the units of x, which the algorithm must not see. Below ε |x|², the new
direction's share of x xᵀ (|x⊥|²/|x|²) is under the rounding unit of x xᵀ
itself: a floating-point S + x xᵀ could not hold it either.

State: arrays ``F`` (d×d; its first ``rank`` columns are the factor, the rest
zero), ``Q`` (d×d; orthonormal basis of the range in its first ``rank``
columns), ``h`` (d,; h in units of c, h_j / c_j) and ``scale`` (d,; c, 0 for a
coordinate never seen); scalars ``t`` (examples learned from), ``gamma`` and
``rank``. Coordinate 0 is the bias (x = 1) when the model has one.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit
from .losses import SOFTMAX, loss_code, loss_grad_into
from .state import LearnerState

RANGE_TOL2 = 2.0 ** -52
"""x is in the range of S when |x⊥|² ≤ RANGE_TOL2 · |x|² (see the module docstring)."""

ALPHA0 = 9.0 / 8.0

# error_model="numpy": IEEE division, no ZeroDivisionError checks in the loops.
jit = njit(cache=True, error_model="numpy")
inline = njit(cache=True, error_model="numpy", inline="always")


@inline
def _sparse_t_product(M, idx, val, m, r, out):
    """out[:r] = M[:, :r]ᵀ z for the sparse z with entries val[e] at idx[e], e < m."""
    for k in range(r):
        out[k] = 0.0
    for e in range(m):
        row = idx[e]
        ze = val[e]
        for k in range(r):
            out[k] += M[row, k] * ze


@jit
def _learn_rows(alpha, tol2, glob, F, Q, h, scale, indptr, indices, data, dense, bias, y, iw, loss, loss_prm,
                scores, losses):
    """Each row in order: predict (scores[i, 0]), then, unless y[i] is NaN,
    learn (losses[i]; NaN when unlabelled). glob = [t, γ, rank]. iw[i] is
    row i's importance weight (empty: all 1); a row of weight 0 changes
    nothing."""
    d = h.shape[0]
    n_rows = indptr.shape[0] - 1
    longest = 0
    for i in range(n_rows):
        longest = max(longest, indptr[i + 1] - indptr[i])
    idx = np.empty(longest + 1, dtype=np.int64)
    val = np.empty(longest + 1)  # z = x / c
    unit = np.empty(longest + 1)  # c used for the entry
    a = np.empty(d)  # Fᵀz
    b = np.empty(d)  # Fᵀh
    cq = np.empty(d)  # Qᵀ(·)
    xp = np.empty(d)  # z⊥
    yhat = np.empty(1)
    g = np.empty(1)
    two_alpha = 2.0 * alpha
    for i in range(n_rows):
        start, end = indptr[i], indptr[i + 1]
        r = int(glob[2])
        # The row's non-zeros as (coordinate, value in units of c); the bias first.
        m = 0
        if bias:
            idx[0] = 0
            unit[0] = scale[0] if scale[0] > 0.0 else 1.0
            val[0] = 1.0 / unit[0]
            m = 1
        for p in range(start, end):
            xv = data[p]
            if xv != 0.0:
                j = (p - start if dense else indices[p]) + bias
                c = scale[j] if scale[j] > 0.0 else abs(xv)  # first appearance: its own unit
                idx[m] = j
                unit[m] = c
                val[m] = xv / c
                m += 1
        zz = 0.0
        for k in range(m):
            zz += val[k] * val[k]
        # z⊥ = z - Q Qᵀz, twice.
        _sparse_t_product(Q, idx, val, m, r, cq)
        for q in range(d):
            xp[q] = 0.0
        for e in range(m):
            xp[idx[e]] = val[e]
        rr = 0.0
        for sweep in range(2):
            if sweep == 1:
                for k in range(r):
                    cq[k] = 0.0
                for q in range(d):
                    xq = xp[q]
                    if xq != 0.0:
                        for k in range(r):
                            cq[k] += Q[q, k] * xq
            for q in range(d):
                s = 0.0
                for k in range(r):
                    s += Q[q, k] * cq[k]
                xp[q] -= s
        for q in range(d):
            rr += xp[q] * xp[q]
        in_range = rr <= tol2 * zz or r >= d
        # a = Fᵀz, b = Fᵀh.
        _sparse_t_product(F, idx, val, m, r, a)
        for k in range(r):
            b[k] = 0.0
        for q in range(d):
            hq = h[q]
            if hq != 0.0:
                for k in range(r):
                    b[k] += F[q, k] * hq
        xu = 0.0
        hu = 0.0
        hsh = 0.0
        for k in range(r):
            xu += a[k] * a[k]
            hu += a[k] * b[k]
            hsh += b[k] * b[k]
        beta = 1.0 + xu
        if in_range:
            qf = hsh - hu * hu / beta  # hᵀS⁺_t h
            xsh = hu / beta  # xᵀS⁺_t h
            lev = xu / beta  # xᵀS⁺_t x
        else:
            qf = hsh
            xsh = 0.0
            lev = 1.0
        eta = math.exp((qf - glob[1]) / two_alpha) / alpha
        yhat[0] = eta * xsh if xsh != 0.0 else 0.0
        scores[i, 0] = yhat[0]
        if math.isnan(y[i]):
            losses[i] = math.nan
            continue
        losses[i] = loss_grad_into(loss, loss_prm, y[i], yhat, g)
        weight_i = iw[i] if iw.shape[0] else 1.0
        if weight_i == 0.0:
            continue
        gt = weight_i * g[0]  # the gradient of the weighted loss; S (F, Q, c) counts x unweighted
        for e in range(m):
            if scale[idx[e]] == 0.0:
                scale[idx[e]] = unit[e]
        if in_range:
            if xu > 0.0:  # Potter: F ← F - σ (F a) aᵀ
                sigma = 1.0 / (beta + math.sqrt(beta))
                for q in range(d):
                    s = 0.0
                    for k in range(r):
                        s += F[q, k] * a[k]
                    if s != 0.0:
                        s *= sigma
                        for k in range(r):
                            F[q, k] -= s * a[k]
        else:  # F ← [F - v aᵀ, v], v = z⊥/|z⊥|²; Q gains z⊥/|z⊥|
            inv = 1.0 / rr
            qn = 1.0 / math.sqrt(rr)
            for q in range(d):
                vq = xp[q] * inv
                if vq != 0.0:
                    for k in range(r):
                        F[q, k] -= vq * a[k]
                F[q, r] = vq
                Q[q, r] = xp[q] * qn
            glob[2] += 1.0
        for e in range(m):
            h[idx[e]] -= gt * val[e]
        glob[1] += gt * gt * lev
        glob[0] += 1.0


@jit
def _weights(alpha, glob, F, h, scale, out):
    """out = η D S_z⁺ h_z: the weights on x (in its own units) at the current state."""
    d = h.shape[0]
    r = int(glob[2])
    b = np.zeros(max(r, 1))
    for q in range(d):
        for k in range(r):
            b[k] += F[q, k] * h[q]
    hsh = 0.0
    for k in range(r):
        hsh += b[k] * b[k]
    eta = math.exp((hsh - glob[1]) / (2.0 * alpha)) / alpha
    for q in range(d):
        s = 0.0
        for k in range(r):
            s += F[q, k] * b[k]
        out[q] = eta * s / scale[q] if s != 0.0 else 0.0


class Kotlowski2:
    """Kotłowski's Algorithm 2 (full matrix), one shard; see the module docstring."""

    name = "kotlowski2"
    summary = "Kotłowski's full-matrix algorithm: invariant to any invertible linear map of x (O(d²) per example)"
    source = "Kotłowski 2017, Algorithm 2"
    parameter_free = True
    scale_invariant = True
    shardable = False
    defaults = {"alpha": 1.5}
    ARRAYS = ("F", "Q", "h", "scale")
    SCALARS = ("t", "gamma", "rank")
    MAX_COORDS = 1 << 14
    """Two d x d matrices of 8-byte floats: 4 GiB here, and every example costs O(d²)."""

    def __init__(self, **params):
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(f"{self.name} has no parameter {', '.join(sorted(unknown))}; "
                             f"its parameters are {', '.join(self.defaults)}")
        values = {**self.defaults, **params}
        try:
            alpha = float(values["alpha"])
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: alpha must be a number, not {values['alpha']!r}") from None
        if not (math.isfinite(alpha) and alpha > ALPHA0):
            raise ValueError(f"{self.name}: alpha must be greater than 9/8, not {alpha!r}")
        self.params = {"alpha": alpha}
        self.alpha = alpha

    def check_loss(self, loss: str) -> None:
        if loss_code(loss) == SOFTMAX:
            raise ValueError(f"{self.name} has one output: use a binary or regression loss "
                             f"(logistic, hinge, absolute, squared, epsilon_insensitive), not softmax")

    def _check_outputs(self, n_outputs: int) -> None:
        if n_outputs != 1:
            raise ValueError(f"{self.name} has one output, not {n_outputs}")

    def _check_size(self, n_coords: int) -> None:
        if n_coords > self.MAX_COORDS:
            raise ValueError(f"{self.name} keeps two d x d matrices: {n_coords:,} coordinates would take "
                             f"{16 * n_coords ** 2 / 2 ** 30:,.0f} GiB (it takes at most {self.MAX_COORDS:,}); "
                             f"use fewer features (or hash bits) or a coordinate-wise learner")

    def init_state(self, n_coords: int, n_outputs: int = 1) -> LearnerState:
        self._check_outputs(n_outputs)
        self._check_size(n_coords)
        d = int(n_coords)
        arrays = {"F": np.zeros((d, d)), "Q": np.zeros((d, d)), "h": np.zeros(d), "scale": np.zeros(d)}
        return LearnerState(arrays, {"t": 0.0, "gamma": 0.0, "rank": 0.0}, {name: [0.0] for name in arrays})

    def grow_state(self, state: LearnerState, n_coords: int) -> None:
        """New coordinates have never been seen: S padded with zero rows and
        columns, whose pseudo-inverse is S⁺ padded the same way (F and Q get
        zero rows, and zero columns for the rank they may gain)."""
        have = state.arrays["h"].shape[0]
        if n_coords <= have:
            return
        self._check_size(n_coords)
        for name in ("F", "Q"):
            grown = np.zeros((n_coords, n_coords))
            grown[:have, :have] = state.arrays[name]
            state.arrays[name] = grown
        for name in ("h", "scale"):
            state.arrays[name] = np.concatenate([state.arrays[name], np.zeros(n_coords - have)])

    def check_state(self, state: LearnerState, n_outputs: int) -> None:
        """ValueError unless ``state`` is a valid kotlowski2 state."""
        self._check_outputs(n_outputs)
        if set(state.arrays) != set(self.ARRAYS) or set(state.scalars) != set(self.SCALARS):
            raise ValueError(f"state fields do not match {self.name}: arrays {', '.join(self.ARRAYS)}, "
                             f"scalars {', '.join(self.SCALARS)}")
        for name, arr in state.arrays.items():
            if arr.dtype != np.float64:
                raise ValueError(f"array {name!r} is {arr.dtype}, {self.name} needs float64")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"array {name!r} has non-finite entries")
        F = state.arrays["F"]
        if F.ndim != 2 or F.shape[0] != F.shape[1]:
            raise ValueError(f"array 'F' is {list(F.shape)}, {self.name} needs a square [d, d] matrix")
        d = F.shape[0]
        if state.arrays["Q"].shape != F.shape:
            raise ValueError(f"array 'Q' is {list(state.arrays['Q'].shape)}, {self.name} needs [{d}, {d}] to match 'F'")
        for name in ("h", "scale"):
            if state.arrays[name].shape != (d,):
                raise ValueError(f"array {name!r} is {list(state.arrays[name].shape)}, "
                                 f"{self.name} needs [{d}] to match 'F'")
        if np.any(state.arrays["scale"] < 0):
            raise ValueError("array 'scale' has negative entries")
        rank = state.scalars["rank"]
        if not (rank == int(rank) and 0 <= rank <= d):
            raise ValueError(f"scalar 'rank' must be a whole number in 0..{d}, not {rank!r}")
        r = int(rank)
        if np.any(F[:, r:]) or np.any(state.arrays["Q"][:, r:]):
            raise ValueError(f"arrays 'F' and 'Q' must be zero beyond their first {r} (rank) columns")
        if not (state.scalars["gamma"] >= 0.0 and state.scalars["t"] >= 0.0):
            raise ValueError("scalars 't' and 'gamma' must be non-negative")

    @staticmethod
    def _glob(state) -> np.ndarray:
        return np.array([state.scalars["t"], state.scalars["gamma"], state.scalars["rank"]])

    def learn_rows(self, state, indptr, indices, data, dense, bias, y, iw, loss, loss_param, scores, losses):
        if loss == SOFTMAX:
            raise ValueError(f"{self.name} has one output; softmax is not supported")
        glob = self._glob(state)
        A = state.arrays
        _learn_rows(self.alpha, RANGE_TOL2, glob, A["F"], A["Q"], A["h"], A["scale"], indptr, indices, data,
                    bool(dense), int(bool(bias)), y, iw, int(loss), float(loss_param), scores, losses)
        for name, value in zip(("t", "gamma", "rank"), glob.tolist()):
            state.scalars[name] = value

    def weights(self, state) -> np.ndarray:
        """η S⁺h at the current state, on x in its own units (the bias first
        when there is one), shape (d, 1). With S of full rank this is exactly
        the paper's η S⁺h; otherwise η G h with the generalised inverse of
        :meth:`generalized_inverse`, which predicts the same on every x in the
        range of S (zero weight on coordinates never seen)."""
        A = state.arrays
        out = np.empty(A["h"].shape[0])
        _weights(self.alpha, self._glob(state), A["F"], A["h"], A["scale"], out)
        return out.reshape(-1, 1)

    # -- inspection (tests, diagnostics) -------------------------------------------
    def normalized_pinv(self, state) -> np.ndarray:
        """S_z⁺ = F Fᵀ, the pseudo-inverse of S in units of c: pinv(D S D)."""
        r = int(state.scalars["rank"])
        F = state.arrays["F"][:, :r]
        return F @ F.T

    def generalized_inverse(self, state) -> np.ndarray:
        """G = D (D S D)⁺ D on x in its own units: S⁺ when S is invertible,
        and in general a symmetric g-inverse (S G S = S) with xᵀG y = xᵀS⁺y
        for x, y in the range of S."""
        c = state.arrays["scale"]
        inv_c = np.divide(1.0, c, out=np.zeros_like(c), where=c > 0)
        return self.normalized_pinv(state) * np.outer(inv_c, inv_c)

    def potential_terms(self, state) -> tuple[float, float]:
        """(hᵀS⁺h, γ) at the current state; Lemma 7's ψ is exp((hᵀS⁺h - γ)/(2α))."""
        r = int(state.scalars["rank"])
        b = state.arrays["F"][:, :r].T @ state.arrays["h"]
        return float(b @ b), float(state.scalars["gamma"])
