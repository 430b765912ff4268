"""The user-facing online linear model.

Three ways in, one state:

- batch, online semantics: ``learn(X, y)`` returns the progressive scores
  (each made before learning from its example), like VW's ``-p``;
- River-style: ``learn_one(x, y)``, ``predict_one(x)``, ``predict_proba_one(x)``
  on dicts ``{feature: value}``;
- scikit-learn-style: ``partial_fit``, ``decision_function``, ``predict``,
  ``predict_proba``.

The state is one shard of the learner protocol (:mod:`learners.protocol`),
driven by the algorithm's compiled batch kernel.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import __version__
from .hashing import FeatureHasher
from .inputs import CSRBatch, as_batch
from .interactions import NamespacedRows, crossed_batch, normalize_interactions
from .losses import BINARY_LOSSES, DEFAULT_LOSS_PARAM, loss_code, prepare_labels, probabilities
from .registry import make_algorithm
from .state import LearnerState, StateFileError, load_state_with_aux, save_state, state_bytes


_NO_INDICES = np.empty(0, dtype=np.int64)


class OnlineLearner:
    """An online linear model: an algorithm (by name) plus a loss.

    ``bias`` adds a constant feature 1 (coordinate 0; input feature i is
    coordinate i + 1). String feature names are hashed into 2^``hash_bits``
    slots. ``n_classes`` is needed for the softmax loss (or give ``classes``
    to the first ``partial_fit``). ``interactions`` are VW-style crosses
    between namespaces, e.g. ``["ab", "abc"]`` (:mod:`learners.interactions`).
    Other keyword arguments are the algorithm's parameters (e.g. ``eps`` for
    ScInOL).
    """

    def __init__(self, algorithm="scinol2", loss="logistic", *, n_classes=None, bias=True,
                 hash_bits=18, hash_seed=0, loss_param=None, interactions=None, **params):
        self.algorithm = make_algorithm(algorithm, **params) if isinstance(algorithm, str) else algorithm
        self.loss = loss
        self._loss = loss_code(loss)
        self.algorithm.check_loss(loss)
        self.loss_param = float(DEFAULT_LOSS_PARAM.get(loss, 0.0) if loss_param is None else loss_param)
        if loss == "softmax":
            if n_classes is not None and int(n_classes) < 2:
                raise ValueError(f"softmax loss needs at least 2 classes, not {n_classes!r}")
        elif n_classes not in (None, 1, 2):
            raise ValueError(f"n_classes={n_classes!r} needs loss='softmax' (got loss={loss!r})")
        self.n_classes = int(n_classes) if loss == "softmax" and n_classes is not None else None
        self.bias = bool(bias)
        self.hasher = FeatureHasher(hash_bits, hash_seed)
        self.interactions = normalize_interactions(interactions)
        self.classes_ = None
        self.state = None
        self.loaded_header: dict = {}
        self.loaded_aux: dict = {}

    # -- bookkeeping ----------------------------------------------------------
    @property
    def n_outputs(self) -> int:
        return self.n_classes if self.loss == "softmax" else 1

    @property
    def n_examples(self) -> int:
        """Examples learned from so far (the trial count t)."""
        return 0 if self.state is None else int(self.state.scalars["t"])

    def _ensure_state(self, n_features: int) -> None:
        if self.loss == "softmax" and self.n_classes is None:
            raise ValueError("softmax loss: give n_classes when creating the learner, or classes= to partial_fit")
        n_coords = n_features + self.bias
        if self.state is None:
            self.state = self.algorithm.init_state(max(n_coords, 1), self.n_outputs)
        else:
            self.algorithm.grow_state(self.state, n_coords)

    def _batch(self, X) -> "_Prepared":
        if self.interactions or isinstance(X, NamespacedRows):
            batch = crossed_batch(X, self.hasher, self.interactions)
        else:
            batch = as_batch(X, self.hasher)
        if isinstance(batch, CSRBatch):
            return _Prepared(batch, batch.n_rows, batch.max_index() + 1)
        return _Prepared(batch, batch.shape[0], batch.shape[1])

    def _run(self, X, y, weights=None) -> tuple[np.ndarray, np.ndarray]:
        batch, n, d = X if isinstance(X, _Prepared) else self._batch(X)
        if y.shape[0] != n:
            raise ValueError(f"{n} rows of features but {y.shape[0]} labels")
        iw = importance_weights(weights, n)
        self._ensure_state(d)
        scores = np.empty((n, self.n_outputs))
        losses = np.empty(n)
        if isinstance(batch, CSRBatch):
            rows = (batch.indptr, batch.indices, batch.data, False)
        else:  # dense: flattened values, the column of entry p is p - row start
            rows = (np.arange(n + 1, dtype=np.int64) * d, _NO_INDICES, batch.reshape(-1), True)
        self.algorithm.learn_rows(self.state, *rows, self.bias, y, iw, self._loss, self.loss_param, scores, losses)
        return scores, losses

    def _shape(self, scores: np.ndarray) -> np.ndarray:
        return scores[:, 0] if self.n_outputs == 1 else scores

    # -- batch API, online semantics ----------------------------------------
    def learn(self, X, y, weights=None, *, return_losses: bool = False):
        """Learn from each row in order; returns the score ŷ_t made for each
        row before learning from it (shape (n,), or (n, K) for softmax).
        A NaN label means "predict only". ``weights``: one importance weight
        ≥ 0 per row, the factor on its loss (None: all 1; 0: predicted, not
        learned from; how each learner applies it: docs/learners.md). With
        ``return_losses`` also returns each row's loss, unweighted (NaN where
        unlabelled)."""
        y = prepare_labels(self.loss, y, self.n_classes or 1)
        scores, losses = self._run(X, y, weights)
        return (self._shape(scores), losses) if return_losses else self._shape(scores)

    def decision_function(self, X) -> np.ndarray:
        """Raw scores ŷ without learning."""
        prepared = self._batch(X)
        if self.state is None:
            self._ensure_state(0)
        return self._shape(self._run(prepared, np.full(prepared.n, np.nan))[0])

    # -- scikit-learn style ---------------------------------------------------
    def _labels_from_classes(self, y, classes):
        y = np.asarray(y).reshape(-1)
        if self.loss not in BINARY_LOSSES and self.loss != "softmax":
            return prepare_labels(self.loss, y)
        if classes is not None and self.classes_ is None:
            self.classes_ = np.unique(np.asarray(classes))
            if self.loss == "softmax" and self.n_classes is None:
                self.n_classes = len(self.classes_)
        if self.classes_ is None:
            if self.loss == "softmax":
                return prepare_labels(self.loss, y, self.n_classes)
            seen = set(np.unique(y).tolist())
            self.classes_ = np.array([0, 1] if seen <= {0, 1} else [-1, 1])
        expected = 2 if self.loss in BINARY_LOSSES else self.n_classes
        if len(self.classes_) != expected:
            raise ValueError(f"{self.loss} loss needs {expected} classes, got {list(self.classes_)}")
        pos = np.searchsorted(self.classes_, y)
        pos = np.clip(pos, 0, len(self.classes_) - 1)
        unknown = self.classes_[pos] != y
        if unknown.any():
            first = int(np.flatnonzero(unknown)[0])
            raise ValueError(
                f"label {y.tolist()[first]!r} at position {first} is not one of the classes {self.classes_.tolist()}"
            )
        return np.where(pos == 1, 1.0, -1.0) if self.loss in BINARY_LOSSES else pos.astype(np.float64)

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        y = self._labels_from_classes(y, classes)
        self._run(X, y, sample_weight)
        return self

    def predict(self, X) -> np.ndarray:
        scores = self.decision_function(X)
        if self.loss in BINARY_LOSSES:
            classes = self.classes_ if self.classes_ is not None else np.array([-1, 1])
            return classes[(scores > 0).astype(int)]
        if self.loss == "softmax":
            top = np.argmax(scores, axis=1)
            return self.classes_[top] if self.classes_ is not None else top
        return scores

    def predict_proba(self, X) -> np.ndarray:
        p = probabilities(self.loss, np.atleast_1d(self.decision_function(X)).reshape(-1, self.n_outputs))
        return np.column_stack([1.0 - p, p]) if self.loss == "logistic" else p

    # -- River style ------------------------------------------------------------
    def learn_one(self, x: dict, y, w: float = 1.0) -> None:
        """Learn from one example; ``w`` is its importance weight (River's name)."""
        self.learn([x], [y], None if w == 1.0 else [w])

    def predict_one(self, x: dict):
        """The class for classification losses, the score for regression."""
        return self.predict([x])[0]

    def predict_proba_one(self, x: dict) -> dict:
        p = self.predict_proba([x])[0]
        if self.loss == "logistic":
            classes = self.classes_ if self.classes_ is not None else [-1, 1]
        else:
            classes = self.classes_ if self.classes_ is not None else range(len(p))
        return {(c.item() if hasattr(c, "item") else c): float(v) for c, v in zip(classes, p)}

    # -- the model as it stands -----------------------------------------------
    def weights(self) -> np.ndarray:
        """Current weights, (n_coords, n_outputs); row 0 is the bias if any."""
        if self.state is None:
            return np.zeros((int(self.bias), self.n_outputs))
        return self.algorithm.weights(self.state)

    def header(self) -> dict:
        return {
            "library": "scinol-stream",
            "library_version": __version__,
            "learner": self.algorithm.name,
            "params": self.algorithm.params,
            "loss": self.loss,
            "loss_param": self.loss_param,
            "n_outputs": self.n_outputs,
            "bias": self.bias,
            "hash_bits": self.hasher.bits,
            "hash_seed": self.hasher.seed,
            "classes": None if self.classes_ is None else self.classes_.tolist(),
            "interactions": list(self.interactions),
        }

    def save(self, path: str, extra: dict | None = None, aux: dict | None = None) -> None:
        """Write the model atomically; ``extra`` header fields (e.g. the Kafka
        offsets a checkpoint covers) and ``aux`` arrays are stored with it and
        come back in ``loaded_header`` and ``loaded_aux`` after :meth:`load`."""
        self._ensure_state(0)
        save_state(path, self.state, {**(extra or {}), **self.header()}, aux)

    @classmethod
    def from_header(cls, meta: dict, where: str = "header") -> "OnlineLearner":
        """A fresh learner configured as ``header()`` describes it."""
        try:
            return cls(meta["learner"], meta["loss"], n_classes=meta["n_outputs"] if meta["loss"] == "softmax" else None,
                       bias=meta["bias"], hash_bits=meta["hash_bits"], hash_seed=meta["hash_seed"],
                       loss_param=meta.get("loss_param"), interactions=meta.get("interactions"), **meta["params"])
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFileError(f"{where}: header does not describe a learner ({exc})") from None

    def to_bytes(self, extra: dict | None = None, aux: dict | None = None) -> bytes:
        """What :meth:`save` writes, as bytes (:meth:`load` reads them back)."""
        self._ensure_state(0)
        return state_bytes(self.state, {**(extra or {}), **self.header()}, aux)

    def parts(self, extra: dict | None = None, aux: dict | None = None) -> tuple[LearnerState, dict, dict | None]:
        """What :meth:`to_bytes` encodes, unencoded: the live state (not a
        copy), the header with ``extra``, and ``aux``."""
        self._ensure_state(0)
        return self.state, {**(extra or {}), **self.header()}, aux

    @classmethod
    def load(cls, path: str | bytes) -> "OnlineLearner":
        """A model from a file written by :meth:`save` (or the bytes of :meth:`to_bytes`)."""
        state, meta, aux = load_state_with_aux(path)
        return cls.from_parts(state, meta, aux, path if isinstance(path, str) else "(in memory)")

    @classmethod
    def from_parts(cls, state: LearnerState, meta: dict, aux: dict | None = None,
                   where: str = "(in memory)") -> "OnlineLearner":
        """A model from :meth:`parts`, checked as :meth:`load` checks a file."""
        model = cls.from_header(meta, where)
        try:
            model.algorithm.check_state(state, model.n_outputs)
        except ValueError as exc:
            raise StateFileError(f"{where}: {exc}") from None
        if not all(math.isfinite(v) for v in state.scalars.values()):
            raise StateFileError(f"{where}: non-finite global scalar")
        if meta.get("classes") is not None:
            model.classes_ = np.array(meta["classes"])
        model.state = state
        model.loaded_header = meta
        model.loaded_aux = aux
        return model


_ALL_ONE = np.empty(0)  # the kernels read an empty weight array as all 1


def importance_weights(weights, n: int) -> np.ndarray:
    """``weights`` as the kernels take them: float64, one per row, finite and
    ≥ 0 (ValueError "bad weight ..." otherwise); None gives all 1."""
    if weights is None:
        return _ALL_ONE
    iw = np.ascontiguousarray(weights, dtype=np.float64).reshape(-1)
    if iw.shape[0] != n:
        raise ValueError(f"{n} rows of features but {iw.shape[0]} weights")
    bad = ~(np.isfinite(iw) & (iw >= 0.0))
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"bad weight {float(iw[first])!r} at position {first}: "
                         "importance weights must be finite and ≥ 0")
    return iw


class _Prepared(NamedTuple):
    """A validated batch (dense array or CSRBatch) with its row count and width."""
    batch: object
    n: int
    d: int


def make_learner(name: str = "scinol2", loss: str = "logistic", **kwargs) -> OnlineLearner:
    """An :class:`OnlineLearner` for the named algorithm and loss; other
    keyword arguments as for :class:`OnlineLearner`."""
    return OnlineLearner(name, loss, **kwargs)
