"""``scinol-mix``: a Bayes mixture of parameter-free linear learners.

Up to seven experts run side by side in one compiled kernel, over one state:

    0 ScInOL2, 1 ScInOL1 (Kempka et al. 2019, Algorithms 2 and 1),
    2 KT coin betting per coordinate (Orabona & Pál 2016), 3 Kotłowski 2017
    Algorithm 1, 4 ScInOL2 on running-mean-centred features (:func:`centred`),
    5 ScInOL2 with ten times the initial wealth ε (the "wide" expert: it bets
    more from the start, which pays on short streams), 6 the zero predictor
    (ŷ = 0: probability 1/2, or 1/K).
    By default 0, 4, 5 and 6 (docs/learners.md says why); 1-3 on request.

Each base learns exactly as it would alone, from the gradient of the loss at
its *own* score. The mixture predicts the class probabilities

    p_t(c) = Σ_i π_{t,i} p_{t,i}(c),   π_{t,i} ∝ exp(-Σ_{s<t} h_s ℓ_{s,i})

(the exponentially weighted average forecaster with η = 1 on the log loss,
i.e. the Bayes mixture with a uniform prior: Cesa-Bianchi & Lugosi,
"Prediction, Learning, and Games", 2006, §3.3 (exp-concave losses, Prop. 3.1)
and §9.2 (log loss)). For the log loss the identity
Σ_t ℓ_t(mix) = -ln Σ_i (1/N) exp(-L_{T,i}) holds exactly (the mixture's
probability of the labels is the prior-average of the experts'), hence

    Σ_t ℓ_t(mix) ≤ min_i L_{T,i} + ln N          (N = 4 by default, up to 7)

for any sequence, with no tuning and no bound on the losses: never more
than ln N / T per example above the best base, nor above the zero model
(ln 2 logistic, ln K softmax). The bound is stronger than the O(√(T ln N))
of the parameter-free experts algorithms for bounded losses (AdaNormalHedge,
coin betting for experts), because the log loss is 1-exp-concave in the
probabilities; it needs the log loss, so the mixture is defined for the
``logistic`` and ``softmax`` losses only. Importance weights h multiply
each expert's loss in the exponent; the bound then holds for h ≤ 1 (Jensen:
(Σ π q)^h ≥ Σ π q^h needs h ≤ 1).

The score returned is the logit of the mixed probability, computed as a
difference of log-sum-exps (logistic: ŷ = ln p(+1) - ln p(-1); softmax:
ŷ_c = ln p(c), so logsumexp ŷ = 0 and ℓ(y, ŷ) = -ln p(y)). It is not a
linear function of x: :meth:`Mixture.weights` gives the bases' weights
averaged with the current π, for inspection only.

Shardable: every base is coordinate-separable (the centred expert's means
too). A shard returns the partial scores of the six linear bases and
Kotłowski's count of new coordinates (6K + 1 sums); the combiner owns the
cumulative losses L_i and returns each base's own g and the row's h (6K + 1
feedback values).

State: P[j, k] = (G, S², η | G, S², η | G, S², η | G, S², β | θ, W | h)
(ScInOL2 | wide ScInOL2 | centred ScInOL2 | ScInOL1 | KT | Kotłowski),
Q[j] = (M, s², M_c, μ, n,
first, varied) (see COORD_FIELDS): ScInOL1 and both raw ScInOL2s share
M = max |x_j|, which all update to the same value. Globals: t, Kotłowski's d seen, and
L_i for each expert.
"""

from __future__ import annotations

import math

import numpy as np

from . import math_kotlowski as KO
from . import math_kt as KT
from . import math_scinol as SC
from .codes import KT_COORD, SCINOL1, SCINOL2
from .jit import drop_stale_cache, njit
from .losses import LOGISTIC, SOFTMAX, loss_grad_into
from .state import LearnerState

jit = njit(cache=True, error_model="numpy")
inline = njit(cache=True, error_model="numpy", inline="always")
# Without numba's reference counting, for the row loop and the mixing, which
# allocate nothing: its pruning left the counts in this large inlined kernel,
# and the atomic increment and decrement of every array passed to an inlined
# helper or sliced took most of the kernel's time (perf, gdb).
no_refcount = njit(cache=True, error_model="numpy", _nrt=False)

