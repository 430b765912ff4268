"""scinol-mix in the pipeline, exact and sharded, like any other learner:
its predictions equal the in-memory learner's and its checkpoints hold its
state. On the embedded tansu broker only: what is checked is that the
learner's protocol (6K + 1 partial sums, 6K + 1 feedback values, the experts'
losses as global scalars) survives the pipeline, not a broker's quirks,
which the scinol2 runs of test_pipeline.py / test_sharded_pipeline.py cover
on both brokers."""

import numpy as np
import pytest

from learners import make_learner
from pipelines.config import LearnerConfig
from pipelines.launch import run
from pipelines.records.topics import produce_events, read_records
from pipelines.state.checkpoints import CheckpointStore
from pipelines.state.cuts import CutStore
from tests.support.sharded_loop import Loop, merged_arrays, stream
from tests.support.runs import config, toy_stream

MIX = LearnerConfig(learner="scinol-mix")


def test_exact_mode_equals_the_in_memory_mixture(tansu_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(3000, unlabelled_every=11)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, checkpoint_every=1000, learner=MIX)
    run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events))
    straight = make_learner("scinol-mix", "logistic")
    np.testing.assert_allclose([p["score"] for p in preds], straight.learn(X, y), rtol=1e-12, atol=1e-300)
    ckpt = CheckpointStore(cfg.checkpoint_dir).latest("default")
    assert ckpt.learner.algorithm.name == "scinol-mix" and ckpt.learner.state.scalars == straight.state.scalars
    np.testing.assert_array_equal(ckpt.learner.state.arrays["P"],
                                  straight.state.arrays["P"][: ckpt.learner.state.n_coords])


def test_sharded_mode_at_zero_staleness_equals_exact_mode(tansu_bootstrap, topic_name, tmp_path):
    X, y, events = toy_stream(400, unlabelled_every=11)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    cfg = config(tansu_bootstrap, topic_name, tmp_path, shards=3, max_staleness=0, checkpoint_every=150,
                 learner=MIX)
    run(cfg)
    preds = read_records(tansu_bootstrap, cfg.predictions_topic, len(events))
    exact = make_learner("scinol-mix", "logistic")
    np.testing.assert_allclose([p["score"] for p in preds], exact.learn(X, y), rtol=1e-9, atol=1e-12)
    merged = CutStore(cfg.checkpoint_dir).latest("default", 3).merged_learner(cfg.learner.make)
    np.testing.assert_allclose(merged.state.arrays["P"], exact.state.arrays["P"][: merged.state.n_coords],
                               rtol=1e-9, atol=1e-12)
    assert merged.state.scalars == pytest.approx(exact.state.scalars, rel=1e-12)


@pytest.mark.parametrize("k", [1, 4])
def test_sharded_protocol_at_zero_staleness_equals_one_mixture(k):
    """Router → shards → Combiner with the feedback passed as records (lists)."""
    X, y, items = stream(400)
    exact = make_learner("scinol-mix", "logistic")
    want = exact.learn(X, y)
    loop = Loop(make_learner("scinol-mix", "logistic"), k, staleness=0)
    loop.run(items)
    np.testing.assert_allclose([p["score"] for p in loop.predictions], want, rtol=1e-9, atol=1e-12)
    merged = merged_arrays(loop, exact.state.n_coords)
    for name, arr in exact.state.arrays.items():
        np.testing.assert_allclose(merged.arrays[name], arr, rtol=1e-9, atol=1e-12, err_msg=name)
    assert loop.combiner.scalars == pytest.approx(exact.state.scalars, rel=1e-12)
