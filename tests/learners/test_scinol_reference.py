"""The compiled kernels against the slow literal reference (tests/reference.py)."""

import math

import numpy as np
import pytest

from tests.support.gen import BINARY, REGRESSION, features, labels, to_csr
from learners import make_learner
from tests.support.compare import assert_scores_match, run_reference
from tests.reference.scinol import ReferenceScInOL

RTOL = 1e-12
CASES = [(v, loss) for v in (1, 2) for loss in BINARY + REGRESSION + ("softmax",)]


def reference_run(variant, X, y, loss, n_outputs, bias):
    ref = ReferenceScInOL(variant, X.shape[1] + bias, n_outputs)
    return (*run_reference(ref, X, y, loss, bias), ref)




def assert_state_matches(model, ref, n_coords):
    b_name = "beta" if model.algorithm.name == "scinol1" else "eta"
    for name, want in (("M", ref.M), ("G", ref.G), ("S2", ref.S2), (b_name, ref.B)):
        got = model.algorithm.field(model.state, name)[:n_coords].reshape(np.shape(want))
        np.testing.assert_allclose(got, np.array(want), rtol=1e-12, atol=0, err_msg=name)


def model_for(variant, loss, bias=True):
    return make_learner(f"scinol{variant}", loss, n_classes=3 if loss == "softmax" else None, bias=bias)


@pytest.mark.parametrize("variant,loss", CASES)
@pytest.mark.parametrize("layout", ["dense", "csr", "csr-shuffled"])
def test_kernel_equals_reference(variant, loss, layout):
    rng = np.random.default_rng(7 * variant + len(loss))
    X = features(rng, 160, 7)
    y = labels(rng, X, loss)
    K = 3 if loss == "softmax" else 1
    want, scale, ref = reference_run(variant, X, y, loss, K, bias=True)
    model = model_for(variant, loss)
    data = X if layout == "dense" else to_csr(X, rng if layout == "csr-shuffled" else None)
    got = model.learn(data, y)
    assert_scores_match(got, want, scale)
    assert_state_matches(model, ref, X.shape[1] + 1)


@pytest.mark.parametrize("variant", [1, 2])
@pytest.mark.parametrize("loss", ["logistic", "softmax"])
def test_extreme_values_without_overflow(variant, loss):
    """Feature scales from 1e-150 to 1e150 in one model."""
    rng = np.random.default_rng(variant)
    X = features(rng, 200, 9, log10_scale=(-150.0, 150.0))
    X[:, 0] = rng.normal(size=200) * 1e150
    X[:, 4] = rng.normal(size=200) * 1e-150
    y = labels(rng, X, loss)
    K = 3 if loss == "softmax" else 1
    model = model_for(variant, loss)
    got = model.learn(X, y)
    assert np.all(np.isfinite(got))
    for arr in model.state.arrays.values():
        assert np.all(np.isfinite(arr))
    want, scale, _ = reference_run(variant, X, y, loss, K, bias=True)
    assert_scores_match(got, want, scale)


def test_never_seen_coordinate_has_zero_weight():
    model = model_for(2, "logistic")
    X = np.zeros((5, 4))
    X[:, 0] = 1.0
    model.learn(X, [1, -1, 1, 1, -1])
    w = model.weights()
    assert w.shape == (5, 1)
    assert np.all(w[2:] == 0.0) and not math.isnan(w.sum())