BASES = ("scinol2", "scinol1", "kt-coord", "kotlowski1", "scinol2-centred", "scinol2-wide")
EXPERTS = (*BASES, "zero")
N_BASES, ZERO, CENTRED, WIDE = 6, 6, 4, 5
WIDE_EPS = 10.0
"""The wide expert's ε, as a multiple of ``eps``."""
# The default experts' fields first, so a coordinate's row of them spans
# two cache lines (sparse rows miss the cache on every coordinate).
FIELDS = ("G_2", "S2_2", "eta", "G_w", "S2_w", "eta_w", "G_c", "S2_c", "eta_c", "G_1", "S2_1", "beta", "theta",
          "wealth", "h")
COORD_FIELDS = ("M", "s2", "M_c", "mu", "n", "first", "varied")
"""M_c = max |x_j - μ_j| (the centred expert's M), μ_j the running mean of
x_j over the rows learned from where x_j ≠ 0, n_j their total importance
weight, the first such x_j, and 1 once a later one differed from it."""
MU, NW, FIRST, VARIED = 3, 4, 5, 6
GLOBALS = ("t", "dim", *(f"L_{e}" for e in EXPERTS), "H", "C")
AVG_FIELDS = ("avg_2", "avg_1", "avg_kt", "avg_h", "avg_c", "avg_w")
"""With average=1: Σ of each base's iterates up to the coordinate's last update."""
AVG_COORD_FIELDS = ("last_t", "last_H", "last_C")
"""With average=1: t, H and C when the coordinate was last updated."""
L0 = 2  # glob[L0 + i] is expert i's cumulative weighted loss
H, C = L0 + N_BASES + 1, L0 + N_BASES + 2  # glob[H] = Σ_{s≤t} 1/s (KT's w ∝ 1/s), glob[C] = Σ 1/(s d_s)
A0, LAST = 15, 7  # P[j, k, A0 + b]: base b's sum; Q[j, LAST + 0, 1, 2]: last t, H, C
P_LO, P_HI = (0, 9, 12, 14, 6, 3), (3, 12, 14, 15, 9, 6)  # base b's fields: P[j, k, P_LO[b]:P_HI[b]]
Q_COL = (0, 0, 0, 1, 2, 0)  # and its column of Q[j]: M (both ScInOLs, the wide one), -, s² (Kotłowski), M_c
DEAD = 1e300  # L_i of an expert whose loss was ∞ or NaN: weight 0 from then on
PARAMS = {"eps": 1.0, "alpha": 1.5, "wealth": 1.0, "kt": 0.0, "scinol1": 0.0, "kotlowski1": 0.0, "average": 0.0,
          "center": 1.0, "wide": 1.0}
"""ε of both ScInOLs, Kotłowski's α, KT's initial wealth (the bases' own
defaults); then 1/0: whether KT, ScInOL1, Kotłowski's Alg. 1 take part;
``average`` 1: unlabelled rows are scored with each base's averaged iterate
(1/T) Σ_t w_t (online-to-batch conversion), labelled rows as always;
``center`` 1/0: whether the running-mean-centred ScInOL2 takes part;
``wide`` 1/0: whether ScInOL2 with ε = WIDE_EPS × eps takes part."""


# The bases' weight and update inlined into the passes (numba IR): compiled
# apart, LLVM left them as calls of some forty arguments each, per coordinate.
_sc_weight, _sc_update, _kt_weight, _kt_update, _ko_weight, _ko_update = (
    njit(error_model="numpy", inline="always")(f.py_func)
    for f in (SC.weight, SC.update, KT.weight, KT.update, KO.weight, KO.update))


@jit
def flags(prm):
    """Which linear bases run: ScInOL2 always; ScInOL1, KT, Kotłowski and
    the centred and the wide ScInOL2 as their parameters say (prm[4], prm[3], prm[5], prm[7], prm[8])."""
    return np.array([True, prm[4] != 0.0, prm[3] != 0.0, prm[5] != 0.0, prm[7] != 0.0, prm[8] != 0.0])


@inline
def centred(Q, j, x):
    """x_j - μ_j (μ_j the mean of the earlier nonzero x_j learned from, not
    the row's own) once x_j has taken two values; x_j while it has taken
    one: a constant coordinate (the bias, also when a shard sees it as a
    plain coordinate) and a binary one (1 where present) stay as they are,
    where centring would make them 0."""
    return x - Q[j, MU] if Q[j, VARIED] != 0.0 else x


