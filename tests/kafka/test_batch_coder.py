"""The coder of the read's batches gives back every message as it was read,
and a pipeline's read step really uses it."""

from __future__ import annotations

import random

import apache_beam as beam
import pytest

from pipelines.beam_io.batch_coder import MessageBatch, MessageBatchCoder
from pipelines.kafka.consumer import KafkaMessage


def _messages(rng: random.Random, n: int) -> list[KafkaMessage]:
    def maybe(value):
        return value if rng.random() < 0.7 else None

    return [KafkaMessage(rng.choice(["events", "labels", "é"]), rng.randrange(8), rng.randrange(1 << 40),
                         rng.choice([-1, rng.randrange(1 << 41)]), maybe(rng.randbytes(rng.randrange(12))),
                         rng.randbytes(rng.randrange(300)),
                         maybe([("h", maybe(b"v")), ("trace", b"")]))
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(5))
def test_a_batch_comes_back_equal_field_for_field(seed):
    rng = random.Random(seed)
    batch = MessageBatch(_messages(rng, rng.choice([0, 1, 7, 500])))
    got = MessageBatchCoder().decode(MessageBatchCoder().encode(batch))
    assert type(got) is MessageBatch
    assert got == batch
    assert all(type(m) is KafkaMessage for m in got)
    assert [m.headers for m in got] == [m.headers for m in batch]


def test_beam_picks_the_coder_for_a_message_batch():
    assert isinstance(beam.coders.registry.get_coder(MessageBatch), MessageBatchCoder)


def test_the_read_step_declares_message_batches():
    from pipelines.beam_io import ReadFromKafkaRanges

    p = beam.Pipeline()  # built, never run: no broker needed
    out = p | ReadFromKafkaRanges("localhost:1", [])
    assert out.element_type is MessageBatch
    assert isinstance(beam.coders.registry.get_coder(out.element_type), MessageBatchCoder)
