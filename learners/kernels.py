"""The compiled driver shared by every coordinate-separable learner.

State layout (one model shard):

- ``P[j, k, f]``: per (coordinate j, output k) field f (e.g. G, S², η);
- ``Q[j, h]``:    per coordinate field h, shared by the outputs (e.g. M);
- ``glob[:]``:    global scalars owned by ``combine``; ``glob[0]`` is t, the
                  number of examples learned from;
- ``prm[:]``:     the algorithm's parameters.

An algorithm is four small functions, selected by its integer code ``a``:

- ``weight``  w_{t,j,k} for input x at trial t (pure; ``learning`` is False
               when the example is unlabelled, for learners that predict
               differently offline, e.g. the averaged KT iterate);
- ``extras``  adds coordinate j's share of the extra partial sums (|x|², …);
- ``combine`` from ŷ, the extra sums and y: the loss, the feedback vector
               ``fb`` (g per output, then any step sizes) and the new globals;
- ``update``  applies the feedback to coordinate j, given the weights used.

A batch is processed strictly in order, one example at a time: the
semantics of one-example online learning at compiled speed. The per-example
``predict_row``/``combine_row``/``update_row`` expose the same arithmetic to
the sharded protocol.

Rows come as CSR (indptr, indices, data). A dense batch is passed as its
flattened values with ``dense`` set: the column is then p - start, so both
layouts share one loop. A zero entry is skipped: for every learner here it
contributes nothing to ŷ and changes no state.
"""

from __future__ import annotations

import math

import numpy as np

from . import math_baselines as BL
from . import math_kotlowski as KO
from . import math_kt as KT
from . import math_ogd as OG
from . import math_pa as PA
from . import math_scinol as SC
from .jit import drop_stale_cache, njit, prefetch_row
from .losses import loss_grad_into

# error_model="numpy": IEEE division, no Python ZeroDivisionError checks in
# the inner loops (each algorithm guards its own divisions).
jit = njit(cache=True, error_model="numpy")
inline = njit(cache=True, error_model="numpy", inline="always")
# The batch kernels let go of the GIL while they run (milliseconds a call):
# a file's next rows are parsed, or another model learns, on the other core
# meanwhile, as with the exports `scinol compile` builds, which all do.
# Kernels called once per event keep it: taking it back after each call
# could wait out another thread's switch interval.
batch = njit(cache=True, error_model="numpy", nogil=True)

from .codes import (ADAGRAD, ADAM, APROX, IMPLICIT, KOTLOWSKI1, KT_ALG1, KT_AVG, KT_COORD, NAG,
                    OGD_COORD, OGD_GLOBAL, PA0, PA1, PA2, SCINOL1, SCINOL2, SGD)

N_EXTRAS = 2  # partial sums beyond ŷ that any algorithm may need
N_FB_EXTRA = 2  # feedback slots beyond g


# The dispatchers below are plain compiled functions, not IR-inlined: a
# kernel calls them with its code as a literal, so numba compiles one small
# copy per code and LLVM folds its branches and inlines it into the loop.
# IR-inlining them (inline="always") copied every algorithm's branches into
# all 17 kernels; that copying was most of the ~30 s cold compile of each.
@jit
def _loss(loss, loss_prm, y, yhat, fb):
    """``loss_grad_into`` compiled once here, not IR-inlined into every
    kernel (numba's inlining copies its IR at each site: most of the compile)."""
    return loss_grad_into(loss, loss_prm, y, yhat, fb)


@jit
def weight(a, prm, glob, P, Q, j, k, x, t, learning):
    c = np.int64(a)  # the math modules get a plain int: compiled once, not once per code
    if a <= SCINOL2:
        return SC.weight(c, prm, P, Q, j, k, x, t)
    if a >= KT_ALG1 and a <= KT_COORD:
        return KT.weight(c, prm, glob, P, j, k, t, learning)
    if a == KOTLOWSKI1:
        return KO.weight(prm, glob, P, Q, j, k, x, t)
    if a == NAG:
        return BL.nag_weight(P, Q, j, k, x)
    return P[j, k, 0]  # the others store the weight itself


