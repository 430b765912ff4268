"""Every coordinate-separable learner, as data: fields, parameters, flags.

An :class:`Algorithm` is a :class:`Spec` plus parameter values. It owns no
arrays; it creates a :class:`~learners.state.LearnerState` and drives the
compiled code of :mod:`learners.kernels` over it, through the protocol of
:mod:`learners.protocol`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import codes as C
from . import kernels as K
from .state import LearnerState


@dataclass(frozen=True)
class Spec:
    name: str
    code: int
    summary: str
    fields: tuple[str, ...]
    """Per (coordinate, output) fields, in the kernels' order."""
    coord_fields: tuple[str, ...] = ()
    """Per-coordinate fields shared by the outputs."""
    globals: tuple[str, ...] = ("t",)
    params: dict = field(default_factory=dict)
    """Parameter name → default, in the kernels' order."""
    init: dict = field(default_factory=dict)
    """Initial value of a field or global: a number or a parameter's name."""
    losses: tuple[str, ...] | None = None
    """The losses the algorithm is defined for (None: any)."""
    parameter_free: bool = False
    scale_invariant: bool = False
    shardable: bool = True
    checks: dict = field(default_factory=dict)
    """Parameter name → (predicate, requirement) for validation."""
    source: str = ""


_POSITIVE = (lambda v: v > 0, "a positive number")
_RATE = {"lr": _POSITIVE}

