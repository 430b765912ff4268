"""An Event's features union read in compiled code: dense values, sparse
(indices, values), or a map of names to values, the names hashed as
:class:`learners.hashing.FeatureHasher` hashes them. :func:`read_features`
also makes the feature checks of
:func:`pipelines.records.validation.validate_event` (for
:func:`pipelines.records.avro.event_reader.decode_events`);
:func:`read_namespaced` reads the union again as namespaced entries, for a
learner that crosses namespaces.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit
from learners.murmur import murmur3_bytes

from .primitives import LONG, read_array, read_double, read_doubles, read_long, read_string, same_bytes

FEATURES = ("DenseFeatures{values:array<double>}"
            "|SparseFeatures{indices:array<long>,values:array<double>}"
            "|NamedFeatures{values:map<double>}")
"""The features union as these readers take it (branches 0, 1, 2), spelled
as the ``LAYOUTS`` of this package spell a type."""


@njit(cache=True)
def _sparse_ok(indices, values, lo, n, max_index):
    """The sparse checks of validate_event: no negative, too large or
    repeated index, every value finite."""
    increasing = True
    for p in range(lo, lo + n):
        i = indices[p]
        if i < 0 or i >= max_index or not np.isfinite(values[p]):
            return False
        if p > lo and i <= indices[p - 1]:
            increasing = False
    if increasing or n < 2:
        return True
    s = np.sort(indices[lo:lo + n])
    for p in range(1, n):
        if s[p] == s[p - 1]:
            return False
    return True


@njit(cache=True)
def table_mask(bound):
    size = 2
    while size < 2 * bound:
        size <<= 1
    return size - 1


@njit(cache=True)
def _read_names(buf, pos, end, seed, scratch, stamp):
    """The map of name -> double at pos as distinct names in first-seen order
    with the last value given (what decoding into a Python dict keeps):
    (count, next position), next -1 when bad or a value is not finite.
    ``scratch`` = (starts, ends, hashes, values, slots, stamps)."""
    starts, ends, hashes, vals, slots, stamps = scratch
    mask = table_mask((end - pos) // 9 + 1)
    count = 0
    while True:
        k, pos = read_long(buf, pos, end)
        if pos < 0 or k < 0:
            return 0, -1
        if k == 0:
            return count, pos
        if k > (end - pos) // 9:  # a name takes at least 1 byte, its value 8
            return 0, -1
        for _ in range(k):
            s, e, pos = read_string(buf, pos, end)
            if pos < 0 or end - pos < 8:
                return 0, -1
            v = read_double(buf, pos)
            pos += 8
            if not np.isfinite(v):
                return 0, -1
            h = np.int64(murmur3_bytes(buf, s, e, seed))
            slot = h & mask
            while True:
                if stamps[slot] != stamp:
                    stamps[slot], slots[slot] = stamp, count
                    starts[count], ends[count], hashes[count], vals[count] = s, e, h, v
                    count += 1
                    break
                q = slots[slot]
                if hashes[q] == h and same_bytes(buf, s, e, starts[q], ends[q]):
                    vals[q] = v
                    break
                slot = (slot + 1) & mask


@njit(cache=True)
def _hash_names(count, bits, scratch, coord_slots, coord_stamps, stamp, indices, values, out):
    """FeatureHasher.transform_one over the distinct names: index = the low
    ``bits`` bits of the hash, value times -1 when bit 31 is set, colliding
    names added up (0.0 + first, as ``dict.get(index, 0.0) + value``), in
    first-seen order. Returns the number of coordinates written at ``out``."""
    _, _, hashes, vals, _, _ = scratch
    mask = table_mask(count)
    low = (np.int64(1) << bits) - 1
    n = 0
    for q in range(count):
        h = hashes[q]
        index = h & low
        value = -1.0 * vals[q] if h >> 31 else vals[q]
        slot = index & mask
        while True:
            if coord_stamps[slot] != stamp:
                coord_stamps[slot], coord_slots[slot] = stamp, n
                indices[out + n], values[out + n] = index, 0.0 + value
                n += 1
                break
            p = coord_slots[slot]
            if indices[out + p] == index:
                values[out + p] += value
                break
            slot = (slot + 1) & mask
    return n


@njit(cache=True)
def read_features(buf, pos, end, params, indices, values, out, scratch, coord_slots, coord_stamps, stamp):
    """(entries written at ``out``, next position) for the features union
    at pos, or next -1 when bad or rejected by the feature checks."""
    bits, seed, max_features, max_index = params
    branch, pos = read_long(buf, pos, end)
    if pos < 0:
        return 0, -1
    if branch == 0:  # DenseFeatures
        n, pos = read_doubles(buf, pos, end, values, out)
        if pos < 0 or n > max_features or n > max_index:
            return 0, -1
        for j in range(n):
            if not np.isfinite(values[out + j]):
                return 0, -1
            indices[out + j] = j
        return n, pos
    if branch == 1:  # SparseFeatures
        m, pos = read_array(buf, pos, end, LONG, indices, out, indices)
        if pos < 0:
            return 0, -1
        n, pos = read_doubles(buf, pos, end, values, out)
        if pos < 0 or n != m or n > max_features or not _sparse_ok(indices, values, out, n, max_index):
            return 0, -1
        return n, pos
    if branch == 2:  # NamedFeatures
        count, pos = _read_names(buf, pos, end, seed, scratch, stamp)
        if pos < 0 or count > max_features:
            return 0, -1
        return _hash_names(count, bits, scratch, coord_slots, coord_stamps, stamp, indices, values, out), pos
    return 0, -1


@njit(cache=True)
def message_sizes(starts, ends):
    """(bytes of all the messages, room for the names of the largest): a
    name takes at least 1 byte and its value 8."""
    total, biggest = 0, 0
    for i in range(starts.shape[0]):
        total += ends[i] - starts[i]
        biggest = max(biggest, ends[i] - starts[i])
    return total, biggest // 9 + 2


@njit(cache=True)
def names_scratch(room):
    """The scratch arrays of :func:`_read_names` for ``room`` names."""
    return (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.int64),
            np.empty(room, np.float64), np.empty(table_mask(room) + 1, np.int64),
            np.zeros(table_mask(room) + 1, np.int64))


@njit(cache=True)
def read_namespaced(buf, starts, ends, bits, seed, default_space):
    """The features union at each ``buf[starts[r]:ends[r]]`` (of messages
    :func:`~pipelines.records.avro.event_reader.decode_events` took, so
    already checked) as namespaced entries, for a learner that crosses
    namespaces: dense values at 0..n-1 and
    sparse indices as given, in ``default_space``; each distinct name (its
    last value, in first-seen order, as a decoded dict holds it) hashed as
    ``FeatureHasher.slot`` hashes it, its namespace the first byte of a
    name with a non-empty head before its first ``^``. Nothing is summed:
    the crosses sum repeats. Returns (indptr, indices, values, spaces), or
    an indptr of length 0 if a features union does not read."""
    n = starts.shape[0]
    total, room = message_sizes(starts, ends)
    indices = np.empty(total // 8 + 1, np.int64)
    values = np.empty(total // 8 + 1, np.float64)
    spaces = np.full(total // 8 + 1, default_space, np.uint8)
    scratch = names_scratch(room)
    indptr = np.zeros(n + 1, np.int64)
    low = (np.int64(1) << bits) - 1
    out = 0
    for r in range(n):
        pos, end = starts[r], ends[r]
        branch, pos = read_long(buf, pos, end)
        if branch == 0:
            k, pos = read_doubles(buf, pos, end, values, out)
            for j in range(k):
                indices[out + j] = j
        elif branch == 1:
            _, pos = read_array(buf, pos, end, LONG, indices, out, indices)
            k, pos = read_doubles(buf, pos, end, values, out)
        elif branch == 2:
            k, pos = _read_names(buf, pos, end, seed, scratch, r + 1)
            name_s, name_e, hashes, vals, _, _ = scratch
            for q in range(k):
                h = hashes[q]
                indices[out + q] = h & low
                values[out + q] = -1.0 * vals[q] if h >> 31 else vals[q]
                for c in range(name_s[q], name_e[q]):
                    if buf[c] == 0x5E:  # '^' after a non-empty head: the head's first byte
                        if c > name_s[q]:
                            spaces[out + q] = buf[name_s[q]]
                        break
        else:
            pos = -1
        if pos < 0:
            return indptr[:0], indices[:0], values[:0], spaces[:0]
        out += k
        indptr[r + 1] = out
    return indptr, indices[:out], values[:out], spaces[:out]
