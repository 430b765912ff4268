"""Beam steps both pipeline shapes use: screening a batch of Kafka messages
into per-model events and dead letters, encoding records for a sink, and
keeping a key's live objects in Beam state."""

from __future__ import annotations

import io
import pickle
import random
from typing import Any, Callable, Iterable, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.coders import Coder
from apache_beam.metrics import Metrics
from apache_beam.runners.worker.statecache import CacheAware

from pipelines.config import RunConfig
from pipelines.kafka.consumer import Position
from pipelines.records.columnar import EventDecoder, EventRows
from pipelines.records.dead_letters import dead_letter, dead_letter_message, screen, screen_label
from pipelines.records.label_decoder import LabelDecoder
from schemas.codec import Codec
from schemas.reasons import TOO_MANY_MODELS

NAMESPACE = "scinol"
"""Beam metrics namespace of the pipelines' counters and gauges."""


class ModelBatch(list):
    """One model's part of a batch of messages, in offset order; ``start``:
    the first offset of the whole batch (every model's parts of earlier
    batches of the partition reach a keyed step before this one);
    ``source``: (topic, partition) of every item when all are of one
    partition (as the Kafka reader's batches are), else None."""

    def __init__(self, items=(), start: int = 0, source: tuple[str, int] | None = None):
        super().__init__(items)
        self.start = start
        self.source = source


class EventBatch(ModelBatch):
    """(Position, Event record) pairs of one model, from the per-event
    decoder (the columnar one gives :class:`EventRows`)."""


class LabelBatch(ModelBatch):
    """(message, Label record) pairs of one model, from the labels topic."""


def _origin(batch: list) -> tuple[int, tuple[str, int] | None]:
    """(first offset, (topic, partition)) of a batch from the Kafka reader:
    one partition, in offset order (pipelines.beam_io.read)."""
    if not batch:
        return 0, None
    return batch[0].offset, (batch[0].topic, batch[0].partition)


class DecodeEvents(beam.DoFn):
    """A batch of Kafka messages → per-model batches of valid events (or of
    :class:`LabelBatch` from the labels topic); every message that is not a
    valid Event (or Label) becomes a DeadLetter record (tag ``dead``) with
    its reason, original bytes, topic, partition and offset (limits:
    ``cfg.max_index``, ``cfg.max_message_bytes``; see
    :mod:`pipelines.records.dead_letters`)."""

    DEAD = "dead"

    def __init__(self, cfg: RunConfig, columnar: bool = False):
        self.cfg = cfg
        self.columnar = columnar
        """Decode each batch in one compiled call (:mod:`pipelines.records.columnar`):
        each model's events are then an :class:`EventRows` of the batch's arrays;
        a batch of labels is screened in one call too (:mod:`pipelines.records.label_decoder`)."""

    def setup(self):
        self.codec = self.cfg.codec()
        learner = self.cfg.learner
        self.decoder = EventDecoder(self.codec, learner.loss, learner.n_classes, hash_bits=learner.hash_bits,
                                    max_index=self.cfg.max_index, max_message_bytes=self.cfg.max_message_bytes)
        self.label_decoder = LabelDecoder(self.codec, learner.loss, learner.n_classes,
                                          max_message_bytes=self.cfg.max_message_bytes)
        self.events = Metrics.counter(NAMESPACE, "events")
        self.dead = Metrics.counter(NAMESPACE, "dead_letters")
        ratio = self.cfg.max_dead_letter_ratio
        self.guard = DeadLetterGuard(ratio) if ratio is not None else None
        self.models: set[str] = set()  # the model names this worker has accepted

    def _screen(self, msg):
        cfg = self.cfg
        event, problem = screen(self.codec, msg.value, cfg.learner.loss, cfg.learner.n_classes,
                                max_index=cfg.max_index, max_message_bytes=cfg.max_message_bytes)
        if problem is None and cfg.max_models is not None and event["model"] not in self.models:
            if len(self.models) >= cfg.max_models:
                return None, (TOO_MANY_MODELS, f"model {event['model'][:200]!r} would be model number "
                                               f"{len(self.models) + 1} of this worker; --max-models is {cfg.max_models}")
            self.models.add(event["model"])
        return event, problem

    def process(self, batch):
        if batch and batch[0].topic == self.cfg.labels_topic:
            yield from self._labels(batch)
            return
        if self.columnar:
            yield from self._columnar(batch)
            return
        by_model: dict[str, EventBatch] = {}
        start, source = _origin(batch)
        for msg in batch:
            event, problem = self._screen(msg)
            if problem is not None:
                self.dead.inc()
                Metrics.counter(NAMESPACE, f"dead_letters_{problem[0]}").inc()
                yield beam.pvalue.TaggedOutput(self.DEAD, dead_letter(msg, *problem))
                continue
            items = by_model.get(event["model"])
            if items is None:
                items = by_model[event["model"]] = EventBatch(start=start, source=source)
            items.append((Position(msg.topic, msg.partition, msg.offset, msg.key), event))
        self.events.inc(len(batch))
        if self.guard is not None:
            self.guard.count(len(batch), len(batch) - sum(len(v) for v in by_model.values()))
        yield from by_model.items()

    def _columnar(self, batch):
        """As :meth:`process`, with the batch decoded and checked as arrays."""
        cols = self.decoder.decode([msg.value for msg in batch])
        dead = dict(cols.dead)
        if self.cfg.max_models is not None:
            dead.update(self._too_many_models(cols))
        for i in sorted(dead):
            reason, detail = dead[i]
            self.dead.inc()
            Metrics.counter(NAMESPACE, f"dead_letters_{reason}").inc()
            yield beam.pvalue.TaggedOutput(self.DEAD, dead_letter(batch[i], reason, detail))
        self.events.inc(len(batch))
        if self.guard is not None:
            self.guard.count(len(batch), len(dead))
        keep = np.ones(len(batch), dtype=bool)
        keep[list(dead)] = False
        yield from EventRows.split(cols, keep, batch)

    def _too_many_models(self, cols) -> dict[int, tuple[str, str]]:
        """The valid events of models beyond ``--max-models``: each model is
        judged where it first appears, as :meth:`_screen` judges them in order."""
        valid = np.flatnonzero(cols.ok)
        codes, first = np.unique(cols.model_code[valid], return_index=True)
        refused = {}
        for c in codes[np.argsort(first)].tolist():
            name = cols.models[c]
            if name in self.models:
                continue
            if len(self.models) < self.cfg.max_models:
                self.models.add(name)
                continue
            refused[c] = (TOO_MANY_MODELS, f"model {name[:200]!r} would be model number {len(self.models) + 1} "
                                           f"of this worker; --max-models is {self.cfg.max_models}")
        return {i: refused[c] for i, c in zip(valid.tolist(), cols.model_code[valid].tolist()) if c in refused}

    def _labels(self, batch):
        cfg = self.cfg
        by_model: dict[str, LabelBatch] = {}
        start, source = _origin(batch)
        if self.columnar:
            screened = self.label_decoder.screen([msg.value for msg in batch])
        else:
            screened = (screen_label(self.codec, msg.value, cfg.learner.loss, cfg.learner.n_classes,
                                     cfg.max_message_bytes) for msg in batch)
        for msg, (record, problem) in zip(batch, screened):
            if problem is not None:
                self.dead.inc()
                Metrics.counter(NAMESPACE, f"dead_letters_{problem[0]}").inc()
                yield beam.pvalue.TaggedOutput(self.DEAD, dead_letter(msg, *problem))
                continue
            by_model.setdefault(record["model"], LabelBatch(start=start, source=source)).append((msg, record))
        Metrics.counter(NAMESPACE, "labels").inc(len(batch))
        yield from by_model.items()