@inline
def _learn_mean(prm, P, Q, j, x, h):
    if Q[j, NW] == 0.0:
        Q[j, FIRST] = x
    elif Q[j, VARIED] == 0.0 and x != Q[j, FIRST]:
        Q[j, VARIED] = 1.0
        Q[j, 2] = 0.0  # M_c
        for k in range(P.shape[1]):
            P[j, k, 6] = 0.0
            P[j, k, 7] = 0.0
            P[j, k, 8] = prm[0]  # η = ε
    Q[j, NW] += h
    Q[j, MU] += (h / Q[j, NW]) * (x - Q[j, MU])


# -- the mixture ----------------------------------------------------------------
@inline
def _lse_add(m, s, v):
    """Running log-sum-exp as (max, Σ exp(· - max)), adding v."""
    if v == -math.inf:  # an expert of weight 0 (or probability 0)
        return m, s
    if v <= m:
        return m, s + math.exp(v - m)
    return v, s * math.exp(m - v) + 1.0


@inline
def _exp_prior(a):
    """exp(a) for a ≤ 0, without calling exp where the result is 0 anyway
    (a < -745.2): on underflow glibc's exp takes a slow error-reporting path,
    and a lagging expert (the zero one, soon) underflows on every row."""
    return math.exp(a) if a > -746.0 else 0.0


@inline
def _softplus(z):
    return math.log1p(math.exp(-abs(z))) + max(z, 0.0)


@inline
def _valid(loss, glob, on, yb, i):
    """Expert i takes part: KT only if on; not after a loss of ∞ or NaN (its
    weight is 0: e.g. Kotłowski's exp potential overflowed under huge
    importance weights); not while its score is NaN (∞ too, for softmax).
    The zero predictor always takes part, so the mixture stays finite."""
    if i == ZERO:
        return True
    if not on[i] or not glob[L0 + i] < DEAD:
        return False
    for k in range(yb.shape[1]):
        if math.isnan(yb[i, k]) or (loss != LOGISTIC and math.isinf(yb[i, k])):
            return False
    return True


@inline
def _mix_logistic_fast(glob, on, yb, top, out, ez):
    """ŷ = ln(Σ π_i σ(z_i)) - ln(Σ π_i σ(-z_i)) in the probability domain:
    one exp for π_i and one for σ per expert, one log, where the log-domain
    sums below take about four of each. Both sums are ≥ π_best min σ, so
    they are far from underflow unless some |z| is past ~700; then (False)
    the log-domain path runs."""
    pz = _exp_prior(top - glob[L0 + ZERO])  # the zero expert: σ(0) = 1/2
    sp, sn = pz * 0.5, pz * 0.5
    for i in range(N_BASES):
        if not on[i] or not glob[L0 + i] < DEAD:
            continue
        z = yb[i, 0]
        if not abs(z) < 700.0:  # also NaN: the log-domain path decides
            return False
        pi = _exp_prior(top - glob[L0 + i])
        e = math.exp(-abs(z))
        ez[i] = e
        big, small = pi / (1.0 + e), pi * e / (1.0 + e)
        if z >= 0.0:
            sp, sn = sp + big, sn + small
        else:
            sp, sn = sp + small, sn + big
    if not (sp > 1e-280 and sn > 1e-280):
        return False
    out[0] = math.log(sp / sn)
    return True


