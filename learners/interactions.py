"""Feature interactions: Vowpal Wabbit-style quadratic and cubic crosses
between namespaces, hashed, computed in compiled code on CSR batches before
the learner's kernel.

Namespaces. Every input entry belongs to a namespace, named by one byte:
the first byte of its namespace's name, as VW's ``-q ab`` names namespaces
by their first letter (so ``|ads`` and ``|age`` are both ``a``). A named
feature ``"ns^name"`` is in namespace ``ns`` (the text before its first
``^``); a name without ``^`` (or starting with ``^``), and every feature
given by index (dense or sparse input), is in the default namespace, the
space ``' '``. :class:`NamespacedRows` carries the namespace of each entry
explicitly (the VW text reader makes these).

Interactions. ``"ab"`` crosses every feature of namespace ``a`` with every
feature of ``b``; ``"abc"`` is cubic. As in VW, the letters of each
interaction are sorted and repeated interactions dropped; where a namespace
meets itself (``"aa"``, ``"aab"``) only pairs (i, j) with i ≤ j in entry
order are made, each unordered combination once.

Per row, in this order (the result is a CSR row without repeated indices):

1. entries with the same (namespace, index) are summed, in order of first
   appearance;
2. for each interaction in turn, each combination of entries (i, j[, k]) in
   entry order gives the cross feature
   ``h = MurmurHash3_x86_32(LE uint32 words (index_i, index_j[, index_k]), seed)``,
   index ``h mod 2^bits``, value ``±value_i · value_j [· value_k]`` with the
   sign from bit 31 of h (signed hashing, as :mod:`learners.hashing`);
   indices enter the hash as their low 32 bits;
3. the entries of step 1 then the crosses are summed by index, in order of
   first appearance.

The bias is not crossed (VW's constant is not either). Crosses of
rescaled features are rescaled by the product of the factors, so a
scale-invariant learner stays invariant: each cross is one coordinate
rescaled by a constant.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .jit import njit
from .murmur import murmur3_words

DEFAULT_NAMESPACE = 32  # ' '
_MAX_ORDER = 3


class NamespacedRows(NamedTuple):
    """CSR rows whose entries carry their namespace byte; an index may repeat
    within a row (repeats are summed, see the module doc)."""

    indptr: np.ndarray  # int64, n + 1
    indices: np.ndarray  # int64
    data: np.ndarray  # float64
    namespaces: np.ndarray  # uint8, one per entry

    @property
    def n_rows(self) -> int:
        return self.indptr.shape[0] - 1


def normalize_interactions(specs) -> tuple[str, ...]:
    """Checked interactions: each a string of 2 or 3 namespace letters
    (single-byte characters), letters sorted, repeats dropped (first kept)."""
    if specs is None:
        return ()
    if isinstance(specs, str):
        raise ValueError(f"interactions must be a list of strings such as ['ab', 'abc'], not the string {specs!r}")
    out: list[str] = []
    for spec in specs:
        if not isinstance(spec, str) or not 2 <= len(spec) <= _MAX_ORDER:
            raise ValueError(f"interaction {spec!r} must be 2 or 3 namespace letters, e.g. 'ab' or 'abc'")
        for letter in spec:
            if ord(letter) > 127 or letter in ":|\t\n\r":
                raise ValueError(f"interaction {spec!r}: {letter!r} cannot name a namespace "
                                 "(one ASCII character other than ':' and '|'; VW's ':' wildcard is not supported)")
        key = "".join(sorted(spec))
        if key not in out:
            out.append(key)
    return tuple(out)


def _spec_array(interactions: tuple[str, ...]) -> np.ndarray:
    specs = np.full((len(interactions), _MAX_ORDER), -1, dtype=np.int64)
    for r, spec in enumerate(interactions):
        specs[r, :len(spec)] = [ord(c) for c in spec]
    return specs


@lru_cache(maxsize=1 << 16)
def namespace_of(name: str) -> int:
    """The namespace byte of a named feature (see the module doc)."""
    head, caret, _ = name.partition("^")
    return head.encode("utf-8")[0] if caret and head else DEFAULT_NAMESPACE


def named_rows(rows, hasher) -> NamespacedRows:
    """Dict rows ``{name or index: value}`` as namespaced entries (names
    hashed with the learner's hasher, nothing merged yet)."""
    indptr, indices, data, spaces = [0], [], [], []
    for r, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"row {r} is a {type(row).__name__}, expected a dict of feature -> value")
        for key, value in row.items():
            if isinstance(key, str):
                index, sign = hasher.slot(key)
                indices.append(index)
                data.append(sign * value)
                spaces.append(namespace_of(key))
            elif isinstance(key, int) and key >= 0:
                indices.append(key)
                data.append(value)
                spaces.append(DEFAULT_NAMESPACE)
            else:
                raise ValueError(f"feature key {key!r} is neither a name (str) nor a non-negative index (int)")
        indptr.append(len(indices))
    return NamespacedRows(np.array(indptr, dtype=np.int64), np.array(indices, dtype=np.int64),
                          np.array(data, dtype=np.float64), np.array(spaces, dtype=np.uint8))


