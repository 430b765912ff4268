"""Kotłowski (2017), Kotłowski 2017: Algorithm 1 (``kotlowski1``, coordinate-wise)
and Algorithm 2 (``kotlowski2``, full matrix) against slow literal references
(tests/reference_kotlowski.py), the paper's per-step potential inequalities
(Lemma 3 and Lemma 7) at every step, and their invariances."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.gen import features, labels, to_csr
from learners import OnlineLearner, make_algorithm, make_learner
from learners.algorithms import SPECS
from learners.fullmatrix import Kotlowski2
from learners.losses import loss_and_grad, loss_code
from learners.state import LearnerState, StateFileError, save_state
from tests.reference.kotlowski import (ReferenceKotlowski1, ReferenceKotlowski1Softmax, ReferenceKotlowski2, gamma_of,
                                       psi1)
from tests.support.compare import run_reference

BOUNDED = ("logistic", "hinge", "absolute")
"""Losses with |g| ≤ 1, which Lemmas 3 and 7 assume."""


def sgn(v: float) -> float:
    return float((v > 0) - (v < 0))


def assert_scores_match(got, want, scale, rtol):
    """|ŷ - ŷ_ref| within rtol of Σ_j |x_j w_j|: a dot product is only as
    exact as the magnitude of its terms."""
    got, want, scale = (np.asarray(a, dtype=float).reshape(-1) for a in (got, want, scale))
    err = np.abs(got - want)
    bound = rtol * scale + 1e-300
    worst = int(np.argmax(err / bound))
    assert np.all(err <= bound), f"row {worst}: kernel {got[worst]!r} vs reference {want[worst]!r}"


def assert_same_predictions(base, other, tol):
    """Relative to the typical score size: scores pass through zero."""
    scale = np.maximum(np.abs(base), np.median(np.abs(base)) + 1e-300)
    worst = np.max(np.abs(other - base) / scale)
    assert np.all(np.abs(other - base) <= tol * scale), f"worst relative difference {worst:.3g}"


def with_bias(X):
    return np.hstack([np.ones((X.shape[0], 1)), X])


# =============================================================================================
# Algorithm 1
# =============================================================================================


def run_reference1(X, y, loss, alpha, dim):
    """The literal reference on X with an explicit ones column (the bias)."""
    Xb = with_bias(X)
    ref = ReferenceKotlowski1(Xb.shape[1], alpha, dim)
    scores, scales = [], []
    for x, label in zip(Xb, y):
        yhat, scale, *_ = ref.step(x.tolist(), float(label), loss)
        scores.append(yhat)
        scales.append(scale)
    return np.array(scores), np.array(scales), ref


@pytest.mark.parametrize("loss", BOUNDED)
@pytest.mark.parametrize("layout", ["dense", "csr-shuffled"])
@pytest.mark.parametrize("dim_mode", ["fixed", "auto"])
def test_alg1_kernel_equals_reference(loss, layout, dim_mode):
    rng = np.random.default_rng(len(loss) + 3 * len(layout) + len(dim_mode))
    X = features(rng, 160, 7)
    y = labels(rng, X, loss)
    y[rng.random(160) < 0.1] = np.nan  # unlabelled: predicted, not learned
    d = X.shape[1] + 1
    dim = float(d) if dim_mode == "fixed" else 0.0
    want, scale, ref = run_reference1(X, y, loss, 1.5, dim)
    model = make_learner("kotlowski1", loss, dim=dim)
    got = model.learn(X if layout == "dense" else to_csr(X, rng), y)
    assert_scores_match(got, want, scale, 1e-12)
    algo = model.algorithm
    np.testing.assert_allclose(algo.field(model.state, "h")[:d, 0], ref.h, rtol=1e-12, atol=0)
    np.testing.assert_allclose(algo.field(model.state, "s2")[:d], ref.s2, rtol=1e-12, atol=0)
    assert model.state.scalars["t"] == ref.t
    if dim_mode == "auto":  # coordinates seen, the zero column excluded
        assert model.state.scalars["dim"] == sum(1 for s in ref.s2 if s > 0) == d - 1


@pytest.mark.parametrize("dim_mode", ["fixed", "auto"])
def test_alg1_softmax_kernel_equals_reference(dim_mode):
    """The multiclass extension: h per (coordinate, class) fed g_k, s², t
    and d per coordinate and trial, shared by the classes. Features of very
    different scales, some rows sparse, so d grows during the run."""
    rng = np.random.default_rng(11 + len(dim_mode))
    X = features(rng, 400, 6)
    X[:40, 3:] = 0.0  # columns 3.. appear late: d_t changes mid-run
    y = labels(rng, X, "softmax")
    d = X.shape[1] + 1
    dim = float(d) if dim_mode == "fixed" else 0.0
    ref = ReferenceKotlowski1Softmax(d, 3, 1.5, dim)
    want, scale = run_reference(ref, X, y, "softmax")
    model = make_learner("kotlowski1", "softmax", n_classes=3, dim=dim)
    got = model.learn(X, y)
    assert_scores_match(got, want, scale, 1e-12)
    np.testing.assert_allclose(model.algorithm.field(model.state, "h")[:d], ref.hk, rtol=1e-12, atol=0)
    np.testing.assert_allclose(model.algorithm.field(model.state, "s2")[:d], ref.s2, rtol=1e-12, atol=0)
    assert np.abs(want).max() > 1e-3  # the weights moved: the comparison is not of zeros


def test_alg1_auto_dim_counts_coordinates_seen_before_the_example():
    """dim=0: d_t is the number of coordinates seen before example t (≥ 1),
    so a late feature raises d only from the next example on."""
    X = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [1.0, 1.0]])
    y = np.array([1.0, -1.0, 1.0, 1.0])
    want, scale, _ = run_reference1(X, y, "logistic", 1.5, 0.0)
    got = make_learner("kotlowski1", "logistic").learn(X, y)
    assert_scores_match(got, want, scale, 1e-12)
    ref = ReferenceKotlowski1(3, 1.5, 0.0)
    ds = []
    for x, label in zip(with_bias(X), y):
        ds.append(ref.d_for_trial())
        ref.step(x.tolist(), label, "logistic")
    assert ds == [1, 2, 2, 3]


# -- Lemma 3 at every step --------------------------------------------------------------------


def lemma3_run(X, loss, alpha, label_for, rel=1e-12):
    """Drive the compiled learner one example at a time through the shard
    protocol (which hands back the weights w_t it predicted with) at fixed
    dim = d, and check Lemma 3 for every coordinate at every trial:

        g_t w_{t,i} x_{t,i} + ψ_t(h_{t,i}, s_{t,i}) ≤ ψ_{t-1}(h_{t-1,i}, s_{t-1,i}) + γ(α)/(t d).

    ``label_for(t, ŷ)`` gives the label (it may look at ŷ: an adaptive
    adversary). Returns the smallest slack seen, relative to the terms."""
    n, d = X.shape
    algo = make_algorithm("kotlowski1", alpha=alpha, dim=float(d))
    state = algo.init_state(d, 1)
    scalars = state.scalars
    code = loss_code(loss)
    gam = gamma_of(alpha)
    tightest = math.inf
    for row in X:
        nz = np.flatnonzero(row)
        idx, vals = nz.astype(np.int64), row[nz]
        h0 = algo.field(state, "h")[:, 0].copy()
        s0 = algo.field(state, "s2").copy()
        partial, w = algo.predict(state, idx, vals, False, scalars)
        yhat = float(partial[0])
        _, _, fb = algo.combine(scalars, partial, float(label_for(int(scalars["t"]) + 1, yhat)), code)
        algo.update(state, idx, vals, False, scalars, fb, w)
        g, t = float(fb[0]), int(scalars["t"])
        assert abs(g) <= 1.0
        h1 = algo.field(state, "h")[:, 0]
        s1 = algo.field(state, "s2")
        gwx = np.zeros(d)
        gwx[nz] = g * w[: len(nz), 0] * vals
        for i in range(d):
            lhs = gwx[i] + psi1(t, d, h1[i], s1[i], alpha)
            rhs = psi1(t - 1, d, h0[i], s0[i], alpha) + gam / (t * d)
            size = abs(gwx[i]) + abs(lhs) + abs(rhs)
            assert lhs <= rhs + rel * size, (
                f"Lemma 3 fails at t={t}, i={i}: {lhs!r} > {rhs!r} (g={g}, x={row[i]}, h={h0[i]}, s²={s0[i]})")
            tightest = min(tightest, (rhs - lhs) / size)
    return tightest


def fixed_labels(y):
    return lambda t, yhat: y[t - 1]


def adversary(t, yhat):
    """Absolute loss, label chosen after seeing ŷ so that g = sgn(ŷ) (the
    learner loses on every bet it makes); +1 when ŷ = 0."""
    return yhat - (sgn(yhat) or -1.0)


def win_then_lose(k):
    """Absolute loss: g = -1 for the first k trials (h grows, the learner
    bets ever more), then g = +1 (every bet loses). This is where the
    potential inequalities are tight: the γ(α)/(td) slack is small next to ψ."""
    return lambda t, yhat: yhat + 1.0 if t <= k else yhat - 1.0


def adversarial_sequences(jump):
    """Named (X, y) sequences; ``jump`` is the factor between the tiny and
    the huge half of the scale-jump sequences."""
    rng = np.random.default_rng(2017)
    n = 150
    cases = {}
    X = rng.normal(size=(n, 4))
    cases["sorted labels"] = (X, np.sort(np.where(rng.random(n) < 0.5, -1.0, 1.0)))
    small = np.where(np.arange(n) < n // 2, 1.0 / math.sqrt(jump), math.sqrt(jump))[:, None]
    X = rng.normal(size=(n, 4)) * small
    cases["tiny then huge"] = (X, np.where(X[:, 0] > 0, 1.0, -1.0))
    X = rng.normal(size=(n, 4)) / small
    cases["huge then tiny"] = (X, np.where(X[:, 0] > 0, 1.0, -1.0))
    X = rng.normal(size=(n, 5))
    X[: n - 10, 3] = 0.0
    X[: n - 1, 4] = 0.0
    cases["late features"] = (X, np.where(X[:, 0] + X[:, 3] > 0, 1.0, -1.0))
    X = np.tile(rng.normal(size=(1, 3)), (n, 1))
    cases["one repeated input, one label"] = (X, np.ones(n))
    X = np.ones((n, 1)) * 10.0 ** rng.uniform(-8, 8, size=(n, 1))
    cases["one coordinate, scale jumps"] = (X, np.where(np.arange(n) % 7 < 4, 1.0, -1.0))
    return cases


ADVERSARIAL = adversarial_sequences(1e16)


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
@pytest.mark.parametrize("loss", BOUNDED)
@pytest.mark.parametrize("alpha", [1.126, 1.5, 4.0])
def test_alg1_lemma3_on_adversarial_sequences(name, loss, alpha):
    X, y = ADVERSARIAL[name]
    if loss == "absolute":
        y = y * 0.5  # labels inside the range the predictions visit
    lemma3_run(X, loss, alpha, fixed_labels(y))


@pytest.mark.parametrize("alpha", [1.126, 1.5, 4.0])
@pytest.mark.parametrize("name", ["one repeated input, one label", "tiny then huge", "late features",
                                  "one coordinate, scale jumps"])
@pytest.mark.parametrize("k", [0, 20, 60])
def test_alg1_lemma3_against_an_adaptive_adversary(name, alpha, k):
    X, _ = ADVERSARIAL[name]
    lemma3_run(X, "absolute", alpha, win_then_lose(k) if k else adversary)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 80), d=st.integers(1, 5),
       alpha=st.floats(1.13, 5.0), loss=st.sampled_from(BOUNDED + ("adversary",)),
       log_range=st.floats(0.0, 10.0), sparsity=st.floats(0.0, 0.8))
def test_alg1_lemma3_property(seed, n, d, alpha, loss, log_range, sparsity):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-log_range, log_range, size=(n, d))
    X[rng.random((n, d)) < sparsity] = 0.0
    if loss == "adversary":
        lemma3_run(X, "absolute", alpha, adversary)
        return
    y = labels(rng, X, loss) if loss != "absolute" else rng.normal(size=n)
    lemma3_run(X, loss, alpha, fixed_labels(y))


def test_alg1_lemma3_check_has_teeth():
    """Lemma 3's γ(α)/(td) slack is generous, but not blind: a plausible
    mistranscription, η = exp(·)/(t d) without the 1/α, breaks it against
    the win-then-lose adversary, which the real algorithm withstands."""

    class NoOneOverAlpha(ReferenceKotlowski1):
        def weights(self, x):
            w, s2_new = super().weights(x)
            return [wi * self.alpha for wi in w], s2_new

    def violations(ref, xs, label_for):
        count = 0
        for t, x in enumerate(xs, 1):
            h0, s0 = ref.h[0], ref.s2[0]
            w, _ = ref.weights([x])
            _, _, _, g, _ = ref.step([x], label_for(t, w[0] * x), "absolute")
            lhs = g * w[0] * x + psi1(t, 1, ref.h[0], ref.s2[0], ref.alpha)
            rhs = psi1(t - 1, 1, h0, s0, ref.alpha) + gamma_of(ref.alpha) / t
            count += lhs > rhs + 1e-12 * abs(rhs)
        return count

    xs = [1.0] * 25
    for alpha in (1.5, 4.0):
        assert violations(ReferenceKotlowski1(1, alpha, 1.0), xs, win_then_lose(20)) == 0
        assert violations(NoOneOverAlpha(1, alpha, 1.0), xs, win_then_lose(20)) > 0
    lemma3_run(np.array(xs)[:, None], "absolute", 1.5, win_then_lose(20))  # the kernel, same sequence


# -- scale invariance ---------------------------------------------------------------------------


@pytest.mark.parametrize("loss", BOUNDED)
@pytest.mark.parametrize("dim_mode", ["fixed", "auto"])
def test_alg1_per_feature_rescaling_leaves_predictions_unchanged(loss, dim_mode):
    rng = np.random.default_rng(31 + len(loss))
    X = features(rng, 1500, 8)
    y = labels(rng, X, loss)
    dim = 9.0 if dim_mode == "fixed" else 0.0
    a = 10.0 ** rng.uniform(-6, 6, size=X.shape[1]) * rng.choice([-1.0, 1.0], size=X.shape[1])
    base = make_learner("kotlowski1", loss, dim=dim).learn(X, y)
    scaled = make_learner("kotlowski1", loss, dim=dim).learn(X * a, y)
    assert np.abs(base).max() > 0.1  # the model did learn something
    assert_same_predictions(base, scaled, 1e-9)


def test_alg1_rescaling_the_bias_column_too():
    """With the constant feature given explicitly (bias=False), rescaling it
    is a rescaling like any other."""
    rng = np.random.default_rng(8)
    X = with_bias(features(rng, 600, 5))
    y = labels(rng, X, "logistic")
    a = 10.0 ** rng.uniform(-6, 6, size=X.shape[1])
    base = make_learner("kotlowski1", bias=False, dim=6.0).learn(X, y)
    scaled = make_learner("kotlowski1", bias=False, dim=6.0).learn(X * a, y)
    assert_same_predictions(base, scaled, 1e-9)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), log_a=st.lists(st.floats(-6, 6), min_size=5, max_size=5))
def test_alg1_invariance_property(seed, log_a):
    rng = np.random.default_rng(seed)
    X = features(rng, 300, 5)
    y = labels(rng, X, "hinge")
    base = make_learner("kotlowski1", "hinge").learn(X, y)
    scaled = make_learner("kotlowski1", "hinge").learn(X * 10.0 ** np.array(log_a), y)
    assert_same_predictions(base, scaled, 1e-9)


# =============================================================================================
# Algorithm 2
# =============================================================================================


def rank_deficient_data(rng, n=220, d=6, log10_scale=(-1.0, 1.0)):
    """Random rows on different scales, with a stretch confined to a plane,
    exact repeats, colinear rows, features that appear late, and a few zero
    entries."""
    X = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(*log10_scale, size=d)
    X[:50] = rng.normal(size=(50, 2)) @ X[:2]  # rank 2 (plus the bias)
    X[50:60] = X[10]  # repeats
    X[60:75] = X[20] * rng.normal(size=(15, 1))  # colinear
    X[75:90] = rng.normal(size=(15, 2)) @ X[[3, 77]]  # back into a plane
    X[:130, d - 2] = 0.0  # late features
    X[:170, d - 1] = 0.0
    X[rng.random((n, d)) < 0.1] = 0.0
    return X


def labels_for(rng, X, loss):
    z = X @ rng.normal(size=X.shape[1]) / np.sqrt((X**2).mean(axis=0) + 1e-300).sum()
    if loss in ("logistic", "hinge"):
        return np.where(z + 0.1 * rng.normal(size=len(z)) > 0, 1.0, -1.0)
    return z


def first_seen(X, y):
    """c_j: |first non-zero x_j| among labelled rows (1 for the bias)."""
    c = np.zeros(X.shape[1])
    for x, label in zip(X, y):
        if not math.isnan(label):
            new = (c == 0) & (x != 0)
            c[new] = np.abs(x[new])
    return c


@pytest.mark.parametrize("loss", ["logistic", "hinge", "absolute", "squared"])
@pytest.mark.parametrize("layout", ["dense", "csr-shuffled"])
def test_alg2_kernel_equals_pinv_reference(loss, layout):
    rng = np.random.default_rng(len(loss) * 5 + len(layout))
    X = rank_deficient_data(rng)
    y = labels_for(rng, X, loss)
    y[rng.random(len(y)) < 0.08] = np.nan
    Xb = with_bias(X)
    ref = ReferenceKotlowski2(Xb.shape[1])
    model = make_learner("kotlowski2", loss)
    algo = model.algorithm
    cuts = [0, 1, 2, 30, 50, 60, 75, 90, 131, 171, len(y)]  # the state is checked at each cut
    for lo, hi in zip(cuts, cuts[1:]):
        want, scale = [], []
        for x, label in zip(Xb[lo:hi], y[lo:hi]):
            yhat, s, *_ = ref.step(x, label, loss)
            want.append(yhat)
            scale.append(s)
        part = X[lo:hi] if layout == "dense" else to_csr(X[lo:hi], rng)
        got = model.learn(part, y[lo:hi])
        assert_scores_match(got, want, scale, 1e-8)
        # The state: h, γ, t, and S⁺ of the inputs in units of c (module docstring).
        # (Sparse batches grow the state only as far as the largest index seen.)
        state = model.state
        algo.grow_state(state, Xb.shape[1])
        c = state.arrays["scale"]
        np.testing.assert_array_equal(c, first_seen(Xb[:hi], y[:hi]))
        assert model.state.scalars["t"] == ref.t
        np.testing.assert_allclose(model.state.arrays["h"][: len(c)] * c, ref.h, rtol=1e-12,
                                   atol=1e-12 * np.abs(ref.h).max())
        assert model.state.scalars["gamma"] == pytest.approx(ref.gamma, rel=1e-8, abs=1e-300)
        inv_c = np.divide(1.0, c, out=np.zeros_like(c), where=c > 0)
        want_z = ref.pinv(ref.S * np.outer(inv_c, inv_c))
        got_z = algo.normalized_pinv(model.state)[: len(c), : len(c)]
        assert np.linalg.norm(got_z - want_z) <= 1e-8 * np.linalg.norm(want_z) + 1e-300, hi
        assert model.state.scalars["rank"] == np.linalg.matrix_rank(ref.S, rtol=1e-10)
        G = algo.generalized_inverse(model.state)[: len(c), : len(c)]
        S = ref.S
        np.testing.assert_allclose(S @ G @ S, S, atol=1e-8 * np.abs(S).max())  # a g-inverse of S
    assert model.state.scalars["rank"] == Xb.shape[1]  # full rank at the end: G is S⁺ itself
    np.testing.assert_allclose(algo.generalized_inverse(model.state), ref.Sinv(), rtol=1e-8,
                               atol=1e-8 * np.abs(ref.Sinv()).max())
    a = 1.5
    eta = math.exp((ref.h @ ref.Sinv() @ ref.h - ref.gamma) / (2 * a)) / a
    np.testing.assert_allclose(model.weights()[:, 0], eta * ref.Sinv() @ ref.h, rtol=1e-8,
                               atol=1e-8 * np.abs(eta * ref.Sinv() @ ref.h).max())


def test_alg2_first_prediction_in_a_new_direction_is_zero():
    """x outside the range of S_{t-1}: xᵀS_t⁺h_{t-1} = 0 (seed, Appendix E)."""
    model = make_learner("kotlowski2", "hinge", bias=False)
    got = model.learn(np.eye(4) * [3.0, 1e-5, 7e4, 2.0], [1, -1, 1, 1])
    np.testing.assert_array_equal(got, 0.0)
    assert model.state.scalars["rank"] == 4


def test_alg2_range_test_is_relative():
    """Colinear inputs, with features from 10⁻¹⁵⁰ to 10¹⁵⁰ and multiples
    from 10⁻⁶ to 10⁶, are one direction (x⊥ = 0 is judged relative to |x|,
    in each feature's units), and a new direction of any size is new."""
    rng = np.random.default_rng(9)
    v = rng.normal(size=3) * [1e-150, 1.0, 1e150]
    X = v * 10.0 ** rng.uniform(-6, 6, size=(60, 1))
    model = make_learner("kotlowski2", "hinge", bias=False)
    got = model.learn(X, np.where(rng.random(60) < 0.5, 1.0, -1.0))
    assert model.state.scalars["rank"] == 1 and np.all(np.isfinite(got))
    model.learn((v * [1e-6, -1e-6, 1e6])[None], [1.0])  # off the line only through signs and units
    assert model.state.scalars["rank"] == 2


# -- Lemma 7 at every step ----------------------------------------------------------------------


def lemma7_run(X, loss, alpha, label_for, rel=1e-9, bias=True):
    """The compiled learner one example at a time; at every trial

        g_t x_tᵀw_t + ψ_t(h_t, S_t) ≤ ψ_{t-1}(h_{t-1}, S_{t-1}),  ψ_t(h, S) = exp((hᵀS⁺h - γ_t)/(2α)),

    with ψ read from the learner's state (hᵀS⁺h is invariant to the units
    the state keeps it in)."""
    model = make_learner("kotlowski2", loss, alpha=alpha, bias=bias)
    model.decision_function(np.zeros((1, X.shape[1])))  # creates the (empty) state

    def psi():
        hSh, gamma = model.algorithm.potential_terms(model.state)
        return math.exp((hSh - gamma) / (2 * alpha))

    assert psi() == 1.0  # ψ_0
    tightest = math.inf
    for t, row in enumerate(X, 1):
        before = psi()
        yhat = float(model.decision_function(row[None])[0])
        label = float(label_for(t, yhat))
        got = float(model.learn(row[None], [label])[0])
        assert got == yhat  # predicting first changed nothing
        _, (g,) = loss_and_grad(loss, label, [yhat])
        assert abs(g) <= 1.0
        after = psi()
        lhs = g * yhat + after
        size = abs(g * yhat) + after + before
        assert lhs <= before + rel * size, f"Lemma 7 fails at t={t}: {lhs!r} > {before!r} (g={g}, ŷ={yhat})"
        tightest = min(tightest, (before - lhs) / size)
    return tightest


ADVERSARIAL2 = adversarial_sequences(1e12)
"""For the full-matrix learner the scale jump is 10¹² rather than 10¹⁶. At
10¹⁶ (all features at once, against the bias's x = 1) the earlier data's
share of S is below the rounding unit of the new x xᵀ, the rank-one update
of S⁺ cannot keep it, and the computed potential is off by a few percent
(Lemma 7 then "fails" by that much); at 10¹² it holds to 10⁻⁹. The
coordinate-wise learner has no such coupling and takes 10¹⁶."""


@pytest.mark.parametrize("name", sorted(ADVERSARIAL2))
@pytest.mark.parametrize("loss", BOUNDED)
@pytest.mark.parametrize("alpha", [1.126, 1.5, 4.0])
def test_alg2_lemma7_on_adversarial_sequences(name, loss, alpha):
    X, y = ADVERSARIAL2[name]
    if loss == "absolute":
        y = y * 0.5
    lemma7_run(X[:80], loss, alpha, fixed_labels(y))


@pytest.mark.parametrize("alpha", [1.126, 1.5, 4.0])
@pytest.mark.parametrize("name", ["one repeated input, one label", "tiny then huge", "late features",
                                  "sorted labels"])
@pytest.mark.parametrize("k", [0, 20, 50])
def test_alg2_lemma7_against_an_adaptive_adversary(name, alpha, k):
    X, _ = ADVERSARIAL2[name]
    lemma7_run(X[:80], "absolute", alpha, win_then_lose(k) if k else adversary)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60), d=st.integers(1, 5),
       alpha=st.floats(1.13, 5.0), loss=st.sampled_from(BOUNDED + ("adversary",)),
       log_range=st.floats(0.0, 6.0), rank=st.integers(1, 5))
