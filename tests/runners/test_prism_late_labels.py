"""Delayed labels on Beam's Prism runner (exact mode, Apache Kafka):
the final model is one learner's on the events in the order their labels
arrived, as on the FnApiRunner and Flink."""

from __future__ import annotations

from pipelines.launch import run
from pipelines.runners.options import prism_args
from pipelines.state.checkpoints import CheckpointStore
from tests.support.labels import assert_same_state, learning_order, produce_delayed, reference_after
from tests.support.runs import config
from tests.support.trialkit import read_topic


def test_late_labels_on_prism_learn_in_label_arrival_order(apache_kafka_bootstrap, topic_name, tmp_path,
                                                           prism_binary):
    # Apache Kafka: reading the predictions back from tansu stopped short of its end (its end offsets lag)
    bootstrap = apache_kafka_bootstrap
    X, y, ids = produce_delayed(bootstrap, topic_name, 80, 40, seed=3)
    cfg = config(bootstrap, topic_name, tmp_path, labels_topic=topic_name + ".labels", max_batch=20,
                 beam_args=prism_args(prism_binary))
    run(cfg)
    order = learning_order([r for _, _, r in read_topic(bootstrap, cfg.predictions_topic)])
    assert sorted(order) == sorted(ids)
    final = CheckpointStore(cfg.checkpoint_dir).latest("default").learner
    assert_same_state(final, reference_after(X, y, ids, order))