SPECS = {s.name: s for s in [
    Spec("scinol1", C.SCINOL1, "ScInOL1: scale-invariant, conservative", ("G", "S2", "beta"), ("M",),
         params={"eps": 1.0}, init={"beta": "eps"}, parameter_free=True, scale_invariant=True,
         checks={"eps": _POSITIVE}, source="Kempka et al. 2019, Algorithm 1"),
    Spec("scinol2", C.SCINOL2, "ScInOL2: scale-invariant, aggressive (recommended)", ("G", "S2", "eta"), ("M",),
         params={"eps": 1.0}, init={"eta": "eps"}, parameter_free=True, scale_invariant=True,
         checks={"eps": _POSITIVE}, source="Kempka et al. 2019, Algorithm 2"),
    Spec("ogd", C.OGD_COORD, "projected OGD, per-coordinate adaptive rates", ("w", "sum_g2"), ("seen",),
         params={"radius": 100.0, "scale": 1.0}, checks={"radius": _POSITIVE, "scale": _POSITIVE},
         source="Streeter & McMahan 2010, Algorithm 1"),
    Spec("ogd-global", C.OGD_GLOBAL, "projected OGD, one adaptive rate", ("w",), ("seen",),
         globals=("t", "sum_g2", "dim"), params={"radius": 100.0, "scale": 1.0},
         checks={"radius": _POSITIVE, "scale": _POSITIVE}, source="Streeter & McMahan 2010, Theorem 2"),
    Spec("kt", C.KT_ALG1, "KT coin betting, one wealth (gradients clipped to ‖g x‖ ≤ 1)", ("theta",),
         globals=("t", "wealth"), params={"wealth": 1.0}, init={"wealth": "wealth"}, parameter_free=True,
         checks={"wealth": _POSITIVE}, source="Orabona & Pál 2016, Algorithm 1"),
    Spec("kt-avg", C.KT_AVG, "KT coin betting; offline predictions use the averaged iterate",
         ("theta", "acc", "c_last"), globals=("t", "wealth", "c"), params={"wealth": 1.0},
         init={"wealth": "wealth"}, parameter_free=True, checks={"wealth": _POSITIVE},
         source="Orabona & Pál 2016, Algorithms 2-3"),
    Spec("kt-coord", C.KT_COORD, "KT coin betting per coordinate (|g x_i| clipped to 1)", ("theta", "wealth"),
         params={"wealth": 1.0}, init={"wealth": "wealth"}, parameter_free=True,
         checks={"wealth": _POSITIVE}, source="Orabona & Pál 2016, per coordinate"),
    Spec("kotlowski1", C.KOTLOWSKI1, "Kotłowski's coordinate-wise scale-invariant algorithm", ("h",), ("s2",),
         globals=("t", "dim"), params={"alpha": 1.5, "dim": 0.0}, parameter_free=True, scale_invariant=True,
         checks={"alpha": (lambda v: v > 9 / 8, "greater than 9/8"), "dim": (lambda v: v >= 0, "0 (auto) or more")},
         source="Kotłowski 2017, Algorithm 1"),
    Spec("implicit", C.IMPLICIT, "implicit OGD for squared loss", ("w",), params={"lr": 0.1, "importance_aware": 0.0},
         checks={"lr": _POSITIVE, "importance_aware": (lambda v: v in (0.0, 1.0), "0 or 1")},
         losses=("squared",), source="Orabona 2020, §1; Karampatziakis & Langford 2011, §4"),
    Spec("pa", C.PA0, "Passive-Aggressive", ("w",), parameter_free=True,
         losses=("hinge", "epsilon_insensitive"), source="Orabona 2020, §2; Crammer et al. 2006"),
    Spec("pa1", C.PA1, "Passive-Aggressive I", ("w",), params={"C": 1.0}, losses=("hinge", "epsilon_insensitive"),
         checks={"C": _POSITIVE}, source="Orabona 2020, eq. (5)"),
    Spec("pa2", C.PA2, "Passive-Aggressive II", ("w",), params={"C": 1.0}, losses=("hinge", "epsilon_insensitive"),
         checks={"C": _POSITIVE}, source="Crammer et al. 2006"),
    Spec("aprox", C.APROX, "aProx: implicit update on the truncated linear model", ("w",),
         params={"lr": 1.0, "power": 0.5, "loss_low": 0.0},
         checks={"lr": _POSITIVE, "power": (lambda v: v >= 0, "0 or more")}, source="Orabona 2020, §3"),
    Spec("sgd", C.SGD, "SGD with rate lr/√t", ("w",), params={"lr": 0.1}, checks=_RATE, source="baseline"),
    Spec("adagrad", C.ADAGRAD, "AdaGrad (diagonal)", ("w", "g2"), params={"lr": 0.1}, checks=_RATE,
         source="baseline, Duchi et al. 2011"),
    Spec("adam", C.ADAM, "Adam (lazy: only present features move)", ("w", "m", "v"),
         params={"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
         checks={"lr": _POSITIVE, "beta1": (lambda v: 0 <= v < 1, "in [0, 1)"),
                 "beta2": (lambda v: 0 <= v < 1, "in [0, 1)"), "eps": _POSITIVE},
         source="baseline, Kingma & Ba 2014"),
    Spec("nag", C.NAG, "normalised adaptive gradient", ("w", "g2"), ("s",), globals=("t", "N"),
         params={"lr": 0.1}, scale_invariant=True, checks=_RATE, source="baseline, Ross et al. 2013"),
]}


class Algorithm:
    """A coordinate-separable learner: a spec and its parameter values."""

    def __init__(self, spec: Spec, **params):
        unknown = set(params) - set(spec.params)
        if unknown:
            raise ValueError(f"{spec.name} has no parameter {', '.join(sorted(unknown))}; "
                             f"its parameters are {', '.join(spec.params) or 'none'}")
        values = {**spec.params, **params}
        for name, value in values.items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{spec.name}: {name} must be a number, not {value!r}") from None
            ok, requirement = spec.checks.get(name, (lambda v: True, ""))
            if not (math.isfinite(value) and ok(value)):
                raise ValueError(f"{spec.name}: {name} must be {requirement or 'finite'}, not {value!r}")
            values[name] = value
        self.spec = spec
        self.name = spec.name
        self.summary = spec.summary
        self.params = values
        self.parameter_free = spec.parameter_free
        self.scale_invariant = spec.scale_invariant
        self.shardable = spec.shardable
        self._prm = np.array(list(values.values()), dtype=np.float64)

    def check_loss(self, loss: str) -> None:
        if self.spec.losses is not None and loss not in self.spec.losses:
            raise ValueError(f"{self.name} is defined for the {' and '.join(self.spec.losses)} loss, not {loss}")

    def _init(self, name: str) -> float:
        value = self.spec.init.get(name, 0.0)
        return self.params[value] if isinstance(value, str) else float(value)

    def init_state(self, n_coords: int, n_outputs: int) -> LearnerState:
        fill_p = np.array([self._init(f) for f in self.spec.fields])
        fill_q = np.array([self._init(f) for f in self.spec.coord_fields])
        arrays = {
            "P": np.broadcast_to(fill_p, (n_coords, n_outputs, len(fill_p))).copy(),
            "Q": np.broadcast_to(fill_q, (n_coords, len(fill_q))).copy(),
        }
        scalars = {g: self._init(g) for g in self.spec.globals}
        return LearnerState(arrays, scalars, {"P": fill_p.tolist(), "Q": fill_q.tolist()})

    def grow_state(self, state: LearnerState, n_coords: int) -> None:
        state.grow(n_coords)

    def check_state(self, state: LearnerState, n_outputs: int) -> None:
        """ValueError unless ``state`` has this learner's arrays and scalars."""
        state.check_like(self.init_state(1, n_outputs), self.name)

    def _glob(self, state) -> np.ndarray:
        return np.array([state.scalars[g] for g in self.spec.globals])

    def _store(self, state, glob) -> None:
        for name, value in zip(self.spec.globals, glob.tolist()):
            state.scalars[name] = value

    # -- fused single-shard batch ----------------------------------------------
    def learn_rows(self, state, indptr, indices, data, dense, bias, y, iw, loss, loss_param, scores, losses):
        """``iw``: the rows' importance weights (≥ 0), or an empty array for all 1."""
        glob = self._glob(state)
        K.LEARN_ROWS[self.spec.code](self._prm, glob, state.arrays["P"], state.arrays["Q"], indptr, indices,
                                     data, dense, bias, y, iw, loss, loss_param, scores, losses)
        self._store(state, glob)

    # -- the shard protocol ------------------------------------------------------
    def predict(self, state, indices, data, bias, scalars, learning=True):
        P = state.arrays["P"]
        n_out = P.shape[1]
        yhat, ex = np.empty(n_out), np.empty(K.N_EXTRAS)
        w = np.empty((indices.shape[0] + 1, n_out))
        K.predict_row(self.spec.code, self._prm, self._glob_from(scalars), P, state.arrays["Q"], indices, data,
                      bias, learning, yhat, ex, w)
        return np.concatenate([yhat, ex]), w

    def combine(self, scalars, total, y, loss, loss_param=0.0, weight=1.0):
        """(ŷ, ℓ, feedback) from the summed partials; advances ``scalars``.
        Unlabelled (y NaN): (ŷ, NaN, None) and nothing changes; weight 0:
        (ŷ, ℓ, None) and nothing changes."""
        n_out = total.shape[0] - K.N_EXTRAS
        yhat = total[:n_out].copy()
        if math.isnan(y):
            return yhat, math.nan, None
        fb = np.zeros(n_out + K.N_FB_EXTRA)  # slots an algorithm leaves alone stay 0, not whatever memory held
        if weight == 0.0:
            return yhat, float(K.loss_only(yhat, y, loss, loss_param, fb)), None
        glob = self._glob_from(scalars)
        value = K.combine_row(self.spec.code, self._prm, glob, yhat, total[n_out:].copy(), y, float(weight), loss,
                              loss_param, fb)
        for name, v in zip(self.spec.globals, glob.tolist()):
            scalars[name] = v
        return yhat, value, fb

    def combine_rows(self, scalars, totals, y, loss, loss_param, weights):
        """:meth:`combine` of each row of ``totals`` in order, in one compiled
        call; advances ``scalars``. (ŷ per row, ℓ per row, the feedback per
        row, whether each row has feedback, the scalars after each row in
        :attr:`scalar_names` order)."""
        n, n_out = totals.shape[0], totals.shape[1] - K.N_EXTRAS
        glob = self._glob_from(scalars)
        yhats, values, learned = np.empty((n, n_out)), np.empty(n), np.zeros(n, dtype=bool)
        feedback, globs = np.zeros((n, n_out + K.N_FB_EXTRA)), np.empty((n, glob.shape[0]))
        K.combine_rows(self.spec.code, self._prm, glob, np.ascontiguousarray(totals, dtype=np.float64),
                       np.asarray(y, dtype=np.float64), np.asarray(weights, dtype=np.float64), loss, loss_param,
                       yhats, values, feedback, learned, globs)
        for name, v in zip(self.spec.globals, glob.tolist()):
            scalars[name] = v
        return yhats, values, feedback, learned, globs

    def update(self, state, indices, data, bias, scalars, feedback, memo):
        K.update_row(self.spec.code, self._prm, self._glob_from(scalars), state.arrays["P"], state.arrays["Q"],
                     indices, data, bias, feedback, memo)

    def predict_rows(self, state, indptr, indices, data, scalars, learning):
        """:meth:`predict` of each row of a CSR block (no bias column) with one
        state and one set of scalars, in one compiled call: ((rows, ŷ and
        extras) sums, the weights used, indexed like ``indices``)."""
        P = state.arrays["P"]
        sums = np.empty((indptr.shape[0] - 1, P.shape[1] + K.N_EXTRAS))
        w = np.empty((indices.shape[0], P.shape[1]))
        K.PREDICT_ROWS[self.spec.code](self._prm, self._glob_from(scalars), P, state.arrays["Q"], indptr, indices,
                                       data, learning, sums, w)
        return sums, w

    def update_rows(self, state, indptr, indices, data, globs, feedback, has_feedback, memo, first_row):
        """:meth:`update` of rows ``first_row``... of a block :meth:`predict_rows`
        gave ``memo`` for (``indptr`` their window of its offsets), in order;
        row i with the scalars ``globs[i]`` (in :attr:`scalar_names` order) and
        ``feedback[i]``, where ``has_feedback[i]``."""
        K.UPDATE_ROWS[self.spec.code](self._prm, globs, state.arrays["P"], state.arrays["Q"], indptr, indices, data,
                                      feedback, has_feedback, memo)

    @property
    def scalar_names(self) -> tuple[str, ...]:
        """The global scalars' names, in the order :meth:`update_rows` takes them."""
        return tuple(self.spec.globals)

    def _glob_from(self, scalars) -> np.ndarray:
        return np.array([scalars[g] for g in self.spec.globals])

    def weights(self, state) -> np.ndarray:
        return K.current_weights(self.spec.code, self._prm, self._glob(state), state.arrays["P"], state.arrays["Q"])

    def field(self, state, name: str) -> np.ndarray:
        """One named field of the state, (n_coords, n_outputs) or (n_coords,)."""
        if name in self.spec.fields:
            return state.arrays["P"][:, :, self.spec.fields.index(name)]
        return state.arrays["Q"][:, self.spec.coord_fields.index(name)]
