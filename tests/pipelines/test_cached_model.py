"""A model in Beam's state cache is weighed from its own estimate, not by a
walk over every event awaiting its label, and the estimate is close to what
the walk finds; its state-store encoding is the model's snapshot."""

from __future__ import annotations

import math

import pytest
from apache_beam.runners.worker.statecache import get_deep_size

from learners import make_learner
from pipelines.bench import delayed_labels as D
from pipelines.exact.model_runner import LabelSettings, ModelRunner
from pipelines.steps import Kept, KeptCoder


@pytest.fixture(scope="module")
def waiting_runner() -> ModelRunner:
    n = 4000
    _, events = D.toy_events(n)
    runner = ModelRunner("m", lambda: make_learner("scinol2", "logistic"),
                         labels=LabelSettings("labels", math.inf, n + 1))
    for part in D.columnar_batches([{**e, "label": None} for e in events], 1000, 18):
        runner.process(part)
    assert len(runner.pending.events) == n
    return runner


def kept(runner: ModelRunner) -> Kept:
    return Kept(runner, runner.snapshot, runner.approx_bytes())


def test_the_weight_is_the_estimate_and_near_the_deep_size(waiting_runner):
    walked = get_deep_size(waiting_runner)
    weighed = get_deep_size(kept(waiting_runner))
    assert weighed >= waiting_runner.approx_bytes()
    assert 0.5 * walked <= weighed <= 2.0 * walked, (weighed, walked)


def test_the_store_gets_the_models_snapshot(waiting_runner):
    coder = KeptCoder()
    encoded = coder.encode(kept(waiting_runner))
    assert encoded == waiting_runner.snapshot()
    back = ModelRunner("m", lambda: make_learner("scinol2", "logistic"),
                       labels=LabelSettings("labels", math.inf, 10_000), snapshot=coder.decode(encoded))
    assert len(back.pending.events) == len(waiting_runner.pending.events)
