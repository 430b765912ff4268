"""Delayed labels on embedded Flink (Apache Kafka in and out), exact and
sharded mode: the final model is one learner's on the events in the order
their labels arrived, as on the FnApiRunner."""

from __future__ import annotations

import pytest

from pipelines.launch import run
from pipelines.state.checkpoints import CheckpointStore
from pipelines.state.cuts import CutStore
from tests.support.labels import assert_same_state, learning_order, produce_delayed, reference_after
from tests.support.flink import flink_args, predictions_of
from tests.support.runs import config

pytestmark = [pytest.mark.flink, pytest.mark.slow]


@pytest.mark.parametrize("shards", [None, 1])
def test_late_labels_on_embedded_flink_learn_in_label_arrival_order(apache_kafka, topic_name, tmp_path,  # noqa: F811
                                                                    flink_job_server_jar, shards):
    kafka_bootstrap = apache_kafka.bootstrap
    X, y, ids = produce_delayed(kafka_bootstrap, topic_name, 20, 10, seed=2)
    sharded = {} if shards is None else {"shards": shards, "max_staleness": 0}
    cfg = config(kafka_bootstrap, topic_name, tmp_path, labels_topic=topic_name + ".labels", max_batch=20,
                 beam_args=flink_args(flink_job_server_jar, "[local]"), **sharded)
    run(cfg)
    order = learning_order(predictions_of(kafka_bootstrap, cfg.predictions_topic))
    assert sorted(order) == sorted(ids)
    if shards is None:
        final = CheckpointStore(cfg.checkpoint_dir).latest("default").learner
    else:
        final = CutStore(cfg.checkpoint_dir).latest("default", shards).merged_learner(cfg.learner.make)
    assert_same_state(final, reference_after(X, y, ids, order))
