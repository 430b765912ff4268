"""A bounded read ends at the true end of each partition. Its ends come
from the high watermark a fetch answers with, not from a watermark query:
tansu answers the query short of its newest records (seen: 98,535 and
99,990 for a partition of 100,000, unchanged for seconds), and a bounded
run that stopped there would miss them."""

from pipelines.kafka.consumer import resolve_ranges
from pipelines.kafka.producer import KafkaWriter
from pipelines.kafka.admin import KafkaAdmin, TopicSpec


def test_a_bounded_range_reaches_the_last_record(kafka_bootstrap, topic_name):
    n = 100_000
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 2)])
    writer = KafkaWriter(kafka_bootstrap, topic_name, {"linger.ms": 20})
    for i in range(n):
        writer.produce(b"%d" % i, partition=i % 2)
    writer.close(60)
    ranges = resolve_ranges(kafka_bootstrap, topic_name, bounded=True)
    assert [(r.partition, r.start, r.stop) for r in ranges] == [(0, 0, n // 2), (1, 0, n // 2)]
