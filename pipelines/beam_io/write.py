"""``WriteToKafka``: a PCollection of values, (key, value) pairs or lists
of either (batches), or OutgoingMessages with headers, produced to one topic through the project's one
producer (:class:`pipelines.kafka.producer.KafkaWriter`).

One producer per DoFn instance; every delivery report is checked and the
first failure raises, naming topic, partition and error, so a bundle never
succeeds with a message undelivered: ``finish_bundle`` waits until all are
acknowledged (a broker that is down is waited for, with a warning every
10 s, until ``message.timeout.ms``). Counter ``kafka_io/messages_delivered``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines.kafka.producer import KafkaWriter, OutgoingMessage

from .partition_fn import METRICS_NAMESPACE


def _to_bytes(x, what: str) -> Optional[bytes]:
    if x is None or isinstance(x, bytes):
        return x
    if isinstance(x, str):
        return x.encode("utf-8")
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise TypeError(f"WriteToKafka: {what} must be bytes or str, got {type(x).__name__}")


class _KafkaWriteFn(beam.DoFn):
    def __init__(self, bootstrap, topic, producer_config, key_fn, flush_each=False):
        self._bootstrap, self._topic = bootstrap, topic
        self._producer_config = dict(producer_config or {})
        self._key_fn, self._flush_each = key_fn, flush_each
        self._writer = None
        self._delivered = Metrics.counter(METRICS_NAMESPACE, "messages_delivered")

    def __getstate__(self):
        return {**self.__dict__, "_writer": None}

    def setup(self):
        self._writer = KafkaWriter(self._bootstrap, self._topic, {"linger.ms": 20, **self._producer_config})
        self._counted = 0  # deliveries already added to the counter

    def _write_one(self, item):
        if isinstance(item, OutgoingMessage):
            self._writer.produce_message(item)
            return
        if isinstance(item, tuple):
            if len(item) != 2:
                raise TypeError(f"WriteToKafka: a tuple element must be (key, value), got {len(item)} items")
            key, value = _to_bytes(item[0], "key"), _to_bytes(item[1], "value")
        else:
            value = _to_bytes(item, "value")
            key = _to_bytes(self._key_fn(item), "key") if self._key_fn is not None else None
        self._writer.produce(value, key)

    def process(self, element):
        items = element if isinstance(element, list) else [element]
        if self._key_fn is None and all(type(item) is bytes for item in items):
            self._writer.produce_values(items)
        else:
            for item in items:
                self._write_one(item)
        if self._flush_each:
            self._writer.flush()
        self._writer.poll()

    def finish_bundle(self):
        self._writer.flush()
        # Counted since the last bundle, not since this flush: process()'s poll()
        # already ran the delivery reports of the messages acknowledged meanwhile
        # (most of them on a broker that acknowledges fast, as Apache Kafka does).
        self._delivered.inc(self._writer.delivered - self._counted)
        self._counted = self._writer.delivered

    def teardown(self):
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WriteToKafka(beam.PTransform):
    """Produce a PCollection to a Kafka topic (see the module docstring).

    Elements: ``bytes``/``str`` values, ``(key, value)`` pairs,
    :class:`~pipelines.kafka.producer.OutgoingMessage` (with headers and a
    timestamp), or lists of those.
    ``key_fn(value) -> key`` keys bare values (pairs keep their own key).
    ``flush_each``: every element is acknowledged by Kafka before the next
    one is taken (not only at the end of the bundle). For low-volume topics
    whose records must be durable before what follows them in the same
    bundle, e.g. dead letters, whose offsets a model checkpoint written later
    in the bundle covers (a restart does not read them again).
    Returns the (empty) output of the writing ParDo.
    """

    def __init__(self, bootstrap: str, topic: str, *, producer_config: Optional[dict] = None,
                 key_fn: Optional[Callable[[Any], Any]] = None, flush_each: bool = False):
        super().__init__()
        self.fn = _KafkaWriteFn(bootstrap, topic, producer_config, key_fn, flush_each)

    def expand(self, pcoll):
        return pcoll | "Produce" >> beam.ParDo(self.fn)
