"""Compiled Avro reading and writing for the project's own records, used by
:mod:`pipelines.records.columnar`: a whole batch of Confluent-framed
``scinol.Event`` (or ``scinol.Label``) messages read into arrays in one call,
a batch of ``scinol.Prediction`` records written into one buffer in one call,
and a ``scinol.FeedbackBatch`` message (sharded mode's feedback) read in one
call.

The reader is deliberately narrow. It accepts a message only when it is
sure :meth:`schemas.codec.Codec.decode` followed by
:func:`pipelines.records.validation.validate_event` would accept it and
produce the same values; anything else (a short or wrong header, an id it
has no layout for, a truncated or over-long body, a union index out of
range, a negative block count, a varint longer than 64 bits, invalid UTF-8,
a value the checks would reject) gets status :data:`FALLBACK`, and the
caller sends that message through the per-event path, which decides the
outcome and the dead-letter text. The reader never has to reproduce an
error message, only to recognise the well-formed common case.

Avro binary encoding: Apache Avro 1.11 specification, "Binary Encoding"
(zig-zag varints, length-prefixed strings, blocked arrays and maps,
unions as a branch index then the value).
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit
from learners.losses import BINARY_LOSSES
from learners.murmur import murmur3_bytes

FALLBACK = 1
"""Per-message status of :func:`decode_events`: at least this for a
message the compiled reader did not take."""
LAYOUT_V1, LAYOUT_V2 = 1, 2
"""Event writer layouts, numbered as the schema versions: version 1 (no
weight), version 2 (weight last). The columns are those of version 2, the
current one; a version 3 needs its layout here before the compiled reader
may take it (until then its messages go the per-event way)."""
LABELS_FINITE, LABELS_BINARY, LABELS_SOFTMAX = 0, 1, 2
"""Which labels the loss surely accepts (the fast check of validate_event)."""


def label_kind(loss: str) -> int:
    """The LABELS_* of ``loss``."""
    if loss in BINARY_LOSSES:
        return LABELS_BINARY
    return LABELS_SOFTMAX if loss == "softmax" else LABELS_FINITE


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


@njit(cache=True, inline="always")
def _same_bytes(buf, a, a_end, b, b_end):
    if a_end - a != b_end - b:
        return False
    for k in range(a_end - a):
        if buf[a + k] != buf[b + k]:
            return False
    return True


@njit(cache=True)
def _table_mask(bound):
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
    mask = _table_mask((end - pos) // 9 + 1)
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
                if hashes[q] == h and _same_bytes(buf, s, e, starts[q], ends[q]):
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
    mask = _table_mask(count)
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
def _read_features(buf, pos, end, params, indices, values, out, scratch, coord_slots, coord_stamps, stamp):
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


@njit(cache=True, inline="always")
def _optional_double(buf, pos, end):
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
def label_ok(y, label_kind, n_classes):
    """validate_event's fast label check; NaN means unlabelled."""
    if y != y:
        return True
    if label_kind == LABELS_BINARY:
        return y == 1.0 or y == -1.0 or y == 0.0
    if label_kind == LABELS_SOFTMAX:
        return 0.0 <= y < n_classes and y == np.floor(y)
    return np.isfinite(y)


@njit(cache=True)
def _read_event(buf, pos, end, layout, params, labels, cols, i, indices, values, out, scratch, coords):
    """Reads the Event body at pos into row i of ``cols``; the number of
    feature entries written at ``out``, or -1 (a fallback)."""
    label_kind, n_classes = labels
    ts, id_s, id_e, model_s, model_e, label, has_label, weight, has_weight = cols
    s, e, pos = read_string(buf, pos, end)
    if pos < 0:
        return -1
    t, pos = read_long(buf, pos, end)
    if pos < 0:
        return -1
    ms, me, pos = read_string(buf, pos, end)
    if pos < 0:
        return -1
    nnz, pos = _read_features(buf, pos, end, params, indices, values, out, scratch, coords[0], coords[1], i + 1)
    if pos < 0:
        return -1
    y, has_y, pos = _optional_double(buf, pos, end)
    if pos < 0 or not label_ok(y, label_kind, n_classes):
        return -1
    w, has_w = np.nan, False
    if layout == LAYOUT_V2:
        w, has_w, pos = _optional_double(buf, pos, end)
        if pos < 0 or (has_w and not (np.isfinite(w) and w > 0.0)):
            return -1
    if pos != end:
        return -1
    ts[i], id_s[i], id_e[i], model_s[i], model_e[i] = t, s, e, ms, me
    label[i], has_label[i], weight[i], has_weight[i] = y, has_y, w, has_w
    return nnz