class EncodeRecords(beam.DoFn):
    """Records → (key, Confluent-framed Avro bytes) for the sink writing to
    ``topic``; ``key`` names the field used as the Kafka key (None: no key);
    ``registry``: a :class:`schemas.registry.Registry` or None."""

    def __init__(self, record_type: str, topic: str, registry=None, key: str | None = None):
        self.record_type, self.topic, self.registry, self.key = record_type, topic, registry, key

    def setup(self):
        self.codec = Codec(self.registry)

    def process(self, record):
        value = self.codec.encode(self.record_type, record, self.topic)
        yield (record[self.key].encode() if self.key else None, value)


class EncodeDeadLetters(EncodeRecords):
    """DeadLetter records → messages with the original key, headers and
    timestamp, the error context in headers (:func:`dead_letter_message`)."""

    def __init__(self, topic: str, registry=None):
        super().__init__("scinol.DeadLetter", topic, registry)

    def process(self, record):
        yield dead_letter_message(record, self.codec.encode(self.record_type, record, self.topic))


class DeadLetterRatioExceeded(RuntimeError):
    """More of the input became dead letters than ``--max-dead-letter-ratio`` allows."""


class DeadLetterGuard:
    """Judges the share of dead letters over tumbling windows of
    :attr:`WINDOW` messages, from the :attr:`MIN_MESSAGES`-th message of a
    window on; raises :class:`DeadLetterRatioExceeded` above ``max_ratio``,
    so that a run fed only what it cannot read stops instead of filling
    the dead-letter topic forever."""

    WINDOW = 1000
    MIN_MESSAGES = 100

    def __init__(self, max_ratio: float):
        self.max_ratio = max_ratio
        self.seen = self.dead = 0

    def count(self, seen: int, dead: int) -> None:
        self.seen += seen
        self.dead += dead
        if self.seen >= self.MIN_MESSAGES and self.dead > self.max_ratio * self.seen:
            raise DeadLetterRatioExceeded(
                f"{self.dead} of the last {self.seen} messages became dead letters, more than the "
                f"--max-dead-letter-ratio of {self.max_ratio:g}; stopping (see the dead-letter topic for why)")
        if self.seen >= self.WINDOW:
            self.seen = self.dead = 0


