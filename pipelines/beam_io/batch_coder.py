"""How a batch of Kafka messages crosses a step boundary: its fields as
columns (all offsets, all values, ...) in one pickle. Beam's default coder
encodes a list element by element, and a
:class:`~pipelines.kafka.consumer.KafkaMessage` (a NamedTuple, not a plain
tuple) then falls back to one pickle call per message; even one pickle of
the whole list calls the NamedTuple's ``__getnewargs__`` per message. For a
batch of 5,000 messages the round trip takes about a fifth of the time of
Beam's default (tests/kafka/test_batch_coder.py checks the values)."""

from __future__ import annotations

import pickle

import apache_beam as beam

from pipelines.kafka.consumer import KafkaMessage


class MessageBatch(list):
    """One partition's messages in offset order, as the read emits them."""

    __slots__ = ()


class MessageBatchCoder(beam.coders.Coder):
    def encode(self, batch) -> bytes:
        return pickle.dumps(tuple(zip(*batch)), protocol=pickle.HIGHEST_PROTOCOL)

    def decode(self, data: bytes) -> MessageBatch:
        new = tuple.__new__  # KafkaMessage(...) without the NamedTuple's Python-level __new__
        return MessageBatch(new(KafkaMessage, fields) for fields in zip(*pickle.loads(data)))

    def is_deterministic(self) -> bool:
        return False  # never a key

    def to_type_hint(self):
        return MessageBatch


beam.coders.registry.register_coder(MessageBatch, MessageBatchCoder)