@no_refcount
def mix_scores(loss, glob, on, yb, out, ez):
    """The mixture's scores from the bases' (yb, (N_BASES, K)) and the L_i.
    True when the logistic fast path ran: ez[i] then holds exp(-|ŷ_i|) of
    each base that takes part, which its loss and gradient reuse."""
    top = -glob[L0 + ZERO]
    for i in range(N_BASES):
        if _valid(loss, glob, on, yb, i):
            top = max(top, -glob[L0 + i])
    if loss == LOGISTIC:
        if _mix_logistic_fast(glob, on, yb, top, out, ez):
            return True
        mp, sp, mn, sn = -math.inf, 0.0, -math.inf, 0.0
        for i in range(N_BASES + 1):
            if not _valid(loss, glob, on, yb, i):
                continue
            z = yb[i, 0] if i < N_BASES else 0.0
            a = top - glob[L0 + i]  # ln π_i up to a constant, ≤ 0
            mp, sp = _lse_add(mp, sp, a - _softplus(-z))  # ln π_i σ(z)
            mn, sn = _lse_add(mn, sn, a - _softplus(z))  # ln π_i σ(-z)
        out[0] = (mp + math.log(sp)) - (mn + math.log(sn))
        return False
    n_out = out.shape[0]
    lz = math.log(n_out)
    for c in range(n_out):
        m, s = -math.inf, 0.0
        for i in range(N_BASES + 1):
            if not _valid(loss, glob, on, yb, i):
                continue
            a = top - glob[L0 + i]
            if i < N_BASES:
                mi = yb[i, 0]
                for k in range(1, n_out):
                    mi = max(mi, yb[i, k])
                si = 0.0
                for k in range(n_out):
                    si += math.exp(yb[i, k] - mi)
                m, s = _lse_add(m, s, a + yb[i, c] - mi - math.log(si))
            else:
                m, s = _lse_add(m, s, a - lz)
        out[c] = m + math.log(s)
    # ln Σ_i π_i: the mixture's probabilities sum to 1 when the scores are
    # ln of them, so normalise by the prior's total.
    m, s = -math.inf, 0.0
    for i in range(N_BASES + 1):
        if _valid(loss, glob, on, yb, i):
            m, s = _lse_add(m, s, top - glob[L0 + i])
    norm = m + math.log(s)
    for c in range(n_out):
        out[c] -= norm
    return False


@inline
def _logistic_from(y, z, e, g):
    """scalar_loss_grad's logistic ℓ and g (y = ±1), from e = exp(-|z|)
    already taken for the mixing: the same operations, one exp fewer."""
    m = y * z
    if m > 0.0:
        g[0] = -y * e / (1.0 + e)
        return math.log1p(e)
    g[0] = -y / (1.0 + e)
    return math.log1p(e) - m


@inline
def _combine(loss, loss_prm, glob, on, yb, ex, y, iw, fb, ymix, tmp, zero_loss, ez):
    """ℓ(y, mixture), each base's g (times iw) into fb[b], L_i += iw ℓ_i."""
    shared = mix_scores(loss, glob, on, yb, ymix, ez) and abs(y) == 1.0
    value = loss_grad_into(loss, loss_prm, y, ymix, tmp)
    for b in range(N_BASES):
        if not on[b]:
            fb[b, :] = 0.0
            continue
        if shared and glob[L0 + b] < DEAD:
            value_b = _logistic_from(y, yb[b, 0], ez[b], fb[b])
        else:
            value_b = loss_grad_into(loss, loss_prm, y, yb[b], fb[b])
        if not _valid(loss, glob, on, yb, b) or not value_b < math.inf:
            # Out of the mixture for good, and frozen: a finite mark, as
            # saved states must hold finite scalars.
            glob[L0 + b] = DEAD
            fb[b, :] = 0.0
            continue
        glob[L0 + b] += iw * value_b
        for k in range(fb.shape[1]):
            fb[b, k] *= iw
    glob[L0 + ZERO] += iw * zero_loss  # ln 2, or ln K: the same every row
    glob[0] += 1.0
    glob[H] += 1.0 / glob[0]
    glob[C] += 1.0 / (glob[0] * max(glob[1], 1.0))  # the d trial t was predicted with
    glob[1] += ex[1]  # Kotłowski's d: the coordinates seen so far
    return value


# -- per coordinate -------------------------------------------------------------
@inline
def _col(indices, p, start, dense):
    return p - start if dense else indices[p]


@inline
def _weight_of(b, prm, kprm, glob, Pb, Qb, j, k, x, t, learning):
    if b == 0 or b >= CENTRED:  # the centred expert gets x - μ and its own G, S², η, M
        return _sc_weight(SCINOL2, prm, Pb, Qb, j, k, x, t)
    if b == 1:
        return _sc_weight(SCINOL1, prm, Pb, Qb, j, k, x, t)
    if b == 2:
        return _kt_weight(KT_COORD, prm, glob, Pb, j, k, t, learning)
    return _ko_weight(kprm, glob, Pb, Qb, j, k, x, t)


@inline
def _update_of(b, prm, glob, Pb, Qb, j, x, t, Fb, Wb, slot, n_out):
    """ScInOL1 (b = 1), KT (2) or Kotłowski (3) learns; the ScInOL2 bases
    learn in :func:`_scinol2s_update`."""
    if b == 1:
        _sc_update(SCINOL1, prm, Pb, Qb, j, x, t, Fb, Wb, slot, n_out)  # M already max'd: the same M²
    elif b == 2:
        _kt_update(KT_COORD, glob, Pb, j, x, Fb, Wb, slot, n_out)
    else:
        _ko_update(Pb, Qb, j, x, Fb, n_out)


