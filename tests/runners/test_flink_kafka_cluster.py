"""Exactly-once on Flink against a 3-node Apache Kafka cluster: the node
leading the predictions partition (the transactions' writes) killed with
SIGKILL mid-stream, and left down. The run rides out the leader election:
every prediction written once (read_committed, in order), the model the
single-process learner's to the bit."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from learners import make_learner
from pipelines.kafka.apache_cluster import ApacheKafkaCluster
from pipelines.launch import start
from pipelines.records.topics import produce_events
from pipelines.state.checkpoints import CheckpointStore
from tests.support.brokers import started
from tests.support.flink import flink_args, new_running_job, predictions_of
from tests.support.waiting import wait_for
from tests.support.runs import config, toy_stream

pytestmark = [pytest.mark.flink, pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def kafka_cluster():
    cluster = started(ApacheKafkaCluster(3))
    yield cluster
    cluster.stop()


def _nodes_story(cluster) -> str:
    """Which nodes run, and the log of any that ended, for a failure message."""
    return "; ".join(f"node {node.quorum.node_id}: " + ("running" if node.process and node.process.poll() is None
                                                        else f"ended: {node.log_tail(1500)}")
                     for node in cluster.nodes)


def _end_offset(bootstrap: str, topic: str) -> int:
    """The predictions partition's end offset: progress while transactions
    are open all the time (a read_committed read to the end waits for a
    moment with none open, which a busy exactly-once run never has)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "progress"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    except KafkaException:
        return -1
    finally:
        consumer.close()


def _model_at(ckpt_dir: str, n: int) -> bool:
    final = CheckpointStore(ckpt_dir).latest("default")
    return final is not None and final.event_count == n


def test_a_killed_partition_leader_under_exactly_once_writes_each_prediction_once(
        kafka_cluster, flink_cluster, flink_job_server_jar, topic_name, tmp_path):
    bootstrap, n = kafka_cluster.bootstrap, 3000
    X, y, events = toy_stream(n)
    produce_events(bootstrap, topic_name, events[:500], partitions=1, progress=False)
    cfg = config(bootstrap, topic_name, tmp_path, bounded=False, checkpoint_every=n, max_batch=200,
                 exactly_once=True, beam_args=flink_args(
                     flink_job_server_jar, flink_cluster.master, "--streaming", "--checkpointing_interval=2000",
                     "--finish_bundle_before_checkpointing", "--number_of_execution_retries=30",
                     "--execution_retry_delay=3000"))
    before = {j["jid"] for j in flink_cluster.jobs()}
    result = start(cfg)
    killed = []
    try:
        job = new_running_job(flink_cluster, before)
        story = lambda: _nodes_story(kafka_cluster)  # noqa: E731
        wait_for(lambda: _end_offset(bootstrap, cfg.predictions_topic) >= 100, 240, "the first predictions", story)
        assert "ended" not in story(), story()
        producer = threading.Thread(target=produce_events, args=(bootstrap, topic_name, events[500:]),
                                    kwargs={"rate": 60, "progress": False})
        producer.start()
        time.sleep(5)
        assert "ended" not in story(), story()
        so_far = _end_offset(bootstrap, cfg.predictions_topic)
        wait_for(lambda: _end_offset(bootstrap, cfg.predictions_topic) > so_far + 300, 240,
                 "predictions flowing before the kill", story)
        leader = kafka_cluster.leader(cfg.predictions_topic)
        leads_events = kafka_cluster.leader(topic_name) is leader
        assert producer.is_alive(), "the kill must come mid-stream"
        leader.process.kill()
        killed.append(leader.quorum.node_id)
        wait_for(lambda: kafka_cluster.leader(cfg.predictions_topic) is not leader, 60, "a new leader")
        producer.join()
        wait_for(lambda: _model_at(cfg.checkpoint_dir, n), 420, f"the model's checkpoint at event {n}")
        failures = flink_cluster.rest(f"/jobs/{job}/exceptions").get("exceptionHistory", {}).get("entries", [])
    finally:
        result.cancel()
        for node in kafka_cluster.nodes:  # the module's cluster whole again, whatever happened
            if node.process is None or node.process.poll() is not None:
                node.restart(wait_for_groups=False)
    ids = [p["event_id"] for p in predictions_of(bootstrap, cfg.predictions_topic)]  # read_committed
    assert ids == [e["id"] for e in events]  # each once, in order
    learner = make_learner("scinol2", "logistic")
    learner.learn(X, y)
    final = CheckpointStore(cfg.checkpoint_dir).latest("default")
    np.testing.assert_array_equal(final.learner.state.arrays["P"],
                                  learner.state.arrays["P"][:final.learner.state.n_coords])
    assert final.learner.state.scalars == learner.state.scalars
    print(f"\nnode killed: {killed} (it led the events partition too: {leads_events}); "
          f"Flink failures: {len(failures)}")
