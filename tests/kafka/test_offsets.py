"""The one offsets type: its stored form and how offsets combine."""

import json
import random

from pipelines.kafka.offsets import advance_offsets, lowest_offsets, offsets_from_records, offsets_records


def _random_offsets(rng: random.Random) -> dict:
    return {(rng.choice(["events", "labels", "a.b-c"]), rng.randrange(12)): rng.randrange(10**12)
            for _ in range(rng.randrange(8))}


def test_the_stored_form_is_sorted_records_and_reads_back_equal():
    rng = random.Random(7)
    for _ in range(200):
        offsets = _random_offsets(rng)
        records = offsets_records(offsets)
        assert [(r["topic"], r["partition"]) for r in records] == sorted(offsets)
        assert offsets_from_records(json.loads(json.dumps(records))) == offsets


def test_records_with_string_numbers_are_read_as_ints():
    offsets = offsets_from_records([{"topic": "t", "partition": "3", "offset": "41"}])
    assert offsets == {("t", 3): 41}
    assert offsets_records(offsets) == [{"topic": "t", "partition": 3, "offset": 41}]


def test_lowest_takes_each_streams_smallest_over_those_that_have_it():
    a, b = {("t", 0): 10, ("t", 1): 5}, {("t", 0): 3, ("u", 0): 9}
    assert lowest_offsets([a, b]) == {("t", 0): 3, ("t", 1): 5, ("u", 0): 9}
    assert lowest_offsets([]) == {}


def test_advance_never_moves_an_offset_back():
    offsets = {("t", 0): 10, ("t", 1): 5}
    advance_offsets(offsets, {("t", 0): 4, ("t", 1): 8, ("t", 2): 1})
    assert offsets == {("t", 0): 10, ("t", 1): 8, ("t", 2): 1}
