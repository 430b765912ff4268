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


@njit(cache=True, inline="always")
def _coord_predict(variant, eps, G, S2, M, B, j, x, t, yhat, w, slot):
    """w_{t,j,k} for every output k into w[slot, :], and x·w added to ŷ."""
    ax = abs(x)
    m = M[j] if M[j] > ax else ax
    m2 = m * m
    for k in range(G.shape[1]):
        s2 = S2[j, k] + m2
        s = math.sqrt(s2)
        theta = G[j, k] / s
        if variant == SCINOL1:
            # s2/x² ≥ 1 first, so neither x² t nor the ratio overflows.
            beta = min(B[j, k], eps * (s2 / (x * x)) / t)
            wk = math.copysign(beta * math.expm1(0.5 * abs(theta)) / (2.0 * s), theta)
        else:
            clipped = theta if abs(theta) <= 1.0 else math.copysign(1.0, theta)
            wk = clipped * B[j, k] / (2.0 * s)
        w[slot, k] = wk
        yhat[k] += x * wk


@njit(cache=True, inline="always")
def _coord_update(variant, eps, G, S2, M, B, j, x, t, g, w, slot):
    ax = abs(x)
    if ax > M[j]:
        M[j] = ax
    m2 = M[j] * M[j]
    for k in range(G.shape[1]):
        if variant == SCINOL1:
            beta = eps * ((S2[j, k] + m2) / (x * x)) / t
            if beta < B[j, k]:
                B[j, k] = beta
        gx = g[k] * x
        G[j, k] -= gx
        S2[j, k] += gx * gx
        if variant == SCINOL2:
            B[j, k] -= gx * w[slot, k]


@njit(cache=True, inline="always")
def _row_predict(variant, eps, G, S2, M, B, indices, data, start, end, bias, t, yhat, w):
    """ŷ for one CSR row; w[p - start + bias] holds the weights of nonzero p."""
    yhat[:] = 0.0
    off = 0
    if bias:
        _coord_predict(variant, eps, G, S2, M, B, 0, 1.0, t, yhat, w, 0)
        off = 1
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            _coord_predict(variant, eps, G, S2, M, B, indices[p] + off, x, t, yhat, w, p - start + off)


@njit(cache=True, inline="always")
def _row_update(variant, eps, G, S2, M, B, indices, data, start, end, bias, t, g, w):
    off = 0
    if bias:
        _coord_update(variant, eps, G, S2, M, B, 0, 1.0, t, g, w, 0)
        off = 1
    for p in range(start, end):
        x = data[p]
        if x != 0.0:
            _coord_update(variant, eps, G, S2, M, B, indices[p] + off, x, t, g, w, p - start + off)


@njit(cache=True, inline="always")
def _loss_grad(loss, label, yhat, g):
    if loss == SOFTMAX:
        return softmax_loss_grad(label, yhat, g)
    value, grad = scalar_loss_grad(loss, label, yhat[0])
    g[0] = grad
    return value


@njit(cache=True)
def learn_csr(variant, eps, G, S2, M, B, t0, indptr, indices, data, bias, y, loss, scores, losses):
    """Learn from a CSR batch strictly in order, one example at a time.

    scores[i] receives ŷ_i made before learning from example i, losses[i] its
    loss (NaN when unlabelled). Returns the trial count after the batch.
    """
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
        _row_predict(variant, eps, G, S2, M, B, indices, data, start, end, bias, t + 1.0, yhat, w)
        scores[i, :] = yhat
        if math.isnan(y[i]):
            losses[i] = math.nan
            continue
        t += 1.0
        losses[i] = _loss_grad(loss, y[i], yhat, g)
        _row_update(variant, eps, G, S2, M, B, indices, data, start, end, bias, t, g, w)
    return t


@njit(cache=True)
def learn_dense(variant, eps, G, S2, M, B, t0, X, bias, y, loss, scores, losses):
    """``learn_csr`` for a dense (n, d) batch; zero entries are skipped."""
    n_out = G.shape[1]
    d = X.shape[1]
    w = np.empty((d + 1, n_out))
    yhat = np.empty(n_out)
    g = np.empty(n_out)
    cols = np.arange(d)
    t = t0
    for i in range(X.shape[0]):
        row = X[i]
        _row_predict(variant, eps, G, S2, M, B, cols, row, 0, d, bias, t + 1.0, yhat, w)
        scores[i, :] = yhat
        if math.isnan(y[i]):
            losses[i] = math.nan
            continue
        t += 1.0
        losses[i] = _loss_grad(loss, y[i], yhat, g)
        _row_update(variant, eps, G, S2, M, B, cols, row, 0, d, bias, t, g, w)
    return t


@njit(cache=True)
def predict_row(variant, eps, G, S2, M, B, indices, data, bias, t, yhat, w):
    """Protocol ``predict`` for one example's slice: partial ŷ into yhat, the
    weights used into w (one row per nonzero, bias first). Pure."""
    _row_predict(variant, eps, G, S2, M, B, indices, data, 0, indices.shape[0], bias, t, yhat, w)


@njit(cache=True)
def update_row(variant, eps, G, S2, M, B, indices, data, bias, t, g, w):
    """Protocol ``update`` for one example's slice, with the w predict gave."""
    _row_update(variant, eps, G, S2, M, B, indices, data, 0, indices.shape[0], bias, t, g, w)


@njit(cache=True)
def current_weights(variant, G, S2, M, B):
    """w as the model stands (no new input: M_t = M), with the seed's
    conventions 0/0 = 0 and c/0 = ∞, so a never-seen coordinate has w = 0."""
    out = np.zeros(G.shape)
    for j in range(G.shape[0]):
        for k in range(G.shape[1]):
            s2 = S2[j, k] + M[j] * M[j]
            if s2 == 0.0:
                continue
            s = math.sqrt(s2)
            theta = G[j, k] / s
            if variant == SCINOL1:
                out[j, k] = math.copysign(B[j, k] * math.expm1(0.5 * abs(theta)) / (2.0 * s), theta)
            else:
                clipped = theta if abs(theta) <= 1.0 else math.copysign(1.0, theta)
                out[j, k] = clipped * B[j, k] / (2.0 * s)
    return out
