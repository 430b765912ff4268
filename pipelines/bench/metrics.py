"""Per-example losses and accuracy, the same way for every tool.

Labels are class indices 0..K-1 everywhere in the benchmark (binary: 0/1).
Our learners and VW's binary learner give raw scores, whose cross-entropy is
computed exactly; River and VW's one-against-all give probabilities, whose
loss is -ln p of the true class with p clipped at ``P_FLOOR``. So that all
tools are scored alike on real data, every per-example loss there is capped
at LOSS_CAP = -ln P_FLOOR (a prediction that is certain and wrong, or NaN).
"""

from __future__ import annotations

import numpy as np

P_FLOOR = 1e-15
LOSS_CAP = float(-np.log(P_FLOOR))  # ≈ 34.5


def binary_score_losses(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Logistic loss ln(1 + e^{-y s}) with y = ±1 from class 0/1, exact."""
    y = np.where(labels == 1, 1.0, -1.0)
    return np.logaddexp(0.0, -y * scores)


def softmax_score_losses(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Softmax cross-entropy logsumexp(s) - s_y, exact; scores (n, K)."""
    top = scores.max(axis=1, keepdims=True)
    log_norm = top[:, 0] + np.log(np.exp(scores - top).sum(axis=1))
    return log_norm - scores[np.arange(len(labels)), labels]


def score_losses(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    return binary_score_losses(scores, labels) if scores.ndim == 1 else softmax_score_losses(scores, labels)


def score_predictions(scores: np.ndarray) -> np.ndarray:
    return (scores > 0).astype(np.int64) if scores.ndim == 1 else np.argmax(scores, axis=1)


def proba_losses(p_true: np.ndarray) -> np.ndarray:
    """-ln p of the true class; NaN (a diverged model) counts as the cap."""
    p = np.nan_to_num(np.asarray(p_true, dtype=np.float64), nan=0.0)
    return -np.log(np.clip(p, P_FLOOR, 1.0))


def capped(losses: np.ndarray) -> np.ndarray:
    return np.minimum(np.nan_to_num(losses, nan=LOSS_CAP), LOSS_CAP)