def default_namespace(indptr, indices, data) -> NamespacedRows:
    """CSR rows without namespaces: every entry in the default namespace."""
    return NamespacedRows(indptr, indices, data, np.full(len(indices), DEFAULT_NAMESPACE, dtype=np.uint8))


def expand(rows: NamespacedRows, interactions: tuple[str, ...], bits: int, seed: int = 0):
    """(indptr, indices, data): the rows with their crosses, repeats summed."""
    indptr = np.ascontiguousarray(rows.indptr, dtype=np.int64)
    indices = np.ascontiguousarray(rows.indices, dtype=np.int64)
    data = np.ascontiguousarray(rows.data, dtype=np.float64)
    spaces = np.ascontiguousarray(rows.namespaces, dtype=np.uint8)
    if not (indices.shape == data.shape == spaces.shape) or indptr.shape[0] < 1 or indptr[-1] != indices.shape[0]:
        raise ValueError(f"namespaced rows: {indices.shape[0]} indices, {data.shape[0]} values, "
                         f"{spaces.shape[0]} namespaces and indptr ending at {indptr[-1]}; they must agree")
    if indices.size and indices.min() < 0:
        raise ValueError(f"negative feature index {int(indices.min())}")
    return _expand(indptr, indices, data, spaces, _spec_array(interactions), (1 << bits) - 1, seed)


# ------------------------------------------------------------------ compiled

@njit(cache=True, inline="always")
def _slot(table, stamps, stamp, key):
    """Open addressing over int64 keys: the slot holding key, or the empty
    slot where it goes (a slot is empty unless stamps[slot] == stamp)."""
    mask = table.shape[0] - 1
    s = ((key * 0x9E3779B97F4A7C1) >> 17) & mask
    while stamps[s] == stamp and table[s, 0] != key:
        s = (s + 1) & mask
    return s


@njit(cache=True)
def _merge(keys, idx, val, n, table, stamps, stamp, out_idx, out_val, out_pos):
    """Sum entries with equal keys in order of first appearance into out_*
    (out_pos[m]: where merged entry m first was); the count."""
    m = 0
    for p in range(n):
        s = _slot(table, stamps, stamp, keys[p])
        if stamps[s] == stamp:
            out_val[table[s, 1]] += val[p]
        else:
            stamps[s] = stamp
            table[s, 0] = keys[p]
            table[s, 1] = m
            out_idx[m], out_val[m], out_pos[m] = idx[p], val[p], p
            m += 1
    return m


