"""Avro records on Kafka with Confluent framing.

Wire format (Confluent): one byte 0 (magic), the schema id as 4 bytes
big-endian, then the record in Avro binary encoding. A :class:`Codec` encodes
with the *current* version of each record's schema and decodes with the
*writer's* schema (found by the id in the frame) resolved against the current
version's schema (the reader's), so bytes written with an older compatible
version stay readable: an ``Event`` written with version 1 (no ``weight``)
decodes with ``weight`` None.

Schemas and their checked-in ids are in :mod:`schemas.catalog`. With a
schema registry (:class:`schemas.registry.Registry`) the ids are the
registry's instead: the codec registers (or, lookup-only, looks up) each
current schema under the subject its naming strategy gives for the topic it
writes to (``<topic>-value`` by default, as Confluent's serializers do) the
first time it encodes that record for that topic, and resolves ids it does
not know through the registry. The checked-in ids are then not used at all
(the two id spaces are separate, and both start at 1: bytes framed with a
registry's id but read without the registry are mis-read, and the dead
letter's detail says so).

Decoded records are plain dicts. ``timestamp-millis`` fields decode as int
milliseconds (not datetimes); encode accepts int milliseconds or aware
datetimes. ``Event.features`` decodes to ``{"values": [...]}`` (dense),
``{"indices": [...], "values": [...]}`` (sparse) or ``{"values": {name:
value}}`` (named); :func:`feature_kind` tells which. To force a union branch
when encoding, pass ``("scinol.SparseFeatures", {...})``.

Undecodable bytes raise :class:`DecodeError` with a reason from
:mod:`schemas.reasons`.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from .catalog import _ID_MAP, RECORD_TYPES, full_name, load_schema
from .reasons import UNDECODABLE, UNKNOWN_SCHEMA_ID, WRONG_RECORD_TYPE
from .registry import Registry, SchemaRegistryError

__all__ = ["Codec", "DecodeError", "EncodeError", "feature_kind"]

_STREAM_REPR = re.compile(r" from <_io\.BytesIO object at 0x[0-9a-f]+>")

MAGIC = 0
HEADER_SIZE = 5


class DecodeError(ValueError):
    """Bytes that are not a record this codec can read; ``reason`` is one of
    :data:`DECODE_REASONS`, ``detail`` the human-readable message."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EncodeError(ValueError):
    """A record that does not fit its schema."""


def _schema_name(schema) -> str | None:
    if not isinstance(schema, dict) or schema.get("type") != "record" or not isinstance(schema.get("name"), str):
        return None
    name = schema["name"]
    if "." not in name and schema.get("namespace"):
        name = f"{schema['namespace']}.{name}"
    return name


