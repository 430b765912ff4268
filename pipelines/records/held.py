"""Events awaiting their labels, kept as columns: what
:class:`pipelines.records.labels.PendingStore` holds.

:class:`HeldEvents` reads as an insertion-ordered mapping from event id to
:class:`Waiting`, but its values live in growable arrays, not an object per
event: a batch of events is held with a few array writes
(:meth:`HeldEvents.append`), all of them are read back with a few gathers
(:meth:`HeldEvents.columns`, which a checkpoint and every bundle's state
write take), and a :class:`Waiting` is made only for an event looked up by id
(its label came).

Rows are only ever appended and never written again, so the arrays of a
:class:`Waiting` handed out are views that stay valid. A removed row's space
is taken back when removed rows outnumber the live ones (:meth:`_compact`),
so the columns hold at most about twice the live rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import MutableMapping
from typing import NamedTuple

import numpy as np


class Source(NamedTuple):
    """Where an event was read, and its message's key."""
    topic: str
    partition: int
    offset: int
    key: bytes | None = None


class Waiting(NamedTuple):
    """An unlabelled event, as predicted."""
    ts_ms: int
    version: int
    latency_ms: float
    scores: np.ndarray  # the prediction made on arrival (n_outputs,)
    indices: np.ndarray  # its features as a CSR row
    values: np.ndarray
    weight: float
    source: Source | None = None
    namespaces: np.ndarray | None = None  # each entry's namespace, when the learner crosses features


class Rows(NamedTuple):
    """Columns of held events, row i for event i (the CSR rows of their features)."""
    ts_ms: np.ndarray  # int64
    version: np.ndarray  # int64
    latency_ms: np.ndarray
    weight: np.ndarray
    scores: np.ndarray  # (n, n_outputs)
    indptr: np.ndarray
    indices: np.ndarray  # int64
    values: np.ndarray
    namespaces: np.ndarray | None  # uint8, or None when the learner crosses no features
    topic: np.ndarray  # int64 index into a list of topic names; -1: read from nowhere known
    partition: np.ndarray  # int64
    offset: np.ndarray  # int64
    keys: list  # bytes or None each

    def waiting(self, k: int, topics: list[str]) -> Waiting:
        """Row k as a :class:`Waiting` (its arrays views of these), ``topic`` indexing ``topics``."""
        lo, hi, code = self.indptr[k], self.indptr[k + 1], int(self.topic[k])
        source = None if code < 0 else Source(topics[code], int(self.partition[k]), int(self.offset[k]), self.keys[k])
        return Waiting(int(self.ts_ms[k]), int(self.version[k]), float(self.latency_ms[k]), self.scores[k],
                       self.indices[lo:hi], self.values[lo:hi], float(self.weight[k]), source,
                       None if self.namespaces is None else self.namespaces[lo:hi])


_ROW_FIELDS = ("ts_ms", "version", "latency_ms", "weight", "scores", "topic", "partition", "offset")
_ROW_TYPES = (np.int64, np.int64, np.float64, np.float64, np.float64, np.int64, np.int64, np.int64)


