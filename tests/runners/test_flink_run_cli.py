"""``scinol run --runner flink`` as a user types it: a real process on an
embedded Flink (MiniCluster) against the session's broker, bounded, exact
mode: one prediction per event, equal to the single-process learner's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from learners import make_learner
from pipelines.records.topics import produce_events
from tests.support.runs import toy_stream
from tests.support.trialkit import read_topic

pytestmark = [pytest.mark.flink, pytest.mark.slow]


def test_scinol_run_on_embedded_flink_predicts_every_event_as_one_process_would(
        kafka_bootstrap, topic_name, tmp_path, flink_job_server_jar):
    X, y, events = toy_stream(100)
    produce_events(kafka_bootstrap, topic_name, events, partitions=1, progress=False)
    predictions = topic_name + ".pred"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", kafka_bootstrap, "--topic", topic_name,
         "--predictions-topic", predictions, "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"),
         "--runner", "flink"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runner flink at [local]" in proc.stderr
    assert "scinol run: done: 100 messages read, 100 predictions written, 0 dead letters" in proc.stderr
    assert "Traceback" not in proc.stderr
    preds = [record for _, _, record in read_topic(kafka_bootstrap, predictions)]
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]
    want = make_learner("scinol2", "logistic").learn(X, y)
    np.testing.assert_allclose([p["score"] for p in preds], want, rtol=1e-12, atol=1e-300)