def _strip_logical_types(schema):
    """The schema without ``logicalType`` annotations, so that decoding yields
    plain ints (timestamp-millis) instead of datetimes; the binary encoding
    is the same."""
    if isinstance(schema, dict):
        return {k: _strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [_strip_logical_types(s) for s in schema]
    return schema


def _reading_schema(schema: dict):
    return parse_schema(_strip_logical_types(schema), named_schemas={})


def feature_kind(features) -> str:
    """``"dense"``, ``"sparse"`` or ``"named"`` for a decoded ``Event.features``."""
    if isinstance(features, tuple):  # ("scinol.SparseFeatures", {...}) notation
        features = features[1]
    if "indices" in features:
        return "sparse"
    return "named" if isinstance(features["values"], dict) else "dense"


def _prepare_event(record: dict) -> dict:
    """The event with its features in tuple notation, so the Avro writer
    does not try every branch of the features union (twice as fast)."""
    features = record.get("features")
    if features.__class__ is dict:
        if "indices" in features:
            return {**record, "features": ("scinol.SparseFeatures", features)}
        values = features.get("values")
        kind = "scinol.NamedFeatures" if isinstance(values, dict) else "scinol.DenseFeatures"
        return {**record, "features": (kind, features)}
    return record


_PREPARE = {"scinol.Event": _prepare_event}


def _only_fields(schema: dict, then=None):
    """A record's fields that ``schema`` has (and ``then`` applied): writing
    with a registered older version drops the fields it does not know."""
    names = tuple(f["name"] for f in schema["fields"])

    def prepare(record: dict) -> dict:
        kept = {k: record[k] for k in names if k in record}
        return then(kept) if then is not None else kept

    return prepare

# -------------------------------------------------------------------- codec


class Codec:
    """Encode and decode the ``scinol`` records with Confluent framing.

    ``registry``: None (use the checked-in ids), a :class:`Registry`, or
    its URL (default subject naming and auto-registration). ``negative_ttl``: seconds for which an id the registry does not
    know is remembered as unknown (so a flood of bad messages does not turn
    into a flood of registry requests).

    Registry failures other than "no such id" raise
    :class:`SchemaRegistryError` (an infrastructure problem, not a bad
    message); everything wrong with the bytes raises :class:`DecodeError`.
    Safe to share between threads.
    """

    def __init__(self, registry: Registry | str | None = None, *, negative_ttl: float = 30.0):
        if isinstance(registry, str):
            registry = Registry(registry)
        self.registry = registry
        self.negative_ttl = float(negative_ttl)
        self._lock = threading.Lock()
        self._missing: dict[int, float] = {}
        # record name (short and full), or (name, topic) with a registry ->
        # (frame header, parsed writing schema, prepare | None)
        self._writers: dict = {}
        # schema id -> (full name, short name, parsed writer schema | None, parsed reader schema | None);
        # writer None: a record this codec does not read; reader None: writer is the current version.
        self._by_id: dict[int, tuple] = {}
        self._readers: dict[str, tuple[dict, str]] = {}  # full name -> (parsed reader, canonical form)
        for name in RECORD_TYPES:
            current = load_schema(name)
            self._readers[name] = (_reading_schema(current), to_parsing_canonical_form(current))
        if registry is None:
            for name, (current, versions) in _ID_MAP.items():
                for version, sid in versions.items():
                    self._add_reader(sid, name, load_schema(name, version))
                self._add_writer(name, versions[current])

    def __getstate__(self) -> dict:
        # Beam pickles DoFns and what they hold: keep the configuration only,
        # rebuild the tables (and the lock) on the other side.
        return {"registry": self.registry, "negative_ttl": self.negative_ttl}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["registry"], negative_ttl=state["negative_ttl"])

    # -- tables

    def _add_writer(self, name: str, sid: int, topic: str | None = None, schema: dict | None = None) -> tuple:
        prepare = _PREPARE.get(name)
        if schema is not None and to_parsing_canonical_form(schema) != self._readers[name][1]:
            prepare = _only_fields(schema, prepare)  # an older registered version: write the fields it has
        schema = parse_schema(schema or load_schema(name), named_schemas={})
        entry = (bytes([MAGIC]) + sid.to_bytes(4, "big"), schema, prepare)
        short = name.rsplit(".", 1)[1]
        if self.registry is None:
            self._writers[name] = self._writers[short] = entry
        else:
            self._writers[(name, topic)] = self._writers[(short, topic)] = entry
        return entry

    def _add_reader(self, sid: int, name: str, writer_schema: dict | None) -> tuple:
        short = name.rsplit(".", 1)[1]
        if writer_schema is None or name not in self._readers:
            entry = (name, short, None, None)
        else:
            reader, canonical = self._readers[name]
            same = to_parsing_canonical_form(writer_schema) == canonical
            entry = (name, short, reader if same else _reading_schema(writer_schema), None if same else reader)
        self._by_id[sid] = entry
        return entry

    def schema_id(self, record_type: str, topic: str | None = None) -> int:
        """The id this codec frames ``record_type`` with when writing to
        ``topic`` (registering or looking it up first when there is a
        registry; the topic only matters there)."""
        return int.from_bytes(self._writer(record_type, topic)[0][1:], "big")

    def _writer(self, record_type: str, topic: str | None) -> tuple[bytes, dict, object]:
        entry = self._writers.get(record_type if self.registry is None else (record_type, topic))
        if entry is not None:
            return entry
        name = full_name(record_type)  # ValueError for an unknown record type
        if self.registry is None:
            return self._writers[name]
        with self._lock:
            if (name, topic) in self._writers:
                return self._writers[(name, topic)]
            text = json.dumps(load_schema(name), separators=(",", ":"))
            sid, writer_text = self.registry.writer_schema(name, topic, text)
            writer = json.loads(writer_text)
            if _schema_name(writer) != name:
                raise SchemaRegistryError(f"looking up {name}", self.registry.url, 200,
                                          f"schema id {sid} is {_schema_name(writer)}, not {name}")
            if sid not in self._by_id:
                self._add_reader(sid, name, writer)
            return self._add_writer(name, sid, topic, writer)

    def _resolve(self, sid: int) -> tuple:
        """Table entry for an id not seen yet (DecodeError if there is none)."""
        if self.registry is None:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {sid} is not in schemas/schema_ids.json{self._hint()}")
        with self._lock:
            if sid in self._by_id:
                return self._by_id[sid]
            now = time.monotonic()
            if self._missing.get(sid, 0.0) > now:
                raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {sid} is not in the schema registry at {self.registry.url}")
            text = self.registry.schema_by_id(sid)  # SchemaRegistryError: not the message's fault
            if text is None:
                if len(self._missing) >= 10_000:
                    self._missing.clear()
                self._missing[sid] = now + self.negative_ttl
                raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {sid} is not in the schema registry at {self.registry.url}") from None
            try:
                schema = json.loads(text)
                name = _schema_name(schema)
                if name in self._readers:
                    parse_schema(schema, named_schemas={})  # a usable Avro schema?
            except Exception as exc:
                raise DecodeError(
                    UNKNOWN_SCHEMA_ID, f"schema id {sid} from the registry at {self.registry.url} is not a usable Avro schema: {exc}"
                ) from None
            return self._add_reader(sid, name or f"<{str(schema)[:60]}>", schema if name in self._readers else None)

    # -- encode

    def encode(self, record_type: str, record: dict, topic: str | None = None) -> bytes:
        """``record`` as Confluent-framed Avro with the current schema of
        ``record_type`` (``"Event"`` or ``"scinol.Event"``). Fields with
        defaults may be left out; unknown fields are an :class:`EncodeError`.
        ``topic``: where it is written (with a registry, the subject of
        TopicNameStrategy and TopicRecordNameStrategy depends on it)."""
        try:
            header, schema, prepare = self._writers[record_type if self.registry is None else (record_type, topic)]
        except KeyError:
            header, schema, prepare = self._writer(record_type, topic)
        fo = io.BytesIO()
        fo.write(header)
        try:
            if prepare is not None:
                record = prepare(record)
            schemaless_writer(fo, schema, record, strict_allow_default=True)
        except (ValueError, TypeError, AttributeError, KeyError, OverflowError) as exc:
            raise EncodeError(f"cannot encode {record_type}: {exc}") from None
        return fo.getvalue()

    # -- decode

    def decode(self, data: bytes, expected: str | None = None) -> dict:
        """The record in ``data``; ``expected`` (``"Event"`` or
        ``"scinol.Event"``) makes any other record a ``wrong_record_type``
        error. Raises :class:`DecodeError` for anything wrong with the bytes."""
        if data.__class__ is not bytes:
            data = self._as_bytes(data)
        if len(data) < HEADER_SIZE or data[0] != MAGIC:
            raise self._bad_header(data)
        sid = int.from_bytes(data[1:5], "big")
        entry = self._by_id.get(sid) or self._resolve(sid)
        name, short, writer, reader = entry
        if expected is not None and expected != name and expected != short:
            raise self._wrong_type(sid, name, expected)
        if writer is None:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {sid} is {name}, not a record this codec reads")
        fo = io.BytesIO(data)
        fo.seek(HEADER_SIZE)
        try:
            record = schemaless_reader(fo, writer, reader)
        except Exception as exc:  # any failure to parse untrusted bytes
            message = _STREAM_REPR.sub("", str(exc)) or ("the record ends early" if isinstance(exc, EOFError) else "-")
            raise DecodeError(UNDECODABLE, f"schema id {sid} ({name}), at or before byte {fo.tell()}: "
                                           f"{type(exc).__name__}: {message}{self._hint()}") from None
        if fo.tell() != len(data):
            raise DecodeError(UNDECODABLE, f"schema id {sid} ({name}): {len(data) - fo.tell()} bytes left over "
                                           f"after the record{self._hint()}")
        return record

    def _hint(self) -> str:
        """Why a checked-in id may not fit its bytes: registries number from 1 too."""
        if self.registry is not None:
            return ""
        return (" (read with the checked-in schema ids, no schema registry: if the producer used a schema "
                "registry, its ids mean other schemas here; pass --schema-registry URL)")

    def decode_many(self, messages, expected: str | None = None) -> list:
        """Decode each message; the result is aligned with the input, each
        entry a record dict or the :class:`DecodeError` it raised."""
        decode = self.decode
        out = []
        append = out.append
        for data in messages:
            try:
                append(decode(data, expected))
            except DecodeError as exc:
                append(exc)
        return out

    # -- errors

    @staticmethod
    def _as_bytes(data) -> bytes:
        if isinstance(data, (bytes, bytearray, memoryview)):
            return bytes(data)
        if data is None:  # e.g. a Kafka tombstone
            raise DecodeError(UNDECODABLE, "no value (None) instead of bytes")
        raise DecodeError(UNDECODABLE, f"expected bytes, got {type(data).__name__}")

    @staticmethod
    def _bad_header(data: bytes) -> DecodeError:
        if len(data) < HEADER_SIZE:
            return DecodeError(UNDECODABLE, f"{len(data)} bytes, shorter than the 5-byte header (magic byte 0, 4-byte schema id)")
        return DecodeError(UNDECODABLE, f"magic byte is {data[0]}, not 0: not Confluent-framed Avro")

    def _wrong_type(self, sid: int, name: str, expected: str) -> DecodeError:
        expected = full_name(expected)  # ValueError for a name that is no record type: a caller's bug
        return DecodeError(WRONG_RECORD_TYPE, f"schema id {sid} is {name}, expected {expected}")
