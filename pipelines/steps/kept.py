"""Keeping a stateful step's per-key objects in Beam state: worked on in
memory, encoded once per bundle, restored with the source's position by a
runner that snapshots both (Flink); and pickling them so that only the
classes they are made of can be read back."""

from __future__ import annotations

import io
import pickle
import random
from typing import Any, Callable, Iterable

from apache_beam.coders import Coder
from apache_beam.runners.worker.statecache import CacheAware


class Kept(CacheAware):
    """A key's live object as the SDK harness's state cache holds it: encoded
    (``encode()``) only when the bundle commits, and weighed in O(1). Beam
    weighs a cached value by walking its whole object graph at every write,
    i.e. every bundle; a model's graph can hold tens of thousands of events
    awaiting labels (0.18 s a bundle, four times the cost of encoding it)."""

    __slots__ = ("value", "encode", "weight")

    def __init__(self, value, encode: Callable[[], bytes], approx_bytes: int):
        self.value, self.encode = value, encode
        self.weight = _Weight(approx_bytes)  # held: objsize skips a referent that is gone by then

    def get_referents_for_cache(self) -> list:
        return [self.weight]


class _Weight:
    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __sizeof__(self) -> int:
        return self.n


class KeptCoder(Coder):
    """Writes a :class:`Kept` as its encoding; reads back those bytes."""

    def encode(self, value) -> bytes:
        return value if isinstance(value, bytes) else value.encode()

    def decode(self, encoded: bytes) -> bytes:
        return encoded

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return bytes


class KeptObjects:
    """A stateful DoFn's per-key objects, worked on in memory and kept in the
    key's Beam state (a :class:`KeptCoder` state and a generation tag), so a
    runner that snapshots state with the source's position (Flink) restores
    them with it, as one. The in-memory object is used while the store's
    generation is its own; otherwise (a restored job, or a key another
    instance worked on meanwhile) the store's version is."""

    def __init__(self):
        self.live: dict[Any, Any] = {}
        self.generations: dict[Any, int] = {}

    def current(self, key, generation) -> bool:
        """Whether the object in memory is the newest the state store holds."""
        return key in self.live and self.generations[key] == (generation.read() or 0)

    def get(self, key, saved, generation) -> tuple[Any, bytes | None]:
        """(the object, None) if one is current here, else (None, the stored bytes or None)."""
        if self.current(key, generation):
            return self.live[key], None
        current = generation.read() or 0
        self.forget(key)
        stored = saved.read()
        if isinstance(stored, Kept):  # this process's own object, from the state cache
            self.set(key, stored.value, current)
            return stored.value, None
        self.live.pop(key, None)
        return None, stored

    def forget(self, key) -> None:
        """Called when the key's object is taken from the store, not memory."""

    def set(self, key, value, current: int = -1) -> None:
        self.live[key], self.generations[key] = value, current

    def retag(self, key, generation) -> None:
        # A fresh random tag, not a counter: another instance of this DoFn in
        # the same worker may hold an older history of the key that reached
        # the same count.
        self.generations[key] = random.getrandbits(62) | 1
        generation.write(self.generations[key])

    def keep(self, key, saved, generation, encode: Callable[[], bytes], approx_bytes: int) -> None:
        """The key's object into the state store, encoded when the bundle commits."""
        self.retag(key, generation)
        saved.write(Kept(self.live[key], encode, approx_bytes))


def pickle_sharing(value, shared: dict[str, Any], apart: Callable[[Any], int | None] | None = None) -> bytes:
    """``value`` pickled, with the objects of ``shared`` (by identity) written
    as their names: a learner's compiled algorithm and feature hasher, which
    do not pickle and which :func:`unpickle_sharing` takes from a learner
    made again from the same configuration. ``apart`` may name other
    objects by a number, to be written elsewhere (a large array:
    :mod:`.row_deltas`); ``shared`` given to :func:`unpickle_sharing` then
    maps those numbers to them."""
    names = {id(obj): name for name, obj in shared.items()}
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    if apart is None:
        pickler.persistent_id = lambda obj: names.get(id(obj))
    else:
        pickler.persistent_id = lambda obj: names.get(id(obj)) or apart(obj)
    pickler.dump(value)
    return out.getvalue()


# What NumPy arrays, dtypes and scalars pickle as (NumPy 2 and 1 module names).
_NUMPY_GLOBALS = {(m, n) for base in ("numpy._core", "numpy.core")
                  for m, n in ((f"{base}.numeric", "_frombuffer"), (f"{base}.multiarray", "_reconstruct"),
                               (f"{base}.multiarray", "scalar"))} | {("numpy", "dtype"), ("numpy", "ndarray")}


# Classes kept in Beam state that have since moved to another module:
# state bytes written before the move (a savepoint of an earlier release)
# name them where they were. (module then, name) -> module now.
MOVED = {("pipelines.records.columnar", "EventRows"): "pipelines.records.event_rows",
         ("pipelines.records.columnar", "ColumnarEvent"): "pipelines.records.event_rows",
         ("pipelines.records.columnar", "LabelledEvent"): "pipelines.records.event_rows",
         ("pipelines.records.columnar", "EventColumns"): "pipelines.records.event_columns"}


class _AllowedOnly(pickle.Unpickler):
    """Loads only the classes it is given, NumPy arrays and deques: a pickle
    that names any other global (``os.system``, ``builtins.eval``...) is
    refused, so state bytes cannot run code (the restricted unpickling of
    the ``pickle`` module's documentation)."""

    def __init__(self, data: bytes, shared: dict[str, Any], allowed: Iterable[type]):
        super().__init__(io.BytesIO(data))
        self.allowed = _NUMPY_GLOBALS | {("collections", "deque")} | {(c.__module__, c.__qualname__)
                                                                     for c in allowed}
        self.persistent_load = shared.__getitem__

    def find_class(self, module: str, name: str):
        module = MOVED.get((module, name), module)
        if (module, name) not in self.allowed:
            raise pickle.UnpicklingError(f"state bytes name {module}.{name}, which is not one of the classes "
                                         f"this state is made of: refused")
        return super().find_class(module, name)


def unpickle_sharing(data: bytes, shared: dict[str, Any], allowed: Iterable[type]):
    """What :func:`pickle_sharing` wrote, made only of ``allowed`` classes (and arrays)."""
    return _AllowedOnly(data, shared, allowed).load()
