"""Signed feature hashing of string feature names.

The hash is MurmurHash3_x86_32 of the UTF-8 name with a seed (default 0),
computed by the ``mmh3`` package (the same function as scikit-learn's
``murmurhash3_32``; pinned values in the tests).
From the unsigned 32-bit hash h:

    index = h mod 2^bits          (the low ``bits`` bits)
    sign  = +1 if bit 31 of h is 0 else -1

and the feature contributes ``sign * value`` at ``index``. The sign makes
collisions cancel in expectation instead of adding up (Weinberger et al.,
2009). ``bits`` is at most 31 so the sign bit is never part of the index.
Integer keys are not hashed: they are coordinates already.
"""

from __future__ import annotations

from functools import lru_cache

import mmh3

def murmurhash3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3_x86_32, unsigned result (the ``mmh3`` package's C code)."""
    return mmh3.hash(data, seed, signed=False)


class FeatureHasher:
    """Maps ``{name: value}`` to (indices, values) in a 2^bits space."""

    def __init__(self, bits: int = 18, seed: int = 0):
        if not 1 <= bits <= 31:
            raise ValueError(f"hash bits must be between 1 and 31, not {bits!r}")
        self.bits = bits
        self.seed = seed
        self.size = 1 << bits
        self.slot = lru_cache(maxsize=1 << 20)(self._slot)

    def _slot(self, name: str) -> tuple[int, float]:
        h = murmurhash3_32(name.encode("utf-8"), self.seed)
        return h & (self.size - 1), (-1.0 if h >> 31 else 1.0)

    def transform_one(self, features: dict) -> dict[int, float]:
        """Coordinate → value; colliding names add up (with their signs)."""
        out: dict[int, float] = {}
        for key, value in features.items():
            if isinstance(key, str):
                index, sign = self.slot(key)
                value = sign * value
            elif isinstance(key, int) and key >= 0:
                index = key
            else:
                raise ValueError(f"feature key {key!r} is neither a name (str) nor a non-negative index (int)")
            out[index] = out.get(index, 0.0) + value
        return out
