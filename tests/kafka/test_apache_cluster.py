"""A 3-node Apache Kafka cluster (KRaft, each node broker and controller):
topics replicated 3 times with min.insync.replicas 2, and the node leading a
partition killed with SIGKILL mid-stream loses no acknowledged message,
writes none twice, and lets transactions go on."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from pipelines.kafka.apache_cluster import ApacheKafkaCluster
from pipelines.kafka.transactions import TransactionalOutput
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster():
    from tests.support.brokers import started

    cluster = started(ApacheKafkaCluster(3))
    yield cluster
    cluster.stop()


def _read_all(bootstrap: str, topic: str, expected: int, timeout: float = 60.0) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{time.time_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + timeout
    try:
        while len(got) < expected and time.monotonic() < deadline:
            got += [int(m.value()) for m in consumer.consume(1000, 0.5) if m.error() is None]
        got += [int(m.value()) for m in consumer.consume(1000, 2.0) if m.error() is None]  # nothing more
    finally:
        consumer.close()
    return got


def test_new_topics_are_replicated_on_three_nodes_with_two_in_sync_required(cluster, topic_name):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result(30)

    def partitions():  # the broker answering may learn of the new topic a moment after it is created
        return admin.list_topics(topic_name, timeout=10).topics[topic_name].partitions

    wait_for(lambda: len(partitions()) == 2, 30, f"the metadata of {topic_name} to list its 2 partitions")
    assert [sorted(p.replicas) for p in partitions().values()] == [[1, 2, 3], [1, 2, 3]]
    config = admin.describe_configs([ConfigResource("topic", topic_name)])
    (described,) = config.values()
    assert described.result(30)["min.insync.replicas"].value == "2"


def test_a_killed_partition_leader_loses_no_acknowledged_message_and_writes_none_twice(cluster, topic_name):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result(30)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5})
    acknowledged, sent = [], 3000
    lock = threading.Lock()

    def delivered(err, msg):
        if err is None:
            with lock:
                acknowledged.append(int(msg.value()))

    leader = cluster.leader(topic_name)
    for i in range(sent):
        producer.produce(topic_name, b"%d" % i, on_delivery=delivered)
        producer.poll(0)
        if i == sent // 3:
            leader.process.kill()  # SIGKILL: a crash, mid-stream
        time.sleep(0.0005)
    assert producer.flush(120) == 0
    try:
        assert cluster.leader(topic_name).quorum.node_id != leader.quorum.node_id
        assert sorted(acknowledged) == list(range(sent))  # the idempotent producer rode out the election
        assert _read_all(cluster.bootstrap, topic_name, sent) == list(range(sent))  # each once, in order
        # Transactions go on with a node down (the coordinator's log has 2 of 3 replicas in sync).
        out = TransactionalOutput(cluster.bootstrap, topic_name, f"tx-{topic_name}", {}, timeout=60)
        try:
            out.commit([(b"%d" % sent, None)], {(topic_name, 0): sent})
        finally:
            out.close()
        assert _read_all(cluster.bootstrap, topic_name, sent + 1)[-1] == sent
    finally:
        leader.restart(wait_for_groups=False)  # the module's cluster whole again
