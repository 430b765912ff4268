"""Compiled ScInOL1 / ScInOL2 kernels (seed 000, Algorithms 1 and 2).

Per-coordinate state, one row per coordinate j and one column per output k:
``G`` (negative cumulative gradient), ``S2`` (sum of squared gradients),
``B`` (β for ScInOL1, η for ScInOL2); ``M`` (max |x_j| seen) has one entry
per coordinate, shared by the outputs.

A coordinate with x = 0 is skipped entirely: in both algorithms it changes
no state (β's update is skipped where x = 0, DESIGN.md §1) and contributes
nothing to ŷ, so dense and sparse inputs give identical results. Skipping
also means every visited coordinate has M ≥ |x| > 0, so √(S²+M²) > 0 and the
0/0 conventions of the seed are never needed inside the kernels.

``predict`` is pure: it computes w_t with M_t = max(M, |x|) and β_t locally and
leaves the state alone; ``update`` stores M_t and β_t and applies the
gradient, using the weights predict returned. Unlabelled examples (y = NaN)
are predicted and not learned from, so they leave no trace in the state.

The bias feature is coordinate 0 with value 1; when ``bias`` is set, input
feature index i lives at coordinate i + 1.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .losses import SOFTMAX, scalar_loss_grad, softmax_loss_grad

SCINOL1, SCINOL2 = 1, 2


# error_model="numpy": IEEE division (no Python ZeroDivisionError checks in
# the inner loops); the kernels never divide by zero anyway (see above).
_jit = njit(cache=True, error_model="numpy")
_inline = njit(cache=True, error_model="numpy", inline="always")


@_inline
def _weight(variant, eps, g_sum, s2_sum, m2, b, x, t):
    """w_{t} of one (coordinate, output) from G, S², M_t², β/η, x_t and t."""
    s2 = s2_sum + m2
    inv = 1.0 / math.sqrt(s2)
    theta = g_sum * inv
    if variant == SCINOL1:
        # s2/x² ≥ 1 first, so neither x² t nor the ratio overflows.
        beta = min(b, eps * (s2 / (x * x)) / t)
        return math.copysign(beta * math.expm1(0.5 * abs(theta)) * 0.5 * inv, theta)
    clipped = theta if abs(theta) <= 1.0 else math.copysign(1.0, theta)
    return clipped * b * 0.5 * inv


@_inline
def _next_b(variant, eps, b, s2_sum, m2, x, t, gx, w):
    """β_t (ScInOL1: the min over trials) or η_t = η_{t-1} - g x w (ScInOL2)."""
    if variant == SCINOL1:
        return min(b, eps * ((s2_sum + m2) / (x * x)) / t)
    return b - gx * w


@_inline
def _coord_predict(variant, eps, G, S2, M, B, j, x, t, yhat, w, slot):
    """w_{t,j,k} for every output k into w[slot, :], and x·w added to ŷ."""
    ax = abs(x)
    m = M[j] if M[j] > ax else ax
    m2 = m * m
    for k in range(G.shape[1]):
        wk = _weight(variant, eps, G[j, k], S2[j, k], m2, B[j, k], x, t)
        w[slot, k] = wk
        yhat[k] += x * wk


@_inline
def _coord_update(variant, eps, G, S2, M, B, j, x, t, g, w, slot):
    ax = abs(x)
    if ax > M[j]:
        M[j] = ax
    m2 = M[j] * M[j]
    for k in range(G.shape[1]):
        gx = g[k] * x
        B[j, k] = _next_b(variant, eps, B[j, k], S2[j, k], m2, x, t, gx, w[slot, k])
        G[j, k] -= gx
        S2[j, k] += gx * gx


# Rows come as CSR (indptr, indices, data). A dense batch is passed as its
# flattened values with ``dense`` set: the column is then p - start, so both
# layouts share one kernel body.
@_inline
def _col(indices, p, start, dense):
    return p - start if dense else indices[p]


@_inline
def _row_predict(variant, eps, G, S2, M, B, indices, data, start, end, dense, bias, t, yhat, w):
    """ŷ for one row; w[p - start + bias] holds the weights of entry p."""
    yhat[:] = 0.0
    if bias:
        _coord_predict(variant, eps, G, S2, M, B, 0, 1.0, t, yhat, w, 0)
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            _coord_predict(variant, eps, G, S2, M, B, _col(indices, p, start, dense) + bias, x, t, yhat, w,
                           p - start + bias)


@_inline
def _row_update(variant, eps, G, S2, M, B, indices, data, start, end, dense, bias, t, g, w):
    if bias:
        _coord_update(variant, eps, G, S2, M, B, 0, 1.0, t, g, w, 0)
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            _coord_update(variant, eps, G, S2, M, B, _col(indices, p, start, dense) + bias, x, t, g, w,
                          p - start + bias)


@_inline
def _loss_grad(loss, label, yhat, g):
    if loss == SOFTMAX:
        return softmax_loss_grad(label, yhat, g)
    value, grad = scalar_loss_grad(loss, label, yhat[0])
    g[0] = grad
    return value


@_jit
def _learn_multi(variant, eps, G, S2, M, B, t0, indptr, indices, data, dense, bias, y, loss, scores, losses):
    n_out = G.shape[1]
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    w = np.empty((longest + 1, n_out))
    yhat = np.empty(n_out)
    g = np.empty(n_out)
    t = t0
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        _row_predict(variant, eps, G, S2, M, B, indices, data, start, end, dense, bias, t + 1.0, yhat, w)
        scores[i, :] = yhat
        if math.isnan(y[i]):
            losses[i] = math.nan
            continue
        t += 1.0
        losses[i] = _loss_grad(loss, y[i], yhat, g)
        _row_update(variant, eps, G, S2, M, B, indices, data, start, end, dense, bias, t, g, w)
    return t


@_jit
def _learn_single(variant, eps, G, S2, M, B, t0, indptr, indices, data, dense, bias, y, loss, scores, losses):
    """``_learn_multi`` for one output, on 1-D state with scalar accumulators
    (the same arithmetic; about twice as fast)."""
    longest = 0
    for i in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[i + 1] - indptr[i])
    w = np.empty(longest + 1)
    t = t0
    for i in range(indptr.shape[0] - 1):
        start, end = indptr[i], indptr[i + 1]
        tt = t + 1.0
        yhat = 0.0
        if bias:
            m = max(M[0], 1.0)
            w[0] = _weight(variant, eps, G[0], S2[0], m * m, B[0], 1.0, tt)
            yhat += w[0]
        for p in range(start, end):
            x = data[p]
            if x != 0.0:
                j = _col(indices, p, start, dense) + bias
                ax = abs(x)
                m = M[j] if M[j] > ax else ax
                wj = _weight(variant, eps, G[j], S2[j], m * m, B[j], x, tt)
                w[p - start + bias] = wj
                yhat += x * wj
        scores[i, 0] = yhat
        if math.isnan(y[i]):
            losses[i] = math.nan
            continue
        t = tt
        value, g = scalar_loss_grad(loss, y[i], yhat)
        losses[i] = value
        if bias:
            M[0] = max(M[0], 1.0)
            B[0] = _next_b(variant, eps, B[0], S2[0], M[0] * M[0], 1.0, t, g, w[0])
            G[0] -= g
            S2[0] += g * g
        for p in range(start, end):
            x = data[p]
            if x != 0.0:
                j = _col(indices, p, start, dense) + bias
                ax = abs(x)
                if ax > M[j]:
                    M[j] = ax
                gx = g * x
                B[j] = _next_b(variant, eps, B[j], S2[j], M[j] * M[j], x, t, gx, w[p - start + bias])
                G[j] -= gx
                S2[j] += gx * gx
    return t


@_jit
def _learn(variant, eps, G, S2, M, B, t0, indptr, indices, data, dense, bias, y, loss, scores, losses):
    if G.shape[1] == 1 and loss != SOFTMAX:
        n = G.shape[0]
        return _learn_single(variant, eps, G.reshape(n), S2.reshape(n), M, B.reshape(n), t0,
                             indptr, indices, data, dense, bias, y, loss, scores, losses)
    return _learn_multi(variant, eps, G, S2, M, B, t0, indptr, indices, data, dense, bias, y, loss, scores, losses)


def learn_csr(variant, eps, G, S2, M, B, t0, indptr, indices, data, bias, y, loss, scores, losses):
    """Learn from a CSR batch strictly in order, one example at a time.

    scores[i] receives ŷ_i made before learning from example i, losses[i] its
    loss (NaN when unlabelled). Returns the trial count after the batch.
    """
    return _learn(variant, eps, G, S2, M, B, t0, indptr, indices, data, False, bias, y, loss, scores, losses)


_NO_INDICES = np.empty(0, dtype=np.int64)


def learn_dense(variant, eps, G, S2, M, B, t0, X, bias, y, loss, scores, losses):
    """``learn_csr`` for a dense C-contiguous (n, d) batch; zeros are skipped."""
    n, d = X.shape
    indptr = np.arange(0, (n + 1) * d, d, dtype=np.int64) if d else np.zeros(n + 1, dtype=np.int64)
    return _learn(variant, eps, G, S2, M, B, t0, indptr, _NO_INDICES, X.reshape(-1), True, bias, y, loss,
                  scores, losses)


@_jit
def predict_row(variant, eps, G, S2, M, B, indices, data, bias, t, yhat, w):
    """Protocol ``predict`` for one example's slice: partial ŷ into yhat, the
    weights used into w (one row per nonzero, bias first). Pure."""
    _row_predict(variant, eps, G, S2, M, B, indices, data, 0, indices.shape[0], False, bias, t, yhat, w)


@_jit
def update_row(variant, eps, G, S2, M, B, indices, data, bias, t, g, w):
    """Protocol ``update`` for one example's slice, with the w predict gave."""
    _row_update(variant, eps, G, S2, M, B, indices, data, 0, indices.shape[0], False, bias, t, g, w)


@_jit
def current_weights(variant, G, S2, M, B):
    """w as the model stands (no new input: M_t = M, β_t = β), with the seed's
    conventions 0/0 = 0 and c/0 = ∞, so a never-seen coordinate has w = 0."""
    out = np.zeros(G.shape)
    for j in range(G.shape[0]):
        for k in range(G.shape[1]):
            if S2[j, k] + M[j] * M[j] > 0.0:
                # x = 0 makes ScInOL1's β bound ε(S²+M²)/0 = ∞, i.e. β_t = β.
                out[j, k] = _weight(variant, 1.0, G[j, k], S2[j, k], M[j] * M[j], B[j, k], 0.0, 1.0)
    return out