def take_csr(indptr: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, positions) of CSR rows ``rows`` of ``indptr``: the entries of
    the new row i are the old entries at ``positions[indptr[i]:indptr[i + 1]]``."""
    return _entries(indptr[:-1], indptr[1:], rows)


class HeldEvents(MutableMapping):
    """Event id -> :class:`Waiting`, in the order first held. A batch
    (:meth:`append`) goes into the columns; a single event set by id is kept
    as its :class:`Waiting` until the columns are next read (:meth:`columns`)."""

    compact_above = 1024  # removed rows kept at least up to this many: compaction is O(live rows)

    def __init__(self):
        self._row: OrderedDict[str, int | Waiting] = OrderedDict()  # id -> its row in the columns, or itself
        self._objects = 0  # values of _row that are a Waiting
        self._cols: dict[str, np.ndarray] = {}  # _ROW_FIELDS, with capacity past self._n
        self._lo = self._hi = np.zeros(0, np.int64)  # each row's entries in the pools
        self._indices, self._values = np.zeros(0, np.int64), np.zeros(0, np.float64)
        self._spaces: np.ndarray | None = None
        self._keys: list = []
        self._topics: list[str] = []
        self._n = self._used = 0  # rows and pool entries written
        self._width: int | None = None  # scores per row, fixed by the first row
        self._crossed: bool | None = None  # whether rows carry namespaces, likewise

    # -- the mapping

    def __len__(self) -> int:
        return len(self._row)

    def __iter__(self):
        return iter(self._row)

    def __contains__(self, event_id) -> bool:
        return event_id in self._row

    def __getitem__(self, event_id: str) -> Waiting:
        return self._waiting(self._row[event_id])

    def __setitem__(self, event_id: str, waiting: Waiting) -> None:
        self._objects += type(self._row.get(event_id)) is not Waiting
        self._row[event_id] = waiting

    def __delitem__(self, event_id: str) -> None:
        self.pop(event_id)

    def pop(self, event_id: str, *default):
        row = self._row.pop(event_id, None)
        if row is None:
            if default:
                return default[0]
            raise KeyError(event_id)
        return self._waiting(row, leaving=True)

    def popitem(self, last: bool = True) -> tuple[str, Waiting]:
        event_id, row = self._row.popitem(last=last)
        return event_id, self._waiting(row, leaving=True)

    def first_ts(self) -> int:
        """The timestamp of the event held longest (there must be one)."""
        row = next(iter(self._row.values()))
        return row.ts_ms if type(row) is Waiting else int(self._cols["ts_ms"][row])

    # -- columns

    def append(self, ids: list[str], rows: Rows, topic: str | None, partition: np.ndarray | None,
               offset: np.ndarray | None, keys: list) -> None:
        """Hold the events ``ids`` (in order; an id held already keeps its
        place and takes the new row), read from ``topic`` (None: from nowhere
        known) at ``partition`` and ``offset``, with message ``keys``; the
        ``topic``, ``partition``, ``offset`` and ``keys`` of ``rows`` are not read."""
        if self._n - (len(self._row) - self._objects) > max(len(self._row), self.compact_above):
            self._compact()
        n = len(ids)
        self._write(ids, rows._replace(
            topic=np.full(n, self._topic_code(topic), np.int64),
            partition=np.full(n, -1, np.int64) if partition is None else partition,
            offset=np.full(n, -1, np.int64) if offset is None else offset, keys=keys))

    def restore(self, ids: list[str], rows: Rows, topics: list[str]) -> None:
        """Hold events saved as :meth:`columns` gave them (into an empty one):
        ``rows.topic`` indexes ``topics``."""
        if self._row or self._topics:
            raise ValueError("restore() fills an empty HeldEvents")
        self._topics = list(topics)
        self._write(ids, rows)

    def columns(self) -> tuple[Rows, list[str]]:
        """(the rows of the events held, in order; the topic names their ``topic`` indexes)."""
        if self._objects:
            self._absorb()
        return self._gather(np.fromiter(self._row.values(), np.int64, len(self._row))), self._topics

    def _topic_code(self, topic: str | None) -> int:
        if topic is None:
            return -1
        if topic not in self._topics:
            self._topics.append(topic)
        return self._topics.index(topic)

    def _absorb(self) -> None:
        """Move the events held as a :class:`Waiting` into the columns, keeping their places."""
        ids = [event_id for event_id, row in self._row.items() if type(row) is Waiting]
        self._write(ids, self._rows_of_waiting([self._row[event_id] for event_id in ids]))

    def _rows_of_waiting(self, held: list[Waiting]) -> Rows:
        n, sources = len(held), [w.source for w in held]
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.fromiter((w.indices.shape[0] for w in held), np.int64, n), out=indptr[1:])
        return Rows(
            np.fromiter((w.ts_ms for w in held), np.int64, n), np.fromiter((w.version for w in held), np.int64, n),
            np.fromiter((w.latency_ms for w in held), np.float64, n),
            np.fromiter((w.weight for w in held), np.float64, n),
            np.array([w.scores for w in held], np.float64).reshape(n, -1), indptr,
            np.concatenate([w.indices for w in held]).astype(np.int64),
            np.concatenate([w.values for w in held]).astype(np.float64),
            None if held[0].namespaces is None else np.concatenate([w.namespaces for w in held]).astype(np.uint8),
            np.array([-1 if s is None else self._topic_code(s.topic) for s in sources], np.int64),
            np.array([-1 if s is None else s.partition for s in sources], np.int64),
            np.array([-1 if s is None else s.offset for s in sources], np.int64),
            [None if s is None else s.key for s in sources])

    # -- taking events out without a Waiting each (a batch of labels)

    def take(self, event_id: str):
        """Stop holding ``event_id``; its row for :meth:`ts_of`,
        :meth:`waiting_of` and :meth:`rows_of` (None: not held). Those must be
        asked before the next :meth:`append`."""
        row = self._row.pop(event_id, None)
        self._objects -= type(row) is Waiting
        return row

    def ts_of(self, row) -> int:
        return row.ts_ms if type(row) is Waiting else int(self._cols["ts_ms"][row])

    def waiting_of(self, row) -> Waiting:
        return self._waiting(row)

    def rows_of(self, taken: list) -> tuple[Rows, list[str]]:
        """(the rows of events :meth:`take` gave, in that order; the topic
        names their ``topic`` indexes)."""
        waiting = [k for k, row in enumerate(taken) if type(row) is Waiting]
        if waiting:  # written as rows no id maps to: the next compaction drops them
            taken = list(taken)
            first = self._put(self._rows_of_waiting([taken[k] for k in waiting]))
            for j, k in enumerate(waiting, first):
                taken[k] = j
        return self._gather(np.array(taken, np.int64)), self._topics

    def _write(self, ids: list[str], rows: Rows) -> None:
        held = self._row
        for k, event_id in enumerate(ids, self._put(rows)):
            self._objects -= type(held.get(event_id)) is Waiting
            held[event_id] = k

    def _put(self, rows: Rows) -> int:
        """Write ``rows`` into the columns; returns the first one's row number."""
        n, m = len(rows.ts_ms), int(rows.indptr[-1])
        width, crossed = rows.scores.shape[1], rows.namespaces is not None
        if self._width is None:
            self._width, self._crossed = width, crossed
        elif (width, crossed) != (self._width, self._crossed):
            raise ValueError(f"held events have {self._width} scores{' and namespaces' * self._crossed}, "
                             f"not {width}{' and namespaces' * crossed}")
        self._reserve(n, m)
        at, used = self._n, self._used
        for name in _ROW_FIELDS:
            self._cols[name][at:at + n] = getattr(rows, name)
        self._lo[at:at + n] = used + rows.indptr[:-1]
        self._hi[at:at + n] = used + rows.indptr[1:]
        self._indices[used:used + m] = rows.indices[:m]
        self._values[used:used + m] = rows.values[:m]
        if crossed:
            self._spaces[used:used + m] = rows.namespaces[:m]
        self._keys.extend(rows.keys)
        self._n, self._used = at + n, used + m
        return at

    def _gather(self, rows: np.ndarray) -> Rows:
        c = self._cols
        if not c:
            return Rows(*(np.zeros(0, t) for t in _ROW_TYPES[:4]), np.zeros((0, self._width or 0)),
                        np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), None,
                        *(np.zeros(0, np.int64) for _ in range(3)), [])
        indptr, at = _entries(self._lo, self._hi, rows)
        keys = self._keys
        return Rows(c["ts_ms"][rows], c["version"][rows], c["latency_ms"][rows], c["weight"][rows],
                    c["scores"][rows], indptr, self._indices[at], self._values[at],
                    None if self._spaces is None else self._spaces[at], c["topic"][rows], c["partition"][rows],
                    c["offset"][rows], [keys[r] for r in rows.tolist()])

    def _waiting(self, row, leaving: bool = False) -> Waiting:
        if type(row) is Waiting:
            self._objects -= leaving
            return row
        c, lo, hi = self._cols, self._lo[row], self._hi[row]
        code = int(c["topic"][row])
        source = None if code < 0 else Source(self._topics[code], int(c["partition"][row]), int(c["offset"][row]),
                                              self._keys[row])
        return Waiting(int(c["ts_ms"][row]), int(c["version"][row]), float(c["latency_ms"][row]), c["scores"][row],
                       self._indices[lo:hi], self._values[lo:hi], float(c["weight"][row]), source,
                       None if self._spaces is None else self._spaces[lo:hi])

    def _reserve(self, n: int, m: int) -> None:
        """Room for n more rows and m more pool entries (new arrays, never
        written in place, so views handed out stay as they were)."""
        if not self._cols or self._n + n > self._cols["ts_ms"].shape[0]:
            size = max(2 * (self._n + n), 64)
            grown = {}
            for name, kind in zip(_ROW_FIELDS, _ROW_TYPES):
                grown[name] = np.zeros((size, self._width) if name == "scores" else size, kind)
                if self._cols:
                    grown[name][:self._n] = self._cols[name][:self._n]
            self._cols = grown
            self._lo, self._hi = _grown(self._lo, self._n, size), _grown(self._hi, self._n, size)
        if self._used + m > self._indices.shape[0] or self._crossed and self._spaces is None:
            size = max(2 * (self._used + m), 1024)
            self._indices = _grown(self._indices, self._used, size)
            self._values = _grown(self._values, self._used, size)
            if self._crossed:
                self._spaces = _grown(self._spaces if self._spaces is not None else np.zeros(0, np.uint8),
                                      self._used, size)

    def _compact(self) -> None:
        """Keep only the live rows, in order (their ids then map to rows 0, 1, ...)."""
        live, ids = self.columns()[0], list(self._row)
        self._cols, self._n, self._used, self._keys, self._row = {}, 0, 0, [], OrderedDict()
        self._lo = self._hi = np.zeros(0, np.int64)
        self._indices, self._values, self._spaces = np.zeros(0, np.int64), np.zeros(0, np.float64), None
        self._write(ids, live)


def _entries(lo: np.ndarray, hi: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, positions in the pools) of the pool entries [lo[r], hi[r]) of each of ``rows``, in order."""
    lengths = hi[rows] - lo[rows]
    indptr = np.zeros(rows.shape[0] + 1, np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return indptr, np.repeat(lo[rows] - indptr[:-1], lengths) + np.arange(indptr[-1], dtype=np.int64)


def _grown(a: np.ndarray, used: int, size: int) -> np.ndarray:
    out = np.zeros(size, a.dtype)
    out[:used] = a[:used]
    return out