def test_alg2_lemma7_property(seed, n, d, alpha, loss, log_range, rank):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, min(rank, d))) @ rng.normal(size=(min(rank, d), d))  # rank-deficient when rank < d
    X *= 10.0 ** rng.uniform(-log_range, log_range, size=d)
    if loss == "adversary":
        lemma7_run(X, "absolute", alpha, adversary)
        return
    y = labels(rng, X, loss) if loss != "absolute" else rng.normal(size=n)
    lemma7_run(X, loss, alpha, fixed_labels(y))


def test_alg2_lemma7_check_has_teeth():
    """Mistranscriptions break Lemma 7 and the same check catches them:
    updating γ with S_{t-1}⁺ (before adding x_t x_tᵀ) instead of S_t⁺, or
    η = exp(·) without its 1/α."""

    class OldGamma(ReferenceKotlowski2):
        def step(self, x, y, loss):
            x = np.asarray(x, dtype=float)
            S_old, gamma_old = self.pinv(self.S), self.gamma
            out = super().step(x, y, loss)
            if not math.isnan(y):
                self.gamma = gamma_old + out[3] ** 2 * float(x @ S_old @ x)
            return out

    class NoOneOverAlpha(ReferenceKotlowski2):
        def eta(self, hSh):
            return super().eta(hSh) * self.alpha

    def violations(ref, X, label_for):
        psi = lambda: math.exp((ref.h @ ref.Sinv() @ ref.h - ref.gamma) / (2 * ref.alpha))  # noqa: E731
        count = 0
        for t, row in enumerate(X, 1):
            before = psi()
            yhat = ref.step(row, math.nan, "absolute")[0]  # predict only
            got, _, _, g = ref.step(row, label_for(t, yhat), "absolute")
            assert got == yhat
            count += g * got + psi() > before * (1 + 1e-9)
        return count

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 3))
    for label_for in (adversary, win_then_lose(30)):
        assert violations(ReferenceKotlowski2(3, 1.5), X, label_for) == 0
    assert violations(OldGamma(3, 1.5), X, adversary) > 0
    assert violations(NoOneOverAlpha(3, 1.5), X, win_then_lose(30)) > 0


