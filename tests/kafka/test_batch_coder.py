"""pipelines.beam_io.batch_coder: the Kafka read's batches cross Beam's
steps as columns, and Beam's size sampling no longer pickles each message."""

import random

import apache_beam as beam
import pytest
from apache_beam.coders import registry

from pipelines.beam_io import KafkaMessage, ReadFromKafka, ReadFromKafkaRanges
from pipelines.beam_io.batch_coder import KafkaBatch, KafkaBatchCoder
from pipelines.kafka.consumer import PartitionRange


def _random_batch(rng: random.Random, n: int) -> list:
    topics = ["events", "labels", "zażółć-🙂"]
    out = []
    def some_bytes(p_none: float, most: int):
        return None if rng.random() < p_none else rng.randbytes(rng.randrange(most))

    for _ in range(n):
        key = some_bytes(0.3, 40)
        headers = None
        if rng.random() < 0.3:
            headers = [(rng.choice(["trace", "ħ", ""]), some_bytes(0.3, 9)) for _ in range(rng.randrange(0, 4))]
        out.append(KafkaMessage(rng.choice(topics), rng.randrange(0, 2**31 - 1), rng.randrange(0, 2**62),
                                rng.choice([-1, rng.randrange(0, 2**45)]), key,
                                some_bytes(0.1, 300),
                                headers))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_any_batch_of_messages_comes_back_as_it_went(seed):
    rng = random.Random(seed)
    coder = KafkaBatchCoder()
    batch = _random_batch(rng, rng.choice([0, 1, 17, 2_000]))
    encoded = coder.encode(batch)
    back = coder.decode(encoded)
    assert type(back) is KafkaBatch and back == batch
    assert all(type(m) is KafkaMessage for m in back)
    assert coder.encode(list(batch)) == encoded  # deterministic
    # the estimate counts what dominates: within the topic names and headers of the encoding
    assert coder.estimate_size(batch) <= len(encoded) <= coder.estimate_size(batch) + 200 * len(batch) + 100


def test_a_batch_keeps_its_span_through_the_coder_and_pickle():
    import pickle

    from pipelines.kafka.spans import Span

    coder = KafkaBatchCoder()
    span = Span("zażółć-🙂", 3, 100, 250, 7)
    for messages in (_random_batch(random.Random(3), 12), []):  # [] closes a gap: a span and no message
        batch = KafkaBatch(messages, span)
        for back in (coder.decode(coder.encode(batch)), pickle.loads(pickle.dumps(batch))):
            assert type(back) is KafkaBatch and back == messages and back.span == span
    assert coder.decode(coder.encode(_random_batch(random.Random(4), 3))).span is None  # a plain list has none


def test_a_damaged_encoding_is_refused():
    coder = KafkaBatchCoder()
    encoded = coder.encode(_random_batch(random.Random(7), 50))
    for damaged in (encoded + b"\x00", encoded[:-1], encoded[:30], b""):
        with pytest.raises(ValueError, match="not a Kafka batch"):
            coder.decode(damaged)


def test_the_read_transforms_output_uses_it():
    assert isinstance(registry.get_coder(KafkaBatch), KafkaBatchCoder)
    assert KafkaBatchCoder().is_deterministic()
    p = beam.Pipeline()
    ranges = p | "ranges" >> ReadFromKafkaRanges("127.0.0.1:9", [PartitionRange("t", 0, 0, 10)])
    whole = p | "topic" >> ReadFromKafka("127.0.0.1:9", "t")
    for pcoll in (ranges, whole):
        assert pcoll.element_type is KafkaBatch
        assert isinstance(registry.get_coder(pcoll.element_type), KafkaBatchCoder)
