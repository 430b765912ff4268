"""Losses as functions of the raw score ŷ, and what labels each accepts.

Every loss is identified by a small integer code so compiled kernels can
switch on it. Conventions (documented, tested):

- ``logistic``  ℓ = ln(1 + e^{-yŷ}),  y ∈ {-1, +1}; a label 0 is read as -1.
- ``hinge``     ℓ = max(0, 1 - yŷ),   y ∈ {-1, +1}; a label 0 is read as -1.
                 g = -y when yŷ ≤ 1 (Kempka et al. 2019, Table 1), else 0.
- ``absolute``  ℓ = |ŷ - y|,  g = sgn(ŷ - y) (0 at ŷ = y), any real y.
- ``squared``   ℓ = ½ (ŷ - y)²,  g = ŷ - y, any real y.  Not Lipschitz, so the
                 ScInOL regret bounds do not cover it; the algorithms still run.
- ``epsilon_insensitive``  ℓ = max(0, |ŷ - y| - ε), g = sgn(ŷ - y) outside
                 the tube, any real y; ε is the loss parameter (default 0.1).
- ``softmax``   ℓ = logsumexp(ŷ) - ŷ_y over K ≥ 2 outputs, y ∈ {0, …, K-1};
                 g = softmax(ŷ) - e_y.

A label NaN means "unlabelled": the example is predicted, not learned from.
"""

from __future__ import annotations

import math

import numpy as np

from .jit import njit

LOGISTIC, HINGE, ABSOLUTE, SQUARED, SOFTMAX, EPS_INSENSITIVE = 0, 1, 2, 3, 4, 5

LOSSES = {
    "logistic": LOGISTIC,
    "hinge": HINGE,
    "absolute": ABSOLUTE,
    "squared": SQUARED,
    "softmax": SOFTMAX,
    "epsilon_insensitive": EPS_INSENSITIVE,
}
DEFAULT_LOSS_PARAM = {"epsilon_insensitive": 0.1}
BINARY_LOSSES = ("logistic", "hinge")
"""Losses whose labels are the classes -1 and +1."""


def loss_code(name: str) -> int:
    try:
        return LOSSES[name]
    except KeyError:
        raise ValueError(
            f"unknown loss {name!r}; choose one of {', '.join(LOSSES)}"
        ) from None


class LabelError(ValueError):
    """A label outside the loss's domain; ``position`` is its row in the batch."""

    def __init__(self, position: int, message: str):
        super().__init__(f"label at position {position} {message}")
        self.position = position
        self.detail = message


def prepare_labels(loss: str, y, n_classes: int = 1) -> np.ndarray:
    """Labels as float64 in the loss's own domain, or a LabelError naming the
    first offending position. NaN (unlabelled) passes through."""
    y = np.ascontiguousarray(np.asarray(y, dtype=np.float64).reshape(-1))
    labelled = ~np.isnan(y)
    if np.isinf(y).any():
        bad = int(np.flatnonzero(np.isinf(y))[0])
        raise LabelError(bad, f"is {float(y[bad])!r}, not a finite number")
    if loss in BINARY_LOSSES:
        ok = (y == 1.0) | (y == -1.0) | (y == 0.0) | ~labelled
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise LabelError(bad, f"is {float(y[bad])!r}; {loss} loss takes labels -1/+1 (or 0/1, 0 read as -1)")
        y = np.where(y == 0.0, -1.0, y)
    elif loss == "softmax":
        ok = ((y >= 0) & (y < n_classes) & (y == np.floor(y))) | ~labelled
        if not ok.all():
            bad = int(np.flatnonzero(~ok)[0])
            raise LabelError(
                bad, f"is {float(y[bad])!r}; softmax loss with {n_classes} classes takes labels 0..{n_classes - 1}"
            )
    return y