# -- invariance to invertible linear maps ---------------------------------------------------------


def random_map(rng, d, cond):
    """A random invertible d×d matrix with condition number ``cond``, at a
    random overall scale."""
    U, _ = np.linalg.qr(rng.normal(size=(d, d)))
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    return U @ np.diag(np.geomspace(1.0, 1.0 / cond, d)) @ V.T * 10.0 ** rng.uniform(-3, 3)


def mapped_runs(algo, loss, X, y, A):
    base = make_learner(algo, loss).learn(X, y)
    mapped = make_learner(algo, loss).learn(X @ A.T, y)
    return base, mapped


def repeats_and_a_late_feature(rng, n=300, d=6):
    X = rng.normal(size=(n, d))
    X[40:60] = X[7]  # repeats
    X[60:70] = X[9] * rng.normal(size=(10, 1))  # colinear
    X[: n // 2, d - 1] = 0.0  # a late feature
    return X


@pytest.mark.parametrize("cond", [1e2, 1e4])
@pytest.mark.parametrize("loss", BOUNDED)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_alg2_invertible_linear_map_leaves_predictions_unchanged(cond, loss, seed):
    """Appendix D: x → A x for any invertible A changes no prediction. In
    floating point the mapped run is as accurate as S's conditioning allows
    (cond(S) grows by up to cond(A)²); the square-root factor keeps it
    within 10⁻⁸ at cond(A) = 10⁴ (an explicit S⁺ drifts by ~10⁻⁴ there)."""
    rng = np.random.default_rng(100 * seed + int(math.log10(cond)))
    X = repeats_and_a_late_feature(rng)
    y = labels_for(rng, X, loss)
    A = random_map(rng, X.shape[1], cond)
    assert np.linalg.cond(A) == pytest.approx(cond, rel=1e-6)
    base, mapped = mapped_runs("kotlowski2", loss, X, y, A)
    assert np.abs(base).max() > 0.1
    assert_same_predictions(base, mapped, 1e-8)


@pytest.mark.parametrize("loss", BOUNDED)
def test_alg2_linear_map_on_rank_deficient_stretches(loss):
    """The same through planes, repeats, colinear rows and two late
    features, where each new direction of the mapped inputs can be a small
    fraction of |A x|. (At cond(A) = 10⁴ such data reach ~10⁻⁷: exact
    arithmetic on the rounded mapped inputs already differs by ~10⁻⁸.)"""
    rng = np.random.default_rng(77 + len(loss))
    X = rank_deficient_data(rng, n=300, log10_scale=(-0.5, 0.5))
    y = labels_for(rng, X, loss)
    base, mapped = mapped_runs("kotlowski2", loss, X, y, random_map(rng, X.shape[1], 1e2))
    assert_same_predictions(base, mapped, 1e-8)


@pytest.mark.parametrize("algo", ["kotlowski1", "scinol2"])
def test_coordinatewise_learners_are_not_invariant_to_a_non_diagonal_map(algo):
    """The check has teeth: the coordinate-wise learners (invariant to
    per-feature rescaling) change their predictions under a rotation-like map."""
    rng = np.random.default_rng(12)
    X = rank_deficient_data(rng, n=300)
    y = labels_for(rng, X, "logistic")
    A = random_map(rng, X.shape[1], 1e2)
    base, mapped = mapped_runs(algo, "logistic", X, y, A)
    with pytest.raises(AssertionError):
        assert_same_predictions(base, mapped, 1e-3)
    k2_base, k2_mapped = mapped_runs("kotlowski2", "logistic", X, y, A)
    assert_same_predictions(k2_base, k2_mapped, 1e-8)


@pytest.mark.parametrize("loss", BOUNDED)
def test_alg2_per_feature_rescaling_by_1e6_leaves_predictions_unchanged(loss):
    """Diagonal maps far beyond what a Euclidean pseudo-inverse resolves in
    double precision (features 10⁻⁶ and 10⁶ side by side): the learner works
    in units of each feature's first value, so they cost nothing."""
    rng = np.random.default_rng(41 + len(loss))
    X = rank_deficient_data(rng, n=300)
    y = labels_for(rng, X, loss)
    a = 10.0 ** rng.uniform(-6, 6, size=X.shape[1]) * rng.choice([-1.0, 1.0], size=X.shape[1])
    base = make_learner("kotlowski2", loss).learn(X, y)
    scaled = make_learner("kotlowski2", loss).learn(X * a, y)
    assert_same_predictions(base, scaled, 1e-9)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), log_cond=st.floats(0.0, 4.0))
