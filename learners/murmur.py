"""MurmurHash3_x86_32 (Austin Appleby's public-domain algorithm) in compiled
code: the same function as :func:`learners.hashing.murmurhash3_32` (the
``mmh3`` package), for hashing inside batch loops (feature names in the VW
text parser, feature crosses in :mod:`learners.interactions`). Arithmetic
is on uint64 kept to 32 bits; tests pin it to ``mmh3``.
"""

from __future__ import annotations

import numpy as np

from .jit import njit

_U = np.uint64
_M32 = _U(0xFFFFFFFF)
_C1, _C2 = _U(0xCC9E2D51), _U(0x1B873593)


@njit(cache=True, inline="always")
def _rotl(x, r):
    return ((x << _U(r)) | (x >> _U(32 - r))) & _M32


@njit(cache=True, inline="always")
def _mix_k(k):
    k = (k * _C1) & _M32
    k = _rotl(k, 15)
    return (k * _C2) & _M32


@njit(cache=True, inline="always")
def _mix_h(h, k):
    h ^= _mix_k(k)
    h = _rotl(h, 13)
    return (h * _U(5) + _U(0xE6546B64)) & _M32


@njit(cache=True, inline="always")
def _finish(h, length):
    h ^= _U(length)
    h ^= h >> _U(16)
    h = (h * _U(0x85EBCA6B)) & _M32
    h ^= h >> _U(13)
    h = (h * _U(0xC2B2AE35)) & _M32
    return h ^ (h >> _U(16))


@njit(cache=True, inline="always")
def murmur3_bytes(buf, start, end, seed):
    """The unsigned 32-bit hash of buf[start:end] (a uint8 array)."""
    h = _U(seed) & _M32
    i = start
    while i + 4 <= end:
        k = _U(buf[i]) | (_U(buf[i + 1]) << _U(8)) | (_U(buf[i + 2]) << _U(16)) | (_U(buf[i + 3]) << _U(24))
        h = _mix_h(h, k)
        i += 4
    rest = end - i
    if rest:
        k = _U(0)
        if rest == 3:
            k ^= _U(buf[i + 2]) << _U(16)
        if rest >= 2:
            k ^= _U(buf[i + 1]) << _U(8)
        k ^= _U(buf[i])
        h ^= _mix_k(k)
    return _finish(h, end - start)


@njit(cache=True, inline="always")
def murmur3_words(words, n, seed):
    """The hash of the first n uint32 values of ``words`` (uint64 array) as
    4n little-endian bytes: what ``mmh3.hash(struct.pack('<nI', ...))`` gives."""
    h = _U(seed) & _M32
    for k in range(n):
        h = _mix_h(h, words[k] & _M32)
    return _finish(h, 4 * n)