@njit(cache=True, inline="always")
def scalar_loss_grad(code, y, yhat, param=0.0):
    """(ℓ(y, ŷ), dℓ/dŷ) for the scalar losses; ``param`` is ε-insensitive's ε."""
    if code == LOGISTIC:
        # One exp of -|yŷ| gives both ℓ = ln(1 + e^{-yŷ}) and
        # g = -y / (1 + e^{yŷ}) without overflow or cancellation.
        m = y * yhat
        e = math.exp(-abs(m))
        if m > 0.0:
            return math.log1p(e), -y * e / (1.0 + e)
        return math.log1p(e) - m, -y / (1.0 + e)
    if code == HINGE:
        m = y * yhat
        if m <= 1.0:
            return 1.0 - m, -y
        return 0.0, 0.0
    if code == ABSOLUTE:
        d = yhat - y
        if d > 0.0:
            return d, 1.0
        if d < 0.0:
            return -d, -1.0
        return 0.0, 0.0
    if code == EPS_INSENSITIVE:
        d = yhat - y
        if d > param:
            return d - param, 1.0
        if d < -param:
            return -d - param, -1.0
        return 0.0, 0.0
    # SQUARED
    d = yhat - y
    return 0.5 * d * d, d


@njit(cache=True, inline="always")
def softmax_loss_grad(label, yhat, g):
    """Cross-entropy of class ``label`` under softmax(ŷ); writes dℓ/dŷ into g."""
    k_count = yhat.shape[0]
    top = yhat[0]
    for k in range(1, k_count):
        if yhat[k] > top:
            top = yhat[k]
    total = 0.0
    for k in range(k_count):
        g[k] = math.exp(yhat[k] - top)
        total += g[k]
    for k in range(k_count):
        g[k] /= total
    c = int(label)
    g[c] -= 1.0
    # ln Σ e^{ŷ_k - top} - (ŷ_c - top): both terms small, so ln 2 is not
    # rounded away next to scores of 1e149 (ln total + top - ŷ_c would be).
    return math.log(total) - (yhat[c] - top)


@njit(cache=True, inline="always")
def loss_grad_into(code, param, y, yhat, g):
    """ℓ(y, ŷ) for any loss; dℓ/dŷ_k into g[k]."""
    if code == SOFTMAX:
        return softmax_loss_grad(y, yhat, g)
    value, grad = scalar_loss_grad(code, y, yhat[0], param)
    g[0] = grad
    return value


def loss_and_grad(loss: str, y: float, yhat: np.ndarray):
    """Python-level (ℓ, g) for one example; ŷ and g have one entry per output."""
    yhat = np.asarray(yhat, dtype=np.float64).reshape(-1)
    if loss == "softmax":
        g = np.empty_like(yhat)
        return softmax_loss_grad(y, yhat, g), g
    value, grad = scalar_loss_grad(loss_code(loss), y, yhat[0])
    return value, np.array([grad])


def probabilities(loss: str, scores: np.ndarray) -> np.ndarray:
    """P(y = +1) for logistic scores (n,), class probabilities for softmax (n, K)."""
    scores = np.asarray(scores, dtype=np.float64)
    if loss == "logistic":
        s = scores.reshape(scores.shape[0], -1)[:, 0]
        out = np.empty_like(s)
        pos = s >= 0
        out[pos] = 1.0 / (1.0 + np.exp(-s[pos]))
        e = np.exp(s[~pos])
        out[~pos] = e / (1.0 + e)
        return out
    if loss == "softmax":
        z = scores - scores.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)
    raise ValueError(f"{loss} loss has no probabilistic reading; use logistic or softmax")


@njit(cache=True)
def _losses_of(code, param, y, scores, out):
    g = np.empty(scores.shape[1])
    for i in range(y.shape[0]):
        out[i] = math.nan if math.isnan(y[i]) else loss_grad_into(code, param, y[i], scores[i], g)


def losses_of(loss: str, y: np.ndarray, scores: np.ndarray, param: float | None = None) -> np.ndarray:
    """ℓ(y_i, ŷ_i) for each row (NaN where y is NaN): scores (n, n_outputs),
    labels as :func:`prepare_labels` returns them."""
    scores = np.ascontiguousarray(scores, dtype=np.float64).reshape(len(y), -1)
    out = np.empty(len(y))
    param = DEFAULT_LOSS_PARAM.get(loss, 0.0) if param is None else float(param)
    _losses_of(loss_code(loss), param, np.asarray(y, dtype=np.float64), scores, out)
    return out