@inline
def _rate(b, kprm, glob):
    """Base b's offline weight at trial s is coef / r_b(s): the sum of the
    weights over trials is coef times Σ 1/r_b, i.e. t, H or C."""
    if b <= 1 or b >= CENTRED:
        return glob[0]
    if b == 2:
        return glob[H]
    return glob[C]


@no_refcount
def _coef(b, prm, kprm, glob, Pb, Qb, j, k):
    """The part of base b's offline weight (x → 0) that changes only when
    coordinate j learns: the weight itself (ScInOL), θW (KT, w = θW/t),
    exp(h²/(2α s²)) h/(α s²) (Kotłowski, w = that / (t d)). Only averaging
    uses it: compiled once, apart, so its four bases are not copied into
    every place that averages."""
    if b == 3:
        d = kprm[1] if kprm[1] > 0.0 else max(glob[1], 1.0)
        return _weight_of(b, prm, kprm, glob, Pb, Qb, j, k, 0.0, 1.0, False) * d
    return _weight_of(b, prm, kprm, glob, Pb, Qb, j, k, 0.0, 1.0, False)


@inline
def _clock(b):
    """Which of Q[j, LAST:LAST + 3] (last t, H, C) base b's average runs on."""
    return 0 if b <= 1 or b >= CENTRED else b - 1


@inline
def _averaged_of(b, prm, kprm, glob, P, Q, Pb, Qb, j, k):
    """(1/T) Σ_{s≤T} w_s of coordinate j: the sum up to its last update plus
    the current weight over the trials since (online-to-batch conversion)."""
    if glob[0] == 0.0:
        return 0.0
    since = _rate(b, kprm, glob) - Q[j, LAST + _clock(b)]
    return (P[j, k, A0 + b] + _coef(b, prm, kprm, glob, Pb, Qb, j, k) * since) / glob[0]


@inline
def _average_coord(prm, kprm, glob, P, Q, j, on, n_out):
    """Before coordinate j learns: its current weights have been in force
    since its last update; add them to the sums and mark the trial."""
    for b in range(N_BASES):
        if on[b]:
            Pb, Qb = P[:, :, P_LO[b]:P_HI[b]], Q[:, Q_COL[b]:Q_COL[b] + 1]
            since = _rate(b, kprm, glob) - Q[j, LAST + _clock(b)]
            for k in range(n_out):
                P[j, k, A0 + b] += _coef(b, prm, kprm, glob, Pb, Qb, j, k) * since
    Q[j, LAST] = glob[0]
    Q[j, LAST + 1] = glob[H]
    Q[j, LAST + 2] = glob[C]


@inline
def _m2(Q, j, c, x):
    """M_t² = max(M, |x|)², M = Q[j, c], as math_scinol's weight takes it."""
    ax = abs(x)
    m = Q[j, c] if Q[j, c] > ax else ax
    return m * m


@inline
def _s2_weight(P, o, j, k, m2):
    """math_scinol's ScInOL2 weight, on the fields P[j, k, o:o + 3]: the
    three default experts then index one row of P, with one address (as
    slices of P, each its own pointer and strides spilled LLVM's registers)."""
    s2 = P[j, k, o + 1] + m2
    if s2 == 0.0:
        return 0.0
    inv = 1.0 / math.sqrt(s2)
    theta = P[j, k, o] * inv
    clipped = theta if abs(theta) <= 1.0 else math.copysign(1.0, theta)
    return clipped * P[j, k, o + 2] * 0.5 * inv


@inline
def _s2_update(P, o, j, x, fb, W, slot, n_out):
    """math_scinol's ScInOL2 update of P[j, :, o:o + 3] (M apart)."""
    for k in range(n_out):
        gx = fb[k] * x
        P[j, k, o + 2] -= gx * W[slot, k]
        P[j, k, o] -= gx
        P[j, k, o + 1] += gx * gx


