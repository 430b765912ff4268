"""Exact on real runners that keep no order: Flink's batch mode at
parallelism 2, which runs the pipeline stage after stage and hands each
keyed step its input in no particular order, and Prism. ``scinol run`` as a user types it, four partitions: with one model
per partition every event is predicted once and each model is the
single-process learner's over its partition, bit for bit; with one model
over the four partitions every event is applied once and each partition in
its offset order."""

from __future__ import annotations

import pytest

from tests.support.partitioned import PARTITIONS, check_model_per_partition, check_one_model, produce, scinol_run

pytestmark = pytest.mark.slow


@pytest.mark.flink
@pytest.mark.parametrize("per_partition_models", [True, False], ids=["model-per-partition", "one-model"])
def test_flink_batch_mode(tansu_bootstrap, topic_name, tmp_path, flink_job_server_jar, per_partition_models):
    """On an embedded Flink: on a session cluster of two TaskManagers Beam's
    batch translation restarts tasks now and then ("Unknown process bundle
    instruction id" from a stateful step's state read; docs/runners.md), and
    a restarted task re-sends predictions, which an exact count cannot take."""
    X, y, events = produce(tansu_bootstrap, topic_name, 4000, per_partition_models)
    proc = scinol_run(tansu_bootstrap, topic_name, tmp_path, "--bounded", "--runner", "flink", "--parallelism", "2",
                      "--execution-mode", "batch")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"scinol run: done: {len(events):,} messages read, {len(events):,} predictions written" in proc.stderr
    assert "skipped as covered" not in proc.stderr
    check = check_model_per_partition if per_partition_models else check_one_model
    check(tansu_bootstrap, topic_name, tmp_path, X, y, events)


@pytest.mark.parametrize("bounded", [True, False], ids=["bounded", "unbounded"])
def test_prism(tansu_bootstrap, topic_name, tmp_path, prism_binary, bounded):
    X, y, events = produce(tansu_bootstrap, topic_name, 2000, per_partition_models=True)
    ends = ["--bounded"] if bounded else ["--stop-after", str(len(events) // PARTITIONS)]
    proc = scinol_run(tansu_bootstrap, topic_name, tmp_path, *ends, "--runner", "prism")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "skipped as covered" not in proc.stderr
    check_model_per_partition(tansu_bootstrap, topic_name, tmp_path, X, y, events)
