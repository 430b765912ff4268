"""Properties every registered learner must have, checked across the registry."""

import numpy as np
import pytest

from gen import features, labels, to_csr
from learners import make_algorithm, make_learner
from learners.algorithms import SPECS
from learners.sharding import ShardedLearner

INVARIANT = {"scinol1", "scinol2", "kotlowski1", "nag"}
"""The learners whose predictions do not change when features are rescaled."""


def loss_for(name):
    spec = SPECS[name]
    return spec.losses[0] if spec.losses else "logistic"


def data_for(name, rng, n=250, d=10):
    X = features(rng, n, d, log10_scale=(-1.0, 1.0))
    return X, labels(rng, X, loss_for(name))


@pytest.mark.parametrize("name", sorted(SPECS))
@pytest.mark.parametrize("k", [1, 3, 7])
def test_shards_equal_one_learner(name, k):
    rng = np.random.default_rng(k)
    X, y = data_for(name, rng)
    loss = loss_for(name)
    single = make_learner(name, loss)
    want = single.learn(X, y)
    sharded = ShardedLearner(make_algorithm(name), loss, k)
    got = sharded.learn(to_csr(X), y)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    merged = sharded.merged_state(single.state.n_coords)
    for key, arr in single.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[key], arr, rtol=1e-9, atol=1e-12, err_msg=key)
    assert merged.scalars == pytest.approx(single.state.scalars, rel=1e-12)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_scale_invariance_is_as_declared(name):
    rng = np.random.default_rng(5)
    X, y = data_for(name, rng, n=400, d=6)
    a = 10.0 ** rng.uniform(-3, 3, size=X.shape[1])
    loss = loss_for(name)
    base = make_learner(name, loss).learn(X, y)
    scaled = make_learner(name, loss).learn(X * a, y)
    scale = np.maximum(np.abs(base), np.median(np.abs(base)) + 1e-300)
    same = bool(np.all(np.abs(scaled - base) <= 1e-9 * scale))
    assert SPECS[name].scale_invariant == (name in INVARIANT)
    assert same == (name in INVARIANT), f"{name}: invariant={same}, declared {name in INVARIANT}"


@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_learner_learns_something(name):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(3000, 4))
    u = np.array([1.0, -2.0, 0.5, 0.0])
    loss = loss_for(name)
    y = X @ u if loss in ("squared", "epsilon_insensitive") else np.where(X @ u > 0, 1.0, -1.0)
    _, losses = make_learner(name, loss).learn(X, y, return_losses=True)
    assert np.mean(losses[-500:]) < 0.7 * np.mean(losses[:100]), name


def test_parameters_are_validated_by_name():
    for name, spec in SPECS.items():
        for param in spec.params:
            with pytest.raises(ValueError, match=param):
                make_learner(name, loss_for(name), **{param: float("nan")})
