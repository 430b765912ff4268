"""Sharded = unsharded: the learner protocol over K feature shards gives the
single-shard learner's predictions and state (DESIGN.md §1)."""

import numpy as np
import pytest

from gen import features, labels, to_csr
from learners import make_algorithm, make_learner
from learners.sharding import ShardedLearner

RTOL = 1e-9


@pytest.mark.parametrize("variant", [1, 2])
@pytest.mark.parametrize("loss", ["logistic", "softmax"])
@pytest.mark.parametrize("k", [1, 2, 3, 7])
def test_k_shards_equal_one_learner(variant, loss, k):
    rng = np.random.default_rng(variant * 10 + k)
    X = features(rng, 250, 12)
    y = labels(rng, X, loss)
    K = 3 if loss == "softmax" else 1
    single = make_learner(f"scinol{variant}", loss, n_classes=K if K > 1 else None)
    want = single.learn(X, y)
    sharded = ShardedLearner(make_algorithm(f"scinol{variant}"), loss, k, n_outputs=K)
    got = sharded.learn(to_csr(X), y)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-12)
    merged = sharded.merged_state(single.state.n_coords)
    for name, arr in single.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[name], arr, rtol=RTOL, atol=1e-12, err_msg=name)
    assert merged.scalars == single.state.scalars


def test_each_coordinate_lives_in_exactly_one_shard():
    rng = np.random.default_rng(0)
    X = features(rng, 50, 30)
    sharded = ShardedLearner(make_algorithm("scinol2"), "logistic", 4)
    sharded.learn(X, labels(rng, X, "logistic"))
    owned = [set(s.owned()[0].tolist()) for s in sharded.shards]
    assert sum(len(o) for o in owned) == len(set().union(*owned))
    assert all(owned)  # no shard left empty with 30 features over 4 shards


def test_non_shardable_learner_refused():
    class Whole:
        name, shardable = "full-matrix", False

    with pytest.raises(ValueError, match="not coordinate-separable"):
        ShardedLearner(Whole(), "logistic", 2)
