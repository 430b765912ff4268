"""Small streams and run configurations shared by the pipeline tests."""

import numpy as np

from learners.datasets import toy_examples
from pipelines.config import RunConfig
from pipelines.records.events import dense_events


def toy_stream(n, seed=0, model="default", unlabelled_every=None):
    X, y = toy_examples(n, seed)
    y = y.copy()
    if unlabelled_every:
        y[::unlabelled_every] = np.nan
    return X, y, list(dense_events(X, y, f"{model}-", model=model, start_ms=1_700_000_000_000))


def config(bootstrap, topic, tmp_path, **kw):
    settings = {"bounded": True, "checkpoint_dir": str(tmp_path / "ckpt"), "progress_seconds": None, **kw}
    return RunConfig(bootstrap=bootstrap, topic=topic, predictions_topic=topic + ".pred", **settings)


def bounded_cli_run(bootstrap, topic, n, tmp_path, *runner_flags):
    """``scinol run --bounded`` as a user types it, over ``n`` toy events
    produced to ``topic`` first; returns the finished process and the
    stream (X, y, events) it read."""
    import subprocess
    import sys

    from pipelines.records.topics import produce_events

    X, y, events = toy_stream(n)
    produce_events(bootstrap, topic, events, partitions=1, progress=False)
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
         "--predictions-topic", topic + ".pred", "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"),
         *runner_flags],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    return proc, X, y, events


def assert_predicted_as_one_process(bootstrap, predictions_topic, X, y, events):
    """Every event predicted once, in order, as the single-process ScInOL2 learner does."""
    from learners import make_learner
    from tests.support.trialkit import read_topic

    preds = [record for _, _, record in read_topic(bootstrap, predictions_topic)]
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]
    want = make_learner("scinol2", "logistic").learn(X, y)
    np.testing.assert_allclose([p["score"] for p in preds], want, rtol=1e-12, atol=1e-300)
