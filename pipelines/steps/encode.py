"""Records to Kafka values for a sink."""

from __future__ import annotations

import apache_beam as beam

from pipelines import telemetry
from pipelines.records.dead_letters import dead_letter_message
from schemas.codec import Codec


class EncodeRecords(beam.DoFn):
    """Records → (key, Confluent-framed Avro bytes) for the sink writing to
    ``topic``; ``key`` names the field used as the Kafka key (None: no key);
    ``registry``: a :class:`schemas.registry.Registry` or None."""

    def __init__(self, record_type: str, topic: str, registry=None, key: str | None = None):
        self.record_type, self.topic, self.registry, self.key = record_type, topic, registry, key

    def setup(self):
        self.codec = Codec(self.registry)

    def process(self, record):
        value = self.codec.encode(self.record_type, record, self.topic)
        yield (record[self.key].encode() if self.key else None, value)


class EncodeDeadLetters(EncodeRecords):
    """DeadLetter records → messages with the original key, headers and
    timestamp, the error context in headers (:func:`dead_letter_message`)."""

    def __init__(self, topic: str, registry=None):
        super().__init__("scinol.DeadLetter", topic, registry)

    def process(self, record):
        telemetry.count("dead_letters", reason=record["reason"])
        yield dead_letter_message(record, self.codec.encode(self.record_type, record, self.topic))
