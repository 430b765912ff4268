"""Sharded = unsharded: the learner protocol over K feature shards gives the
single-shard learner's predictions and state."""

import numpy as np
import pytest

from tests.support.gen import features, labels
from learners import make_algorithm
from learners.sharding import ShardedLearner

RTOL = 1e-9


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
