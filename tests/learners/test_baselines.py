"""The tuned baselines (sgd, adagrad, adam, nag) against the slow literal
references of tests/reference_baselines.py, written from the papers.

Lazy updates: the kernels touch only coordinates with x_i ≠ 0. For SGD,
AdaGrad and NAG that is exactly the dense algorithm (the update of an absent
coordinate is zero), and the references run densely over every coordinate.
Adam is different: dense Adam keeps decaying the moments of absent features
and its momentum keeps moving their weights, so lazy Adam (what sparse
implementations and this library do) is a different algorithm on data with
zeros; test_lazy_adam_is_not_dense_adam shows it.
"""

import math

import numpy as np
import pytest

from tests.support.gen import features, labels, to_csr
from tests.support.compare import assert_scores_match, run_reference
from learners import make_learner
from tests.reference.baselines import REFERENCES, ReferenceAdam

RTOL = 1e-12
NAMES = ("sgd", "adagrad", "adam", "nag")
LOSSES = ("logistic", "hinge", "softmax")
# Non-default values, so the test also checks each parameter reaches the kernel in its place.
PARAMS = {
    "sgd": {"lr": 0.05},
    "adagrad": {"lr": 0.2},
    "adam": {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6},
    "nag": {"lr": 0.3},
}


def n_classes(loss):
    return 3 if loss == "softmax" else None


def reference_run(name, X, y, loss, *, bias=True, ref=None, **params):
    K = n_classes(loss) or 1
    ref = ref or REFERENCES[name](X.shape[1] + bias, K, **params)
    return (*run_reference(ref, X, y, loss, bias), ref)




def assert_close(got, want, magnitude, what):
    """Within RTOL of the magnitude of the terms summed into the value."""
    want = np.asarray(want, dtype=float)
    got = np.asarray(got, dtype=float).reshape(want.shape)
    magnitude = np.broadcast_to(np.asarray(magnitude, dtype=float), want.shape)
    err = np.abs(got - want)
    bound = RTOL * (magnitude + np.abs(want)) + 1e-300
    assert np.all(err <= bound), f"{what}: worst {np.max(err / bound):.3g} × tolerance"


def assert_state_matches(model, ref, name):
    algo, n = model.algorithm, ref.d
    assert model.n_examples == ref.t
    assert_close(model.weights()[:n], ref.w, ref.mass, "weights")
    if name == "adagrad":
        assert_close(algo.field(model.state, "g2")[:n], ref.G, 0.0, "G")
    if name == "adam":
        assert_close(algo.field(model.state, "m")[:n], ref.m, ref.m_mass, "m")
        assert_close(algo.field(model.state, "v")[:n], ref.v, 0.0, "v")
    if name == "nag":
        assert_close(algo.field(model.state, "g2")[:n], ref.G, 0.0, "G")
        assert_close(algo.field(model.state, "s")[:n], ref.s, 0.0, "s")
        assert_close(model.state.scalars["N"], ref.N, 0.0, "N")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("layout", ["dense", "csr", "csr-shuffled"])
def test_kernel_equals_reference(name, loss, layout):
    """Feature scales 1e-3..1e3, a zero column, columns first present half-way
    and three-quarters of the way, ~30% zeros; scores and final state."""
    rng = np.random.default_rng(100 + 10 * NAMES.index(name) + LOSSES.index(loss))
    X = features(rng, 160, 7)
    y = labels(rng, X, loss)
    want, scale, ref = reference_run(name, X, y, loss, **PARAMS[name])
    model = make_learner(name, loss, n_classes=n_classes(loss), **PARAMS[name])
    data = X if layout == "dense" else to_csr(X, rng if layout == "csr-shuffled" else None)
    got = model.learn(data, y)
    assert np.abs(want).max() > 0.1  # the run did move
    assert_scores_match(got, want, scale)
    assert_state_matches(model, ref, name)
    late = np.abs(np.array(ref.w)[3 + 1])  # the column that appears three-quarters in (after the bias)
    assert late.max() > 0.0


@pytest.mark.parametrize("name", NAMES)
def test_unlabelled_rows_are_predicted_not_learned(name):
    """A NaN label: predicted, nothing learned (for NAG, not even s_i or N)."""
    rng = np.random.default_rng(7)
    X = features(rng, 120, 5)
    y = labels(rng, X, "logistic")
    y[::4] = np.nan
    y[3] = np.nan
    X[3] *= 100.0  # a larger |x_i| on an unlabelled row must not move NAG's s_i
    want, scale, ref = reference_run(name, X, y, "logistic")
    model = make_learner(name, "logistic")
    scores, losses = model.learn(X, y, return_losses=True)
    assert np.isnan(losses[np.isnan(y)]).all()
    assert_scores_match(scores, want, scale)
    assert_state_matches(model, ref, name)


