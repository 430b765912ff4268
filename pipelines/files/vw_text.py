"""Vowpal Wabbit's text input format: one example per line,

    [label [importance]] [tag]|namespace[:scale] feature[:value] ... |namespace ...

as VW reads it, so VW users' files run unchanged:

- **label** a number; without one the example is predicted, not learned
  from. **importance** a number ≥ 0 (default 1), read into
  ``Batch.weights``. A third number (VW's initial prediction) is refused.
- **tag** the last word before the first ``|`` when it touches the ``|``
  (``1 id7|a x``) or starts with ``'`` (``1 'id7 |a x``). As in VW, ``1|a x``
  is therefore *unlabelled* with tag ``1``: put a space before ``|``.
- **namespace** the word right after ``|`` (``|a``, ``|user:0.5``); a ``|``
  followed by white space is the default namespace. ``:scale`` multiplies
  the values of its features.
- **feature** ``name``, ``name:number`` or ``name:text`` (VW 9: the feature
  ``name^text`` with value 1). Zero values are dropped; a feature may
  repeat (values add up).

Words are separated by spaces and tabs; there are no comments (``#`` is an
ordinary character, as in VW); blank lines are skipped.

Features become named features, the same names a ``NamedFeatures`` event
carries (so ``scinol produce --format vw`` then ``scinol run`` learns what
``scinol learn --format vw`` learns): ``ns^name`` in namespace ``ns``,
plain ``name`` in the default namespace (``^name`` if the name holds a
``^``, so that it stays in the default namespace for interactions). Names
are hashed by the learner (signed MurmurHash3, :mod:`learners.hashing`),
every name, numeric or not (VW uses numeric names as indices as they
are; here ``|f 13`` is the name ``f^13``). The namespace of a feature, for
``-q``/``--cubic``, is the first byte of its namespace's name, as in VW
(:mod:`learners.interactions`).
"""

from __future__ import annotations

import math
import re
from typing import Iterator, NamedTuple

import numpy as np

from learners.interactions import namespace_of

from .textbase import Batch, DataError, Reader, _is_float, _open_text, _read_errors, _RowBuffer, block_batches

_WORD = re.compile(r"[^ \t]+")
_NO_NAMES = np.empty(0, dtype=np.int64)  # parse_vw: hash the names, keep none


class VwRow(NamedTuple):
    label: float | None
    weight: float
    tag: str | None
    features: list  # [(name, value)] in order, zero values dropped


def feature_name(namespace: str | None, name: str, text: str | None = None) -> str:
    """The named feature of ``name[:text]`` in ``namespace`` (None: the default one)."""
    base = name if text is None else f"{name}^{text}"
    if namespace is None:
        return "^" + base if "^" in base else base
    return f"{namespace}^{base}"


def _number(path, lineno, col, word, what) -> float:
    try:
        value = float(word)
    except ValueError:
        raise DataError(path, lineno, col, f"non-numeric {what} {word!r}") from None
    if not math.isfinite(value):
        raise DataError(path, lineno, col, f"non-finite {what} {word!r}")
    return value


def _label_section(path, lineno, head: str, has_bar: bool):
    words = [(m.start() + 1, m.group()) for m in _WORD.finditer(head)]
    tag = None
    if words and words[-1][1].startswith("'"):
        tag = words.pop()[1][1:]
    elif words and has_bar and head[-1] not in " \t":
        tag = words.pop()[1]
    if len(words) == 3:
        col, word = words[2]
        if not _is_float(word):
            raise DataError(path, lineno, col, f"unexpected word {word!r} before '|' (a tag must touch the '|' "
                                               "or start with ')")
        raise DataError(path, lineno, col, f"a third number before '|' ({word!r}, VW's initial prediction) "
                                           "is not supported")
    if len(words) > 3:
        raise DataError(path, lineno, words[3][0], "too many words before the first '|' "
                                                   "(expected [label [importance]] [tag])")
    label = _number(path, lineno, *words[0], "label") if words else None
    weight = _number(path, lineno, *words[1], "importance weight") if len(words) > 1 else 1.0
    if weight < 0:
        raise DataError(path, lineno, words[1][0], f"negative importance weight {words[1][1]!r}")
    return label, weight, tag


def _namespace(path, lineno, col, token: str):
    """(name or None for the default namespace, scale)."""
    name, colon, scale_text = token.partition(":")
    scale = _number(path, lineno, col + len(name) + 1, scale_text, f"namespace {name!r} scale") if colon else 1.0
    if name.startswith("^"):
        raise DataError(path, lineno, col, f"namespace name {name!r} starts with '^' (reserved for the default namespace)")
    return name or None, scale