class Kept(CacheAware):
    """A key's live object as the SDK harness's state cache holds it: encoded
    (``encode()``) only when the bundle commits, and weighed in O(1). Beam
    weighs a cached value by walking its whole object graph at every write,
    i.e. every bundle; a model's graph can hold tens of thousands of events
    awaiting labels (0.18 s a bundle, four times the cost of encoding it)."""

    __slots__ = ("value", "encode", "weight")

    def __init__(self, value, encode: Callable[[], bytes], approx_bytes: int):
        self.value, self.encode = value, encode
        self.weight = _Weight(approx_bytes)  # held: objsize skips a referent that is gone by then

    def get_referents_for_cache(self) -> list:
        return [self.weight]


class _Weight:
    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __sizeof__(self) -> int:
        return self.n


class KeptCoder(Coder):
    """Writes a :class:`Kept` as its encoding; reads back those bytes."""

    def encode(self, value) -> bytes:
        return value if isinstance(value, bytes) else value.encode()

    def decode(self, encoded: bytes) -> bytes:
        return encoded

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return bytes


class KeptObjects:
    """A stateful DoFn's per-key objects, worked on in memory and kept in the
    key's Beam state (a :class:`KeptCoder` state and a generation tag), so a
    runner that snapshots state with the source's position (Flink) restores
    them with it, as one. The in-memory object is used while the store's
    generation is its own; otherwise (a restored job, or a key another
    instance worked on meanwhile) the store's version is."""

    def __init__(self):
        self.live: dict[Any, Any] = {}
        self.generations: dict[Any, int] = {}

    def get(self, key, saved, generation) -> tuple[Any, bytes | None]:
        """(the object, None) if one is current here, else (None, the stored bytes or None)."""
        current = generation.read() or 0
        if key in self.live and self.generations[key] == current:
            return self.live[key], None
        stored = saved.read()
        if isinstance(stored, Kept):  # this process's own object, from the state cache
            self.set(key, stored.value, current)
            return stored.value, None
        self.live.pop(key, None)
        return None, stored

    def set(self, key, value, current: int = -1) -> None:
        self.live[key], self.generations[key] = value, current

    def keep(self, key, saved, generation, encode: Callable[[], bytes], approx_bytes: int) -> None:
        """The key's object into the state store, encoded when the bundle commits."""
        # A fresh random tag, not a counter: another instance of this DoFn in
        # the same worker may hold an older history of the key that reached
        # the same count.
        self.generations[key] = random.getrandbits(62) | 1
        generation.write(self.generations[key])
        saved.write(Kept(self.live[key], encode, approx_bytes))


def pickle_sharing(value, shared: dict[str, Any]) -> bytes:
    """``value`` pickled, with the objects of ``shared`` (by identity) written
    as their names: a learner's compiled algorithm and feature hasher, which
    do not pickle and which :func:`unpickle_sharing` takes from a learner
    made again from the same configuration."""
    names = {id(obj): name for name, obj in shared.items()}
    out = io.BytesIO()
    pickler = pickle.Pickler(out, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.persistent_id = lambda obj: names.get(id(obj))
    pickler.dump(value)
    return out.getvalue()


# What NumPy arrays, dtypes and scalars pickle as (NumPy 2 and 1 module names).
_NUMPY_GLOBALS = {(m, n) for base in ("numpy._core", "numpy.core")
                  for m, n in ((f"{base}.numeric", "_frombuffer"), (f"{base}.multiarray", "_reconstruct"),
                               (f"{base}.multiarray", "scalar"))} | {("numpy", "dtype"), ("numpy", "ndarray")}


class _AllowedOnly(pickle.Unpickler):
    """Loads only the classes it is given, NumPy arrays and deques: a pickle
    that names any other global (``os.system``, ``builtins.eval``...) is
    refused, so state bytes cannot run code (the restricted unpickling of
    the ``pickle`` module's documentation)."""

    def __init__(self, data: bytes, shared: dict[str, Any], allowed: Iterable[type]):
        super().__init__(io.BytesIO(data))
        self.allowed = _NUMPY_GLOBALS | {("collections", "deque")} | {(c.__module__, c.__qualname__)
                                                                     for c in allowed}
        self.persistent_load = shared.__getitem__

    def find_class(self, module: str, name: str):
        if (module, name) not in self.allowed:
            raise pickle.UnpicklingError(f"state bytes name {module}.{name}, which is not one of the classes "
                                         f"this state is made of: refused")
        return super().find_class(module, name)


def unpickle_sharing(data: bytes, shared: dict[str, Any], allowed: Iterable[type]):
    """What :func:`pickle_sharing` wrote, made only of ``allowed`` classes (and arrays)."""
    return _AllowedOnly(data, shared, allowed).load()
