"""``scinol run --runner prism`` as a user types it: Beam's Prism runner
(the binary ``scinol provision prism`` built) against the session's broker,
bounded, exact mode: one model, every prediction equal to the
single-process learner's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from learners import make_learner
from pipelines.records.topics import produce_events
from pipelines.state.checkpoints import CheckpointStore
from tests.support.runs import toy_stream
from tests.support.trialkit import read_topic


def test_scinol_run_on_prism_predicts_every_event_as_one_process_would(tansu_bootstrap, topic_name,
                                                                      tmp_path, prism_binary):
    X, y, events = toy_stream(300)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    predictions = topic_name + ".pred"
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", tansu_bootstrap, "--topic", topic_name,
         "--predictions-topic", predictions, "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"),
         "--runner", "prism"],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scinol run: done: 300 messages read, 300 predictions written, 0 dead letters" in proc.stderr
    preds = [record for _, _, record in read_topic(tansu_bootstrap, predictions)]
    assert [p["event_id"] for p in preds] == [e["id"] for e in events]
    want = make_learner("scinol2", "logistic").learn(X, y)
    np.testing.assert_allclose([p["score"] for p in preds], want, rtol=1e-12, atol=1e-300)
    # One model: Prism hands a key to more than one DoFn instance, which the model in Beam state survives.
    assert CheckpointStore(str(tmp_path / "ckpt")).latest("default").event_count == 300
