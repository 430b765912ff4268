"""A model's batch of predictions as Kafka values in one compiled call
(:func:`pipelines.records.avro.prediction_writer.encode_predictions`):
:func:`encode_predictions` from arrays, :func:`prediction_values` and
:func:`labelled_values` from the steps' events; byte for byte what
:meth:`schemas.codec.Codec.encode` writes for the same records.
"""

from __future__ import annotations

import numpy as np

from pipelines.records.avro.prediction_writer import encode_predictions as _encode
from pipelines.records.event_columns import EventColumns
from pipelines.records.event_rows import EventRows, own_labels
from pipelines.records.strings import Strings
from schemas.codec import Codec


def _flag(values, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, present) for an optional column: None means absent in every row."""
    if values is None:
        return np.zeros(n), np.zeros(n, np.bool_)
    return values, np.ones(n, np.bool_)


def encode_predictions(codec: Codec, topic: str | None, *, buf: np.ndarray, id_start: np.ndarray,
                       id_end: np.ndarray, model: str, model_version: np.ndarray, scores: np.ndarray,
                       label: np.ndarray, has_label: np.ndarray, loss: np.ndarray, event_timestamp: np.ndarray,
                       latency_ms: np.ndarray, probability: np.ndarray | None = None,
                       predicted_class: np.ndarray | None = None, source_topic: str | None = None,
                       source_partition: np.ndarray | None = None,
                       source_offset: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``scinol.Prediction`` records of one model's batch, framed as
    ``codec.encode("scinol.Prediction", record, topic)`` frames them:
    (buffer, offsets), record i at buffer[offsets[i]:offsets[i + 1]].
    Event ids are ``buf[id_start[i]:id_end[i]]`` (UTF-8, as in
    :class:`EventColumns`); ``loss`` NaN is null (unlabelled); a label is
    written where ``has_label`` (NaN included); optional columns given as
    None are null in every row, ``source_topic`` is one topic for the batch.
    Raises :class:`schemas.codec.EncodeError` for a partition outside int."""
    from schemas.codec import EncodeError

    header, _, prepare = codec._writer("scinol.Prediction", topic)
    if prepare is not None:  # the registry's writer is an older version: the compiled layout does not apply
        raise EncodeError(f"the registered scinol.Prediction schema for {topic!r} is not the current version")
    n = len(id_start)
    names = (model.encode(), b"" if source_topic is None else source_topic.encode())
    sbuf = np.concatenate([np.asarray(buf, np.uint8), np.frombuffer(names[0] + names[1], np.uint8)])
    at = np.int64(len(buf))
    model_s = np.full(n, at, np.int64)
    topic_s = np.full(n, at + len(names[0]) if source_topic is not None else -1, np.int64)
    prob, has_prob = _flag(probability, n)
    klass, has_klass = _flag(predicted_class, n)
    partition, has_partition = _flag(source_partition, n)
    offset, has_offset = _flag(source_offset, n)
    partition = np.asarray(partition, np.int64)
    if has_partition.any() and ((partition < -(1 << 31)) | (partition >= 1 << 31)).any():
        raise EncodeError("cannot encode scinol.Prediction: source_partition outside the Avro int range")
    strs = (np.asarray(id_start, np.int64), np.asarray(id_end, np.int64), model_s, model_s + len(names[0]),
            topic_s, topic_s + len(names[1]))
    longs = tuple(np.asarray(a, np.int64) for a in (model_version, klass, event_timestamp, partition, offset))
    flags = (has_prob, has_klass, np.asarray(has_label, np.bool_), has_partition, has_offset)
    scores = np.ascontiguousarray(scores, np.float64).reshape(n, -1)
    if scores.shape[1] == 0:
        raise ValueError("a prediction needs at least one score")
    doubles = (scores,) + tuple(np.ascontiguousarray(a, np.float64) for a in (prob, label, loss, latency_ms))
    return _encode(np.frombuffer(header, np.uint8), sbuf, strs, longs, flags, doubles)


