"""A kept object written as a base and row deltas (pipelines.steps.row_deltas)
reads back bit for bit, whatever changed between writes and in whatever
order the state store returns the deltas."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

from pipelines.steps import KeptAsDeltas, KeptCells, KeptCoder
from pipelines.steps.row_deltas import LARGE_BYTES, Written, base_record, delta_record, restore

ROWS = LARGE_BYTES // 8 + 1  # a float64 column of this many rows is held apart


@dataclass
class Wide:
    """A stand-in for a shard's state: large arrays, a small one, one array
    named twice, and an object shared with the reader."""
    arrays: dict
    small: np.ndarray
    twice: list
    algorithm: object


class Algorithm:
    """Not picklable, like a learner's compiled algorithm: shared by name."""

    def __reduce__(self):
        raise TypeError("the algorithm is shared, never pickled")


def wide(algorithm) -> Wide:
    rng = np.random.default_rng(0)
    g = rng.standard_normal(ROWS)
    return Wide({"g": g, "m": rng.standard_normal((ROWS, 1, 3)), "slot": np.arange(ROWS, dtype=np.int64)},
                np.zeros(10), [g, g], algorithm)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def assert_same(a: Wide, b: Wide) -> None:
    assert a.arrays.keys() == b.arrays.keys()
    for name in a.arrays:
        assert a.arrays[name].shape == b.arrays[name].shape and a.arrays[name].dtype == b.arrays[name].dtype
        np.testing.assert_array_equal(bits(a.arrays[name]), bits(b.arrays[name]), err_msg=name)
    np.testing.assert_array_equal(a.small, b.small)
    assert b.twice[0] is b.twice[1] is b.arrays["g"]


def mutate(value: Wide, rng: random.Random) -> str:
    """One bundle's change, of the kinds a learner makes."""
    kind = rng.choice(["rows", "rows", "signed zero", "nan payload", "grow", "new array", "drop array", "none"])
    g = value.arrays["g"]
    if kind == "rows":
        rows = np.array(rng.sample(range(len(g)), 50))
        g[rows] += 1.0
        value.arrays["m"][rows[:10], 0, 1] = -3.5
        value.small[rng.randrange(10)] += 1
    elif kind == "signed zero":
        g[7] = 0.0
        value.arrays["m"][7] = 0.0
        return "zero then"  # the next change flips the sign only
    elif kind == "nan payload":
        g[3] = np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), dtype=np.float64)[0]
    elif kind == "grow":
        for name, a in list(value.arrays.items()):
            grown = np.zeros((len(a) + 5,) + a.shape[1:], dtype=a.dtype)
            grown[: len(a)] = a
            value.arrays[name] = grown
        value.twice = [value.arrays["g"]] * 2
    elif kind == "new array":
        value.arrays.setdefault("extra", np.full(ROWS, 2.0))
    elif kind == "drop array":
        value.arrays.pop("extra", None)
    return kind


@pytest.mark.parametrize("seed", range(8))
def test_a_base_and_its_deltas_read_back_bit_for_bit_in_any_order(seed):
    rng = random.Random(seed)
    algorithm = Algorithm()
    value, written = wide(algorithm), Written()
    base, deltas = base_record(value, {"algorithm": algorithm}, written), []
    for _ in range(12):
        if mutate(value, rng) == "zero then":
            deltas.append(delta_record(value, {"algorithm": algorithm}, written))
            value.arrays["g"][7] = -0.0  # equal to 0.0, other bits
        deltas.append(delta_record(value, {"algorithm": algorithm}, written))
        shuffled = rng.sample(deltas, len(deltas))
        reader = Algorithm()
        back = restore(base, shuffled, {"algorithm": reader}, (Wide,))
        assert back.algorithm is reader
        assert_same(value, back)


def test_a_delta_holds_the_changed_rows_only():
    algorithm = Algorithm()
    value, written = wide(algorithm), Written()
    base = base_record(value, {"algorithm": algorithm}, written)
    value.arrays["g"][:100] += 1.0
    delta = delta_record(value, {"algorithm": algorithm}, written)
    assert len(delta) < 0.01 * len(base), (len(delta), len(base))
    unchanged = delta_record(value, {"algorithm": algorithm}, written)
    assert len(unchanged) < 4096


def test_a_lost_delta_is_an_error_not_an_old_model():
    algorithm = Algorithm()
    value, written = wide(algorithm), Written()
    base = base_record(value, {"algorithm": algorithm}, written)
    deltas = []
    for k in range(3):
        value.arrays["g"][k] = 9.0
        deltas.append(delta_record(value, {"algorithm": algorithm}, written))
    with pytest.raises(ValueError, match="skip from 2 to 4"):
        restore(base, [deltas[0], deltas[2]], {"algorithm": algorithm}, (Wide,))


class CommittedCells:
    """Stand-in for Beam's state cells of one key, as the SDK harness
    presents them: writes are kept as objects and encoded (KeptCoder) when
    the bundle commits; reads after a commit see the encoded bytes."""

    def __init__(self):
        self.coder = KeptCoder()
        self.value, self.tag, self.bag = None, 0, []
        self.written_value, self.added, self.cleared = None, [], False

    def cells(self) -> KeptCells:
        return KeptCells(self.Saved(self), self.Tag(self), self.Bag(self))

    def commit(self) -> None:
        if self.written_value is not None:
            self.value = self.coder.encode(self.written_value)
        if self.cleared:
            self.bag = []
        self.bag += [self.coder.encode(v) for v in self.added]
        self.written_value, self.added, self.cleared = None, [], False

    class Saved:
        def __init__(self, cells): self.c = cells
        def read(self): return self.c.value
        def write(self, v): self.c.written_value = v

    class Tag:
        def __init__(self, cells): self.c = cells
        def read(self): return self.c.tag
        def write(self, v): self.c.tag = v

    class Bag:
        def __init__(self, cells): self.c = cells
        def read(self): return list(self.c.bag)
        def add(self, v): self.c.added.append(v)
        def clear(self): self.c.cleared, self.c.added = True, []


def test_kept_as_deltas_writes_once_a_bundle_and_a_fresh_instance_reads_the_last_commit():
    algorithm = Algorithm()
    store = CommittedCells()
    kept = KeptAsDeltas({"algorithm": algorithm}, (Wide,))
    rng = random.Random(5)
    for bundle in range(30):
        kept.start_bundle()
        value, restored = kept.read("k", store.cells())
        assert not restored
        if value is None:
            value = wide(algorithm)
            kept.set("k", value)
        for _ in range(3):  # three elements in one bundle: one write
            value.arrays["g"][rng.randrange(ROWS)] += 1.0
            kept.keep_deltas("k", store.cells(), 1 << 20)
        assert len(store.added) + (store.written_value is not None) == 1
        store.commit()
        other = KeptAsDeltas({"algorithm": algorithm}, (Wide,))  # another worker, after a failover
        back, restored = other.read("k", store.cells())
        assert restored and "k" not in other.live
        assert_same(value, back)
    assert len(store.bag) < 30  # bases were written again as deltas piled up
