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