@njit(cache=True)
def _distinct(indices, lo, hi, table, stamps, stamp):
    """Whether indices[lo:hi] holds no index twice (the table as _merge's)."""
    for p in range(lo, hi):
        s = _slot(table, stamps, stamp, indices[p])
        if stamps[s] == stamp:
            return False
        stamps[s] = stamp
        table[s, 0] = indices[p]
    return True


@njit(cache=True)
def _combinations(group_sizes, letters, order):
    """How many crosses one interaction makes."""
    if order == 2:
        a, b = group_sizes[0], group_sizes[1]
        return a * (a + 1) // 2 if letters[0] == letters[1] else a * b
    a, b, c = group_sizes[0], group_sizes[1], group_sizes[2]
    if letters[0] == letters[1] == letters[2]:
        return a * (a + 1) * (a + 2) // 6
    if letters[0] == letters[1]:
        return a * (a + 1) // 2 * c
    if letters[1] == letters[2]:
        return a * (b * (b + 1) // 2)
    return a * b * c


@njit(cache=True)
def _expand(indptr, indices, data, spaces, specs, mask, seed):
    n_rows = indptr.shape[0] - 1
    longest = 0
    for r in range(n_rows):
        longest = max(longest, indptr[r + 1] - indptr[r])
    base_idx = np.empty(longest, dtype=np.int64)
    base_val = np.empty(longest)
    base_spc = np.empty(longest, dtype=np.uint8)
    keys = np.empty(longest, dtype=np.int64)
    groups = np.empty((_MAX_ORDER, longest), dtype=np.int64)
    sizes = np.zeros(_MAX_ORDER, dtype=np.int64)
    words = np.empty(_MAX_ORDER, dtype=np.uint64)
    cap = max(16, 2 * indices.shape[0])
    out_ptr = np.zeros(n_rows + 1, dtype=np.int64)
    out_idx = np.empty(cap, dtype=np.int64)
    out_val = np.empty(cap)
    row_idx = np.empty(16, dtype=np.int64)
    row_val = np.empty(16)
    row_pos = np.empty(16, dtype=np.int64)
    first = np.empty(longest, dtype=np.int64)
    table = np.empty((32, 2), dtype=np.int64)
    stamps = np.zeros(32, dtype=np.int64)
    stamp = 0
    for r in range(n_rows):
        lo, hi = indptr[r], indptr[r + 1]
        n = hi - lo
        # room for this row: its entries and every cross they can make
        total = n
        for q in range(specs.shape[0]):
            order = 2 if specs[q, 2] < 0 else 3
            for k in range(order):
                sizes[k] = 0
                for p in range(lo, hi):
                    if spaces[p] == specs[q, k]:
                        sizes[k] += 1
            total += _combinations(sizes, specs[q], order)
        if row_idx.shape[0] < total:
            row_idx = np.empty(2 * total, dtype=np.int64)
            row_val = np.empty(2 * total)
            row_pos = np.empty(2 * total, dtype=np.int64)
        if table.shape[0] < 2 * total:
            size = table.shape[0]
            while size < 2 * total:
                size *= 2
            table = np.empty((size, 2), dtype=np.int64)
            stamps = np.zeros(size, dtype=np.int64)
            stamp = 0
        if specs.shape[0] == 0:
            stamp += 1
            if _distinct(indices, lo, hi, table, stamps, stamp):  # both merges below would copy the row as it is
                start = out_ptr[r]
                out_idx[start:start + n] = indices[lo:hi]
                out_val[start:start + n] = data[lo:hi]
                out_ptr[r + 1] = start + n
                continue
        # 1. sum repeats of (namespace, index)
        for p in range(n):
            keys[p] = indices[lo + p] * 256 + spaces[lo + p]
        stamp += 1
        m = _merge(keys, indices[lo:hi], data[lo:hi], n, table, stamps, stamp, base_idx, base_val, first)
        for p in range(m):
            base_spc[p] = spaces[lo + first[p]]
        # 2. crosses, after the entries themselves
        row_idx[:m] = base_idx[:m]
        row_val[:m] = base_val[:m]
        t = m
        for q in range(specs.shape[0]):
            order = 2 if specs[q, 2] < 0 else 3
            for k in range(order):
                sizes[k] = 0
                for p in range(m):
                    if base_spc[p] == specs[q, k]:
                        groups[k, sizes[k]] = p
                        sizes[k] += 1
            t = _cross(groups, sizes, specs[q], order, base_idx, base_val, words, mask, seed, row_idx, row_val, t)
        # 3. sum repeats of an index
        start = out_ptr[r]
        if out_idx.shape[0] < start + t:
            grown = max(2 * out_idx.shape[0], start + t)
            out_idx = _grow_int(out_idx, grown)
            out_val = _grow_float(out_val, grown)
        stamp += 1
        k = _merge(row_idx, row_idx, row_val, t, table, stamps, stamp, out_idx[start:], out_val[start:], row_pos)
        out_ptr[r + 1] = start + k
    nnz = out_ptr[n_rows]
    return out_ptr, out_idx[:nnz].copy(), out_val[:nnz].copy()


@njit(cache=True)
def _grow_int(a, size):
    b = np.empty(size, dtype=np.int64)
    b[:a.shape[0]] = a
    return b


@njit(cache=True)
def _grow_float(a, size):
    b = np.empty(size)
    b[:a.shape[0]] = a
    return b


@njit(cache=True, inline="always")
def _emit(words, order, value, mask, seed, row_idx, row_val, t):
    h = murmur3_words(words, order, seed)
    row_idx[t] = np.int64(h) & mask
    row_val[t] = -value if h >> np.uint64(31) else value
    return t + 1


@njit(cache=True)
def _cross(groups, sizes, letters, order, idx, val, words, mask, seed, row_idx, row_val, t):
    for a in range(sizes[0]):
        pa = groups[0, a]
        words[0] = np.uint64(idx[pa] & 0xFFFFFFFF)
        b0 = a if letters[1] == letters[0] else 0
        for b in range(b0, sizes[1]):
            pb = groups[1, b]
            words[1] = np.uint64(idx[pb] & 0xFFFFFFFF)
            if order == 2:
                t = _emit(words, 2, val[pa] * val[pb], mask, seed, row_idx, row_val, t)
                continue
            c0 = b if letters[2] == letters[1] else 0
            for c in range(c0, sizes[2]):
                pc = groups[2, c]
                words[2] = np.uint64(idx[pc] & 0xFFFFFFFF)
                t = _emit(words, 3, val[pa] * val[pb] * val[pc], mask, seed, row_idx, row_val, t)
    return t


def crossed_batch(X, hasher, interactions: tuple[str, ...]):
    """A learner's input with its crosses, as a validated CSRBatch: namespaced
    rows as they are, dict rows by their names' namespaces, anything else
    (dense, CSR) in the default namespace."""
    from .inputs import CSRBatch, as_batch, csr_batch

    if isinstance(X, NamespacedRows):
        rows = X
    elif isinstance(X, dict) or (isinstance(X, (list, tuple)) and X and isinstance(X[0], dict)):
        rows = named_rows([X] if isinstance(X, dict) else X, hasher)
    else:
        batch = as_batch(X, hasher)
        if not isinstance(batch, CSRBatch):  # dense: its non-zero entries, column j as index j
            r, c = np.nonzero(batch)
            indptr = np.zeros(batch.shape[0] + 1, dtype=np.int64)
            np.cumsum(np.bincount(r, minlength=batch.shape[0]), out=indptr[1:])
            batch = CSRBatch(indptr, c.astype(np.int64), batch[r, c])
        rows = default_namespace(batch.indptr, batch.indices, batch.data)
    return csr_batch(*expand(rows, interactions, hasher.bits, hasher.seed), distinct=True)  # expand sums repeats