@jit
def has_extras(a):
    return a == OGD_GLOBAL or a == KT_ALG1 or a == KT_AVG or a >= IMPLICIT and a <= APROX or a == KOTLOWSKI1 or a == NAG


@jit
def extras(a, prm, glob, Q, j, x, ex):
    if a == OGD_GLOBAL:
        OG.global_extras(Q, j, x, ex)
    elif a == KT_ALG1 or a == KT_AVG or a >= IMPLICIT and a <= APROX:
        ex[0] += x * x
    elif a == KOTLOWSKI1:
        KO.extras(Q, j, ex)
    elif a == NAG:
        BL.nag_extras(Q, j, x, ex)


@jit
def combine(a, prm, glob, yhat, ex, y, iw, loss, loss_prm, fb):
    """ℓ(y, ŷ) (unweighted); fills fb (g first) and advances the globals.

    ``iw`` > 0 is the example's importance weight, the factor on its loss.
    The gradient methods see the gradient of iw·ℓ, so g is multiplied by iw
    before anything accumulates it (G, S², Σg², the wealth, h, m, v); the
    implicit/PA/aProx family keeps g and puts iw into its step size m
    (:mod:`learners.math_pa`). t and the input-scale statistics (M, s, s²,
    N, the dimension seen) count examples, not weight. (A weight of 0 never
    gets here: the drivers skip such an example, so it is a no-op.)"""
    value = _loss(loss, loss_prm, y, yhat, fb)
    if a < IMPLICIT or a > APROX:
        for k in range(yhat.shape[0]):
            fb[k] *= iw
    glob[0] += 1.0
    t = glob[0]
    c = np.int64(a)  # as in weight
    if a == OGD_GLOBAL:
        OG.global_combine(prm, glob, yhat, ex, fb)
    elif a == KT_ALG1 or a == KT_AVG:
        KT.combine(c, glob, yhat, ex, fb, t)
    elif a == KOTLOWSKI1:
        KO.combine(prm, glob, ex)
    elif a >= IMPLICIT and a <= APROX:
        PA.combine(c, prm, yhat, ex, value, iw, fb, t)
    elif a == SGD:
        fb[yhat.shape[0]] = prm[0] / math.sqrt(t)
    elif a == NAG:
        glob[1] += ex[0]
        fb[yhat.shape[0]] = prm[0] * math.sqrt(t / glob[1])
    return value


@jit
def update(a, prm, glob, P, Q, j, x, t, fb, w, slot, n_out):
    """(n_out is P.shape[1], passed so a single-output caller can make it a constant.)"""
    c = np.int64(a)  # as in weight
    if a <= SCINOL2:
        SC.update(c, prm, P, Q, j, x, t, fb, w, slot, n_out)
    elif a == OGD_COORD or a == OGD_GLOBAL:
        OG.update(c, prm, P, Q, j, x, fb, n_out)
    elif a <= KT_COORD:
        KT.update(c, glob, P, j, x, fb, w, slot, n_out)
    elif a == KOTLOWSKI1:
        KO.update(P, Q, j, x, fb, n_out)
    elif a <= APROX:
        PA.update(P, j, x, fb, n_out)
    else:
        BL.update(a, prm, glob, P, Q, j, x, t, fb, w, slot, n_out)  # the literal: adam ran 30-50% slower on a plain int


# -- the batch driver ------------------------------------------------------------
@inline
def _col(indices, p, start, dense):
    return p - start if dense else indices[p]