def event_arrays(events: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(buf, id_start, id_end, timestamp in ms as float, label, has_label)
    of a list of Event records (or an :class:`EventRows`), what :func:`encode_predictions` takes:
    slices of the batch's columns when all are
    :class:`~pipelines.records.event_rows.ColumnarEvent` of one batch,
    else read record by record (events given a label that came
    before them, or records of the per-event decoder)."""
    if isinstance(events, EventRows):
        cols, rows = events.cols, events.rows
        return _row_arrays(cols, rows, cols.label[rows], cols.has_label[rows])
    cols = getattr(events[0], "cols", None) if events else None
    if cols is not None:
        try:
            rows = np.fromiter((e.i for e in events if e.cols is cols), np.int64, len(events))
        except (AttributeError, ValueError):  # not all ColumnarEvents, or of other batches
            rows = None
        if rows is not None:
            return _row_arrays(cols, rows, *own_labels(events, cols.label[rows], cols.has_label[rows]))
    from pipelines.records.predictions import millis

    ids = [e["id"].encode() for e in events]
    ends = np.cumsum(np.fromiter(map(len, ids), np.int64, len(ids)))
    labels = [e.get("label") for e in events]
    has_label = np.fromiter((v is not None for v in labels), np.bool_, len(labels))
    label = np.array([np.nan if v is None else v for v in labels], np.float64)
    ts = np.array([millis(e["timestamp"]) for e in events], np.float64)
    return np.frombuffer(b"".join(ids), np.uint8), ends - np.diff(ends, prepend=0), ends, ts, label, has_label


def _row_arrays(cols: EventColumns, rows: np.ndarray, label: np.ndarray, has_label: np.ndarray) -> tuple:
    return (cols.buf, cols.id_start[rows], cols.id_end[rows], cols.timestamp[rows].astype(np.float64), label,
            has_label)


def prediction_values(codec: Codec, topic: str | None, model: str, items: list, events: list, *,
                      versions: np.ndarray, scores: np.ndarray, losses: np.ndarray, probability, klass,
                      now_ms: float) -> list[bytes] | None:
    """The Kafka values of ``prediction_record(events[i], model, versions[i],
    scores[i], probability[i], klass[i], losses[i], now_ms, items[i][0])``
    for every i, byte for byte as ``codec.encode("scinol.Prediction", ...,
    topic)`` writes them, made in one compiled call; None when that call
    cannot make the same bytes (events read from several topics, a registry
    whose Prediction schema is not the current one, a partition outside
    int): the caller encodes the records one by one then. ``items`` may be
    an :class:`EventRows` (``events`` the same), read as its arrays."""
    from schemas.codec import EncodeError

    if isinstance(items, EventRows):  # one partition: its arrays
        n, topics = len(items), {items.source[0]}
        partitions, offsets = np.full(n, items.source[1], np.int64), items.offsets
    else:
        n, topics = len(items), {pos.topic for pos, _ in items}
        partitions = np.fromiter((p.partition for p, _ in items), np.int64, n)
        offsets = np.fromiter((p.offset for p, _ in items), np.int64, n)
    if len(topics) != 1:
        return None
    buf, id_start, id_end, ts, label, has_label = event_arrays(events)
    try:
        out, offsets = encode_predictions(
            codec, topic, buf=buf, id_start=id_start, id_end=id_end, model=model, model_version=versions,
            scores=scores, label=label, has_label=has_label, loss=losses,
            event_timestamp=ts.astype(np.int64), latency_ms=now_ms - ts, probability=probability,
            predicted_class=klass, source_topic=topics.pop(), source_partition=partitions, source_offset=offsets)
    except EncodeError:
        return None
    return _split(out, offsets)


def labelled_values(codec: Codec, topic: str | None, model: str, learned, probability, klass) -> list[bytes] | None:
    """The Kafka values of the labelled Prediction records of ``learned`` (a
    :class:`pipelines.exact.model_runner.Learned`: held events and their
    late labels), byte for byte as ``codec.encode`` writes
    ``labelled_prediction``'s records, made in one compiled call; None when
    that call cannot make the same bytes (held events read from several
    topics or from none known, or see :func:`prediction_values`)."""
    from schemas.codec import EncodeError

    rows, n = learned.rows, len(learned.ids)
    codes = np.unique(rows.topic)
    if codes.shape[0] != 1 or codes[0] < 0:
        return None
    ids = Strings.of(learned.ids)
    try:
        out, offsets = encode_predictions(
            codec, topic, buf=ids.buf, id_start=ids.starts, id_end=ids.ends, model=model, model_version=rows.version,
            scores=learned.scores, label=np.array(learned.labels, np.float64), has_label=np.ones(n, np.bool_),
            loss=learned.losses, event_timestamp=rows.ts_ms, latency_ms=rows.latency_ms, probability=probability,
            predicted_class=klass, source_topic=learned.topics[int(codes[0])], source_partition=rows.partition,
            source_offset=rows.offset)
    except EncodeError:
        return None
    return _split(out, offsets)


def _split(buf: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Record i of an encoded batch is ``buf[offsets[i]:offsets[i + 1]]``."""
    raw, at = buf.tobytes(), offsets.tolist()
    return [raw[a:b] for a, b in zip(at[:-1], at[1:])]
