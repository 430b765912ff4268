"""Fuzzing: random and mutated bytes never raise out of the pipeline; each
message becomes a learnable event or a dead letter with a reason, and
absurd declared sizes are rejected without allocating them."""

import os
import random
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzzkit import (absurd_values, check_batch, corpus, decoder, fuzz_through_pipeline, mutate, outcomes,
                     oversized_value, seed_values)
from pipelines.state.checkpoints import CheckpointStore
from pipelines.records.dead_letters import DEFAULT_MAX_INDEX, MAX_ORIGINAL_BYTES, screen
from schemas.catalog import schema_id
from schemas.codec import Codec

CODEC = Codec()
SEEDS = seed_values()
HEADER = b"\x00" + schema_id("scinol.Event").to_bytes(4, "big")


FN = decoder()
message = st.one_of(
    st.binary(max_size=120),
    st.binary(max_size=120).map(lambda b: HEADER + b),
    st.tuples(st.sampled_from(SEEDS), st.randoms(use_true_random=False)).map(lambda sr: mutate(*sr)),
    st.sampled_from(SEEDS),
    st.none(),
)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(message, min_size=1, max_size=12))
def test_any_bytes_become_a_learnable_event_or_a_dead_letter(values):
    check_batch(FN, values)


def test_a_mutation_corpus_keeps_the_invariant():
    values = corpus(20_000, seed=1)
    dead, events = check_batch(FN, values)
    assert len(dead) > 10_000 and len(events) > 500  # both outcomes are exercised


@pytest.mark.parametrize("name", list(absurd_values()))
def test_absurd_sizes_are_rejected_with_a_reason_not_by_allocating(name):
    value = absurd_values()[name]
    tracemalloc.start()
    try:
        dead, events = outcomes(FN, [value])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not events and len(dead) == 1
    expected = "index_out_of_range" if name.startswith("sparse index") else "undecodable"
    assert dead[0]["reason"] == expected, dead[0]
    assert peak < 5_000_000, f"{peak} bytes allocated to reject {name}"


def test_index_limit_covers_dense_length_and_is_configurable():
    dense = CODEC.encode("scinol.Event", {"id": "d", "timestamp": 0, "features": {"values": [1.0] * 10}})
    sparse = CODEC.encode("scinol.Event", {"id": "s", "timestamp": 0,
                                           "features": {"indices": [DEFAULT_MAX_INDEX + 5], "values": [1.0]}})
    assert [d["reason"] for d in outcomes(decoder(max_index=8), [dense])[0]] == ["index_out_of_range"]
    assert outcomes(decoder(max_index=10), [dense])[1]
    assert [d["reason"] for d in outcomes(FN, [sparse])[0]] == ["index_out_of_range"]
    assert outcomes(decoder(max_index=DEFAULT_MAX_INDEX + 6), [sparse])[1]


def test_oversized_message_is_rejected_undecoded_and_its_dead_letter_fits_kafka():
    big = oversized_value()
    event, problem = screen(CODEC, big, "logistic", None)
    assert event is None and problem[0] == "oversized" and str(len(big)) in problem[1]
    dead, _ = outcomes(FN, [big])
    assert len(dead[0]["original"]) == MAX_ORIGINAL_BYTES and "cut to its first" in dead[0]["detail"]
    assert len(CODEC.encode("scinol.DeadLetter", dead[0])) < 1_000_000  # librdkafka's default message.max.bytes


def test_fuzzed_topic_through_the_pipeline(kafka_bootstrap, topic_name, tmp_path):
    """The same bytes through Kafka and the whole Beam pipeline (checkpoints
    on): it finishes, every message is a prediction or a dead letter, the
    17 MiB one included, and no model name escapes the checkpoint directory."""
    rnd = random.Random(5)
    values = corpus(700, seed=2) + SEEDS + list(absurd_values().values()) + [oversized_value()]
    rnd.shuffle(values)
    ckpt = tmp_path / "ckpt"
    dead, predictions, expected_dead = fuzz_through_pipeline(kafka_bootstrap, topic_name, values, str(ckpt))

    assert set(dead) == expected_dead
    assert len(predictions) == len(values) - len(expected_dead)
    assert dead[values.index(oversized_value())]["reason"] == "oversized"
    for offset, record in dead.items():
        assert record["original"] == values[offset][:MAX_ORIGINAL_BYTES]
    assert os.listdir(tmp_path) == ["ckpt"]  # nothing written outside the checkpoint directory
    store = CheckpointStore(str(ckpt))
    models = store.models()
    for model in ("..", ".", "../../escaped", "a/b", "a_b", "x" * 1000):
        assert model in models  # each its own model, in its own directory
        assert store.latest(model).model == model
    for entry in os.listdir(ckpt):
        assert os.path.dirname(os.path.realpath(ckpt / entry)) == os.path.realpath(ckpt)
    accepted = [CODEC.decode(v) for i, v in enumerate(values) if i not in expected_dead]
    biggest = max(max(e["features"].get("indices") or [0]) for e in accepted)
    assert biggest < DEFAULT_MAX_INDEX
    sizes = [store.latest(m).learner.state.n_coords for m in models]
    # state grows (by doubling) to what passed: the largest sparse index or the 2**18 hashed names
    assert max(sizes) < 2 * max(biggest + 2, (1 << 18) + 1)
    assert np.all(np.isfinite(store.latest("fuzz").learner.weights()))