@inline
def _predict(a, prm, glob, P, Q, indices, data, start, end, dense, bias, t, learning, yhat, ex, w):
    """ŷ and the extra sums for one row; w[p - start + bias, k] holds the
    weights of entry p (the bias, coordinate 0 with x = 1, first)."""
    yhat[:] = 0.0
    ex[:] = 0.0
    if bias:
        j0 = np.int64(0)
        for k in range(P.shape[1]):
            w[0, k] = weight(a, prm, glob, P, Q, j0, k, 1.0, t, learning)
            yhat[k] += w[0, k]
        extras(a, prm, glob, Q, j0, 1.0, ex)
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            j = _col(indices, p, start, dense) + bias
            slot = p - start + bias
            for k in range(P.shape[1]):
                wk = weight(a, prm, glob, P, Q, j, k, x, t, learning)
                w[slot, k] = wk
                yhat[k] += x * wk
            extras(a, prm, glob, Q, j, x, ex)


@inline
def _update(a, prm, glob, P, Q, indices, data, start, end, dense, bias, fb, w, n_out):
    t = glob[0]
    if bias:
        j0 = np.int64(0)
        update(a, prm, glob, P, Q, j0, 1.0, t, fb, w, j0, n_out)
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            update(a, prm, glob, P, Q, _col(indices, p, start, dense) + bias, x, t, fb, w, p - start + bias, n_out)


@inline
def _predict_single(a, prm, glob, P, Q, indices, data, start, end, dense, bias, t, learning, ex, w):
    """``_predict`` for one output with a scalar accumulator (about twice as
    fast: the compiler cannot keep an array element in a register)."""
    if has_extras(a):
        ex[:] = 0.0
    yhat = 0.0
    k0 = np.int64(0)
    if bias:
        w[0, 0] = weight(a, prm, glob, P, Q, k0, k0, 1.0, t, learning)
        yhat += w[0, 0]
        extras(a, prm, glob, Q, k0, 1.0, ex)
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            j = _col(indices, p, start, dense) + bias
            wj = weight(a, prm, glob, P, Q, j, k0, x, t, learning)
            w[p - start + bias, 0] = wj
            yhat += x * wj
            extras(a, prm, glob, Q, j, x, ex)
    return yhat


AHEAD = 4
"""Rows ahead whose coordinates' state a sparse kernel asks the cache for
(:func:`_prefetch_state`)."""


@inline
def _prefetch_state(P, Q, indptr, indices, i, dense, bias):
    """Prefetch the P and Q rows of row i's coordinates, if row i exists.
    Sparse rows over many coordinates (2^20 hashed features: tens of MB of
    state) miss the cache at nearly every entry, and the loop asks for each
    entry's state only when it gets there; asked for a few rows early, it
    arrives while the rows before are learned. Dense rows reuse the same
    coordinates, which stay cached."""
    if dense or i >= indptr.shape[0] - 1:
        return
    for p in range(indptr[i], indptr[i + 1]):
        j = indices[p] + bias
        prefetch_row(P, j)
        prefetch_row(Q, j)


@inline
def _rows_single(a, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses, w,
                 ex, yhat, fb):
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        _prefetch_state(P, Q, indptr, indices, i + AHEAD, dense, bias)
        learning = not math.isnan(y[i])
        yhat[0] = _predict_single(a, prm, glob, P, Q, indices, data, start, end, dense, bias, glob[0] + 1.0,
                                  learning, ex, w)
        scores[i, 0] = yhat[0]
        if not learning:
            losses[i] = math.nan
            continue
        weight_i = iw[i] if iw.shape[0] else 1.0
        if weight_i == 0.0:  # learns nothing: the loss only
            losses[i] = _loss(loss, loss_prm, y[i], yhat, fb)
            continue
        losses[i] = combine(a, prm, glob, yhat, ex, y[i], weight_i, loss, loss_prm, fb)
        _update(a, prm, glob, P, Q, indices, data, start, end, dense, bias, fb, w, 1)


