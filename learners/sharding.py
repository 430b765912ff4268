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
from .model import importance_weights
from .state import LearnerState

_MASK64 = (1 << 64) - 1


def shard_of(coordinate: int, n_shards: int) -> int:
    """Shard of a coordinate: splitmix64 finaliser of the index, mod K, so
    neighbouring coordinates spread evenly."""
    z = (coordinate + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return (z ^ (z >> 31)) % n_shards


def shards_of(coordinates: np.ndarray, n_shards: int) -> np.ndarray:
    """:func:`shard_of` of each coordinate (uint64 arithmetic wraps like the mask)."""
    z = coordinates.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return ((z ^ (z >> np.uint64(31))) % np.uint64(n_shards)).astype(np.int64)


class Shard:
    """The state of the coordinates one shard owns, in a local index space:
    ``coords[slot]`` is the global coordinate of local slot ``slot``."""

    def __init__(self, algorithm, n_outputs: int, state: LearnerState | None = None,
                 coords: np.ndarray | None = None):
        self.algorithm = algorithm
        self.state: LearnerState = algorithm.init_state(0, n_outputs) if state is None else state
        self.coords = np.zeros(0, dtype=np.int64) if coords is None else np.asarray(coords, dtype=np.int64)
        self.n = self.coords.shape[0]
        self._slot = np.full(int(self.coords.max(initial=-1)) + 1, -1, dtype=np.int64)
        self._slot[self.coords] = np.arange(self.n)

    def local_indices(self, coords: np.ndarray) -> np.ndarray:
        """Local slots of global ``coords``, adding the new ones in the order
        they first appear (a block of rows may name a coordinate twice)."""
        top = int(coords.max(initial=-1)) + 1
        if top > self._slot.shape[0]:
            grown = np.full(max(top, 2 * self._slot.shape[0]), -1, dtype=np.int64)
            grown[: self._slot.shape[0]] = self._slot
            self._slot = grown
        slots = self._slot[coords]
        new = slots < 0
        if new.any():
            fresh = coords[new]
            _, first = np.unique(fresh, return_index=True)
            fresh = fresh[np.sort(first)]  # each once
            self._slot[fresh] = np.arange(self.n, self.n + fresh.shape[0])
            slots[new] = self._slot[coords[new]]
            if self.n + fresh.shape[0] > self.coords.shape[0]:
                grown = np.zeros(max(self.n + fresh.shape[0], 2 * self.coords.shape[0]), dtype=np.int64)
                grown[: self.n] = self.coords[: self.n]
                self.coords = grown
            self.coords[self.n: self.n + fresh.shape[0]] = fresh
            self.n += fresh.shape[0]
            self.state.grow(self.n)
        return slots

    def owned(self) -> tuple[np.ndarray, LearnerState]:
        """The global coordinates this shard holds and their state, trimmed."""
        state = LearnerState({k: v[: self.n].copy() for k, v in self.state.arrays.items()},
                             dict(self.state.scalars), dict(self.state.fill))
        return self.coords[: self.n].copy(), state


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

    def learn(self, X, y, weights=None) -> np.ndarray:
        """Like :meth:`OnlineLearner.learn`; the weights enter at ``combine``."""
        y = prepare_labels(self.loss, y, self.n_outputs)
        iw = importance_weights(weights, y.shape[0])
        iw = iw if iw.shape[0] else np.ones(y.shape[0])
        k = len(self.shards)
        scores = []
        for (coords, vals), label, weight in zip(self._rows(X), y, iw):
            owner = shards_of(coords, k)
            slices, total = [], None
            learning = not np.isnan(label)
            for s, shard in enumerate(self.shards):
                mine = owner == s
                idx, v = shard.local_indices(coords[mine]), vals[mine]
                partial, memo = self.algorithm.predict(shard.state, idx, v, False, self.scalars, learning)
                total = partial if total is None else total + partial
                slices.append((idx, v, memo))
            yhat, _, feedback = self.algorithm.combine(self.scalars, total, float(label), self._loss, self.loss_param,
                                                       float(weight))
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
            coords, state = shard.owned()
            for name, arr in merged.arrays.items():
                arr[coords] = state.arrays[name]
        merged.scalars = dict(self.scalars)
        return merged
