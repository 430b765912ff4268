"""The project's Avro records to and from topics: events produced by
``scinol produce``, the demo and the benchmarks; predictions, dead letters
and checkpoint headers read back by the demo, the tests and benchmarks."""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable, Iterable

from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.consumer import read_topic
from pipelines.kafka.producer import KafkaWriter, produce_stream
from schemas.codec import Codec

log = logging.getLogger(__name__)


def produce_events(bootstrap: str, topic: str, events: Iterable[dict], **options) -> tuple[int, float]:
    """Encode and produce ``events`` (created with ``partitions``, default 1,
    when missing); they go round-robin over the topic's partitions (in order
    within each). ``registry``: a :class:`schemas.registry.Registry`, its
    URL or None; ``topic_spec``: replication and config for a topic created
    (:class:`pipelines.kafka.admin.TopicSpec` fields). Returns (count,
    events/s). Delivery failures raise."""
    return produce_values(bootstrap, topic, lambda codec: (codec.encode("scinol.Event", e, topic) for e in events),
                          **options)


def produce_values(bootstrap: str, topic: str, encoded: Callable[[Codec], Iterable[bytes]], *,
                   partitions: int | None = None, rate: float | None = None, total: int | None = None,
                   kafka_config: dict | None = None, progress: bool = True, registry=None,
                   topic_spec: dict | None = None) -> tuple[int, float]:
    """:func:`produce_events` for events already encoded:
    ``encoded(codec)`` gives their framed values (e.g.
    :func:`pipelines.records.event_values.file_values`, a batch per call)."""
    from tqdm import tqdm

    spec = TopicSpec(topic, partitions or 1, **(topic_spec or {}))
    admin = KafkaAdmin(bootstrap, kafka_config)
    admin.wait_until_ready(say=log.warning)  # a refused login or an absent broker: one line, not a traceback
    n_partitions = admin.ensure_topics([spec])[topic]
    values = encoded(Codec(registry))
    writer = KafkaWriter(bootstrap, topic, {"linger.ms": 20, **(kafka_config or {})}, count_delivered=False)
    bar = tqdm(total=total, unit=" events", disable=not progress, file=sys.stderr, mininterval=0.5,
               dynamic_ncols=True, leave=False)
    start = time.monotonic()
    try:
        count = produce_stream(writer, values, partitions=n_partitions, rate=rate, progress=bar)
    finally:
        bar.close()
        writer.close()
    return count, count / max(time.monotonic() - start, 1e-9)


def read_records(bootstrap: str, topic: str, expected: int, timeout: float = 60.0, partition: int = 0,
                 config: dict | None = None, registry=None) -> list[dict]:
    """Decode one partition's records from the start until ``expected`` are
    read or ``timeout`` seconds pass."""
    codec = Codec(registry)
    messages = read_topic(bootstrap, topic, partitions=[partition], limit=expected, idle_timeout=None,
                          timeout=timeout, config=config)
    return [codec.decode(m.value) for m in messages]
