"""Framed ``scinol.Event`` values of many rows in one compiled call
(:mod:`pipelines.records.avro.event_writer`): a data file's rows for
``scinol produce`` (:func:`file_values`), dense arrays for the load
generators (:func:`dense_values`); byte for byte what
:meth:`schemas.codec.Codec.encode` writes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np

from pipelines.records.avro.event_writer import encode_file_events, encode_named_events
from pipelines.records.events import dense_events
from schemas.codec import Codec, _prepare_event


def file_values(reader, model: str, codec: Codec, topic: str | None) -> Iterator[bytes]:
    """The framed ``scinol.Event`` values of
    :func:`pipelines.records.events.file_events` (same ids, timestamps,
    labels and weights, byte for byte what ``codec.encode`` writes). CSV and
    libsvm rows and VW text are parsed and encoded a batch per compiled
    call, in a thread ahead of the caller (both release the GIL: the caller
    produces on one core while the next batches are read on another); a
    registry whose Event schema is an older version goes record by record."""
    from pipelines.files.prefetch import prefetch
    from pipelines.files.vw_text import VwReader
    from pipelines.records.events import file_events

    header, _, prepare = codec._writer("scinol.Event", topic)
    if prepare is not _prepare_event:
        yield from (codec.encode("scinol.Event", e, topic) for e in file_events(reader, model))
        return
    if isinstance(reader, VwReader):
        batches = _vw_batches(reader, model, header, codec, topic)
    else:
        batches = _file_batches(reader, model, header)
    for values in prefetch(batches):
        yield from values


def _file_batches(reader, model: str, header: bytes) -> Iterator[list[bytes]]:
    """Per batch of ``reader``, its framed Event values (:func:`file_values`)."""
    header, name = np.frombuffer(header, np.uint8), np.frombuffer(model.encode(), np.uint8)
    prefix = np.frombuffer(f"{os.path.basename(reader.path)}:".encode(), np.uint8)
    width = -1 if reader.n_features is None else reader.n_features
    for batch in reader.batches():
        now = int(time.time() * 1000)
        n = batch.y.shape[0]
        w = np.ones(n) if batch.weights is None else np.asarray(batch.weights, np.float64)
        buf, offsets = encode_file_events(header, prefix, np.asarray(batch.lines, np.int64), now, name, width,
                                          batch.indptr, batch.indices,
                                          np.ascontiguousarray(batch.data, np.float64), batch.y, w != 0,
                                          w, (w != 0) & (w != 1))
        data, ends = buf.tobytes(), offsets.tolist()
        yield [data[a:b] for a, b in zip(ends, ends[1:])]


def _vw_batches(reader, model: str, header: bytes, codec: Codec, topic: str | None) -> Iterator[list[bytes]]:
    """Per batch of a VW file, its framed Event values (:func:`file_values`);
    the few lines parsed in Python are encoded by ``codec``."""
    from pipelines.records.events import vw_event

    header, name = np.frombuffer(header, np.uint8), np.frombuffer(model.encode(), np.uint8)
    file_name = os.path.basename(reader.path)
    prefix = np.frombuffer(f"{file_name}:".encode(), np.uint8)
    for batch in reader.named_batches():
        now, w = int(time.time() * 1000), batch.weights
        skip = np.zeros(w.shape[0], np.bool_)
        skip[list(batch.python_rows)] = True
        buf, offsets = encode_named_events(header, prefix, batch.lines, now, name, batch.block, batch.tag_spans,
                                           batch.indptr, batch.hashes, batch.names, batch.name_ends, batch.values,
                                           batch.y, ~np.isnan(batch.y) & (w != 0), w, (w != 0) & (w != 1), skip)
        data, ends = buf.tobytes(), offsets.tolist()
        values = [data[a:b] for a, b in zip(ends, ends[1:])]
        for r, row in batch.python_rows.items():
            event_id = row.tag if row.tag is not None else f"{file_name}:{int(batch.lines[r])}"
            values[r] = codec.encode("scinol.Event", vw_event(row, event_id, model, now), topic)
        yield values


def dense_values(codec: Codec, X: np.ndarray, y: np.ndarray, id_prefix: str, *, first: int = 0,
                 model: str = "default", topic: str | None = None) -> list[bytes]:
    """The framed ``scinol.Event`` values of dense rows ``X`` (labels ``y``,
    NaN = unlabelled), ids ``id_prefix`` + ``first + i``, all stamped now:
    what ``codec.encode`` writes for each, in one compiled call. For load
    generators, which must offer events faster than the pipeline takes them."""
    header, _, prepare = codec._writer("scinol.Event", topic)
    now, n, width = int(time.time() * 1000), X.shape[0], X.shape[1]
    labelled = ~np.isnan(np.asarray(y, np.float64))
    if prepare is not _prepare_event:  # a registry whose Event schema is an older version
        return [codec.encode("scinol.Event", {**e, "id": f"{id_prefix}{first + i}", "timestamp": now}, topic)
                for i, e in enumerate(dense_events(X, y, id_prefix, model))]
    buf, offsets = encode_file_events(
        np.frombuffer(header, np.uint8), np.frombuffer(id_prefix.encode(), np.uint8),
        np.arange(first, first + n, dtype=np.int64), now, np.frombuffer(model.encode(), np.uint8), width,
        np.arange(0, n * width + 1, width, dtype=np.int64), np.tile(np.arange(width, dtype=np.int32), n),
        np.ascontiguousarray(X, np.float64).ravel(), np.asarray(y, np.float64), labelled,
        np.ones(n), np.zeros(n, np.bool_))
    data, ends = buf.tobytes(), offsets.tolist()
    return [data[a:b] for a, b in zip(ends, ends[1:])]
