"""Apache Kafka 4.x as a cluster of several KRaft nodes on loopback (each
broker and controller, a static controller quorum), as production runs it:
internal topics and new topics replicated on 3 nodes with
``min.insync.replicas`` 2 (unless the caller says otherwise), so one node
may die and every write acknowledged by ``acks=all`` survives, and
transactions go on.

Each node is an :class:`ApacheKafkaBroker` with its own data folder and
process; :meth:`ApacheKafkaCluster.leader` names the node leading a
partition, so a test can ``kill -9`` exactly that one.
"""

from __future__ import annotations

import time

from pipelines.kafka.apache_broker import DEFAULT_HEAP, ApacheKafkaBroker, Quorum, new_cluster_id
from pipelines.kafka.broker import DEFAULT_HOST, BrokerError, free_port
from pipelines.provision.kafka import DEFAULT_KAFKA_VERSION, provision_kafka

LAST_NODE_STOP_SECONDS = 3.0
"""The last node's SIGTERM-to-SIGKILL wait in :meth:`ApacheKafkaCluster.stop` (see there)."""


def cluster_settings(replication: int) -> dict:
    """Defaults of a cluster of ``replication`` or more nodes."""
    min_isr = str(max(1, replication - 1))
    return {
        "default.replication.factor": str(replication),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(replication),
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": str(replication),
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": str(replication),
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        "num.partitions": "1",
        "auto.create.topics.enable": "true",
    }


class ApacheKafkaCluster:
    """``brokers`` Apache Kafka nodes; a context manager like the single broker."""

    def __init__(self, brokers: int = 3, host: str = DEFAULT_HOST, *, version: str = DEFAULT_KAFKA_VERSION,
                 heap: str = DEFAULT_HEAP, settings: dict | None = None):
        if brokers < 1:
            raise ValueError(f"a cluster needs at least one broker, not {brokers}")
        controller_ports = [free_port(host) for _ in range(brokers)]
        voters = ",".join(f"{i + 1}@{host}:{port}" for i, port in enumerate(controller_ports))
        cluster_id, defaults = new_cluster_id(), {**cluster_settings(min(3, brokers)), **(settings or {})}
        self.version = version
        self.nodes = [ApacheKafkaBroker(host=host, version=version, heap=heap,
                                        quorum=Quorum(i + 1, port, voters, cluster_id, defaults))
                      for i, port in enumerate(controller_ports)]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def start(self, timeout: float = 180.0) -> str:
        """Start every node at once (a controller quorum elects a leader only
        once most of its voters run), then wait until each serves."""
        libs = provision_kafka(self.version)
        try:
            for node in self.nodes:
                node._prepare(libs)
                node._spawn(libs)
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                node._wait_until_serving(max(1.0, deadline - time.monotonic()), wait_for_groups=False)
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def stop(self) -> None:
        """Stop every node and delete its data. One by one, so each shuts
        down in order while the others keep the controller quorum; the last
        one left has no quorum to shut down with and would wait out its whole
        timeout (30 s), so it gets 3 s before SIGKILL: its data goes anyway."""
        for i, node in enumerate(self.nodes):
            node.stop(timeout=LAST_NODE_STOP_SECONDS if i == len(self.nodes) - 1 else 30.0)

    def node(self, node_id: int) -> ApacheKafkaBroker:
        return self.nodes[node_id - 1]

    def leader(self, topic: str, partition: int = 0, timeout: float = 30.0) -> ApacheKafkaBroker:
        """The node leading ``topic[partition]`` now."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + timeout
        while True:
            found = admin.list_topics(topic, timeout=5).topics.get(topic)
            if found is not None and found.error is None and partition in found.partitions:
                leader = found.partitions[partition].leader
                if leader > 0:
                    return self.node(leader)
            if time.monotonic() > deadline:
                raise BrokerError(f"no leader of {topic}[{partition}] within {timeout:.0f} s")
            time.sleep(0.2)

    def __enter__(self) -> "ApacheKafkaCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