@inline
def _scinol2s_scores(prm, P, Q, indices, data, start, end, dense, bias, t, wide, centre, W, yb, n_out):
    """ScInOL2, and the wide and the centred ScInOL2 if on, in one loop:
    x, j and the coordinate's state read once, up to three independent
    chains per coordinate, which the core overlaps (separate passes cost
    each its own loop); the raw and the wide one share M. The flags are per
    row, so their branches predict."""
    for k in range(n_out):
        acc, acc_w, acc_c = 0.0, 0.0, 0.0
        if bias:  # the bias is not centred
            m2 = _m2(Q, 0, 0, 1.0)
            acc = W[0, 0, k] = _s2_weight(P, 0, 0, k, m2)
            if wide:
                acc_w = W[WIDE, 0, k] = _s2_weight(P, 3, 0, k, m2)
            if centre:
                acc_c = W[CENTRED, 0, k] = _s2_weight(P, 6, 0, k, _m2(Q, 0, 2, 1.0))
        for p in range(start, end):
            x = data[p]
            if x != 0.0:
                j = (p - start if dense else indices[p]) + bias
                slot = p - start + bias
                m2 = _m2(Q, j, 0, x)
                w = W[0, slot, k] = _s2_weight(P, 0, j, k, m2)
                acc += x * w
                if wide:
                    w = W[WIDE, slot, k] = _s2_weight(P, 3, j, k, m2)
                    acc_w += x * w
                if centre:
                    xc = centred(Q, j, x)
                    w = W[CENTRED, slot, k] = _s2_weight(P, 6, j, k, _m2(Q, j, 2, xc))
                    acc_c += xc * w
        yb[0, k], yb[WIDE, k], yb[CENTRED, k] = acc, acc_w, acc_c


@no_refcount
def _base_scores(b, prm, kprm, glob, P, Q, indices, data, start, end, dense, bias, t, learning, averaged, Wb, yb,
                 n_out):
    """Base b's scores over the row, one base per pass with a scalar
    accumulator, as the standalone kernels run (one loop calling all four
    bases per coordinate ran at twice the sum of the four kernels' times).
    For the bases off the default path (ScInOL1, KT, Kotłowski) and for
    averaged scores: compiled once, apart, with b known at run time.
    Inlined at each call site, its four-way dispatch made numba's inliner
    copy every base into every site, and a cold compile took minutes."""
    Pb, Qb = P[:, :, P_LO[b]:P_HI[b]], Q[:, Q_COL[b]:Q_COL[b] + 1]
    for k in range(n_out):
        acc = 0.0
        if bias:
            if averaged:
                w = _averaged_of(b, prm, kprm, glob, P, Q, Pb, Qb, 0, k)
            else:
                w = _weight_of(b, prm, kprm, glob, Pb, Qb, 0, k, 1.0, t, learning)
            Wb[0, k] = w
            acc += w
        for p in range(start, end):
            x = data[p]
            if x != 0.0:
                j = _col(indices, p, start, dense) + bias
                if b == CENTRED:  # the bias (above) is not centred
                    x = centred(Q, j, x)
                if averaged:
                    w = _averaged_of(b, prm, kprm, glob, P, Q, Pb, Qb, j, k)
                else:
                    w = _weight_of(b, prm, kprm, glob, Pb, Qb, j, k, x, t, learning)
                Wb[p - start + bias, k] = w
                acc += x * w
        yb[b, k] = acc


@inline
def _scinol2s_update(prm, P, Q, indices, data, start, end, dense, bias, t, wide, centre, fb, W, n_out, h):
    """:func:`_scinol2s_scores`' experts learn, in one loop; then the
    coordinate's running mean (it touches only coordinate j, whose indices
    are distinct, so the centred update still sees the μ it predicted with)."""
    for p in range(start - bias, end):  # p = start - 1: the bias
        j = 0 if p < start else (p - start if dense else indices[p]) + bias
        x = 1.0 if p < start else data[p]
        if x != 0.0:
            slot = p - start + bias
            if abs(x) > Q[j, 0]:  # M, the raw and the wide expert's
                Q[j, 0] = abs(x)
            _s2_update(P, 0, j, x, fb[0], W[0], slot, n_out)
            if wide:
                _s2_update(P, 3, j, x, fb[WIDE], W[WIDE], slot, n_out)
            if centre:  # the bias is constant, so never centred; its mean tracked as a shard tracks it
                xc = centred(Q, j, x) if p >= start else x
                if abs(xc) > Q[j, 2]:  # M_c
                    Q[j, 2] = abs(xc)
                _s2_update(P, 6, j, xc, fb[CENTRED], W[CENTRED], slot, n_out)
                _learn_mean(prm, P, Q, j, x, h)


