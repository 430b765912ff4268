"""The three ways into a learner agree with each other, and inputs are checked."""

import numpy as np
import pytest

from tests.support.gen import features, labels
from learners import make_learner
from learners.hashing import FeatureHasher, murmurhash3_32


def test_learn_one_equals_batch_learn_on_hashed_dicts():
    rng = np.random.default_rng(0)
    names = ["price_cents", "ratio", "count", "age_days"]
    rows = [{n: float(v) for n, v in zip(names, r) if v != 0} for r in features(rng, 200, 4)]
    y = rng.choice([-1.0, 1.0], size=200)
    one = make_learner("scinol2")
    scores = []
    for x, label in zip(rows, y):
        scores.append(one.decision_function([x])[0])
        one.learn_one(x, label)
    batch = make_learner("scinol2").learn(rows, y)
    np.testing.assert_array_equal(np.array(scores), batch)
    # predict_one / predict_proba_one are consistent with the score.
    x = rows[0]
    p = one.predict_proba_one(x)
    s = one.decision_function([x])[0]
    assert set(p) == {-1, 1} and p[1] == pytest.approx(1 / (1 + np.exp(-s)), rel=1e-12)
    assert one.predict_one(x) == (1 if s > 0 else -1)


def test_hashed_dicts_equal_the_explicit_sparse_input():
    hasher = FeatureHasher(bits=10)
    rows = [{"a": 1.5, "b": -2.0}, {"c": 3.0}, {"a": 0.5, "c": -1.0, "d": 7.0}] * 30
    y = [1, -1, 1] * 30
    indptr, indices, data = [0], [], []
    for r in rows:
        for name, v in r.items():
            h = murmurhash3_32(name.encode())
            indices.append(h % 1024)
            data.append(v if h < 2**31 else -v)
        indptr.append(len(indices))
    want = make_learner("scinol2", hash_bits=10).learn(rows, y)
    got = make_learner("scinol2").learn((indptr, indices, data), y)
    np.testing.assert_array_equal(got, want)
    assert hasher.transform_one({"a": 1.0, 5: 2.0})[5] == 2.0


def test_murmurhash3_known_vectors():
    # Published MurmurHash3_x86_32 values (also mmh3.hash / sklearn murmurhash3_32).
    assert murmurhash3_32(b"") == 0
    assert murmurhash3_32(b"", 1) == 0x514E28B7
    assert murmurhash3_32(b"hello") == 613153351
    assert murmurhash3_32(b"The quick brown fox jumps over the lazy dog") == 0x2E4FF723
    assert murmurhash3_32(b"foo") == 0xF6A5C420


def test_sklearn_style_with_01_labels_and_classes():
    rng = np.random.default_rng(1)
    X = features(rng, 600, 5)
    y01 = (labels(rng, X, "logistic") > 0).astype(int)
    model = make_learner("scinol2")
    for lo in range(0, 600, 100):
        model.partial_fit(X[lo : lo + 100], y01[lo : lo + 100])
    assert list(model.classes_) == [0, 1]
    pred = model.predict(X)
    assert set(np.unique(pred)) <= {0, 1} and np.mean(pred == y01) > 0.6
    proba = model.predict_proba(X)
    assert proba.shape == (600, 2) and np.allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(proba[:, 1] > 0.5, model.decision_function(X) > 0)
    # Same as learning with ±1 labels directly.
    direct = make_learner("scinol2")
    direct.learn(X, np.where(y01 == 1, 1.0, -1.0))
    np.testing.assert_array_equal(direct.decision_function(X), model.decision_function(X))


