"""The coordinate-separable learner protocol (DESIGN.md §1).

An algorithm keeps per-coordinate state in a :class:`~learners.state.LearnerState`
and is driven, for each example, as::

    partial, memo = algo.predict(shard_state, idx, vals, bias, scalars)  # per shard
    total = sum of partials over shards
    yhat, loss, feedback = algo.combine(scalars, total, y)   # global scalars live here
    algo.update(shard_state, idx, vals, bias, scalars, feedback, memo)  # per shard

``predict`` is pure; ``memo`` carries what the shard must keep until the
feedback arrives (the weights it predicted with). ``combine`` owns the loss
derivative and the global scalars (e.g. the trial count t) and advances them.

For speed a single-shard learner does all three inside one compiled call per
batch (``learn_csr`` / ``learn_dense``), with exactly the same arithmetic.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from .state import LearnerState


class Algorithm(Protocol):
    name: str
    params: dict
    parameter_free: bool
    scale_invariant: bool
    shardable: bool

    def init_state(self, n_coords: int, n_outputs: int) -> LearnerState: ...

    def learn_csr(self, state, indptr, indices, data, bias, y, loss, scores, losses) -> None: ...

    def learn_dense(self, state, X, bias, y, loss, scores, losses) -> None: ...

    def predict(self, state, indices, data, bias, scalars) -> tuple[np.ndarray, object]: ...

    def combine(self, scalars: dict, total: np.ndarray, y: float, loss: int) -> tuple[np.ndarray, float, np.ndarray]: ...

    def update(self, state, indices, data, bias, scalars, feedback, memo) -> None: ...

    def weights(self, state: LearnerState) -> np.ndarray: ...
