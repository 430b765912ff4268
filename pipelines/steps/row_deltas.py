"""A kept object written as a base and then row deltas.

A wide model's state is a few arrays with a row per coordinate (2^20 rows:
tens of MB), and a bundle touches a small share of the rows. Pickling the
whole object into Beam state at every bundle sent all of it through the Fn
API's state channel into Flink's state backend: 38 MB a bundle for each
shard of a 2^20-coordinate model, about 1.2 GB for 5,000 sparse events.
Here an object is pickled with its large arrays held apart
(:func:`split_pickle`); the first write is a *base* (the small pickle and
every array whole), each later one a *delta*: the small pickle again and,
for each array, only the rows whose bits changed since the last write
(compared bitwise, so ``-0.0`` after ``0.0`` and NaN payloads count), or the
whole array when its shape changed (a learner that grew). When the deltas
since the base outweigh it, the next write is a base again, so reading a
key back costs at most about twice its size.

Records are numbered; :func:`restore` applies a base's deltas in number
order whatever order the state store returns them in."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple

import numpy as np

from .kept import Kept, KeptObjects, pickle_sharing, unpickle_sharing

LARGE_BYTES = 1 << 20
"""Arrays this large or larger are held apart and written as row deltas."""


def _large(obj) -> bool:
    return (type(obj) is np.ndarray and obj.nbytes >= LARGE_BYTES and obj.ndim >= 1
            and obj.dtype.kind in "fiub" and obj.dtype.itemsize in (1, 2, 4, 8) and obj.flags.c_contiguous)


def split_pickle(value, shared: dict[str, Any]) -> tuple[bytes, list[np.ndarray]]:
    """``value`` pickled with ``shared``'s objects written as their names
    (as :func:`~pipelines.steps.kept.pickle_sharing`) and its large arrays
    as their place in the returned list (one place per array object)."""
    arrays: list[np.ndarray] = []
    places: dict[int, int] = {}

    def apart(obj) -> int | None:
        if not _large(obj):
            return None
        if id(obj) not in places:
            places[id(obj)] = len(arrays)
            arrays.append(obj)
        return places[id(obj)]

    return pickle_sharing(value, shared, apart), arrays


@dataclass
class Written:
    """What one DoFn instance last wrote for a key: a copy of its large
    arrays (the rows a delta is taken against) and the sizes that decide
    when a base is due."""

    copies: list[np.ndarray] = field(default_factory=list)
    number: int = 0
    base_bytes: int = 0
    delta_bytes: int = 0
    deltas_added: bool = False

    def base_due(self) -> bool:
        """An object with no large arrays is written whole each time (a
        delta would be as large); one with them once its deltas outweigh it."""
        return not self.copies or self.delta_bytes > self.base_bytes


def base_record(value, shared: dict[str, Any], written: Written) -> bytes:
    """``value`` whole; ``written`` now holds copies of its large arrays."""
    small, arrays = split_pickle(value, shared)
    written.copies = [a.copy() for a in arrays]
    written.number += 1
    written.delta_bytes = 0
    record = pickle_sharing((written.number, small, len(arrays), dict(enumerate(arrays)), []), {})
    written.base_bytes = len(record)
    return record


def _changed_rows(now: np.ndarray, before: np.ndarray) -> np.ndarray:
    bits = np.dtype(f"u{now.dtype.itemsize}")
    differs = now.view(bits) != before.view(bits)
    return differs.reshape(len(now), -1).any(axis=1)


def delta_record(value, shared: dict[str, Any], written: Written) -> bytes:
    """``value`` as the rows of its large arrays that changed since
    ``written``'s copies (updated to match); arrays whose shape or type
    changed, or that are new, whole."""
    small, arrays = split_pickle(value, shared)
    wholes, by_rows = {}, {}
    for i, now in enumerate(arrays):
        before = written.copies[i] if i < len(written.copies) else None
        if before is None or before.shape != now.shape or before.dtype != now.dtype:
            wholes[i] = now
        else:
            by_rows.setdefault(len(now), []).append(i)
    patches = []
    for n, places in by_rows.items():
        changed = np.zeros(n, dtype=bool)
        for i in places:
            changed |= _changed_rows(arrays[i], written.copies[i])
        rows = np.flatnonzero(changed)
        if len(rows):
            values = [arrays[i][rows] for i in places]
            for i, v in zip(places, values):
                written.copies[i][rows] = v
            patches.append((places, rows, values))
    written.copies = [written.copies[i] if i not in wholes else arrays[i].copy() for i in range(len(arrays))]
    written.number += 1
    record = pickle_sharing((written.number, small, len(arrays), wholes, patches), {})
    written.delta_bytes += len(record)
    return record


def _writable(a: np.ndarray) -> np.ndarray:
    return a if a.flags.writeable else a.copy()


def restore(base: bytes, deltas: Iterable[bytes], shared: dict[str, Any], allowed: Iterable[type]):
    """The object a base and its deltas describe (the deltas in any order;
    those numbered before the base, left by an older base, are ignored)."""
    number, small, count, wholes, _ = unpickle_sharing(base, {}, ())
    arrays = [_writable(wholes[i]) for i in range(count)]
    records = sorted((unpickle_sharing(d, {}, ()) for d in deltas), key=lambda r: r[0])
    for later, small_now, count, wholes, patches in records:
        if later <= number:
            continue
        if later != number + 1:
            raise ValueError(f"state deltas skip from {number} to {later}: the state store lost one")
        number, small = later, small_now
        arrays = arrays[:count] + [None] * (count - len(arrays))
        for i, whole in wholes.items():
            arrays[i] = _writable(whole)
        for places, rows, values in patches:
            for i, v in zip(places, values):
                arrays[i][rows] = v
    return unpickle_sharing(small, {**shared, **dict(enumerate(arrays))}, allowed)


class KeptCells(NamedTuple):
    """A key's Beam state cells for a kept object: the base (a
    :class:`~pipelines.steps.kept.KeptCoder` value), the generation tag and
    the deltas since the base (a bag of the same coder)."""

    saved: Any
    generation: Any
    deltas: Any


class KeptAsDeltas(KeptObjects):
    """:class:`~pipelines.steps.kept.KeptObjects` whose objects go into Beam
    state as a base and then one row delta per bundle: each write is
    encoded when its bundle commits (so it holds the whole bundle's
    changes), and a key already written in the running bundle is not
    written again. The owning DoFn calls :meth:`start_bundle`. What is
    written is ``written_as(object)`` (the object itself by default), made
    of ``allowed`` classes; ``shared`` as in
    :func:`~pipelines.steps.kept.pickle_sharing`."""

    def __init__(self, shared: dict[str, Any], allowed: Iterable[type],
                 written_as: Callable[[Any], Any] = lambda value: value):
        super().__init__()
        self.shared, self.allowed, self.written_as = shared, tuple(allowed), written_as
        self.written: dict[Any, Written] = {}
        self.bundle = 0
        self.pending: dict[Any, int] = {}  # key -> the bundle whose write of it is not encoded yet

    def start_bundle(self) -> None:
        self.bundle += 1

    def forget(self, key) -> None:
        self.written.pop(key, None)  # another history of the key: the next write is a base
        self.pending.pop(key, None)

    def read(self, key, cells: KeptCells):
        """(the object, False) if it is current in memory; (what was written,
        True) if it came back from the state store's bytes, for the caller
        to make the object again and :meth:`set` it; (None, False) if the
        store holds nothing."""
        value, stored = self.get(key, cells.saved, cells.generation)
        if value is not None or stored is None:
            return value, False
        deltas = [d if isinstance(d, bytes) else d.encode() for d in cells.deltas.read()]
        return restore(stored, deltas, self.shared, self.allowed), True

    def keep_deltas(self, key, cells: KeptCells, approx_bytes: int) -> None:
        value = self.live[key]
        self.retag(key, cells.generation)
        if self.pending.get(key) == self.bundle:
            return  # this bundle's write encodes the object as it is at the commit
        written = self.written.get(key)
        if written is None or written.base_due():
            if written is None or written.deltas_added:  # unknown after a restore: may hold an older base's
                cells.deltas.clear()
            written = self.written[key] = Written(number=written.number if written else 0)
            cells.saved.write(Kept(value, self._encoder(key, value, written, base_record), approx_bytes))
        else:
            written.deltas_added = True
            cells.deltas.add(Kept(value, self._encoder(key, value, written, delta_record), 1 << 10))
        self.pending[key] = self.bundle

    def _encoder(self, key, value, written: Written, record) -> Callable[[], bytes]:
        bundle, encoded = self.bundle, []

        def encode() -> bytes:
            if not encoded:  # once: a delta taken twice would be empty the second time
                encoded.append(record(self.written_as(value), self.shared, written))
                if self.pending.get(key) == bundle:
                    del self.pending[key]
            return encoded[0]
        return encode
