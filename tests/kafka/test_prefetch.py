"""A consumer that falls behind does not hold the backlog in memory: every
consumer the project makes keeps at most about ``PREFETCH_MESSAGES``
fetched ahead of what it has consumed (librdkafka's fetch-queue count, read
from its statistics), where librdkafka's default would read 100,000 ahead."""

import json
import time

from confluent_kafka import Consumer, TopicPartition

from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.consumer import PREFETCH_MESSAGES, consumer_settings
from pipelines.kafka.producer import KafkaWriter

BACKLOG = 200_000
VALUE = b"x" * 250  # about an Avro toy event's size


def _fetch_queue_counts(bootstrap: str, topic: str, seconds: float = 3.0) -> list[int]:
    """The partition's fetch-queue count from librdkafka's statistics while
    its consumer has taken one message and then waits."""
    stats = []
    conf = consumer_settings(bootstrap, None, {"statistics.interval.ms": 100,
                                               "stats_cb": lambda text: stats.append(json.loads(text))})
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert consumer.consume(1, 30), "no message within 30 s"
        for _ in range(int(seconds / 0.5)):
            time.sleep(0.5)  # librdkafka fetches meanwhile; poll(0) serves the stats, one message each
            consumer.poll(0)
    finally:
        consumer.close()
    return [s["topics"][topic]["partitions"]["0"]["fetchq_cnt"] for s in stats if topic in s.get("topics", {})]


def test_a_lagging_consumer_fetches_a_bounded_number_ahead(kafka_bootstrap, topic_name):
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    writer = KafkaWriter(kafka_bootstrap, topic_name, {"linger.ms": 20}, count_delivered=False)
    writer.produce_values([VALUE] * BACKLOG)
    writer.close(60)
    counts = _fetch_queue_counts(kafka_bootstrap, topic_name)
    assert counts, "librdkafka reported no statistics for the partition"
    assert max(counts) >= PREFETCH_MESSAGES // 2, f"it barely read ahead: {max(counts)}"
    # one fetch answer may land on top of the threshold (a MiB per partition: ~4,000 of these)
    assert max(counts) <= 2 * PREFETCH_MESSAGES, f"{max(counts):,} messages fetched ahead"
