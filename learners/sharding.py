"""Feature shards: the learner protocol run over K shards in one process.

This is the reference for the distributed sharded pipeline: each coordinate
belongs to one shard (by a hash of its index), each shard holds the state of
its coordinates only, and the shards are coupled only through ``combine``.
With the same examples in the same order it gives the results of a
single-shard :class:`~learners.model.OnlineLearner`, up to floating-point
round-off (the partial sums are added in a different order).
"""

from __future__ import annotations

import numpy as np

from .inputs import CSRBatch, as_batch
from .losses import DEFAULT_LOSS_PARAM, loss_code, prepare_labels
from .state import LearnerState

_MASK64 = (1 << 64) - 1


def shard_of(coordinate: int, n_shards: int) -> int:
    """Shard of a coordinate: splitmix64 finaliser of the index, mod K, so
    neighbouring coordinates spread evenly."""
    z = (coordinate + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) % n_shards


class Shard:
    """The state of the coordinates one shard owns, in a local index space."""

    def __init__(self, algorithm, n_outputs: int):
        self.algorithm = algorithm
        self.state: LearnerState = algorithm.init_state(0, n_outputs)
        self.local: dict[int, int] = {}
        self.coords: list[int] = []

    def local_indices(self, coords: np.ndarray) -> np.ndarray:
        out = np.empty(coords.shape[0], dtype=np.int64)
        for p, c in enumerate(coords.tolist()):
            slot = self.local.get(c)
            if slot is None:
                slot = self.local[c] = len(self.coords)
                self.coords.append(c)
            out[p] = slot
        self.state.grow(len(self.coords))
        return out


class ShardedLearner:
    """K shards + combine, one example at a time (slow; for tests and as the
    specification of the distributed mode)."""

    def __init__(self, algorithm, loss: str, n_shards: int, *, n_outputs: int = 1, bias: bool = True,
                 loss_param: float | None = None):
        if not getattr(algorithm, "shardable", False):
            raise ValueError(f"learner {algorithm.name!r} is not coordinate-separable; it runs on one shard only")
        if n_shards < 1:
            raise ValueError(f"need at least one shard, not {n_shards}")
        self.algorithm = algorithm
        self.loss = loss
        self._loss = loss_code(loss)
        self.loss_param = float(DEFAULT_LOSS_PARAM.get(loss, 0.0) if loss_param is None else loss_param)
        self.n_outputs = n_outputs
        self.bias = bias
        self.shards = [Shard(algorithm, n_outputs) for _ in range(n_shards)]
        self.scalars = algorithm.init_state(0, n_outputs).scalars

    def _rows(self, X):
        batch = as_batch(X, None)
        if not isinstance(batch, CSRBatch):
            rows, cols = np.nonzero(batch)
            indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=batch.shape[0]))])
            batch = CSRBatch(indptr, cols.astype(np.int64), batch[rows, cols])
        for i in range(batch.n_rows):
            lo, hi = batch.indptr[i], batch.indptr[i + 1]
            coords, vals = batch.indices[lo:hi] + self.bias, batch.data[lo:hi]
            if self.bias:
                coords = np.concatenate([[0], coords])
                vals = np.concatenate([[1.0], vals])
            yield coords, vals

    def learn(self, X, y) -> np.ndarray:
        y = prepare_labels(self.loss, y, self.n_outputs)
        k = len(self.shards)
        scores = []
        for (coords, vals), label in zip(self._rows(X), y):
            owner = np.array([shard_of(c, k) for c in coords.tolist()], dtype=np.int64)
            slices, total = [], None
            for s, shard in enumerate(self.shards):
                mine = owner == s
                idx, v = shard.local_indices(coords[mine]), vals[mine]
                partial, memo = self.algorithm.predict(shard.state, idx, v, False, self.scalars)
                total = partial if total is None else total + partial
                slices.append((idx, v, memo))
            yhat, _, feedback = self.algorithm.combine(self.scalars, total, float(label), self._loss, self.loss_param)
            scores.append(yhat.copy())
            if feedback is not None:
                for shard, (idx, v, memo) in zip(self.shards, slices):
                    self.algorithm.update(shard.state, idx, v, False, self.scalars, feedback, memo)
        out = np.array(scores).reshape(-1, self.n_outputs)
        return out[:, 0] if self.n_outputs == 1 else out

    def merged_state(self, n_coords: int) -> LearnerState:
        """The shards' states put back in one global coordinate space."""
        merged = self.algorithm.init_state(n_coords, self.n_outputs)
        for shard in self.shards:
            coords = np.array(shard.coords, dtype=np.int64)
            for name, arr in merged.arrays.items():
                arr[coords] = shard.state.arrays[name][: len(coords)]
        merged.scalars = dict(self.scalars)
        return merged