def test_alg2_invariance_property(seed, log_cond):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, 4))
    X[40:60] = X[7]
    X[:90, 3] = 0.0
    y = labels_for(rng, X, "logistic")
    base, mapped = mapped_runs("kotlowski2", "logistic", X, y, random_map(rng, 4, 10.0**log_cond))
    assert_same_predictions(base, mapped, 1e-8)


# -- the learner protocol: registry, sharding, growth, state files --------------------------------


def test_alg2_is_registered_and_validated():
    algo = make_algorithm("kotlowski2")
    assert isinstance(algo, Kotlowski2)
    assert (algo.name, algo.params, algo.parameter_free, algo.scale_invariant, algo.shardable) == (
        "kotlowski2", {"alpha": 1.5}, True, True, False)
    assert make_algorithm("kotlowski2", alpha=2).params == {"alpha": 2.0}
    with pytest.raises(ValueError, match="alpha must be greater than 9/8"):
        make_algorithm("kotlowski2", alpha=1.125)
    with pytest.raises(ValueError, match="kotlowski2 has no parameter eps; its parameters are alpha"):
        make_algorithm("kotlowski2", eps=1.0)
    with pytest.raises(ValueError, match="not softmax"):
        make_learner("kotlowski2", "softmax", n_classes=3)
    with pytest.raises(ValueError) as err:
        make_algorithm("kotlowski3")
    assert str(err.value).startswith("unknown learner 'kotlowski3'; choose one of ")
    for name in [*SPECS, "kotlowski2"]:
        assert name in str(err.value)
    assert make_algorithm("kotlowski1").name == "kotlowski1"  # the SPECS path is unchanged


