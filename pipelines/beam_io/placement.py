"""Keys that land on the Flink subtask we choose.

Beam gives no control over where Flink runs a key: Beam's Flink runner keys
a stateful step (and a splittable DoFn's restrictions) by the key's bytes
in the runner's coder, nested (``FlinkKeyUtils.encodeKey``); the key's hash
is Guava's ``murmur3_128`` of those bytes, first four bytes as an int
(``FlinkKey.hashCode``); Flink puts it in key group
``murmurHash(hash) % maxParallelism`` and the key group on subtask
``group * parallelism // maxParallelism`` (``KeyGroupRangeAssignment``).
So where partitions and models ran was the hashes' luck: four partitions
at parallelism 2 were read 4/0, and four models named ``p0``..``p3`` land
3/1.

A placed key is ``(key, salt)``: the smallest ``salt`` whose key lands on
the subtask wanted. The keyed step reads ``key`` and ignores the salt; the
salt is a function of the key, so a key's state stays under one placed key.
``pipelines.steps.placement`` builds a run's :class:`Placement`.
``tests/runners/test_placement.py`` checks these functions against Flink's
own classes, and the spread on a session cluster against Flink's REST API.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Hashable

import mmh3

MASK = 0xFFFFFFFF
MAX_SALT = 1 << 16


def default_max_parallelism(parallelism: int) -> int:
    """Flink's default number of key groups for an operator of ``parallelism``
    (``KeyGroupRangeAssignment.computeDefaultMaxParallelism``)."""
    wanted = parallelism + parallelism // 2
    power = 1 << max(wanted - 1, 0).bit_length()
    return min(max(power, 128), 32768)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & MASK


def _flink_murmur(code: int) -> int:
    """``org.apache.flink.util.MathUtils.murmurHash``: one round of murmur3 on
    an int, then its final mix; non-negative."""
    code = _rotl((code * 0xCC9E2D51) & MASK, 15)
    code = _rotl((code * 0x1B873593) & MASK, 13)
    code = ((code * 5 + 0xE6546B64) & MASK) ^ 4
    code ^= code >> 16
    code = (code * 0x85EBCA6B) & MASK
    code ^= code >> 13
    code = (code * 0xC2B2AE35) & MASK
    code ^= code >> 16
    signed = code - (1 << 32) if code & 0x80000000 else code
    return abs(signed) if signed != -(1 << 31) else 0


def flink_subtask(key_bytes: bytes, parallelism: int, max_parallelism: int | None = None) -> int:
    """The subtask of an operator of ``parallelism`` that a key whose nested
    encoding is ``key_bytes`` runs on."""
    groups = max_parallelism or default_max_parallelism(parallelism)
    key_hash = struct.unpack("<i", mmh3.hash_bytes(key_bytes)[:4])[0]
    return (_flink_murmur(key_hash & MASK) % groups) * parallelism // groups


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # Beam's VarLongCoder writes a negative long as its 64-bit two's complement
    while True:
        bits, n = n & 0x7F, n >> 7
        if not n:
            out.append(bits)
            return bytes(out)
        out.append(bits | 0x80)


def nested(key: Any) -> bytes:
    """A key's bytes as the runner encodes it (nested): a ``str`` in Beam's
    string coder, an ``int`` in its varint coder, a tuple of two as a KV of
    its parts, ``bytes`` as a length-prefixed unknown (pickled) value."""
    if isinstance(key, str):
        data = key.encode("utf-8")
        return _varint(len(data)) + data
    if isinstance(key, bool) or not isinstance(key, (int, bytes, tuple)):
        raise TypeError(f"no runner encoding known for a key of type {type(key).__name__}")
    if isinstance(key, int):
        return _varint(key)
    if isinstance(key, bytes):
        return _varint(len(key)) + key
    if len(key) != 2:
        raise TypeError(f"a tuple key must have 2 parts (a KV), got {len(key)}")
    return nested(key[0]) + nested(key[1])


def salt_for(encode: Callable[[int], bytes], subtask: int, parallelism: int,
             max_parallelism: int | None = None) -> int:
    """The smallest salt whose ``encode(salt)`` lands on ``subtask``."""
    if not 0 <= subtask < parallelism:
        raise ValueError(f"subtask {subtask} is not one of the {parallelism} subtasks")
    for salt in range(MAX_SALT):
        if flink_subtask(encode(salt), parallelism, max_parallelism) == subtask:
            return salt
    raise RuntimeError(f"no salt below {MAX_SALT} puts a key on subtask {subtask} of {parallelism}")


class Placement:
    """Where a run's keyed steps put their keys: ``parallelism`` subtasks
    (1: anywhere, every salt 0); ``models`` in the order given go one a
    subtask, round the subtasks (a model not named goes where its name
    hashes); a sharded model's shard ``s`` goes ``s`` subtasks after its
    model; partition ``n`` of a topic goes to subtask ``n % parallelism``."""

    def __init__(self, parallelism: int | None = None, max_parallelism: int | None = None,
                 models: tuple[str, ...] = ()):
        self.parallelism = max(int(parallelism or 1), 1)
        self.max_parallelism = max_parallelism
        self.models = {name: i for i, name in enumerate(dict.fromkeys(models))}
        self._salts: dict = {}

    def __reduce__(self):  # pickled into the pipeline without its cache of salts
        return Placement, (self.parallelism, self.max_parallelism, tuple(self.models))

    def place(self, key: Hashable, subtask: int) -> tuple:
        """``(key, salt)`` landing on ``subtask`` (mod the parallelism)."""
        if self.parallelism == 1:
            return key, 0
        cached = self._salts.get((key, subtask))
        if cached is None:
            cached = salt_for(lambda salt: nested((key, salt)), subtask % self.parallelism, self.parallelism,
                              self.max_parallelism)
            self._salts[(key, subtask)] = cached
        return key, cached

    def model_subtask(self, model: str) -> int | None:
        return self.models.get(model)

    def model(self, model: str) -> tuple:
        """The placed key of a model's keyed steps."""
        subtask = self.model_subtask(model)
        return (model, 0) if subtask is None else self.place(model, subtask)

    def shard(self, model: str, shard: int) -> tuple:
        """The placed key of shard ``shard`` of ``model``."""
        home = self.model_subtask(model)
        return self.place((model, shard), (home or 0) + shard)

    def stream(self, topic: str, partition: int) -> tuple:
        """The placed key of a partition's sequencing step."""
        return self.place((topic, partition), partition)
