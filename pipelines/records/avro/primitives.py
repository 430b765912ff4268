"""Avro's primitive encodings in compiled code, read and written: zig-zag
varints (long, int), little-endian doubles, length-prefixed UTF-8 strings
(checked as Python's strict decoder checks them), blocked arrays of
primitives, and ["null", "double"] unions. The record readers and writers
of this package are made of these.

Apache Avro 1.11 specification, "Binary Encoding".
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit


@njit(cache=True, inline="always")
def read_long(buf, pos, end):
    """(value, next position) of the zig-zag varint at pos; next position -1
    when it runs past ``end`` or does not fit 64 bits."""
    result = np.uint64(0)
    shift = 0
    while True:
        if pos >= end:
            return np.int64(0), -1
        b = buf[pos]
        pos += 1
        if shift == 63 and b > 1:
            return np.int64(0), -1
        result |= np.uint64(b & 0x7F) << np.uint64(shift)
        if b < 0x80:
            break
        shift += 7
    value = np.int64(result >> np.uint64(1)) ^ -np.int64(result & np.uint64(1))
    return value, pos


@njit(cache=True, inline="always")
def _cont(buf, i, end, lo, hi):
    return i < end and lo <= buf[i] <= hi


@njit(cache=True)
def utf8_ok(buf, start, end):
    """Whether buf[start:end] is UTF-8 that Python's strict decoder accepts
    (no overlong forms, no surrogates, nothing above U+10FFFF)."""
    i = start
    while i < end:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            if not _cont(buf, i + 1, end, 0x80, 0xBF):
                return False
            i += 2
        elif 0xE0 <= c <= 0xEF:
            lo, hi = (0xA0, 0xBF) if c == 0xE0 else ((0x80, 0x9F) if c == 0xED else (0x80, 0xBF))
            if not (_cont(buf, i + 1, end, lo, hi) and _cont(buf, i + 2, end, 0x80, 0xBF)):
                return False
            i += 3
        elif 0xF0 <= c <= 0xF4:
            lo, hi = (0x90, 0xBF) if c == 0xF0 else ((0x80, 0x8F) if c == 0xF4 else (0x80, 0xBF))
            if not (_cont(buf, i + 1, end, lo, hi) and _cont(buf, i + 2, end, 0x80, 0xBF)
                    and _cont(buf, i + 3, end, 0x80, 0xBF)):
                return False
            i += 4
        else:
            return False
    return True


@njit(cache=True, inline="always")
def read_string(buf, pos, end):
    """(start, end, next position) of the string at pos; next -1 when bad."""
    n, pos = read_long(buf, pos, end)
    if pos < 0 or n < 0 or n > end - pos or not utf8_ok(buf, pos, pos + n):
        return 0, 0, -1
    return pos, pos + n, pos + n


@njit(cache=True, inline="always")
def read_double(buf, pos):
    return buf[pos:pos + 8].view(np.float64)[0]


@njit(cache=True, inline="always")
def next_block(buf, pos, end):
    """(item count, where the items start) of the array block at pos: count
    0 at the array's end, -1 when bad. A negative count (a block written
    with its size in bytes) counts as bad: the codec reads those."""
    k, pos = read_long(buf, pos, end)
    return (k, pos) if pos >= 0 and k >= 0 else (-1, -1)


@njit(cache=True, inline="always")
def read_doubles(buf, pos, end, values, out):
    """The double array at pos into values[out:]; (count, next position),
    next -1 when bad. Each double takes 8 bytes, so the count is bounded by
    the bytes left before anything is written."""
    count = 0
    k, pos = next_block(buf, pos, end)
    while k > 0:
        if k > (end - pos) // 8:
            return 0, -1
        values[out + count:out + count + k] = buf[pos:pos + 8 * k].view(np.float64)
        pos, count = pos + 8 * k, count + k
        k, pos = next_block(buf, pos, end)
    return (count, pos) if k == 0 else (0, -1)


LONG, INT, BOOLEAN, STRING = 0, 1, 2, 3
"""Item kinds of :func:`read_array`."""


@njit(cache=True)
def read_array(buf, pos, end, kind, out, at, ends):
    """The array of ``kind`` items at pos into out[at:] (a string as its
    start there and its end in ends[at:]); (count, next position), next -1
    when bad, past the room in ``out``, or outside what the compiled readers
    take (an int outside 32 bits, a boolean byte other than 0 and 1, a block
    written with its size, i.e. a negative count: the codec reads those)."""
    count = 0
    k, pos = next_block(buf, pos, end)
    while k > 0:
        if at + count + k > out.shape[0]:
            return 0, -1
        for i in range(at + count, at + count + k):
            if kind == BOOLEAN:
                if pos >= end or buf[pos] > 1:
                    return 0, -1
                out[i], pos = buf[pos], pos + 1
            elif kind == STRING:
                out[i], ends[i], pos = read_string(buf, pos, end)
            else:
                out[i], pos = read_long(buf, pos, end)
                if kind == INT and not -2147483648 <= out[i] <= 2147483647:
                    return 0, -1
            if pos < 0:
                return 0, -1
        count += k
        k, pos = next_block(buf, pos, end)
    return (count, pos) if k == 0 else (0, -1)


@njit(cache=True, inline="always")
def read_optional_double(buf, pos, end):
    """(value, present, next position) of a ["null", "double"] union."""
    branch, pos = read_long(buf, pos, end)
    if pos < 0 or branch < 0 or branch > 1:
        return np.nan, False, -1
    if branch == 0:
        return np.nan, False, pos
    if end - pos < 8:
        return np.nan, False, -1
    return read_double(buf, pos), True, pos + 8


@njit(cache=True, inline="always")
def same_bytes(buf, a, a_end, b, b_end):
    """Whether buf[a:a_end] and buf[b:b_end] hold the same bytes."""
    if a_end - a != b_end - b:
        return False
    for k in range(a_end - a):
        if buf[a + k] != buf[b + k]:
            return False
    return True


# ---------------------------------------------------------------- writing


@njit(cache=True, inline="always")
def _zigzag(v):
    return (np.uint64(v) << np.uint64(1)) ^ np.uint64(v >> 63)


@njit(cache=True, inline="always")
def long_size(v):
    z = _zigzag(v)
    n = 1
    while z >= 0x80:
        z >>= np.uint64(7)
        n += 1
    return n


@njit(cache=True, inline="always")
def write_long(out, pos, v):
    z = _zigzag(v)
    while z >= 0x80:
        out[pos] = np.uint8((z & np.uint64(0x7F)) | np.uint64(0x80))
        z >>= np.uint64(7)
        pos += 1
    out[pos] = np.uint8(z)
    return pos + 1


@njit(cache=True, inline="always")
def write_double(out, pos, v):
    """v's 8 bytes, little-endian (Avro's double), one at a time: no array
    view or slice copy, so the writers that allocate nothing can run
    without numba's reference counting."""
    bits = np.float64(v).view(np.uint64)
    for i in range(8):
        out[pos + i] = np.uint8((bits >> np.uint64(8 * i)) & np.uint64(0xFF))
    return pos + 8


@njit(cache=True, inline="always")
def write_string(out, pos, sbuf, s, e):
    pos = write_long(out, pos, e - s)
    for i in range(e - s):  # a loop, not a slice copy: see write_double
        out[pos + i] = sbuf[s + i]
    return pos + e - s


@njit(cache=True, inline="always")
def write_optional_double(out, pos, present, v):
    """A ["null", "double"] union: branch 0 (null) or branch 1 then v."""
    out[pos] = 2 if present else 0
    return write_double(out, pos + 1, v) if present else pos + 1
