"""Framed ``scinol.Event`` records of a batch of file rows written in one
compiled call, for ``scinol produce`` and the load generators
(:mod:`pipelines.records.event_values`): dense or sparse CSR rows
(:func:`encode_file_events`), or VW rows with their feature names
(:func:`encode_named_events`); byte for byte what the codec writes.
"""

from __future__ import annotations

import numpy as np

from learners.jit import njit

from .event_reader import LAYOUT_V2
from .event_reader import LAYOUTS as _READ
from .primitives import long_size, same_bytes, write_double, write_long, write_optional_double, write_string

LAYOUTS = {("scinol.Event", LAYOUT_V2): _READ["scinol.Event", LAYOUT_V2]}
"""(record, version) -> the fields these writers write, in order, as
(name, type): the layout the Event reader reads; checked against the
schema files by a test."""


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
    pos = write_optional_double(out, pos, labelled[i], y[i])
    return write_optional_double(out, pos, weighted[i], weights[i])


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
    return same_bytes(names, name_ends[j - 1] if j else 0, name_ends[j], name_ends[k - 1] if k else 0, name_ends[k])


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
    of a batch of parsed VW rows (:func:`pipelines.files.vw_parse.parse_vw`
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
        pos = write_optional_double(out, pos + 1, labelled[r], y[r])
        write_optional_double(out, pos, weighted[r], weights[r])