@njit(cache=True)
def _layout(buf, start, end, sids, layouts, max_message_bytes):
    """The layout of the message's writer schema, 0 when the header is bad,
    the id has no compiled layout or the message is too large."""
    if end - start < 5 or end - start > max_message_bytes or buf[start] != 0:
        return 0
    sid = (np.int64(buf[start + 1]) << 24) | (np.int64(buf[start + 2]) << 16) | (np.int64(buf[start + 3]) << 8) \
        | np.int64(buf[start + 4])
    for k in range(sids.shape[0]):
        if sids[k] == sid:
            return layouts[k]
    return 0


@njit(cache=True)
def _model_code(buf, model_s, model_e, i, firsts, n_models, last):
    """The code of message i's model among the models seen in this batch
    (``firsts``: the first message of each); a new model gets the next code."""
    if last >= 0 and _same_bytes(buf, model_s[i], model_e[i], model_s[firsts[last]], model_e[firsts[last]]):
        return last, n_models
    for c in range(n_models):
        f = firsts[c]
        if _same_bytes(buf, model_s[i], model_e[i], model_s[f], model_e[f]):
            return c, n_models
    firsts[n_models] = i
    return n_models, n_models + 1


@njit(cache=True)
def _sizes(starts, ends):
    """(bytes of all the messages, room for the names of the largest): a
    name takes at least 1 byte and its value 8."""
    total, biggest = 0, 0
    for i in range(starts.shape[0]):
        total += ends[i] - starts[i]
        biggest = max(biggest, ends[i] - starts[i])
    return total, biggest // 9 + 2


@njit(cache=True)
def _names_scratch(room):
    """The scratch arrays of :func:`_read_names` for ``room`` names."""
    return (np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.int64),
            np.empty(room, np.float64), np.empty(_table_mask(room) + 1, np.int64),
            np.zeros(_table_mask(room) + 1, np.int64))