def test_alg2_growing_features_equals_knowing_them_up_front():
    """Sparse batches whose features appear over time grow the state (zero
    rows and columns: S⁺ of S padded with zeros); the run is the dense one."""
    rng = np.random.default_rng(6)
    X = rank_deficient_data(rng, n=200)
    y = labels_for(rng, X, "logistic")
    dense = make_learner("kotlowski2")
    want = dense.learn(X, y)
    sparse = make_learner("kotlowski2")
    cuts = [0, 40, 131, 150, 171, 200]
    got = np.concatenate([sparse.learn(to_csr(X[a:b]), y[a:b]) for a, b in zip(cuts, cuts[1:])])
    assert sparse.state.arrays["F"].shape == (X.shape[1] + 1,) * 2
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    for name, arr in dense.state.arrays.items():
        np.testing.assert_allclose(sparse.state.arrays[name], arr, rtol=1e-12, atol=1e-14, err_msg=name)


def test_alg2_weights():
    """weights() is η S⁺h at the current state. S here has rank 3 of 5 (two
    features never seen, two colinear ones): on every x in the range of S the
    weights give the paper's η xᵀS⁺h, and never-seen features weigh 0."""
    X = np.zeros((8, 4))
    X[:, 0] = [1, -2, 3, 1, 2, -1, 0.5, 1]
    X[:, 1] = 2.5 * X[:, 0]
    X[:, 2] = [0, 1, 1, 2, 0, 1, 3, -1]
    y = np.array([1, -1, 1, 1, -1, 1, -1, 1.0])
    model = make_learner("kotlowski2")
    model.learn(X, y)
    ref = ReferenceKotlowski2(5)
    for x, label in zip(with_bias(X), y):
        ref.step(x, label, "logistic")
    assert model.state.scalars["rank"] == 3
    w = model.weights()
    assert w.shape == (5, 1) and w[4, 0] == 0.0
    Sp = ref.Sinv()
    want_w = ref.eta(float(ref.h @ Sp @ ref.h)) * Sp @ ref.h
    rng = np.random.default_rng(0)
    for x in with_bias(X) + rng.normal(size=(8, 1)) * with_bias(X)[::-1]:  # combinations of seen rows
        np.testing.assert_allclose(x @ w[:, 0], x @ want_w, rtol=1e-10)