def test_nag_rescales_by_the_ratio_of_scales_not_its_square():
    """Ross et al. 2013, Algorithm 1, by hand: one feature, no bias, lr η.

    Row 1, x = 1, y = +1: s = 1, N = 1, g = ℓ'(0) = -1/2, G = 1/4, so
    w = 0 - η √(1/1) (-1/2)(1) / (1 · 1/2) = η.
    Row 2, x = 2: |x| > s, so w ← w s/|x| = η/2 and ŷ = 2 · η/2 = η.
    (The squared factor s²/x² of the non-adaptive NG would give η/2.)
    Then learning row 2 (y = +1): s = 2, N = 1 + 1 = 2, g = -1/(1 + e^η),
    G = 1/4 + (2g)², w = η/2 - η √(2/2) · 2g / (2 √G), and row 3 (x = 2) gets 2w.
    """
    eta = 0.1
    model = make_learner("nag", "logistic", bias=False, lr=eta)
    got = model.learn(np.array([[1.0], [2.0], [2.0]]), [1, 1, 1])
    g = -1.0 / (1.0 + math.exp(eta))
    w2 = eta / 2 - eta * math.sqrt(2 / 2) * (2 * g) / (2 * math.sqrt(0.25 + (2 * g) ** 2))
    np.testing.assert_allclose(got, [0.0, eta, 2 * w2], rtol=1e-15, atol=0)


def test_lazy_adam_is_not_dense_adam():
    """On data with zeros, literal dense Adam (every coordinate updated every
    step) predicts differently from the lazy Adam here; on data without
    zeros the two are one algorithm."""
    rng = np.random.default_rng(9)
    with_zeros = features(rng, 200, 6)
    without = rng.normal(size=(200, 6)) * 10.0 ** rng.uniform(-3, 3, size=6)
    assert (with_zeros == 0).any() and (without != 0).all()
    err = {}
    for key, X in (("with zeros", with_zeros), ("without zeros", without)):
        y = labels(rng, X, "logistic")
        got = make_learner("adam", "logistic", lr=0.01).learn(X, y)
        dense, scale, _ = reference_run("adam", X, y, "logistic", ref=ReferenceAdam(7, lr=0.01, lazy=False))
        err[key] = np.max(np.abs(got - dense[:, 0]) / (scale[:, 0] + 1e-300))
    assert err["with zeros"] > 1e-3 and err["without zeros"] <= RTOL, err


# -- scale invariance --------------------------------------------------------------
def rescaled_runs(name, loss):
    """Predictions on a stream and on the same stream with feature i × a_i,
    a_i log-uniform in 1e-3..1e3."""
    rng = np.random.default_rng(12)
    X = features(rng, 1000, 8)
    y = labels(rng, X, loss)
    a = 10.0 ** rng.uniform(-3, 3, size=X.shape[1])
    base = make_learner(name, loss, n_classes=n_classes(loss)).learn(X, y)
    scaled = make_learner(name, loss, n_classes=n_classes(loss)).learn(X * a, y)
    assert np.abs(base).max() > 0.1  # the model did learn something
    # Relative to the typical score size: scores pass through zero.
    return np.max(np.abs(scaled - base) / np.maximum(np.abs(base), np.median(np.abs(base))))


@pytest.mark.parametrize("loss", LOSSES)
def test_nag_is_scale_invariant(loss):
    assert rescaled_runs("nag", loss) <= 1e-9


@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam"])
def test_other_baselines_are_not_scale_invariant(name):
    assert rescaled_runs(name, "logistic") > 1e-2


# -- parameter validation ----------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lr", [0.0, -0.1, -math.inf, math.nan])
def test_learning_rate_must_be_positive(name, lr):
    with pytest.raises(ValueError, match=rf"^{name}: lr must be a positive number"):
        make_learner(name, "logistic", lr=lr)


@pytest.mark.parametrize("param,value", [("beta1", 1.0), ("beta1", -0.1), ("beta2", 1.0), ("eps", 0.0)])
def test_adam_parameters_are_validated(param, value):
    with pytest.raises(ValueError, match=rf"^adam: {param} must be"):
        make_learner("adam", "logistic", **{param: value})