def _feature(path, lineno, col, token: str, namespace, scale):
    """(name, value) of one feature token; value 0 is dropped by the caller."""
    name, colon, rest = token.partition(":")
    text, value = None, 1.0
    if colon:
        if not rest:
            raise DataError(path, lineno, col, f"malformed feature {token!r} (no value after ':')")
        if ":" in rest:
            raise DataError(path, lineno, col, f"malformed feature {token!r} (more than one ':')")
        try:
            value = float(rest)
        except ValueError:
            text = rest
        if text is None and not math.isfinite(value):
            raise DataError(path, lineno, col, f"non-finite value {rest!r} for feature {name!r}")
    full = feature_name(namespace, name, text)
    value *= scale
    if not math.isfinite(value):
        raise DataError(path, lineno, col, f"value of feature {full!r} overflows ({scale:g} × {rest})")
    return full, value


def parse_vw_line(path, lineno: int, text: str) -> VwRow | None:
    """One line; None if blank; DataError at the first problem (1-based column)."""
    if not text.strip(" \t"):
        return None
    bar = text.find("|")
    label, weight, tag = _label_section(path, lineno, text if bar < 0 else text[:bar], bar >= 0)
    features = []
    while bar >= 0:
        following = text.find("|", bar + 1)
        segment = text[bar + 1:following if following >= 0 else len(text)]
        base = bar + 2  # the column of segment[0]
        tokens = [(base + m.start(), m.group()) for m in _WORD.finditer(segment)]
        namespace, scale = None, 1.0
        if tokens and segment[:1] not in ("", " ", "\t"):
            namespace, scale = _namespace(path, lineno, *tokens.pop(0))
        for col, token in tokens:
            name, value = _feature(path, lineno, col, token, namespace, scale)
            if value != 0:
                features.append((name, value))
        bar = following
    return VwRow(label, weight, tag, features)


def vw_rows(path) -> Iterator[tuple[int, VwRow]]:
    """(line number, row) of every non-blank line, parsed in Python (for
    ``scinol produce``, which needs the names)."""
    with _read_errors(path), _open_text(path) as f:
        for lineno, raw in enumerate(f, 1):
            row = parse_vw_line(path, lineno, raw.rstrip("\r\n"))
            if row is not None:
                yield lineno, row


class _VwRowBuffer(_RowBuffer):
    """The row buffer plus importance weights, namespaces and tags."""

    def __init__(self, capacity: int, values: int = 1 << 16):
        super().__init__(capacity, values)
        self.spaces = np.empty(values, dtype=np.uint8)
        self.tag_spans = np.empty((capacity, 2), dtype=np.int64)
        self.tags: list = [None] * capacity
        self.any_tag = False

    def grow(self, at_least: int = 0) -> None:
        super().grow(at_least)
        self.spaces = np.resize(self.spaces, self.indices.shape[0])

    def note_tags(self, block, first: int) -> None:
        """Tag strings of rows first..n-1 from their spans in block."""
        found = np.flatnonzero(self.tag_spans[first:self.n, 0] >= 0)
        for r in (found + first).tolist():
            start, end = self.tag_spans[r]
            self.tags[r] = bytes(block[start:end]).decode("ascii")
            self.any_tag = True

    def append_row(self, line: int, row: VwRow, hasher) -> None:
        """One row parsed in Python: its names hashed as the compiled parser does."""
        lo = self.indptr[self.n]
        hi = lo + len(row.features)
        if hi > self.indices.shape[0]:
            self.grow(hi)
        for p, (name, value) in enumerate(row.features, lo):
            index, sign = hasher.slot(name)
            self.indices[p], self.data[p], self.spaces[p] = index, sign * value, namespace_of(name)
        self.y[self.n] = math.nan if row.label is None else row.label
        self.lines[self.n], self.weights[self.n], self.tags[self.n] = line, row.weight, row.tag
        self.any_tag = self.any_tag or row.tag is not None
        self.n += 1
        self.indptr[self.n] = hi

    def take(self) -> Batch:
        n, nnz = self.n, self.indptr[self.n]
        weights = self.weights[:n].copy()  # VW batches always carry them
        batch = super().take()
        tags = self.tags[:n] if self.any_tag else None
        self.tags, self.any_tag = [None] * len(self.tags), False
        return batch._replace(weights=weights, namespaces=self.spaces[:nnz].copy(), tags=tags)


class VwNamedBatch(NamedTuple):
    """Rows of a VW file with their feature names (``scinol produce``):
    entry k of row r (``indptr``) is the name
    ``names[name_ends[k - 1]:name_ends[k]]`` (from 0 for k = 0) with value
    ``values[k]`` (scaled, unsigned) and 32-bit MurmurHash3 ``hashes[k]``; a
    name may repeat in a row. Row r's tag is ``block[tag_spans[r, 0]:
    tag_spans[r, 1]]`` (-1: none). ``python_rows`` holds the rows the
    compiled parser handed to Python, by row number; they have no entries."""

    indptr: np.ndarray
    hashes: np.ndarray
    names: np.ndarray
    name_ends: np.ndarray
    values: np.ndarray
    y: np.ndarray
    weights: np.ndarray
    lines: np.ndarray
    tag_spans: np.ndarray
    block: np.ndarray
    python_rows: dict