@no_refcount
def _base_update(b, prm, glob, P, Q, indices, data, start, end, dense, bias, t, Fb, Wb, n_out):
    """Base b (ScInOL1, KT or Kotłowski) learns: compiled apart, as
    :func:`_base_scores`."""
    Pb, Qb = P[:, :, P_LO[b]:P_HI[b]], Q[:, Q_COL[b]:Q_COL[b] + 1]
    if bias:
        _update_of(b, prm, glob, Pb, Qb, 0, 1.0, t, Fb, Wb, 0, n_out)
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            _update_of(b, prm, glob, Pb, Qb, _col(indices, p, start, dense) + bias, x, t, Fb, Wb, p - start + bias,
                       n_out)


@inline
def _gather(P, Q, indices, start, end, bias, ex):
    """Load each coordinate's first and last default state word before the passes:
    on sparse rows every coordinate misses the cache, and these loads,
    independent of each other, overlap their misses, where the passes'
    loads wait behind each coordinate's arithmetic. (The sum goes to ex[0],
    which nothing reads, so the loads are kept.)"""
    acc = 0.0
    for p in range(start, end):
        j = indices[p] + bias
        acc += P[j, 0, 0] + P[j, 0, 8] + Q[j, 0] + Q[j, VARIED]  # the default experts' first and last
    ex[0] = acc


@inline
def _row(prm, kprm, glob, P, Q, indices, data, start, end, dense, bias, learning, on, yb, ex, W, n_out):
    """The bases' scores for one row; W[b, slot] their weights. (n_out is
    P.shape[1], passed so a single-output caller makes it a constant: the
    loops over k then fold away, several times faster.) With average=1,
    unlabelled rows (test time) are scored with the averaged iterates;
    labelled rows, hence the progressive metrics, stay online."""
    averaged = prm[6] != 0.0 and not learning
    t = glob[0] + 1.0
    QK = Q[:, 1:2]
    if not dense:
        _gather(P, Q, indices, start, end, bias, ex)
    for b in range(N_BASES):
        if not on[b]:
            yb[b, :] = 0.0
    if averaged:
        for b in range(N_BASES):
            if on[b]:
                _base_scores(b, prm, kprm, glob, P, Q, indices, data, start, end, dense, bias, t, learning, True, W[b],
                             yb, n_out)
    else:
        _scinol2s_scores(prm, P, Q, indices, data, start, end, dense, bias, t, on[WIDE], on[CENTRED], W, yb, n_out)
        for b in range(1, CENTRED):  # ScInOL1, KT, Kotłowski
            if on[b]:
                _base_scores(b, prm, kprm, glob, P, Q, indices, data, start, end, dense, bias, t, learning, False,
                             W[b], yb, n_out)
    ex[1] = 0.0  # Kotłowski's count of coordinates never seen before (only Kotłowski reads it)
    if not on[3]:
        return
    if bias:
        KO.extras(QK, 0, ex)
    for p in range(start, end):
        if data[p] != 0.0:
            KO.extras(QK, _col(indices, p, start, dense) + bias, ex)


@inline
def _apply(prm, glob, P, Q, indices, data, start, end, dense, bias, on, fb, W, n_out, h):
    """Each base learns from its fb; h, the row's importance weight, weighs
    it in the running means (the fb already carry it)."""
    t = glob[0]
    if prm[6] != 0.0:
        kprm = prm[1:3]
        if bias:
            _average_coord(prm, kprm, glob, P, Q, 0, on, n_out)
        for p in range(start, end):
            if data[p] != 0.0:
                _average_coord(prm, kprm, glob, P, Q, _col(indices, p, start, dense) + bias, on, n_out)
    # The others touch none of the centred expert's state, so it may learn first.
    _scinol2s_update(prm, P, Q, indices, data, start, end, dense, bias, t, on[WIDE], on[CENTRED], fb, W, n_out, h)
    for b in range(1, CENTRED):  # ScInOL1, KT, Kotłowski
        if on[b]:
            _base_update(b, prm, glob, P, Q, indices, data, start, end, dense, bias, t, fb[b], W[b], n_out)