def _bad_states():
    algo = make_algorithm("kotlowski2")
    good = algo.init_state(3, 1)

    def edit(fn):
        s = good.copy()
        fn(s)
        return s

    return algo, good, {
        "non-square F": edit(lambda s: s.arrays.__setitem__("F", np.zeros((3, 4)))),
        "h does not match F": edit(lambda s: s.arrays.__setitem__("h", np.zeros(4))),
        "Q does not match F": edit(lambda s: s.arrays.__setitem__("Q", np.zeros((2, 2)))),
        "missing array": edit(lambda s: s.arrays.pop("Q")),
        "missing scalar": edit(lambda s: s.scalars.pop("gamma")),
        "rank too large": edit(lambda s: s.scalars.__setitem__("rank", 4.0)),
        "columns beyond the rank": edit(lambda s: s.arrays["F"].__setitem__((0, 2), 1.0)),
        "non-finite": edit(lambda s: s.arrays["h"].__setitem__(0, np.inf)),
        "negative scale": edit(lambda s: s.arrays["scale"].__setitem__(0, -1.0)),
    }


def test_alg2_check_state_validates_shapes():
    algo, good, bad = _bad_states()
    algo.check_state(good, 1)
    for what, state in bad.items():
        with pytest.raises(ValueError):
            algo.check_state(state, 1)
            pytest.fail(what)
    with pytest.raises(ValueError, match="one output"):
        algo.check_state(good, 3)


def test_alg2_load_refuses_a_state_of_the_wrong_shape(tmp_path):
    model = make_learner("kotlowski2")
    model.learn(np.eye(3), [1, -1, 1])
    header = model.header()
    state = model.state.copy()
    state.arrays["F"] = np.zeros((4, 5))  # same first axis as h: the file format alone cannot tell
    path = tmp_path / "bad.scinol"
    save_state(str(path), state, header)
    with pytest.raises(StateFileError, match="square"):
        OnlineLearner.load(str(path))
    state = LearnerState({"Sinv": np.zeros((4, 4)), "h": np.zeros(4)}, {"t": 0.0, "gamma": 0.0})
    save_state(str(path), state, header)
    with pytest.raises(StateFileError, match="state fields do not match kotlowski2"):
        OnlineLearner.load(str(path))
