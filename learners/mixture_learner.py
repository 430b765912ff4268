"""The ``scinol-mix`` learner: the protocol of :mod:`learners.protocol`
around the compiled mixture of :mod:`learners.mixture` (the algorithm, its
citation and its guarantee are in that module's docstring)."""

from __future__ import annotations

import math

import numpy as np

from . import mixture as MX
from .state import LearnerState

_CHECKS = {
    "eps": (lambda v: v > 0, "a positive number"),
    "alpha": (lambda v: v > 9 / 8, "greater than 9/8"),
    "wealth": (lambda v: v > 0, "a positive number"),
    "kt": (lambda v: v in (0.0, 1.0), "0 or 1"),
    "scinol1": (lambda v: v in (0.0, 1.0), "0 or 1"),
    "kotlowski1": (lambda v: v in (0.0, 1.0), "0 or 1"),
    "average": (lambda v: v in (0.0, 1.0), "0 or 1"),
    "center": (lambda v: v in (0.0, 1.0), "0 or 1"),
    "wide": (lambda v: v in (0.0, 1.0), "0 or 1"),
}


class Mixture:
    """ScInOL2, ScInOL2 on running-mean-centred features, ScInOL2 with ten
    times the initial wealth and the zero predictor by default (``center=0``,
    ``wide=0`` leave the centred and the wide one out), and on
    request ScInOL1, KT per coordinate and Kotłowski's Alg. 1 (``scinol1=1``,
    ``kt=1``, ``kotlowski1=1``), mixed as a Bayes mixture of their
    probabilities. ``eps`` is ScInOL's ε, ``alpha`` Kotłowski's α,
    ``wealth`` KT's initial wealth (all at the bases' defaults). Fewer
    experts: less cost, and ln N less regret. Without KT every expert is
    scale-invariant, and so is the mixture."""

    name = "scinol-mix"
    summary = "Bayes mixture of ScInOL2, centred ScInOL2, ScInOL2 at 10ε and zero (+ ScInOL1, KT, Kotłowski)"
    parameter_free = True
    shardable = True

    def __init__(self, **params):
        unknown = set(params) - set(MX.PARAMS)
        if unknown:
            raise ValueError(f"{self.name} has no parameter {', '.join(sorted(unknown))}; "
                             f"its parameters are {', '.join(MX.PARAMS)}")
        values = {**MX.PARAMS, **params}
        for name, value in values.items():
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name}: {name} must be a number, not {value!r}") from None
            ok, requirement = _CHECKS[name]
            if not (math.isfinite(value) and ok(value)):
                raise ValueError(f"{self.name}: {name} must be {requirement}, not {value!r}")
            values[name] = value
        self.params = values
        self.scale_invariant = values["kt"] == 0.0
        # prm = (ε, α, Kotłowski's dim = 0: auto, KT, ScInOL1, Kotłowski on/off); KT's wealth is only
        # an initial value.
        self._prm = np.array([values["eps"], values["alpha"], 0.0, values["kt"], values["scinol1"],
                              values["kotlowski1"], values["average"], values["center"], values["wide"]])

    def check_loss(self, loss: str) -> None:
        if loss not in ("logistic", "softmax"):
            raise ValueError(f"{self.name} mixes probabilities (a Bayes mixture under the log loss): "
                             f"it is defined for the logistic and softmax losses, not {loss}")

    def init_state(self, n_coords: int, n_outputs: int) -> LearnerState:
        init = {"eta": self.params["eps"], "eta_c": self.params["eps"], "beta": self.params["eps"],
                "eta_w": MX.WIDE_EPS * self.params["eps"],
                "wealth": self.params["wealth"]}
        averaged = self.params["average"] != 0.0  # the sums and marks only when asked for
        fill_p = np.array([init.get(f, 0.0) for f in MX.FIELDS + MX.AVG_FIELDS * averaged])
        fill_q = np.zeros(len(MX.COORD_FIELDS + MX.AVG_COORD_FIELDS * averaged))
        arrays = {"P": np.broadcast_to(fill_p, (n_coords, n_outputs, len(fill_p))).copy(),
                  "Q": np.broadcast_to(fill_q, (n_coords, len(fill_q))).copy()}
        return LearnerState(arrays, {g: 0.0 for g in MX.GLOBALS}, {"P": fill_p.tolist(), "Q": fill_q.tolist()})

    def grow_state(self, state: LearnerState, n_coords: int) -> None:
        state.grow(n_coords)

    def check_state(self, state: LearnerState, n_outputs: int) -> None:
        state.check_like(self.init_state(1, n_outputs), self.name)

    @staticmethod
    def _glob(scalars) -> np.ndarray:
        return np.array([scalars[g] for g in MX.GLOBALS])

    @staticmethod
    def _store(scalars, glob) -> None:
        for name, value in zip(MX.GLOBALS, glob.tolist()):
            scalars[name] = value

    def learn_rows(self, state, indptr, indices, data, dense, bias, y, iw, loss, loss_param, scores, losses):
        glob = self._glob(state.scalars)
        MX.learn_rows(self._prm, glob, state.arrays["P"], state.arrays["Q"], indptr, indices, data, dense, bias,
                      y, iw, loss, loss_param, scores, losses)
        self._store(state.scalars, glob)

    # -- the shard protocol: 6K partial scores + 1 count; 6K feedback values + h --
    def predict(self, state, indices, data, bias, scalars, learning=True):
        P = state.arrays["P"]
        n_out = P.shape[1]
        yb, ex = np.zeros((MX.N_BASES, n_out)), np.zeros(2)
        W = np.zeros((MX.N_BASES, indices.shape[0] + 1, n_out))
        MX.predict_row(self._prm, self._glob(scalars), P, state.arrays["Q"], indices, data, bias, learning,
                       yb, ex, W)
        return np.concatenate([yb.reshape(-1), ex[1:]]), W

    def combine(self, scalars, total, y, loss, loss_param=0.0, weight=1.0):
        """(ŷ, ℓ, feedback) as :class:`~learners.algorithms.Algorithm`'s."""
        n_out = (total.shape[0] - 1) // MX.N_BASES
        yb = np.ascontiguousarray(total[: MX.N_BASES * n_out].reshape(MX.N_BASES, n_out))
        glob = self._glob(scalars)
        ymix = np.empty(n_out)
        if math.isnan(y) or weight == 0.0:
            value = MX.scores_only(self._prm, glob, yb, y, loss, loss_param, ymix)
            return ymix, float(value), None
        fb = np.zeros((MX.N_BASES, n_out))
        ex = np.array([0.0, total[-1]])
        value = MX.combine_row(self._prm, glob, yb, ex, y, float(weight), loss, loss_param, fb, ymix)
        self._store(scalars, glob)
        # h last: the shards weigh their running means with it
        return ymix, float(value), np.append(fb.reshape(-1), float(weight))

    def combine_rows(self, scalars, totals, y, loss, loss_param, weights):
        """:meth:`combine` row by row, giving what ``Algorithm.combine_rows`` gives."""
        n, n_out = totals.shape[0], (totals.shape[1] - 1) // MX.N_BASES
        yhats, values, learned = np.empty((n, n_out)), np.empty(n), np.zeros(n, dtype=bool)
        feedback, globs = np.zeros((n, MX.N_BASES * n_out + 1)), np.empty((n, len(MX.GLOBALS)))
        for i in range(n):
            yhats[i], values[i], fb = self.combine(scalars, totals[i], float(y[i]), loss, loss_param, float(weights[i]))
            if fb is not None:
                feedback[i], learned[i] = fb, True
            globs[i] = self._glob(scalars)
        return yhats, values, feedback, learned, globs

    def update(self, state, indices, data, bias, scalars, feedback, memo):
        P = state.arrays["P"]
        feedback = np.asarray(feedback, dtype=np.float64)
        fb = np.ascontiguousarray(feedback[:-1].reshape(MX.N_BASES, P.shape[1]))
        MX.update_row(self._prm, self._glob(scalars), P, state.arrays["Q"], indices, data, bias, fb, memo,
                      float(feedback[-1]))

    def predict_rows(self, state, indptr, indices, data, scalars, learning):
        """:meth:`predict` row by row (the mixture has no block kernel)."""
        rows = [self.predict(state, indices[indptr[i]:indptr[i + 1]], data[indptr[i]:indptr[i + 1]], False,
                             scalars, bool(learning[i])) for i in range(indptr.shape[0] - 1)]
        width = MX.N_BASES * state.arrays["P"].shape[1] + 1
        sums = np.array([r[0] for r in rows]).reshape(len(rows), width)
        return sums, [r[1] for r in rows]

    def update_rows(self, state, indptr, indices, data, globs, feedback, has_feedback, memo, first_row):
        """:meth:`update` row by row; ``memo`` is :meth:`predict_rows`'s list."""
        for i in range(indptr.shape[0] - 1):
            if has_feedback[i]:
                lo, hi = indptr[i], indptr[i + 1]
                scalars = dict(zip(MX.GLOBALS, globs[i]))
                self.update(state, indices[lo:hi], data[lo:hi], False, scalars, feedback[i], memo[first_row + i])

    @property
    def scalar_names(self) -> tuple[str, ...]:
        return tuple(MX.GLOBALS)

    # -- inspection ----------------------------------------------------------------
    def expert_weights(self, state) -> np.ndarray:
        """π_i, the current posterior weight of each expert (:data:`EXPERTS` order)."""
        L = np.array([state.scalars[f"L_{e}"] for e in MX.EXPERTS])
        on = np.append(MX.flags(self._prm), True)  # the zero predictor always takes part
        a = np.where(on, -(L - L[on].min()), -np.inf)
        p = np.exp(a)
        return p / p.sum()

    def weights(self, state) -> np.ndarray:
        """Σ_i π_i w_i over the linear bases (the zero expert adds 0). The
        mixture mixes probabilities, so this linear model only approximates
        its predictions; for inspection and export."""
        per_base = MX.base_weights(self._prm, self._glob(state.scalars), state.arrays["P"], state.arrays["Q"])
        return np.tensordot(self.expert_weights(state)[: MX.N_BASES], per_base, axes=1)