@njit(cache=True)
def decode_events(buf, starts, ends, sids, layouts, params, labels, max_message_bytes):
    """Every message buf[starts[i]:ends[i]] read as a framed Event (see the
    module doc). ``sids``/``layouts``: the writer schema ids with a compiled
    layout; ``params`` = (hash bits, hash seed, max features, max index);
    ``labels`` = (label kind, n_classes). Returns (status, cols, indptr,
    indices, values, model_code, model_firsts); status is minus the layout
    for a message read, positive (FALLBACK or more) for one to send through
    the per-event path, whose row is empty. Output space is bounded by the input's size: an accepted
    message holds at most one feature entry per 8 bytes."""
    n = starts.shape[0]
    total, room = _sizes(starts, ends)
    indices = np.empty(total // 8 + 1, np.int64)
    values = np.empty(total // 8 + 1, np.float64)
    scratch = _names_scratch(room)
    coords = (np.empty(_table_mask(room) + 1, np.int64), np.zeros(_table_mask(room) + 1, np.int64))
    cols = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(n, np.int64), np.full(n, np.nan), np.zeros(n, np.bool_), np.full(n, np.nan),
            np.zeros(n, np.bool_))
    status = np.full(n, FALLBACK, np.int8)
    indptr = np.zeros(n + 1, np.int64)
    model_code = np.full(n, -1, np.int32)
    firsts = np.empty(n, np.int64)
    n_models, last, out = 0, -1, 0
    for i in range(n):
        layout = _layout(buf, starts[i], ends[i], sids, layouts, max_message_bytes)
        status[i] = FALLBACK + layout  # unless read below
        if layout:
            nnz = _read_event(buf, starts[i] + 5, ends[i], layout, params, labels, cols, i, indices, values, out,
                              scratch, coords)
            if nnz >= 0:
                status[i] = -layout
                out += nnz
                last, n_models = _model_code(buf, cols[3], cols[4], i, firsts, n_models, last)
                model_code[i] = last
        indptr[i + 1] = out
    return status, cols, indptr, indices[:out], values[:out], model_code, firsts[:n_models]


@njit(cache=True)
def _read_label(buf, pos, end, labels, cols, i):
    """Reads the Label body at pos into row i of ``cols``; False (a
    fallback) unless it is well formed and its label and weight are sure
    to pass the checks."""
    label_kind, n_classes = labels
    ts, id_s, id_e, model_s, model_e, label, weight, has_weight = cols
    s, e, pos = read_string(buf, pos, end)
    if pos < 0:
        return False
    ms, me, pos = read_string(buf, pos, end)
    if pos < 0 or end - pos < 8:
        return False
    y = read_double(buf, pos)
    if y != y or not label_ok(y, label_kind, n_classes):  # a Label's label is never missing
        return False
    w, has_w, pos = _optional_double(buf, pos + 8, end)
    if pos < 0 or (has_w and not (np.isfinite(w) and w > 0.0)):
        return False
    t, pos = read_long(buf, pos, end)
    if pos != end:
        return False
    ts[i], id_s[i], id_e[i], model_s[i], model_e[i] = t, s, e, ms, me
    label[i], weight[i], has_weight[i] = y, w, has_w
    return True


@njit(cache=True)
def decode_labels(buf, starts, ends, sids, labels, max_message_bytes):
    """Every message buf[starts[i]:ends[i]] read as a framed ``scinol.Label``
    (version 1, the only one) whose writer schema id is one of ``sids``, as
    :func:`decode_events` reads Events: (status, cols), status 0 for a
    message read, FALLBACK for one to send through the per-message path;
    cols = (timestamp, id start, id end, model start, model end, label,
    weight, has weight)."""
    n = starts.shape[0]
    cols = (np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64),
            np.zeros(n, np.int64), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, np.bool_))
    status = np.full(n, FALLBACK, np.int8)
    layouts = np.ones(sids.shape[0], np.int8)
    for i in range(n):
        if _layout(buf, starts[i], ends[i], sids, layouts, max_message_bytes) \
                and _read_label(buf, starts[i] + 5, ends[i], labels, cols, i):
            status[i] = 0
    return status, cols