@inline
def _rows_multi(a, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses, w,
                ex, yhat, fb):
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        _prefetch_state(P, Q, indptr, indices, i + AHEAD, dense, bias)
        learning = not math.isnan(y[i])
        _predict(a, prm, glob, P, Q, indices, data, start, end, dense, bias, glob[0] + 1.0, learning, yhat, ex, w)
        scores[i, :] = yhat
        if not learning:
            losses[i] = math.nan
            continue
        weight_i = iw[i] if iw.shape[0] else 1.0
        if weight_i == 0.0:  # learns nothing: the loss only
            losses[i] = _loss(loss, loss_prm, y[i], yhat, fb)
            continue
        losses[i] = combine(a, prm, glob, yhat, ex, y[i], weight_i, loss, loss_prm, fb)
        _update(a, prm, glob, P, Q, indices, data, start, end, dense, bias, fb, w, P.shape[1])


@inline
def _learn_rows(a, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    """Learn from each row in order; scores[i] gets ŷ_i made before learning
    from row i, losses[i] its loss ℓ (unweighted; NaN when y[i] is NaN:
    predicted only). iw[i] ≥ 0 is row i's importance weight (an empty iw:
    all 1); a row of weight 0 is predicted and its loss computed, but it
    changes nothing, not even t."""
    n_out = P.shape[1]
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    w = np.empty((longest + 1, n_out))
    yhat = np.empty(n_out)
    ex = np.zeros(N_EXTRAS)
    fb = np.empty(n_out + N_FB_EXTRA)
    if n_out == 1:
        _rows_single(a, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses,
                     w, ex, yhat, fb)
    else:
        _rows_multi(a, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses,
                    w, ex, yhat, fb)


# One compiled entry point per algorithm: with the code a constant, the
# dispatch above folds away and each learner runs its own tight loop
# (numba's literal dispatch would do this too, but re-types on every call).


@batch
def _learn_scinol1(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(SCINOL1, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_scinol2(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(SCINOL2, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_ogd(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(OGD_COORD, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_ogd_global(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(OGD_GLOBAL, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_kt(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(KT_ALG1, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_kt_avg(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(KT_AVG, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_kt_coord(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(KT_COORD, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_kotlowski1(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(KOTLOWSKI1, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_implicit(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(IMPLICIT, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_pa(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(PA0, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_pa1(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(PA1, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_pa2(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(PA2, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_aprox(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(APROX, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_sgd(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(SGD, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_adagrad(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(ADAGRAD, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_adam(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(ADAM, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


@batch
def _learn_nag(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses):
    _learn_rows(NAG, prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)


LEARN_ROWS = {
    SCINOL1: _learn_scinol1,
    SCINOL2: _learn_scinol2,
    OGD_COORD: _learn_ogd,
    OGD_GLOBAL: _learn_ogd_global,
    KT_ALG1: _learn_kt,
    KT_AVG: _learn_kt_avg,
    KT_COORD: _learn_kt_coord,
    KOTLOWSKI1: _learn_kotlowski1,
    IMPLICIT: _learn_implicit,
    PA0: _learn_pa,
    PA1: _learn_pa1,
    PA2: _learn_pa2,
    APROX: _learn_aprox,
    SGD: _learn_sgd,
    ADAGRAD: _learn_adagrad,
    ADAM: _learn_adam,
    NAG: _learn_nag,
}
"""Algorithm code → its batch kernel:
``(prm, glob, P, Q, indptr, indices, data, dense, bias, y, iw, loss, loss_prm, scores, losses)``."""


@jit
def predict_row(a, prm, glob, P, Q, indices, data, bias, learning, yhat, ex, w):
    """Protocol ``predict`` on one example's slice (pure): partial ŷ and
    extra sums, and the weights used (kept by the shard until feedback)."""
    _predict(a, prm, glob, P, Q, indices, data, 0, indices.shape[0], False, bias, glob[0] + 1.0, learning,
             yhat, ex, w)


@jit
def combine_row(a, prm, glob, yhat, ex, y, iw, loss, loss_prm, fb):
    """Protocol ``combine`` for an example of weight iw > 0: the loss;
    feedback into fb; advances glob."""
    return combine(a, prm, glob, yhat, ex, y, iw, loss, loss_prm, fb)


@jit
def combine_rows(a, prm, glob, totals, y, iw, loss, loss_prm, yhats, values, fbs, learned, globs):
    """``combine_row`` (or ``loss_only``) on each row of ``totals`` (ŷ then
    the extra sums), in order, as the sharded Combiner would call them one
    event at a time: y NaN (unlabelled) changes nothing and its value is
    NaN; weight 0 gives the loss only; otherwise the loss, the feedback
    fbs[i] (learned[i] set), and the globals advance. yhats[i]: ŷ as the
    call left it; globs[i]: the globals after row i."""
    n_out = yhats.shape[1]
    for i in range(totals.shape[0]):
        yhat = totals[i, :n_out].copy()
        learned[i] = False
        if math.isnan(y[i]):
            values[i] = math.nan
        elif iw[i] == 0.0:
            values[i] = loss_grad_into(loss, loss_prm, y[i], yhat, fbs[i])
        else:
            values[i] = combine(a, prm, glob, yhat, totals[i, n_out:].copy(), y[i], iw[i], loss, loss_prm, fbs[i])
            learned[i] = True
        yhats[i] = yhat
        globs[i] = glob


@jit
def loss_only(yhat, y, loss, loss_prm, fb):
    """ℓ(y, ŷ) for an example that is not learned from (weight 0)."""
    return loss_grad_into(loss, loss_prm, y, yhat, fb)


@jit
def update_row(a, prm, glob, P, Q, indices, data, bias, fb, w):
    """Protocol ``update`` on one example's slice with the weights predict gave."""
    _update(a, prm, glob, P, Q, indices, data, 0, indices.shape[0], False, bias, fb, w, P.shape[1])


@inline
def _predict_block(a, prm, glob, P, Q, indptr, indices, data, learning, out, w):
    """``predict_row`` on each row of a CSR block with one state (pure):
    out[i] = row i's partial ŷ then extra sums; w[p] the weights of entry p."""
    n_out = P.shape[1]
    t = glob[0] + 1.0
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        _prefetch_state(P, Q, indptr, indices, i + AHEAD, False, False)
        if n_out == 1:
            out[i, 1:] = 0.0  # the extra sums, which _predict_single leaves alone for an algorithm without them
            out[i, 0] = _predict_single(a, prm, glob, P, Q, indices, data, start, end, False, False, t, learning[i],
                                        out[i, 1:], w[start:end])
        else:
            _predict(a, prm, glob, P, Q, indices, data, start, end, False, False, t, learning[i], out[i, :n_out],
                     out[i, n_out:], w[start:end])


@inline
def _update_block(a, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    """``update_row`` on each row of a CSR block, in order, row i with the
    globals globs[i] and feedback fbs[i] of its own example; rows without
    feedback (unlabelled, weight 0) are skipped. indptr may be a window of
    a larger block: w is indexed like indices."""
    n_out = P.shape[1]
    for i in range(indptr.shape[0] - 1):
        _prefetch_state(P, Q, indptr, indices, i + AHEAD, False, False)
        if has_fb[i]:
            start, end = indptr[i], indptr[i + 1]
            if n_out == 1:  # the constant lets the compiler drop the loop over outputs, as in _rows_single
                _update(a, prm, globs[i], P, Q, indices, data, start, end, False, False, fbs[i], w[start:end], 1)
            else:
                _update(a, prm, globs[i], P, Q, indices, data, start, end, False, False, fbs[i], w[start:end], n_out)


# The sharded protocol's block kernels, one compiled pair per algorithm as
# LEARN_ROWS: with the code a runtime value each weight and update call
# went through every algorithm's branches (about 7x slower per coordinate).
@batch
def _predict_scinol1(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(SCINOL1, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_scinol1(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(SCINOL1, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_scinol2(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(SCINOL2, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_scinol2(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(SCINOL2, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_ogd(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(OGD_COORD, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_ogd(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(OGD_COORD, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_ogd_global(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(OGD_GLOBAL, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_ogd_global(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(OGD_GLOBAL, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_kt(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(KT_ALG1, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_kt(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(KT_ALG1, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_kt_avg(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(KT_AVG, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_kt_avg(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(KT_AVG, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_kt_coord(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(KT_COORD, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_kt_coord(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(KT_COORD, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_kotlowski1(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(KOTLOWSKI1, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_kotlowski1(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(KOTLOWSKI1, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_implicit(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(IMPLICIT, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_implicit(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(IMPLICIT, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_pa(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(PA0, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_pa(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(PA0, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_pa1(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(PA1, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_pa1(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(PA1, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_pa2(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(PA2, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_pa2(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(PA2, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_aprox(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(APROX, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_aprox(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(APROX, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_sgd(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(SGD, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_sgd(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(SGD, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_adagrad(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(ADAGRAD, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_adagrad(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(ADAGRAD, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_adam(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(ADAM, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_adam(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(ADAM, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


@batch
def _predict_nag(prm, glob, P, Q, indptr, indices, data, learning, out, w):
    _predict_block(NAG, prm, glob, P, Q, indptr, indices, data, learning, out, w)


@batch
def _update_nag(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w):
    _update_block(NAG, prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)


PREDICT_ROWS = {
    SCINOL1: _predict_scinol1, SCINOL2: _predict_scinol2, OGD_COORD: _predict_ogd, OGD_GLOBAL: _predict_ogd_global,
    KT_ALG1: _predict_kt, KT_AVG: _predict_kt_avg, KT_COORD: _predict_kt_coord, KOTLOWSKI1: _predict_kotlowski1,
    IMPLICIT: _predict_implicit, PA0: _predict_pa, PA1: _predict_pa1, PA2: _predict_pa2, APROX: _predict_aprox,
    SGD: _predict_sgd, ADAGRAD: _predict_adagrad, ADAM: _predict_adam, NAG: _predict_nag,
}
"""Algorithm code → its block predict: ``(prm, glob, P, Q, indptr, indices, data, learning, out, w)``."""
UPDATE_ROWS = {
    SCINOL1: _update_scinol1, SCINOL2: _update_scinol2, OGD_COORD: _update_ogd, OGD_GLOBAL: _update_ogd_global,
    KT_ALG1: _update_kt, KT_AVG: _update_kt_avg, KT_COORD: _update_kt_coord, KOTLOWSKI1: _update_kotlowski1,
    IMPLICIT: _update_implicit, PA0: _update_pa, PA1: _update_pa1, PA2: _update_pa2, APROX: _update_aprox,
    SGD: _update_sgd, ADAGRAD: _update_adagrad, ADAM: _update_adam, NAG: _update_nag,
}
"""Algorithm code → its block update: ``(prm, globs, P, Q, indptr, indices, data, fbs, has_fb, w)``."""


@jit
def current_weights(a, prm, glob, P, Q):
    """The weights as the model stands, for inspection and export: what
    the model would predict with for a coordinate whose input does not grow
    its scale (x → 0 in the per-input terms), at the next trial, offline."""
    out = np.zeros(P.shape[:2])
    t = glob[0] + 1.0
    offline = np.bool_(False)  # not a literal, as in the batch kernels: one compile of weight
    for j in range(P.shape[0]):
        for k in range(P.shape[1]):
            out[j, k] = weight(a, prm, glob, P, Q, j, k, 0.0, t, offline)
    return out


drop_stale_cache("kernels", _learn_scinol1)

__all__ = ["LEARN_ROWS", "predict_row", "combine_row", "loss_only", "update_row", "PREDICT_ROWS", "combine_rows",
           "UPDATE_ROWS", "current_weights"]
