"""Sharded mode's feedback in batches: one ``scinol.FeedbackBatch`` record
carries the Feedback of many consecutive events of a model as columns, so
the combine step writes one Kafka message per batch, and the shards and the
feedback reader decode one and work on its columns, instead of one record
per event. The record's fields are those of ``scinol.Feedback``, one column
each (its schema file documents them).

:class:`FeedbackColumns` is what the combine step makes (arrays, no dict per
event); :func:`feedback_batches` turns columns or Feedback records into
FeedbackBatch records; :class:`FeedbackReader` reads the messages back, in
one compiled call for those of the current schema."""

from __future__ import annotations

import itertools
from typing import Iterator, NamedTuple

import numpy as np

from pipelines.records.avro.feedback_batch import decode_feedback_batch, encode_feedback_batch
from pipelines.records.framed import WriterIds
from pipelines.records.strings import Strings
from schemas.catalog import current_version
from schemas.codec import HEADER_SIZE, MAGIC, Codec, DecodeError
from schemas.reasons import UNDECODABLE

BATCH_BYTES = 512 * 1024
"""About the most one FeedbackBatch holds, under Kafka's default 1 MB message limit."""


class FeedbackColumns(NamedTuple):
    """The Feedback of consecutive events of one model and run as arrays,
    what the combine step makes: one row per event; ``g`` (n, width), zero
    rows where nothing was learned; ``scalars`` (n, len(scalar_names)),
    the global scalars after each event; ``event_ids`` as one buffer
    (a control record's is empty)."""

    model: str
    run_id: str
    event_ids: Strings
    seqs: np.ndarray
    partitions: np.ndarray
    offsets: np.ndarray
    learned: np.ndarray
    g: np.ndarray
    scalar_names: list[str]
    scalars: np.ndarray
    checkpoints: np.ndarray

    @property
    def n(self) -> int:
        """How many events (rows)."""
        return len(self.event_ids)

    @classmethod
    def of_records(cls, records: list[dict]) -> "FeedbackColumns":
        """Feedback records (dicts of ``scinol.Feedback``'s fields) with the same scalars' names."""
        width = max((len(r["g"]) for r in records), default=0)
        names = list(records[0]["scalars"])
        g = np.zeros((len(records), width))
        for i, r in enumerate(records):
            g[i, :len(r["g"])] = r["g"]
        return cls(records[0]["model"], records[0]["run_id"], Strings.of(r["event_id"] for r in records),
                   _ints([r["seq"] for r in records]), _ints([r["partition"] for r in records]),
                   _ints([r["offset"] for r in records]), np.array([bool(r["g"]) for r in records]), g, names,
                   np.array([[r["scalars"][n] for n in names] for r in records]).reshape(len(records), len(names)),
                   np.array([r["checkpoint"] for r in records], dtype=bool))

    def take(self, rows: np.ndarray) -> "FeedbackColumns":
        """These rows, in this order (a row may come twice or not at all)."""
        return self._replace(event_ids=self.event_ids.take(rows),
                             **{f: getattr(self, f)[rows] for f in _ROW_ARRAYS})

    def faulted(self, drop, duplicate) -> "FeedbackColumns":
        """Without the events whose sequence numbers are in ``drop``, and
        those in ``duplicate`` twice (fault trials: lost and repeated feedback)."""
        if not drop and not duplicate:
            return self
        counts = 1 + np.isin(self.seqs, list(duplicate)) - 2 * np.isin(self.seqs, list(drop))
        return self.take(np.repeat(np.arange(self.n), np.maximum(counts, 0)))

    @classmethod
    def concat(cls, parts: list["FeedbackColumns"]) -> "FeedbackColumns":
        """Consecutive columns of one model, run and set of scalars' names, as one."""
        if len(parts) == 1:
            return parts[0]
        width = max(p.g.shape[1] for p in parts)
        g = np.zeros((sum(p.n for p in parts), width))
        at = 0
        for p in parts:
            g[at:at + p.n, :p.g.shape[1]] = p.g
            at += p.n
        return parts[0]._replace(event_ids=Strings.concat([p.event_ids for p in parts]), g=g,
                                 **{f: np.concatenate([getattr(p, f) for p in parts])
                                    for f in _ROW_ARRAYS if f != "g"})

    def batches(self) -> list[dict]:
        """As FeedbackBatch records of at most about :data:`BATCH_BYTES` each."""
        return [self._batch(lo, hi) for lo, hi in self._spans()]

    def parts(self) -> list["FeedbackColumns"]:
        """Split as :meth:`batches` splits, each part still columns: what a
        shard gets from one FeedbackBatch message."""
        spans = self._spans()
        return [self] if len(spans) == 1 else [self.take(np.arange(lo, hi)) for lo, hi in spans]

    @classmethod
    def of_batch(cls, batch: dict) -> "FeedbackColumns":
        """A FeedbackBatch record (a dict of its fields) as columns."""
        n, width, names = len(batch["seqs"]), batch["g_width"], list(batch["scalar_names"])
        return cls(batch["model"], batch["run_id"], Strings.of(batch["event_ids"]), _ints(batch["seqs"]),
                   _ints(batch["partitions"]), _ints(batch["offsets"]), np.array(batch["learned"], dtype=bool),
                   np.array(batch["g"], dtype=np.float64).reshape(n, width), names,
                   np.array(batch["scalars"], dtype=np.float64).reshape(n, len(names)),
                   np.array(batch["checkpoints"], dtype=bool))

    def _spans(self) -> list[tuple[int, int]]:
        step = max(1, BATCH_BYTES // (8 * (self.g.shape[1] + len(self.scalar_names)) + 64))
        return [(lo, min(lo + step, self.n)) for lo in range(0, self.n, step)]

    def values(self, codec: Codec, topic: str | None) -> list[bytes]:
        """:meth:`batches` as Kafka values, byte for byte what
        ``codec.encode("scinol.FeedbackBatch", batch, topic)`` writes, each
        in one compiled call (through the codec when the topic's registered
        schema is not the current one)."""
        header, _, prepare = codec._writer("scinol.FeedbackBatch", topic)
        if prepare is not None or not self.n:
            return [codec.encode("scinol.FeedbackBatch", batch, topic) for batch in self.batches()]
        header = np.frombuffer(header, np.uint8)
        head = Strings.of([self.model, self.run_id])
        names = Strings.of(self.scalar_names)
        columns = np.stack([self.seqs, self.partitions, self.offsets, self.learned, self.checkpoints]).astype(np.int64)
        out = []
        for lo, hi in self._spans():
            text, lengths = Strings.concat([head, self.event_ids[lo:hi], names]).joined()
            out.append(encode_feedback_batch(header, text, np.cumsum(lengths), hi - lo, columns[:, lo:hi],
                                             self.g.shape[1], self.g[lo:hi].ravel(),
                                             self.scalars[lo:hi].ravel()).tobytes())
        return out

    def _batch(self, lo: int, hi: int) -> dict:
        return {"model": self.model, "run_id": self.run_id, "event_ids": self.event_ids[lo:hi].tolist(),
                "seqs": self.seqs[lo:hi].tolist(), "partitions": self.partitions[lo:hi].tolist(),
                "offsets": self.offsets[lo:hi].tolist(), "learned": self.learned[lo:hi].tolist(),
                "g_width": self.g.shape[1], "g": self.g[lo:hi].ravel().tolist(),
                "scalar_names": list(self.scalar_names), "scalars": self.scalars[lo:hi].ravel().tolist(),
                "checkpoints": self.checkpoints[lo:hi].tolist()}


_ROW_ARRAYS = ("seqs", "partitions", "offsets", "learned", "g", "scalars", "checkpoints")


def _ints(values: list) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def feedback_batches(records: list[dict] | list[FeedbackColumns]) -> list[dict]:
    """Feedback of one model and run, in order, as FeedbackBatch records of
    at most about :data:`BATCH_BYTES` each; a new one also wherever the
    scalars' names change, as between a control record and an event's.
    ``records``: Feedback records (dicts of ``scinol.Feedback``'s fields)
    or :class:`FeedbackColumns`."""
    return [batch for columns in _runs(records) for batch in columns.batches()]


def feedback_parts(records: list[dict] | list[FeedbackColumns]) -> list[FeedbackColumns]:
    """:func:`feedback_batches` as columns (:meth:`FeedbackColumns.parts`):
    what :meth:`FeedbackReader.columns` reads back from their messages."""
    return [part for columns in _runs(records) for part in columns.parts()]


def feedback_values(records: list[dict] | list[FeedbackColumns], codec: Codec, topic: str | None) -> list[bytes]:
    """:func:`feedback_batches` as Kafka values (:meth:`FeedbackColumns.values`)."""
    return [value for columns in _runs(records) for value in columns.values(codec, topic)]


def _runs(records) -> Iterator[FeedbackColumns]:
    """The records as columns, one per run with the same scalars' names."""
    for _, group in itertools.groupby(records, key=_scalar_names):
        yield FeedbackColumns.concat(_as_columns(group))


def _scalar_names(part) -> tuple:
    return tuple(part.scalar_names if isinstance(part, FeedbackColumns) else part["scalars"])


def _as_columns(parts) -> list[FeedbackColumns]:
    """Columns as they are; each run of records made one."""
    out = []
    for columnar, run in itertools.groupby(parts, key=lambda p: isinstance(p, FeedbackColumns)):
        out += list(run) if columnar else [FeedbackColumns.of_records(list(run))]
    return out


class FeedbackReader:
    """Reads FeedbackBatch messages as ``codec.decode(value, expected=
    "scinol.FeedbackBatch")`` does, to the same record: one written with
    the current schema in one compiled call
    (:func:`pipelines.records.avro.feedback_batch.decode_feedback_batch`), anything
    else (an older writer schema, bytes the compiled reader does not take)
    by the codec, which also names what is wrong (a ``DecodeError``)."""

    def __init__(self, codec: Codec):
        self.codec = codec
        self.writers = WriterIds(codec, "scinol.FeedbackBatch", (current_version("scinol.FeedbackBatch"),))

    def decode(self, value) -> dict:
        columns = self._compiled(value)
        if columns is not None:
            return columns._batch(0, columns.n)
        return self.codec.decode(value, expected="scinol.FeedbackBatch")

    def columns(self, value) -> FeedbackColumns:
        """:meth:`decode` as :class:`FeedbackColumns`: arrays (the ids one
        buffer), no Python object per event, so cheap to pass between Beam steps."""
        columns = self._compiled(value)
        if columns is not None:
            return columns
        batch = self.codec.decode(value, expected="scinol.FeedbackBatch")
        n, names = len(batch["seqs"]), batch["scalar_names"]
        if batch["g_width"] < 0 or len(batch["g"]) != n * batch["g_width"] or len(batch["scalars"]) != n * len(names):
            raise DecodeError(UNDECODABLE, f"a FeedbackBatch of {n} events holds {len(batch['g'])} g values of "
                                           f"width {batch['g_width']} and {len(batch['scalars'])} scalars of "
                                           f"{len(names)} names")
        return FeedbackColumns.of_batch(batch)

    def _compiled(self, value) -> FeedbackColumns | None:
        if value.__class__ is bytes and len(value) > HEADER_SIZE and value[0] == MAGIC:
            self.writers.refresh()  # a registry's id, as the codec meets it
            if int.from_bytes(value[1:HEADER_SIZE], "big") in self.writers.version_of:
                return _compiled(value)
        return None


def _compiled(value: bytes) -> FeedbackColumns | None:
    buf = np.frombuffer(value, np.uint8)
    end, n, m, starts, ends, columns, width, g, scalars = decode_feedback_batch(buf, HEADER_SIZE, buf.shape[0])
    if end != buf.shape[0] or width < 0 or g.shape[0] != n * width or scalars.shape[0] != n * m:
        return None  # not taken, bytes left over, or columns of other lengths: the codec decides
    text = Strings(buf, starts[:2 + n + m], ends[:2 + n + m])
    head, names = text[:2].tolist(), text[2 + n:].tolist()
    return FeedbackColumns(head[0], head[1], text[2:2 + n], columns[0], columns[1], columns[2], columns[3].astype(bool),
                           g.reshape(n, width), names, scalars.reshape(n, m), columns[4].astype(bool))


def feedback_records(batch: dict) -> list[dict]:
    """The Feedback records a FeedbackBatch holds, in order (the inverse of
    :func:`feedback_batches`; for tests and tools, not the hot path)."""
    width, names = batch["g_width"], batch["scalar_names"]
    g, scalars, m = batch["g"], batch["scalars"], len(names)
    return [{"event_id": event_id, "model": batch["model"], "run_id": batch["run_id"], "seq": seq,
             "partition": partition, "offset": offset, "g": g[i * width: (i + 1) * width] if learned else [],
             "scalars": dict(zip(names, scalars[i * m: (i + 1) * m])), "checkpoint": checkpoint}
            for i, (event_id, seq, partition, offset, learned, checkpoint)
            in enumerate(zip(batch["event_ids"], batch["seqs"], batch["partitions"], batch["offsets"],
                             batch["learned"], batch["checkpoints"]))]


def end_markers(parts: list[FeedbackColumns]) -> bool:
    """Whether any of these parts holds the feedback reader's end marker
    (a control record: no event id, checkpoint set)."""
    return any((p.event_ids.empty() & p.checkpoints).any() for p in parts)
