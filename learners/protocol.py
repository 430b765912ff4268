"""The learner protocol.

Every learner runs single-shard through ``learn_rows`` (a compiled batch
kernel, one example at a time). A *shardable* (coordinate-separable) learner
also exposes the three steps its kernel is made of, so its coordinates can
be split over shards that are coupled only through ``combine``::

    partial, memo = algo.predict(shard_state, idx, vals, bias, scalars)  # per shard, pure
    total = sum of partials over shards      # ŷ (one per output), then extra sums such as |x|²
    yhat, loss, feedback = algo.combine(scalars, total, y, loss_code, loss_param, weight)  # advances the globals
    algo.update(shard_state, idx, vals, bias, scalars, feedback, memo)  # per shard

``memo`` carries what a shard keeps until the feedback arrives (the weights
it predicted with). The fused kernel does exactly this arithmetic.

Importance weights: a weight h ≥ 0 multiplies the example's loss. It enters
in ``combine`` only (the gradient methods scale g by h there, the
implicit/PA/aProx family its step size), so the shards never see it; h = 0
returns no feedback and changes nothing.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .state import LearnerState


class Learner(Protocol):
    """What :class:`~learners.model.OnlineLearner` needs of an algorithm."""

    name: str
    params: dict
    parameter_free: bool
    scale_invariant: bool
    shardable: bool

    def check_loss(self, loss: str) -> None: ...

    def init_state(self, n_coords: int, n_outputs: int) -> LearnerState: ...

    def grow_state(self, state: LearnerState, n_coords: int) -> None: ...

    def check_state(self, state: LearnerState, n_outputs: int) -> None: ...

    def learn_rows(self, state, indptr, indices, data, dense, bias, y, iw, loss, loss_param, scores,
                   losses) -> None: ...

    def weights(self, state: LearnerState) -> np.ndarray: ...


class ShardableLearner(Learner, Protocol):
    def predict(self, state, indices, data, bias, scalars, learning=True) -> tuple[np.ndarray, object]: ...

    def combine(self, scalars: dict, total: np.ndarray, y: float, loss: int, loss_param: float = 0.0,
                weight: float = 1.0) -> tuple[np.ndarray, float, np.ndarray | None]: ...

    def update(self, state, indices, data, bias, scalars, feedback, memo) -> None: ...

    def predict_rows(self, state, indptr, indices, data, scalars, learning) -> tuple[np.ndarray, object]: ...

    def combine_rows(self, scalars: dict, totals: np.ndarray, y: np.ndarray, loss: int, loss_param: float,
                     weights: np.ndarray) -> tuple: ...

    def update_rows(self, state, indptr, indices, data, globs, feedback, has_feedback, memo, first_row) -> None: ...

    @property
    def scalar_names(self) -> tuple[str, ...]: ...