class _VwNamedRowBuffer(_VwRowBuffer):
    """The row buffer keeping each entry's name, of one block at a time."""

    def __init__(self, capacity: int, values: int = 1 << 16):
        super().__init__(capacity, values)
        self.names = np.empty(16 * values, dtype=np.uint8)  # grown on VALUES_FULL, with the entries
        self.name_ends = np.empty(values, dtype=np.int64)
        self.python_rows: dict = {}
        self.block = None

    def grow(self, at_least: int = 0) -> None:
        super().grow(at_least)
        self.name_ends = np.resize(self.name_ends, self.indices.shape[0])
        self.names = np.resize(self.names, 2 * self.names.shape[0])

    def append_row(self, line: int, row: VwRow, hasher=None) -> None:
        """A row parsed in Python: kept whole, without entries."""
        self.python_rows[self.n] = row
        self.y[self.n], self.lines[self.n], self.weights[self.n] = math.nan, line, row.weight
        self.tag_spans[self.n] = -1
        self.n += 1
        self.indptr[self.n] = self.indptr[self.n - 1]

    def take(self) -> VwNamedBatch:
        n, nnz = self.n, self.indptr[self.n]
        ends = self.name_ends[:nnz].copy()
        batch = VwNamedBatch(self.indptr[:n + 1].copy(), self.indices[:nnz].copy(),
                             self.names[:ends[-1] if nnz else 0].copy(), ends, self.data[:nnz].copy(),
                             self.y[:n].copy(), self.weights[:n].copy(), self.lines[:n].copy(),
                             self.tag_spans[:n].copy(), self.block, self.python_rows)
        self.n, self.python_rows = 0, {}
        return batch


class VwReader(Reader):
    """VW text files (.vw, .gz fine), parsed by the compiled block parser
    (:mod:`pipelines.files.vw_parse`). Batches carry raw namespaced entries
    (an index may repeat; ``namespaces`` gives each entry's namespace byte),
    the importance weights and the tags. Names are hashed into 2^hash_bits
    slots with hash_seed: set both to the learner's before reading."""

    def __init__(self, path, hash_bits: int = 18, hash_seed: int = 0):
        self.path = str(path)
        self.hash_bits, self.hash_seed = hash_bits, hash_seed
        with _read_errors(self.path), _open_text(self.path) as f:
            f.read(1)  # surface open errors (missing file, not gzip, ...) now

    def batches(self, batch_size: int = 4096) -> Iterator[Batch]:
        from learners.hashing import FeatureHasher

        hasher = FeatureHasher(self.hash_bits, self.hash_seed)
        return self._batches(lambda: _VwRowBuffer(batch_size), batch_size, hasher)

    def named_batches(self, batch_size: int = 4096) -> Iterator[VwNamedBatch]:
        """The rows with their names, for encoding as NamedFeatures events."""
        return self._batches(lambda: _VwNamedRowBuffer(batch_size), batch_size, None)

    def _batches(self, row_buffer, batch_size: int, hasher) -> Iterator:
        from .blocks import parse_blocks

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        with _read_errors(self.path):
            yield from parse_blocks(self.path, lambda block, line: self._block_batches(
                block, line, batch_size, row_buffer(), hasher))

    def _block_batches(self, block, line: int, batch_size: int, rows, hasher) -> Iterator:
        from .numbers import POW5_HI, POW5_LO
        from .vw_parse import parse_vw

        named = isinstance(rows, _VwNamedRowBuffer)
        mask = (1 << (32 if named else self.hash_bits)) - 1  # kept names: the whole hash, to find repeats
        scratch = None if named else np.empty(2 * block.shape[0] + 16, dtype=np.uint8)
        words = np.empty((2, 4), dtype=np.int64)
        if named:
            rows.block = block

        def parse(block, pos, line):
            first = rows.n
            status, pos, line, rows.n = parse_vw(
                block, pos, line, rows.y, rows.weights, rows.lines, rows.tag_spans, rows.indptr,
                rows.indices, rows.data, rows.spaces, rows.n, rows.names if named else scratch,
                rows.name_ends if named else _NO_NAMES, words, mask, self.hash_seed, POW5_HI, POW5_LO)
            if not named:
                rows.note_tags(block, first)
            return status, pos, line

        def python_row(line, text):
            parsed = parse_vw_line(self.path, line, text)
            if parsed is not None:
                rows.append_row(line, parsed, hasher)

        return block_batches(block, line, rows, batch_size, parse, python_row)