@njit(cache=True)
def read_namespaced(buf, starts, ends, bits, seed, default_space):
    """The features union at each ``buf[starts[r]:ends[r]]`` (of messages
    :func:`decode_events` took, so already checked) as namespaced entries,
    for a learner that crosses namespaces: dense values at 0..n-1 and
    sparse indices as given, in ``default_space``; each distinct name (its
    last value, in first-seen order, as a decoded dict holds it) hashed as
    ``FeatureHasher.slot`` hashes it, its namespace the first byte of a
    name with a non-empty head before its first ``^``. Nothing is summed:
    the crosses sum repeats. Returns (indptr, indices, values, spaces), or
    an indptr of length 0 if a features union does not read."""
    n = starts.shape[0]
    total, room = _sizes(starts, ends)
    indices = np.empty(total // 8 + 1, np.int64)
    values = np.empty(total // 8 + 1, np.float64)
    spaces = np.full(total // 8 + 1, default_space, np.uint8)
    scratch = _names_scratch(room)
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


@njit(cache=True)
def _prediction_size(i, header, strs, longs, flags, doubles):
    id_s, id_e, model_s, model_e, topic_s, topic_e = strs
    version, klass, ts, partition, offset = longs
    has_prob, has_klass, has_label, has_partition, has_offset = flags
    scores, prob, label, loss, latency = doubles
    k = scores.shape[1]
    size = header.shape[0] + long_size(id_e[i] - id_s[i]) + id_e[i] - id_s[i]
    size += long_size(model_e[i] - model_s[i]) + model_e[i] - model_s[i] + long_size(version[i]) + 8
    size += (long_size(k) + 8 * k + 1) if k else 1
    size += 1 + 8 * has_prob[i] + 1 + (long_size(klass[i]) if has_klass[i] else 0) + 1 + 8 * has_label[i]
    size += 1 + (8 if loss[i] == loss[i] else 0) + long_size(ts[i]) + 8
    size += 1 + (long_size(topic_e[i] - topic_s[i]) + topic_e[i] - topic_s[i] if topic_s[i] >= 0 else 0)
    size += 1 + (long_size(partition[i]) if has_partition[i] else 0)
    size += 1 + (long_size(offset[i]) if has_offset[i] else 0)
    return size


@njit(cache=True)
def _write_prediction(out, pos, i, header, sbuf, strs, longs, flags, doubles):
    id_s, id_e, model_s, model_e, topic_s, topic_e = strs
    version, klass, ts, partition, offset = longs
    has_prob, has_klass, has_label, has_partition, has_offset = flags
    scores, prob, label, loss, latency = doubles
    out[pos:pos + header.shape[0]] = header
    pos = write_string(out, pos + header.shape[0], sbuf, id_s[i], id_e[i])
    pos = write_string(out, pos, sbuf, model_s[i], model_e[i])
    pos = write_double(out, write_long(out, pos, version[i]), scores[i, 0])
    k = scores.shape[1]
    if k:
        pos = write_long(out, pos, k)
        for j in range(k):
            pos = write_double(out, pos, scores[i, j])
    out[pos] = 0
    pos += 1
    pos = _union_double(out, pos, has_prob[i], prob[i])
    out[pos] = 2 if has_klass[i] else 0
    pos = write_long(out, pos + 1, klass[i]) if has_klass[i] else pos + 1
    pos = _union_double(out, pos, has_label[i], label[i])
    pos = _union_double(out, pos, loss[i] == loss[i], loss[i])
    pos = write_double(out, write_long(out, pos, ts[i]), latency[i])
    out[pos] = 2 if topic_s[i] >= 0 else 0
    pos = write_string(out, pos + 1, sbuf, topic_s[i], topic_e[i]) if topic_s[i] >= 0 else pos + 1
    out[pos] = 2 if has_partition[i] else 0
    pos = write_long(out, pos + 1, partition[i]) if has_partition[i] else pos + 1
    out[pos] = 2 if has_offset[i] else 0
    return write_long(out, pos + 1, offset[i]) if has_offset[i] else pos + 1


@njit(cache=True, inline="always")
def _union_double(out, pos, present, v):
    """A ["null", "double"] union: branch 0 (null) or branch 1 then v."""
    out[pos] = 2 if present else 0
    return write_double(out, pos + 1, v) if present else pos + 1


@njit(cache=True)
def encode_predictions(header, sbuf, strs, longs, flags, doubles):
    """Framed ``scinol.Prediction`` (version 2 layout) records, row i of the
    columns (``strs``: start/end in sbuf of the event id, model and source
    topic, topic start -1 for null; ``longs``: model version, predicted
    class, event timestamp, source partition and offset; ``flags``: which of
    probability, class, label, partition, offset are present; ``doubles``:
    scores (n, k), probability, label, loss (NaN = null), latency) written
    back to back: (buffer, offsets), record i at buffer[offsets[i]:offsets[i + 1]]."""
    n = strs[0].shape[0]
    offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + _prediction_size(i, header, strs, longs, flags, doubles)
    out = np.empty(offsets[n], np.uint8)
    for i in range(n):
        _write_prediction(out, offsets[i], i, header, sbuf, strs, longs, flags, doubles)
    return out, offsets


@njit(cache=True)
def gather_rows(indptr, indices, values, rows):
    """The CSR rows ``rows`` of (indptr, indices, values), in that order."""
    n = rows.shape[0]
    out_ptr = np.zeros(n + 1, np.int64)
    for k in range(n):
        out_ptr[k + 1] = out_ptr[k] + indptr[rows[k] + 1] - indptr[rows[k]]
    out_i = np.empty(out_ptr[n], np.int64)
    out_v = np.empty(out_ptr[n], np.float64)
    for k in range(n):
        lo, hi = indptr[rows[k]], indptr[rows[k] + 1]
        out_i[out_ptr[k]:out_ptr[k + 1]] = indices[lo:hi]
        out_v[out_ptr[k]:out_ptr[k + 1]] = values[lo:hi]
    return out_ptr, out_i, out_v


@njit(cache=True, inline="always")
def _digits(v):
    n = 1
    while v >= 10:
        v //= 10
        n += 1
    return n


@njit(cache=True)
def _write_line_id(out, pos, prefix, line):
    """The string ``prefix`` + ``line`` in decimal (as str(int) writes it)."""
    digits = _digits(line)
    pos = write_long(out, pos, prefix.shape[0] + digits)
    for i in range(prefix.shape[0]):  # a loop, not a slice copy: see write_double
        out[pos + i] = prefix[i]
    pos += prefix.shape[0]
    for d in range(digits - 1, -1, -1):
        out[pos + d] = 48 + line % 10
        line //= 10
    return pos + digits


@njit(cache=True)
def _event_size(i, header, prefix, lines, ts, model, width, indptr, indices, labelled, weighted):
    lo, hi = indptr[i], indptr[i + 1]
    id_len = prefix.shape[0] + _digits(lines[i])
    size = header.shape[0] + long_size(id_len) + id_len + long_size(ts) + long_size(model.shape[0]) + model.shape[0]
    if width >= 0:  # DenseFeatures (branch 0): `width` doubles
        size += 1 + ((long_size(width) + 8 * width + 1) if width else 1)
    elif hi > lo:  # SparseFeatures (branch 1): the row's indices, then its values
        size += 1 + long_size(hi - lo) + 1 + long_size(hi - lo) + 8 * (hi - lo) + 1
        for k in range(lo, hi):
            size += long_size(indices[k])
    else:
        size += 3
    return size + 1 + 8 * labelled[i] + 1 + 8 * weighted[i]


@njit(cache=True)
def _write_event(out, pos, i, header, prefix, lines, ts, model, width, indptr, indices, values, value_bytes, y,
                 labelled, weights, weighted, row):
    out[pos:pos + header.shape[0]] = header
    pos = write_long(out, _write_line_id(out, pos + header.shape[0], prefix, lines[i]), ts)
    pos = write_string(out, pos, model, 0, model.shape[0])
    lo, hi = indptr[i], indptr[i + 1]
    if width >= 0:
        out[pos] = 0
        pos += 1
        if width:
            row[:] = 0.0
            for k in range(lo, hi):
                row[indices[k]] = values[k]
            pos = write_long(out, pos, width)
            out[pos:pos + 8 * width] = row.view(np.uint8)  # Avro doubles are little-endian, as is x86/ARM
            pos += 8 * width
        out[pos] = 0
        pos += 1
    else:
        out[pos] = 2
        pos += 1
        if hi > lo:
            pos = write_long(out, pos, hi - lo)
            for k in range(lo, hi):
                pos = write_long(out, pos, indices[k])
        out[pos] = 0
        pos += 1
        if hi > lo:
            pos = write_long(out, pos, hi - lo)
            out[pos:pos + 8 * (hi - lo)] = value_bytes[8 * lo:8 * hi]
            pos += 8 * (hi - lo)
        out[pos] = 0
        pos += 1
    pos = _union_double(out, pos, labelled[i], y[i])
    return _union_double(out, pos, weighted[i], weights[i])


@njit(cache=True, nogil=True)
def encode_file_events(header, prefix, lines, ts, model, width, indptr, indices, values, y, labelled, weights,
                       weighted):
    """Framed ``scinol.Event`` (version 2 layout) records of a batch of file
    rows, row i of the CSR arrays: id = ``prefix`` (UTF-8) + the decimal
    line number, timestamp ``ts``, model name ``model`` (UTF-8), features
    dense (``width`` >= 0: that many values, zero where the row has none) or
    sparse (``width`` -1), label ``y[i]`` where ``labelled``, weight where
    ``weighted``; back to back: (buffer, offsets), record i at
    buffer[offsets[i]:offsets[i + 1]]. ``values`` contiguous float64 (its
    bytes are copied a row at a time)."""
    n = lines.shape[0]
    offsets = np.zeros(n + 1, np.int64)
    for i in range(n):
        offsets[i + 1] = offsets[i] + _event_size(i, header, prefix, lines, ts, model, width, indptr, indices,
                                                  labelled, weighted)
    out = np.empty(offsets[n], np.uint8)
    row = np.zeros(max(width, 0), np.float64)
    value_bytes = values.view(np.uint8)
    for i in range(n):
        _write_event(out, offsets[i], i, header, prefix, lines, ts, model, width, indptr, indices, values, value_bytes,
                     y, labelled, weights, weighted, row)
    return out, offsets


@njit(cache=True)
def _first_names(indptr, hashes, names, name_ends, values):
    """Repeated names of a row summed into their first occurrence, in the
    order they come (as a dict fills): (kept entries mask, values)."""
    keep = np.ones(values.shape[0], np.bool_)
    summed = values.copy()
    longest = 0
    for r in range(indptr.shape[0] - 1):
        longest = max(longest, indptr[r + 1] - indptr[r])
    slots = np.empty(_table_size(longest), np.int64)  # one table for every row: no allocation per row
    for r in range(indptr.shape[0] - 1):
        _merge_row(indptr[r], indptr[r + 1], hashes, names, name_ends, keep, summed, slots)
    return keep, summed


@njit(cache=True, inline="always")
def _table_size(n):
    """A power of two at least 2n (and 8): the table stays at most half full."""
    size = 8
    while size < 2 * n:
        size *= 2
    return size


@njit(cache=True, inline="always")
def _merge_row(lo, hi, hashes, names, name_ends, keep, summed, slots):
    """Row lo:hi through an open-addressing table of the entries kept so
    far (their first occurrences), keyed by hash: an entry whose name is
    there is added to it and dropped. Linear in the row, as a dict is."""
    mask = _table_size(hi - lo) - 1
    slots[:mask + 1] = -1
    for k in range(lo, hi):
        s = hashes[k] & mask
        while True:
            j = slots[s]
            if j < 0:
                slots[s] = k
                break
            if hashes[j] == hashes[k] and _same_name(names, name_ends, j, k):
                summed[j] += summed[k]
                keep[k] = False
                break
            s = (s + 1) & mask  # another name here (or a collision of hashes): probe on


@njit(cache=True, inline="always")
def _same_name(names, name_ends, j, k):
    return _same_bytes(names, name_ends[j - 1] if j else 0, name_ends[j], name_ends[k - 1] if k else 0, name_ends[k])


@njit(cache=True)
def _named_id(r, prefix, lines, block, tag_spans, out, pos):
    """Row r's id (its tag, else ``prefix`` + line number) written at pos,
    or its size when ``out`` is empty."""
    if tag_spans[r, 0] >= 0:
        s, e = tag_spans[r, 0], tag_spans[r, 1]
        if out.shape[0] == 0:
            return long_size(e - s) + e - s
        return write_string(out, pos, block, s, e)
    if out.shape[0] == 0:
        digits = _digits(lines[r])
        return long_size(prefix.shape[0] + digits) + prefix.shape[0] + digits
    return _write_line_id(out, pos, prefix, lines[r])


@njit(cache=True, nogil=True)
def encode_named_events(header, prefix, lines, ts, model, block, tag_spans, indptr, hashes, names, name_ends,
                        values, y, labelled, weights, weighted, skip):
    """Framed ``scinol.Event`` (version 2 layout) records with NamedFeatures
    of a batch of parsed VW rows (:func:`pipelines.records.vw_parse.parse_vw`
    keeping names): entry k of row r (indptr) is the name
    names[name_ends[k - 1]:name_ends[k]] with ``values[k]``, ``hashes[k]``
    its hash; a repeated name is one map entry, its values summed. Id: the
    tag block[tag_spans[r, 0]:tag_spans[r, 1]], or ``prefix`` + line number
    without one. Rows where ``skip`` get no bytes (the caller encodes them).
    (buffer, offsets) as :func:`encode_file_events`."""
    n = lines.shape[0]
    keep, summed = _first_names(indptr, hashes, names, name_ends, values)
    offsets = np.zeros(n + 1, np.int64)
    counts = np.zeros(n, np.int64)  # map entries of each row
    _named_sizes(header, prefix, lines, ts, model, block, tag_spans, indptr, name_ends, labelled, weighted, skip,
                 keep, np.empty(0, np.uint8), offsets, counts)
    out = np.empty(offsets[n], np.uint8)
    _write_named(header, prefix, lines, ts, model, block, tag_spans, indptr, names, name_ends, y, labelled,
                 weights, weighted, skip, keep, summed, offsets, counts, out)
    return out, offsets


# The two passes allocate nothing, so they run without numba's reference
# counting: with it, every call of a helper that takes arrays (the id, the
# writes) counted a reference per array, 6 % of encoding a VW text file.
@njit(cache=True, nogil=True, _nrt=False)
def _named_sizes(header, prefix, lines, ts, model, block, tag_spans, indptr, name_ends, labelled, weighted, skip,
                 keep, none, offsets, counts):
    """offsets[r + 1] = offsets[r] + row r's record size; counts[r] its map entries."""
    for r in range(lines.shape[0]):
        size = 0
        if not skip[r]:
            size = header.shape[0] + _named_id(r, prefix, lines, block, tag_spans, none, 0) + long_size(ts)
            size += long_size(model.shape[0]) + model.shape[0] + 1 + 1
            for k in range(indptr[r], indptr[r + 1]):
                if keep[k]:
                    length = name_ends[k] - (name_ends[k - 1] if k else 0)
                    size += long_size(length) + length + 8
                    counts[r] += 1
            if counts[r]:
                size += long_size(counts[r])
            size += 1 + 8 * labelled[r] + 1 + 8 * weighted[r]
        offsets[r + 1] = offsets[r] + size


@njit(cache=True, nogil=True, _nrt=False)
def _write_named(header, prefix, lines, ts, model, block, tag_spans, indptr, names, name_ends, y, labelled, weights,
                 weighted, skip, keep, summed, offsets, counts, out):
    """Each row's record at out[offsets[r]:offsets[r + 1]]."""
    for r in range(lines.shape[0]):
        if skip[r]:
            continue
        pos = offsets[r]
        for i in range(header.shape[0]):
            out[pos + i] = header[i]
        pos = _named_id(r, prefix, lines, block, tag_spans, out, pos + header.shape[0])
        pos = write_long(out, pos, ts)
        pos = write_string(out, pos, model, 0, model.shape[0])
        out[pos] = 4  # union branch 2, NamedFeatures
        pos += 1
        if counts[r]:
            pos = write_long(out, pos, counts[r])
            for k in range(indptr[r], indptr[r + 1]):
                if keep[k]:
                    pos = write_string(out, pos, names, name_ends[k - 1] if k else 0, name_ends[k])
                    pos = write_double(out, pos, summed[k])
        out[pos] = 0
        pos = _union_double(out, pos + 1, labelled[r], y[r])
        _union_double(out, pos, weighted[r], weights[r])


# ---------------------------------------------------------------- scinol.FeedbackBatch, read


@njit(cache=True)
def decode_feedback_batch(buf, pos, end):
    """A FeedbackBatch body (current layout) at buf[pos:end]: (next position,
    or -1 when the compiled reader does not take it; n events; m scalars;
    strings as (start, end) pairs: model, run_id, the n event ids, then the
    m scalars' names; seqs, partitions, offsets, learned, checkpoints as the
    rows of one array; g_width; g; scalars)."""
    room = end - pos + 2
    starts, ends = np.zeros(room, np.int64), np.zeros(room, np.int64)
    columns, doubles = np.zeros((5, 0), np.int64), np.zeros(0)
    bad = (-1, 0, 0, starts, ends, columns, 0, doubles, doubles)
    for i in range(2):  # model, run_id
        starts[i], ends[i], pos = read_string(buf, pos, end)
        if pos < 0:
            return bad
    n, pos = read_array(buf, pos, end, STRING, starts, 2, ends)
    if pos < 0:
        return bad
    columns = np.zeros((5, n), np.int64)
    for row, kind in ((0, LONG), (1, INT), (2, LONG), (3, BOOLEAN)):  # seqs, partitions, offsets, learned
        count, pos = read_array(buf, pos, end, kind, columns[row], 0, ends)
        if pos < 0 or count != n:
            return bad
    width, pos = read_long(buf, pos, end)
    if pos < 0 or not -2147483648 <= width <= 2147483647:
        return bad
    g = np.empty((end - pos) // 8 + 1)
    n_g, pos = read_doubles(buf, pos, end, g, 0)
    if pos < 0:
        return bad
    m, pos = read_array(buf, pos, end, STRING, starts, 2 + n, ends)
    if pos < 0:
        return bad
    scalars = np.empty((end - pos) // 8 + 1)
    n_s, pos = read_doubles(buf, pos, end, scalars, 0)
    if pos < 0:
        return bad
    count, pos = read_array(buf, pos, end, BOOLEAN, columns[4], 0, ends)  # checkpoints
    if pos < 0 or count != n:
        return bad
    return pos, n, m, starts, ends, columns, width, g[:n_g], scalars[:n_s]


@njit(cache=True, inline="always")
def _write_longs(out, pos, col):
    """An array of long (or int): one block, then the empty block."""
    if col.shape[0]:
        pos = write_long(out, pos, col.shape[0])
        for v in col:
            pos = write_long(out, pos, v)
    out[pos] = 0
    return pos + 1


@njit(cache=True, inline="always")
def _write_booleans(out, pos, col):
    if col.shape[0]:
        pos = write_long(out, pos, col.shape[0])
        for v in col:
            out[pos] = 1 if v else 0
            pos += 1
    out[pos] = 0
    return pos + 1


@njit(cache=True, inline="always")
def _write_doubles(out, pos, col):
    if col.shape[0]:
        pos = write_long(out, pos, col.shape[0])
        for v in col:
            pos = write_double(out, pos, v)
    out[pos] = 0
    return pos + 1


@njit(cache=True, inline="always")
def _write_strings(out, pos, sbuf, ends, lo, hi):
    """Strings lo..hi−1 of ``sbuf`` (string k ends at ends[k]) as an array of string."""
    if hi > lo:
        pos = write_long(out, pos, hi - lo)
        for k in range(lo, hi):
            pos = write_string(out, pos, sbuf, ends[k - 1] if k else 0, ends[k])
    out[pos] = 0
    return pos + 1


@njit(cache=True)
def encode_feedback_batch(header, sbuf, ends, n, columns, width, g, scalars):
    """A framed ``scinol.FeedbackBatch`` (the inverse of
    :func:`decode_feedback_batch`): ``sbuf`` holds the UTF-8 of the model,
    the run id, the n event ids and the scalars' names back to back, string
    k ending at ends[k]; ``columns`` rows: seqs, partitions, offsets,
    learned, checkpoints; ``g`` and ``scalars`` flat, row-major."""
    m = ends.shape[0] - 2 - n
    out = np.empty(header.shape[0] + sbuf.shape[0] + 10 * (ends.shape[0] + 5 * n + 16)
                   + 8 * (g.shape[0] + scalars.shape[0]), np.uint8)
    out[:header.shape[0]] = header
    pos = write_string(out, header.shape[0], sbuf, 0, ends[0])
    pos = write_string(out, pos, sbuf, ends[0], ends[1])
    pos = _write_strings(out, pos, sbuf, ends, 2, 2 + n)
    pos = _write_longs(out, pos, columns[0])
    pos = _write_longs(out, pos, columns[1])
    pos = _write_longs(out, pos, columns[2])
    pos = _write_booleans(out, pos, columns[3])
    pos = write_long(out, pos, width)
    pos = _write_doubles(out, pos, g)
    pos = _write_strings(out, pos, sbuf, ends, 2 + n, 2 + n + m)
    pos = _write_doubles(out, pos, scalars)
    pos = _write_booleans(out, pos, columns[4])
    return out[:pos]
