"""``scinol run --runner prism`` as a user types it: Beam's Prism runner
(the binary ``scinol provision prism`` built) against the session's broker,
bounded, exact mode: one model, every prediction equal to the
single-process learner's."""

from __future__ import annotations

from pipelines.state.checkpoints import CheckpointStore
from tests.support.runs import assert_predicted_as_one_process, bounded_cli_run


def test_scinol_run_on_prism_predicts_every_event_as_one_process_would(tansu_bootstrap, topic_name,
                                                                      tmp_path, prism_binary):
    proc, X, y, events = bounded_cli_run(tansu_bootstrap, topic_name, 300, tmp_path, "--runner", "prism")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "scinol run: done: 300 messages read, 300 predictions written, 0 dead letters" in proc.stderr
    assert_predicted_as_one_process(tansu_bootstrap, topic_name + ".pred", X, y, events)
    # One model: Prism hands a key to more than one DoFn instance, which the model in Beam state survives.
    assert CheckpointStore(str(tmp_path / "ckpt")).latest("default").event_count == 300
