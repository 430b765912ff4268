"""``PartitionReader`` against a real broker reached through a TCP proxy
that refuses connections for a while (a broker host down).

librdkafka's own wedge after a broker restart (confluentinc/librdkafka#5153:
an assigned partition never fetched again) cannot be produced on demand, so
these tests stand in for it by pausing the partition in the reader's
consumer while the broker is away: a consumer that fetches nothing."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.kafka.consumer import PartitionReader
from tests.support.faultkit import ProxiedBroker

REVIVE = 2.0


@pytest.fixture
def proxied():
    with ProxiedBroker("tansu") as broker:
        yield broker


def _create(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _produce(bootstrap: str, topic: str, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        producer.produce(topic, str(v).encode())
    assert producer.flush(30) == 0


def _read(reader: PartitionReader, until: int, timeout: float) -> list[int]:
    """Values polled (the owner's part: moving the position) until ``until`` or ``timeout``."""
    values, deadline = [], time.monotonic() + timeout
    while len(values) < until and time.monotonic() < deadline:
        polled = reader.poll(100, 0.2)
        values += [int(km.value) for km in polled.batch]
        if polled.batch:
            reader.position = polled.batch[-1].offset + 1
    return values


def _broker_away(broker: ProxiedBroker, reader: PartitionReader, wedge: bool) -> None:
    """Refuse connections until the reader has reported it (errors are
    served by polls), then (``wedge``) stop its partition's fetching, and
    after two more seconds listen again."""
    broker.proxy.refuse()
    deadline = time.monotonic() + 30
    while not reader.reporter.in_trouble and time.monotonic() < deadline:
        assert not reader.poll(100, 0.2).batch
    assert reader.reporter.in_trouble, "the refused connections were not reported"
    if wedge:
        reader.consumer.pause([TopicPartition(reader.topic, reader.partition)])  # stand-in for librdkafka's wedge
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        assert not reader.poll(100, 0.2).batch
    broker.proxy.accept()


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("wedged", [False, True], ids=["healthy", "wedged"])
def test_a_reader_reads_on_after_the_broker_comes_back_and_revives_a_wedged_consumer(proxied, topic_name,
                                                                                     wedged):
    _create(proxied.bootstrap, topic_name)
    _produce(proxied.bootstrap, topic_name, range(50))
    reader = PartitionReader(proxied.bootstrap, topic_name, 0, revive_seconds=REVIVE)
    try:
        reader.seek(0)
        assert _read(reader, 50, 30) == list(range(50))
        _broker_away(proxied, reader, wedge=wedged)
        _produce(proxied.bootstrap, topic_name, range(50, 100))
        assert _read(reader, 50, 30 + 3 * REVIVE) == list(range(50, 100))  # nothing lost, nothing twice
        assert reader.revived == (1 if wedged else 0)
        assert not reader.reporter.in_trouble
    finally:
        reader.close()


@pytest.mark.kafka
def test_an_idle_reader_without_broker_errors_keeps_its_consumer(proxied, topic_name):
    _create(proxied.bootstrap, topic_name)
    reader = PartitionReader(proxied.bootstrap, topic_name, 0, revive_seconds=0.5)
    try:
        reader.seek(0)
        reader.consumer.pause([TopicPartition(topic_name, 0)])
        assert _read(reader, 1, 2.0) == []
        assert reader.revived == 0
    finally:
        reader.close()