@no_refcount
def _rows(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses, on, W, yb, fb,
          ex, ymix, tmp, ez, n_out=1):
    kprm = prm[1:3]
    zero_loss = math.log(2.0) if loss == LOGISTIC else math.log(n_out)
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        learning = not math.isnan(y[i])
        _row(prm, kprm, glob, P, Q, indices, data, start, end, dense, bias, learning, on, yb, ex, W, n_out)
        weight_i = iw[i] if iw.shape[0] else 1.0
        if not learning or weight_i == 0.0:
            mix_scores(loss, glob, on, yb, ymix, ez)
            for c in range(n_out):
                scores[i, c] = ymix[c]
            losses[i] = math.nan if not learning else loss_grad_into(loss, loss_prm, y[i], ymix, tmp)
            continue
        losses[i] = _combine(loss, loss_prm, glob, on, yb, ex, y[i], weight_i, fb, ymix, tmp, zero_loss, ez)
        for c in range(n_out):
            scores[i, c] = ymix[c]
        _apply(prm, glob, P, Q, indices, data, start, end, dense, bias, on, fb, W, n_out, weight_i)


@jit
def learn_rows(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    """As :mod:`learners.kernels`' batch kernels: scores[i] is the mixture's
    score before learning from row i, losses[i] its loss (NaN unlabelled)."""
    n_out = P.shape[1]
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    W = np.zeros((N_BASES, longest + 1, n_out))
    yb, fb, ex = np.zeros((N_BASES, n_out)), np.zeros((N_BASES, n_out)), np.zeros(2)
    ymix, tmp, ez = np.empty(n_out), np.empty(n_out), np.empty(N_BASES)
    args = (prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses, flags(prm),
            W, yb, fb, ex, ymix, tmp, ez)
    if n_out == 1:  # n_out omitted: its default, a constant, so the loops over k fold away
        _rows(*args)  # (a 1 passed is typed int64: one _rows for both calls, a loop per coordinate)
    else:
        _rows(*args, n_out)


@jit
def predict_row(prm, glob, P, Q, indices, data, bias, learning, yb, ex, W):
    _row(prm, prm[1:3], glob, P, Q, indices, data, 0, indices.shape[0], False, bias, learning, flags(prm),
         yb, ex, W, P.shape[1])


@jit
def combine_row(prm, glob, yb, ex, y, iw, loss, loss_prm, fb, ymix):
    n_out = yb.shape[1]
    return _combine(loss, loss_prm, glob, flags(prm), yb, ex, y, iw, fb, ymix, np.empty(n_out),
                    math.log(2.0) if loss == LOGISTIC else math.log(n_out), np.empty(N_BASES))


@jit
def scores_only(prm, glob, yb, y, loss, loss_prm, ymix):
    """The mixture's score, and its loss (NaN for y NaN), changing nothing."""
    mix_scores(loss, glob, flags(prm), yb, ymix, np.empty(N_BASES))
    if math.isnan(y):
        return math.nan
    return loss_grad_into(loss, loss_prm, y, ymix, np.empty(ymix.shape[0]))


@jit
def update_row(prm, glob, P, Q, indices, data, bias, fb, W, h):
    _apply(prm, glob, P, Q, indices, data, 0, indices.shape[0], False, bias, flags(prm), fb, W, P.shape[1], h)


@jit
def base_weights(prm, glob, P, Q):
    """Each base's current weights (x → 0, next trial, offline), (4, n, K)."""
    n, n_out = P.shape[0], P.shape[1]
    out = np.zeros((N_BASES, n, n_out))
    t = glob[0] + 1.0
    on = flags(prm)
    for j in range(n):
        for k in range(n_out):
            out[0, j, k] = SC.weight(SCINOL2, prm, P[:, :, 0:3], Q, j, k, 0.0, t)
            if on[1]:
                out[1, j, k] = SC.weight(SCINOL1, prm, P[:, :, 9:12], Q, j, k, 0.0, t)
            if on[2]:
                out[2, j, k] = KT.weight(KT_COORD, prm, glob, P[:, :, 12:14], j, k, t, False)
            if on[3]:
                out[3, j, k] = KO.weight(prm[1:3], glob, P[:, :, 14:15], Q[:, 1:2], j, k, 0.0, t)
            if on[4]:  # on x - μ: these weights apply to centred features
                out[4, j, k] = SC.weight(SCINOL2, prm, P[:, :, 6:9], Q[:, 2:3], j, k, 0.0, t)
            if on[5]:
                out[5, j, k] = SC.weight(SCINOL2, prm, P[:, :, 3:6], Q, j, k, 0.0, t)
    return out


drop_stale_cache("mixture", learn_rows)
