"""Scale invariance (Kempka et al. 2019, §2 and Appendix B): multiplying feature i by
any a_i > 0 leaves every prediction of ScInOL1 and ScInOL2 unchanged."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.gen import features, labels
from learners import make_learner

TOL = 1e-9


def rescaled_run(algo, loss, X, y, a):
    K = 3 if loss == "softmax" else None
    base = make_learner(algo, loss, n_classes=K).learn(X, y)
    scaled = make_learner(algo, loss, n_classes=K).learn(X * a, y)
    return base, scaled


def assert_same_predictions(base, scaled):
    # Relative to the typical score size: scores pass through zero.
    scale = np.maximum(np.abs(base), np.median(np.abs(base)) + 1e-300)
    assert np.all(np.abs(scaled - base) <= TOL * scale), np.max(np.abs(scaled - base) / scale)


@pytest.mark.parametrize("algo", ["scinol1", "scinol2"])
@pytest.mark.parametrize("loss", ["logistic", "hinge", "absolute", "softmax"])
def test_rescaling_features_leaves_predictions_unchanged(algo, loss):
    rng = np.random.default_rng(11)
    X = features(rng, 2000, 10)
    y = labels(rng, X, loss)
    a = 10.0 ** rng.uniform(-6, 6, size=X.shape[1])
    base, scaled = rescaled_run(algo, loss, X, y, a)
    assert np.abs(base).max() > 0.1  # the model did learn something
    assert_same_predictions(base, scaled)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), log_a=st.lists(st.floats(-6, 6), min_size=6, max_size=6),
       algo=st.sampled_from(["scinol1", "scinol2"]))
def test_invariance_property(seed, log_a, algo):
    rng = np.random.default_rng(seed)
    X = features(rng, 300, 6)
    y = labels(rng, X, "logistic")
    base, scaled = rescaled_run(algo, "logistic", X, y, 10.0 ** np.array(log_a))
    assert_same_predictions(base, scaled)


def test_negative_factors_flip_weights_not_predictions():
    """Sign flips are rescalings too: sgn(θ) and M use |x| consistently."""
    rng = np.random.default_rng(5)
    X = features(rng, 500, 6)
    y = labels(rng, X, "logistic")
    base, flipped = rescaled_run("scinol2", "logistic", X, y, np.array([1, -1, 1, -1, -1, 1.0]))
    assert_same_predictions(base, flipped)


def test_plain_gradient_descent_is_not_invariant():
    """The check has teeth: a learner with a fixed rate fails it."""
    rng = np.random.default_rng(6)
    X = features(rng, 300, 4)
    y = labels(rng, X, "logistic")
    a = 10.0 ** rng.uniform(-3, 3, size=4)

    def sgd(X):
        w, out = np.zeros(X.shape[1]), []
        for x, label in zip(X, y):
            s = float(x @ w)
            out.append(s)
            w += 0.1 * label * np.exp(-np.logaddexp(0.0, label * s)) * x
        return np.array(out)

    base, scaled = sgd(X), sgd(X * a)
    with pytest.raises(AssertionError):
        assert_same_predictions(base, scaled)
