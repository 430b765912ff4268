"""Every learner of the accuracy benchmark behind one small interface.

A contender learns from the training rows in a given order, one example at a
time with online semantics, returning the loss of each prediction made
before learning from that example and whether it named the right class; and
scores the test set without learning.
Families group the configurations of one method: a parameter-free method has
one, a tuned method one per grid value (the best is chosen later).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from learners import make_learner

from pipelines.bench.metrics import capped, proba_losses, score_losses, score_predictions

# Every learning rate of either seed experiment: §4.1 used 0.001..10, §4.2
# 1e-5..1. The tuned methods get the union, which can only help them.
LR_GRID = (1e-5, 1e-4, 1e-3, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
RIVER_OPTIMIZERS = ("SGD", "AdaGrad", "Adam")


@dataclass(frozen=True)
class Family:
    label: str       # the row in the table
    tool: str        # "scinol-stream", "vw" or "river"
    method: str      # what make_contender builds
    grid: tuple = (None,)  # parameter values; (None,) = nothing to tune
    free: bool = False     # no learning rate to tune at all

    @property
    def tuned(self) -> bool:
        return self.grid != (None,)


def families(lr_grid=LR_GRID, with_vw=True, with_river=True) -> list[Family]:
    out = [
        Family("ScInOL2", "scinol-stream", "scinol2", free=True),
        Family("ScInOL1", "scinol-stream", "scinol1", free=True),
        Family("Alg1-K17 (kotlowski1)", "scinol-stream", "kotlowski1", free=True),
        *[Family(f"{name} (best lr)", "scinol-stream", algo, tuple(lr_grid))
          for name, algo in (("SGD", "sgd"), ("AdaGrad", "adagrad"), ("Adam", "adam"), ("NAG", "nag"))],
    ]
    if with_vw:
        out += [Family("VW default", "vw", "default"), Family("VW --coin", "vw", "coin", free=True),
                Family("VW best -l", "vw", "l", tuple(lr_grid))]
    if with_river:
        out += [Family("River LogReg default", "river", "default"),
                Family("River StandardScaler+LogReg", "river", "scaled"),
                Family("River LogReg best optimizer", "river", "tuned",
                       tuple((opt, lr) for opt in RIVER_OPTIMIZERS for lr in lr_grid))]
    return out


# The one-pass comparison (pipelines/bench/one_pass.py): the learners of this
# project it shows, by registry name (one not registered is left out with a
# note), and the untuned competitors their progressive loss is held against.
ONE_PASS_LEARNERS = ("scinol-mix", "scinol2")
UNTUNED_COMPETITORS = ("VW default", "VW --coin", "River LogReg default", "River StandardScaler+LogReg")
ZERO = "zero model"
LABELS = {"scinol2": "ScInOL2", "scinol1": "ScInOL1", "kotlowski1": "Alg1-K17 (kotlowski1)"}


def one_pass_families(learners, lr_grid, with_vw, with_river) -> tuple[list[Family], list[Family], list[str]]:
    """(untuned families, tuned families, notes) for the one-pass comparison."""
    from learners.registry import learner_names

    known = set(learner_names())
    ours = [Family(LABELS.get(n, n), "scinol-stream", n, free=True) for n in learners
            if parse_spec(n)[0] in known]
    notes = [f"{n}: not in this build's learner registry, left out" for n in learners
             if parse_spec(n)[0] not in known]
    untuned = ours + [Family(ZERO, "reference", "zero", free=True)]
    everything = families(lr_grid, with_vw, with_river)
    untuned += [f for f in everything if f.label in UNTUNED_COMPETITORS]
    return untuned, [f for f in everything if f.tuned], notes


def parse_spec(spec: str) -> tuple[str, dict]:
    """"scinol-mix:kt=0:eps=2" → ("scinol-mix", {"kt": 0.0, "eps": 2.0}): a
    learner by registry name with parameters of its own (numbers)."""
    name, *pairs = spec.split(":")
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{spec!r}: expected NAME or NAME:KEY=VALUE[:KEY=VALUE...]")
        try:
            params[key] = float(value)
        except ValueError:
            raise ValueError(f"{spec!r}: {key}={value!r} is not a number") from None
    return name, params


def param_text(family: Family, param) -> str:
    if param is None:
        return "-"
    if family.tool == "river":
        return f"{param[0]}({param[1]:g})"
    return f"{'-l ' if family.tool == 'vw' else 'lr='}{param:g}"


def make_contender(family: Family, param, data):
    if family.tool == "scinol-stream":
        name, params = parse_spec(family.method)
        return OurLearner(name, params if param is None else {**params, "lr": param}, data.n_classes)
    if family.tool == "vw":
        return VWLearner(family.method, param, data)
    if family.tool == "reference":
        return ZeroModel(data.n_classes)
    return RiverLearner(family.method, param, data)


class ZeroModel:
    """The model that never learns: every score 0, so every loss is ln K (ln 2
    binary); its error is that of always naming class 0, the tie-break of the
    score rules every learner here is read with."""

    def __init__(self, n_classes: int):
        self.k = n_classes

    def _scored(self, y) -> tuple[np.ndarray, np.ndarray]:
        scores = np.zeros(len(y)) if self.k == 2 else np.zeros((len(y), self.k))
        return score_losses(scores, y), score_predictions(scores) == y

    def learn_epoch(self, data, order) -> tuple[np.ndarray, np.ndarray]:
        return self._scored(data.y_train[order])

    def evaluate(self, data) -> tuple[float, float]:
        losses, right = self._scored(data.y_test)
        return float(losses.mean()), float(right.mean())


class OurLearner:
    """A learner of this project through its public API (compiled kernels)."""

    def __init__(self, algo: str, params: dict, n_classes: int):
        self.binary = n_classes == 2
        self.model = (make_learner(algo, "logistic", **params) if self.binary
                      else make_learner(algo, "softmax", n_classes=n_classes, **params))

    def learn_epoch(self, data, order) -> tuple[np.ndarray, np.ndarray]:
        y = data.y_train[order]
        scores = self.model.learn(data.X_train[order], np.where(y == 1, 1.0, -1.0) if self.binary else y)
        return capped(score_losses(scores, y)), score_predictions(scores) == y

    def evaluate(self, data) -> tuple[float, float]:
        scores = self.model.decision_function(data.X_test)
        acc = float(np.mean(score_predictions(scores) == data.y_test))
        return float(capped(score_losses(scores, data.y_test)).mean()), acc


# -- Vowpal Wabbit ------------------------------------------------------------
_VW_TEXT: dict = {}


def vw_features(X: np.ndarray) -> list[str]:
    """Rows as VW features ``|f 0:v0 3:v3 ...`` (zeros left out, %.9g: exact
    for VW's float32). Integer feature names are VW's own indices."""
    return ["|f " + " ".join(f"{j}:{v:.9g}" for j, v in zip(np.flatnonzero(row), row[row != 0])) for row in X]


def _vw_text(data):
    key = (data.name, data.X_train.shape, data.X_test.shape)
    if key not in _VW_TEXT:
        labels = ["1" if c == 1 else "-1" for c in data.y_train] if data.n_classes == 2 \
            else [str(c + 1) for c in data.y_train]  # oaa classes are 1..K
        train = [f"{lab} {feats}" for lab, feats in zip(labels, vw_features(data.X_train))]
        _VW_TEXT[key] = (train, vw_features(data.X_test))
    return _VW_TEXT[key]


class VWLearner:
    """VW through its Python bindings, one example at a time: its default
    (adaptive, normalised, invariant updates, -l 0.5), --coin, or -l LR.
    Binary: logistic loss, raw score; multiclass: --oaa K --probabilities."""

    def __init__(self, method: str, lr, data):
        from vowpalwabbit import Workspace

        self.binary = data.n_classes == 2
        args = ["--quiet", "--loss_function", "logistic"]
        if not self.binary:
            args += ["--oaa", str(data.n_classes), "--probabilities"]
        if method == "coin":
            args.append("--coin")
        elif method == "l":
            args += ["-l", repr(float(lr))]
        self.ws = Workspace(arg_list=args)
        self.train_text, self.test_text = _vw_text(data)

    def learn_epoch(self, data, order) -> tuple[np.ndarray, np.ndarray]:
        ws, text = self.ws, self.train_text
        preds = []
        for i in order.tolist():
            ex = ws.parse(text[i])
            ws.learn(ex)  # predicts first: the prediction below is from before this update
            preds.append(ex.get_simplelabel_prediction() if self.binary else ex.get_scalars())
            ws.finish_example(ex)
        y = data.y_train[order]
        return self._losses(preds, y), self._guess(preds) == y

    def evaluate(self, data) -> tuple[float, float]:
        preds = [self.ws.predict(line) for line in self.test_text]
        losses = self._losses(preds, data.y_test)
        return float(losses.mean()), float(np.mean(self._guess(preds) == data.y_test))

    def _guess(self, preds) -> np.ndarray:
        return (np.array(preds) > 0).astype(np.int64) if self.binary else np.argmax(np.array(preds), axis=1)

    def _losses(self, preds, y) -> np.ndarray:
        if self.binary:
            return capped(score_losses(np.array(preds, dtype=np.float64), y))
        P = np.array(preds, dtype=np.float64)
        return capped(proba_losses(P[np.arange(len(y)), y]))


# -- River ----------------------------------------------------------------------
_RIVER_ROWS: dict = {}


def _river_rows(data):
    key = (data.name, data.X_train.shape, data.X_test.shape)
    if key not in _RIVER_ROWS:
        def dicts(X):  # zeros left out: River treats a missing feature as 0
            return [{int(j): float(row[j]) for j in np.flatnonzero(row)} for row in X]
        _RIVER_ROWS[key] = (dicts(data.X_train), dicts(data.X_test))
    return _RIVER_ROWS[key]


class RiverLearner:
    """River's LogisticRegression (one-vs-rest for K > 2 classes): its
    defaults (SGD, lr 0.01), behind River's StandardScaler, or with a given
    (optimizer, lr); everything else at River's defaults."""

    def __init__(self, method: str, param, data):
        from river import linear_model, multiclass, optim, preprocessing

        optimizer = getattr(optim, param[0])(param[1]) if method == "tuned" else None
        model = linear_model.LogisticRegression(optimizer=optimizer)
        self.k = data.n_classes
        if self.k > 2:
            model = multiclass.OneVsRestClassifier(model)
        self.model = preprocessing.StandardScaler() | model if method == "scaled" else model
        self.train_rows, self.test_rows = _river_rows(data)

    def _label(self, c: int):
        return bool(c == 1) if self.k == 2 else int(c)

    def _proba(self, x) -> np.ndarray:
        got = self.model.predict_proba_one(x)
        if not got:  # one-vs-rest before its first example: it knows no class yet
            return np.full(self.k, 1.0 / self.k)
        return np.array([float(got.get(self._label(c), 0.0)) for c in range(self.k)])

    def learn_epoch(self, data, order) -> tuple[np.ndarray, np.ndarray]:
        rows, y = self.train_rows, data.y_train
        p_true, right = np.empty(len(order)), np.empty(len(order), dtype=bool)
        for n, i in enumerate(order.tolist()):
            x, c = rows[i], int(y[i])
            p = self._proba(x)
            p_true[n], right[n] = p[c], np.argmax(np.nan_to_num(p, nan=-1.0)) == c
            self.model.learn_one(x, self._label(c))
        return capped(proba_losses(p_true)), right

    def evaluate(self, data) -> tuple[float, float]:
        P = np.array([self._proba(x) for x in self.test_rows])
        y = data.y_test
        losses = capped(proba_losses(P[np.arange(len(y)), y]))
        return float(losses.mean()), float(np.mean(np.argmax(np.nan_to_num(P, nan=-1.0), axis=1) == y))