def test_multiclass_with_string_classes():
    rng = np.random.default_rng(2)
    X = features(rng, 900, 6)
    y_idx = labels(rng, X, "softmax").astype(int)
    names = np.array(["cat", "dog", "eel"])
    model = make_learner("scinol2", "softmax")
    model.partial_fit(X, names[y_idx], classes=names)
    assert model.n_classes == 3
    assert np.mean(model.predict(X) == names[y_idx]) > 0.5
    p = model.predict_proba_one({0: 1.0, 3: -2.0})
    assert set(p) == {"cat", "dog", "eel"} and sum(p.values()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="not one of the classes"):
        model.partial_fit(X[:2], ["cat", "cow"])


def test_decision_function_does_not_learn():
    rng = np.random.default_rng(3)
    X = features(rng, 50, 4)
    model = make_learner("scinol1")
    model.learn(X, labels(rng, X, "logistic"))
    before = {k: v.copy() for k, v in model.state.arrays.items()}
    model.decision_function(X * 1e6)
    for k, v in before.items():
        np.testing.assert_array_equal(model.state.arrays[k][: v.shape[0]], v)
    assert model.n_examples == 50


def test_features_can_appear_beyond_the_initial_dimension():
    model = make_learner("scinol2")
    model.learn(np.ones((3, 2)), [1, 1, -1])
    model.learn(([0, 1], [5000], [2.0]), [1])  # a new coordinate, far out
    assert model.state.n_coords >= 5001 + 1
    assert model.weights()[5001, 0] != 0.0


@pytest.mark.parametrize("X,y,message", [
    (np.array([[1.0, np.nan]]), [1], "non-finite feature value nan at row 0, column 1"),
    (np.array([[1.0], [np.inf]]), [1, 1], "non-finite feature value inf at row 1, column 0"),
    (([0, 2], [3, 3], [1.0, 2.0]), [1], "duplicate feature index 3 in row 0"),
    (([0, 1], [-1], [1.0]), [1], "negative feature index -1 in row 0"),
    (([0, 2], [1], [1.0]), [1], "must agree"),
    (([0, 1], [0.5], [1.0]), [1], "must be integers"),
    (np.ones((2, 2)), [1], "2 rows of features but 1 labels"),
    (np.ones((1, 2)), [2], "logistic loss takes labels -1/\\+1"),
    (np.ones((1, 2)), [np.inf], "not a finite number"),
])
def test_bad_inputs_are_named(X, y, message):
    with pytest.raises(ValueError, match=message):
        make_learner("scinol2").learn(X, y)


def test_bad_configuration_is_named():
    with pytest.raises(ValueError, match="unknown learner 'adamw'"):
        make_learner("adamw")
    with pytest.raises(ValueError, match="unknown loss 'l3'"):
        make_learner("scinol2", "l3")
    with pytest.raises(ValueError, match="eps must be a positive"):
        make_learner("scinol2", eps=-1)
    with pytest.raises(ValueError, match="scinol1 has no parameter rate; its parameters are eps"):
        make_learner("scinol1", rate=0.1)
    with pytest.raises(ValueError, match="alpha must be greater than 9/8"):
        make_learner("kotlowski1", alpha=1.125)
    with pytest.raises(ValueError, match="pa is defined for the hinge and epsilon_insensitive loss"):
        make_learner("pa", "logistic")
    with pytest.raises(ValueError, match="softmax loss: give n_classes"):
        make_learner("scinol2", "softmax").learn(np.ones((1, 1)), [0])
    with pytest.raises(ValueError, match="labels 0..2"):
        make_learner("scinol2", "softmax", n_classes=3).learn(np.ones((1, 1)), [3])


@pytest.mark.parametrize("loss", ["absolute", "squared"])
def test_regression_losses_learn_a_linear_target(loss):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(4000, 3)) * [1e-3, 1.0, 1e3]
    y = X @ np.array([2e3, -1.0, 5e-4]) + 3.0
    model = make_learner("scinol2", loss)
    scores = model.learn(X, y)
    early, late = np.abs(scores[:200] - y[:200]).mean(), np.abs(scores[-500:] - y[-500:]).mean()
    assert late < 0.2 * early
