"""Avro records on Kafka with Confluent framing, and the checks an event must
pass before a learner sees it.

Wire format (Confluent): one byte 0 (magic), the schema id as 4 bytes
big-endian, then the record in Avro binary encoding. A :class:`Codec` encodes
with the *current* version of each record's schema and decodes with the
*writer's* schema (found by the id in the frame) resolved against the current
version's schema (the reader's), so bytes written with an older compatible
version stay readable: an ``Event`` written with version 1 (no ``weight``)
decodes with ``weight`` None.

Schemas live next to this module as ``<record>.v<N>.avsc`` (``event.v1.avsc``,
``model_checkpoint.v1.avsc``, ...; record names in snake case), namespace
``scinol``. ``schema_ids.json`` is the checked-in id map::

    {"scinol.Event": {"current": 2, "versions": {"1": 1, "2": 2}}, ...}

Ids are stable: never renumber or reuse one; a new version gets a new .avsc
file and the next unused id, and old versions' files are kept. With a schema
registry (:class:`SchemaRegistry`) the ids are the registry's instead: the
codec registers each current schema under the subject named by the record's
full name (``scinol.Event``, Confluent's RecordNameStrategy) the first time it
encodes that record, and resolves ids it does not know through the registry.
The checked-in ids are then not used at all (the two id spaces are separate).

Decoded records are plain dicts. ``timestamp-millis`` fields decode as int
milliseconds (not datetimes); encode accepts int milliseconds or aware
datetimes. ``Event.features`` decodes to ``{"values": [...]}`` (dense),
``{"indices": [...], "values": [...]}`` (sparse) or ``{"values": {name:
value}}`` (named); :func:`feature_kind` tells which. To force a union branch
when encoding, pass ``("scinol.SparseFeatures", {...})``.

Reason codes (module constants; the ``reason`` of a ``DeadLetter``):

Raised as :class:`DecodeError` by :meth:`Codec.decode`:

- ``undecodable``        no or short header, wrong magic byte, Avro parse
                         failure, bytes left over after the record, or a
                         writer schema the reader schema cannot resolve
- ``unknown_schema_id``  the id is in neither the id map nor the registry
                         (or names a record this codec does not read)
- ``wrong_record_type``  the id belongs to another record than ``expected``

Returned by :func:`validate_event` as ``(reason, detail)``:

- ``non_finite_feature`` a NaN or infinite feature value
- ``length_mismatch``    sparse indices and values of different lengths
- ``negative_index``     a negative sparse index
- ``duplicate_index``    a sparse index given twice
- ``oversized``          more than ``max_features`` entries (default 10**6)
- ``index_out_of_range`` a sparse index >= ``max_index``, or more than
                         ``max_index`` dense values (default 2**40; the
                         pipeline's is 2**22, ``scinol run --max-index``):
                         the learner would allocate state for every
                         coordinate below it
- ``bad_label``          a label outside the loss's domain
                         (``learners.losses.prepare_labels``); a null or NaN
                         label means unlabelled and is fine
- ``non_finite_weight``  a NaN or infinite weight
- ``bad_weight``         a weight <= 0
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from fastavro import parse_schema, schemaless_reader, schemaless_writer
from fastavro.schema import to_parsing_canonical_form

from learners.losses import BINARY_LOSSES, LabelError, loss_code, prepare_labels

__all__ = [
    "Codec",
    "DecodeError",
    "EncodeError",
    "SchemaRegistry",
    "SchemaRegistryError",
    "validate_event",
    "feature_kind",
    "schema_id",
    "current_version",
    "load_schema",
    "schema_text",
    "RECORD_TYPES",
    "REASONS",
]

# ---------------------------------------------------------------- reason codes

UNDECODABLE = "undecodable"
UNKNOWN_SCHEMA_ID = "unknown_schema_id"
WRONG_RECORD_TYPE = "wrong_record_type"
DECODE_REASONS = (UNDECODABLE, UNKNOWN_SCHEMA_ID, WRONG_RECORD_TYPE)

NON_FINITE_FEATURE = "non_finite_feature"
LENGTH_MISMATCH = "length_mismatch"
NEGATIVE_INDEX = "negative_index"
DUPLICATE_INDEX = "duplicate_index"
BAD_LABEL = "bad_label"
NON_FINITE_WEIGHT = "non_finite_weight"
BAD_WEIGHT = "bad_weight"
OVERSIZED = "oversized"
INDEX_OUT_OF_RANGE = "index_out_of_range"
EVENT_REASONS = (
    NON_FINITE_FEATURE,
    LENGTH_MISMATCH,
    NEGATIVE_INDEX,
    DUPLICATE_INDEX,
    BAD_LABEL,
    NON_FINITE_WEIGHT,
    BAD_WEIGHT,
    OVERSIZED,
    INDEX_OUT_OF_RANGE,
)
REASONS = DECODE_REASONS + EVENT_REASONS

MAX_FEATURES = 1_000_000
"""Default bound on the number of feature entries in one event."""
MAX_INDEX = 1 << 40
"""Default bound (exclusive) on a sparse feature index and on the number of
dense values. A learner holds state for every coordinate up to the largest
index it has seen (32 bytes each for ScInOL2): the pipeline passes a much
tighter bound (``pipelines.dead_letters.DEFAULT_MAX_INDEX``)."""

_STREAM_REPR = re.compile(r" from <_io\.BytesIO object at 0x[0-9a-f]+>")

MAGIC = 0
HEADER_SIZE = 5
NAMESPACE = "scinol"
SCHEMA_DIR = os.path.dirname(os.path.abspath(__file__))
ID_MAP_FILE = os.path.join(SCHEMA_DIR, "schema_ids.json")


class DecodeError(ValueError):
    """Bytes that are not a record this codec can read; ``reason`` is one of
    :data:`DECODE_REASONS`, ``detail`` the human-readable message."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class EncodeError(ValueError):
    """A record that does not fit its schema."""


class SchemaRegistryError(RuntimeError):
    """A schema registry request failed. ``status`` is the HTTP status (None
    when the registry could not be reached), ``error_code`` Confluent's error
    code when the reply carried one."""

    def __init__(self, method: str, url: str, status: int | None, message: str, error_code: int | None = None):
        where = f"HTTP {status}" if status is not None else "no reply"
        super().__init__(f"schema registry {method} {url} failed ({where}): {message}")
        self.method = method
        self.url = url
        self.status = status
        self.error_code = error_code
        self.message = message


# ------------------------------------------------------------- schema catalog


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def schema_file(record_type: str, version: int) -> str:
    """Path of a record's .avsc file for one version."""
    return os.path.join(SCHEMA_DIR, f"{_snake(full_name(record_type).rsplit('.', 1)[1])}.v{int(version)}.avsc")


def _load_id_map() -> dict:
    with open(ID_MAP_FILE, encoding="utf-8") as f:
        raw = json.load(f)
    out = {}
    for name, entry in raw.items():
        versions = {int(v): int(i) for v, i in entry["versions"].items()}
        current = int(entry["current"])
        if current not in versions:
            raise RuntimeError(f"{ID_MAP_FILE}: current version {current} of {name} has no id")
        out[name] = (current, versions)
    return out


_ID_MAP = _load_id_map()
RECORD_TYPES = tuple(_ID_MAP)
"""Full names of the records, e.g. ``scinol.Event``."""
_NAMES = {**{n: n for n in RECORD_TYPES}, **{n.rsplit(".", 1)[1]: n for n in RECORD_TYPES}}
_TEXTS: dict[tuple[str, int], str] = {}


def full_name(record_type: str) -> str:
    """``scinol.Event`` for ``Event`` or ``scinol.Event``; ValueError otherwise."""
    try:
        return _NAMES[record_type]
    except (KeyError, TypeError):
        raise ValueError(f"unknown record type {record_type!r}; choose one of {', '.join(RECORD_TYPES)}") from None


def current_version(record_type: str) -> int:
    return _ID_MAP[full_name(record_type)][0]


def schema_id(record_type: str, version: int | None = None) -> int:
    """The checked-in id of a record's schema (current version by default)."""
    current, versions = _ID_MAP[full_name(record_type)]
    version = current if version is None else int(version)
    try:
        return versions[version]
    except KeyError:
        raise ValueError(f"{full_name(record_type)} has no version {version}; versions: {sorted(versions)}") from None


def schema_text(record_type: str, version: int | None = None) -> str:
    """The .avsc text of a record's schema (current version by default)."""
    name = full_name(record_type)
    version = current_version(name) if version is None else int(version)
    schema_id(name, version)  # the version must be in the id map
    key = (name, version)
    if key not in _TEXTS:
        with open(schema_file(name, version), encoding="utf-8") as f:
            _TEXTS[key] = f.read()
    return _TEXTS[key]


def load_schema(record_type: str, version: int | None = None) -> dict:
    """A record's schema as a fresh dict (current version by default)."""
    return json.loads(schema_text(record_type, version))


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

# -------------------------------------------------------------------- codec


class Codec:
    """Encode and decode the ``scinol`` records with Confluent framing.

    ``registry``: None (use the checked-in ids), a :class:`SchemaRegistry`, or
    its URL. ``negative_ttl``: seconds for which an id the registry does not
    know is remembered as unknown (so a flood of bad messages does not turn
    into a flood of registry requests).

    Registry failures other than "no such id" raise
    :class:`SchemaRegistryError` (an infrastructure problem, not a bad
    message); everything wrong with the bytes raises :class:`DecodeError`.
    Safe to share between threads.
    """

    def __init__(self, registry: SchemaRegistry | str | None = None, *, negative_ttl: float = 30.0):
        if isinstance(registry, str):
            registry = SchemaRegistry(registry)
        self.registry = registry
        self.negative_ttl = float(negative_ttl)
        self._lock = threading.Lock()
        self._missing: dict[int, float] = {}
        # record name (short and full) -> (frame header, parsed writing schema, prepare | None)
        self._writers: dict[str, tuple[bytes, dict, object]] = {}
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

    def _add_writer(self, name: str, sid: int) -> tuple[bytes, dict, object]:
        schema = parse_schema(load_schema(name), named_schemas={})
        entry = (bytes([MAGIC]) + sid.to_bytes(4, "big"), schema, _PREPARE.get(name))
        self._writers[name] = self._writers[name.rsplit(".", 1)[1]] = entry
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

    def schema_id(self, record_type: str) -> int:
        """The id this codec frames ``record_type`` with (registering it first
        when there is a registry)."""
        entry = self._writers.get(record_type) or self._writer(record_type)
        return int.from_bytes(entry[0][1:], "big")

    def _writer(self, record_type: str) -> tuple[bytes, dict, object]:
        name = full_name(record_type)
        with self._lock:
            if name in self._writers:
                return self._writers[name]
            sid = self.registry.register(name, json.dumps(load_schema(name), separators=(",", ":")))
            if sid not in self._by_id:
                self._add_reader(sid, name, load_schema(name))
            return self._add_writer(name, sid)

    def _resolve(self, sid: int) -> tuple:
        """Table entry for an id not seen yet (DecodeError if there is none)."""
        if self.registry is None:
            raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {sid} is not in schemas/schema_ids.json")
        with self._lock:
            if sid in self._by_id:
                return self._by_id[sid]
            now = time.monotonic()
            if self._missing.get(sid, 0.0) > now:
                raise DecodeError(UNKNOWN_SCHEMA_ID, f"schema id {sid} is not in the schema registry at {self.registry.url}")
            try:
                text = self.registry.schema_by_id(sid)
            except SchemaRegistryError as exc:
                if exc.status != 404:
                    raise
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

    def encode(self, record_type: str, record: dict) -> bytes:
        """``record`` as Confluent-framed Avro with the current schema of
        ``record_type`` (``"Event"`` or ``"scinol.Event"``). Fields with
        defaults may be left out; unknown fields are an :class:`EncodeError`."""
        try:
            header, schema, prepare = self._writers[record_type]
        except KeyError:
            header, schema, prepare = self._writer(record_type)
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
            raise DecodeError(
                UNDECODABLE, f"schema id {sid} ({name}), at or before byte {fo.tell()}: {type(exc).__name__}: {message}"
            ) from None
        if fo.tell() != len(data):
            raise DecodeError(UNDECODABLE, f"schema id {sid} ({name}): {len(data) - fo.tell()} bytes left over after the record")
        return record

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


# ----------------------------------------------------------- event checks


def _first_non_finite(values) -> int:
    for i, v in enumerate(values):
        if not math.isfinite(v):
            return i
    return -1


def _label_ok_fast(loss: str, n_classes: int, y: float) -> bool:
    """True only for labels prepare_labels surely accepts (a shortcut for the
    common case; every rejection goes through prepare_labels)."""
    if loss in BINARY_LOSSES:
        return y == 1.0 or y == -1.0 or y == 0.0
    if loss == "softmax":
        return 0.0 <= y < n_classes and float(y).is_integer()
    return math.isfinite(y)


def validate_event(
    event: dict,
    loss: str,
    n_classes: int | None = None,
    *,
    max_features: int = MAX_FEATURES,
    max_index: int = MAX_INDEX,
) -> tuple[str, str] | None:
    """``(reason, detail)`` for a decoded ``Event`` the learner must not see,
    or None when it is fine. Checks, in this order: size (``oversized``),
    sparse structure (``length_mismatch``, ``negative_index``,
    ``index_out_of_range``), values (``non_finite_feature``), ``duplicate_index``, the weight,
    then the label against ``loss`` (``n_classes`` is required for softmax)."""
    loss_code(loss)  # ValueError for an unknown loss
    if loss == "softmax" and (n_classes is None or n_classes < 2):
        raise ValueError(f"softmax loss needs n_classes >= 2, got {n_classes!r}")

    features = event["features"]
    if isinstance(features, tuple):
        features = features[1]
    values = features["values"]
    indices = features.get("indices")
    n = len(values)
    if indices is not None:
        m = len(indices)
        if n > max_features or m > max_features:
            return OVERSIZED, f"{max(n, m)} sparse feature entries, more than the limit of {max_features}"
        if m != n:
            return LENGTH_MISMATCH, f"{m} sparse indices but {n} values"
        if n:
            lo = min(indices)
            if lo < 0:
                return NEGATIVE_INDEX, f"negative feature index {lo} at position {indices.index(lo)}"
            hi = max(indices)
            if hi >= max_index:
                return (INDEX_OUT_OF_RANGE,
                        f"feature index {hi} at position {indices.index(hi)} is not below the limit of {max_index}")
            if not math.isfinite(sum(values)):  # a NaN or inf makes the sum non-finite
                p = _first_non_finite(values)
                if p >= 0:
                    return NON_FINITE_FEATURE, f"non-finite value {values[p]!r} for feature index {indices[p]} (position {p})"
            if n > 1 and len(set(indices)) != n:
                seen = set()
                for p, i in enumerate(indices):
                    if i in seen:
                        return DUPLICATE_INDEX, f"feature index {i} appears twice (again at position {p})"
                    seen.add(i)
    elif isinstance(values, dict):
        if n > max_features:
            return OVERSIZED, f"{n} named features, more than the limit of {max_features}"
        if n and not math.isfinite(sum(values.values())):
            for name, v in values.items():
                if not math.isfinite(v):
                    return NON_FINITE_FEATURE, f"non-finite value {v!r} for feature {name!r}"
    else:
        if n > max_features:
            return OVERSIZED, f"{n} dense feature values, more than the limit of {max_features}"
        if n > max_index:
            return INDEX_OUT_OF_RANGE, f"{n} dense feature values, more than the index limit of {max_index}"
        if n and not math.isfinite(sum(values)):
            p = _first_non_finite(values)
            if p >= 0:
                return NON_FINITE_FEATURE, f"non-finite value {values[p]!r} for feature index {p}"

    weight = event.get("weight")
    if weight is not None:
        if not math.isfinite(weight):
            return NON_FINITE_WEIGHT, f"weight is {weight!r}, not a finite number"
        if weight <= 0:
            return BAD_WEIGHT, f"weight is {weight!r}; weights must be > 0"

    y = event.get("label")
    if y is not None and y == y and not _label_ok_fast(loss, n_classes or 1, y):
        try:
            prepare_labels(loss, [y], n_classes or 1)
        except LabelError as exc:
            return BAD_LABEL, f"label {exc.detail}"
    return None


# -------------------------------------------------------- schema registry

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistry:
    """A minimal client of a Confluent-compatible schema registry (standard
    library only): :meth:`register` and :meth:`schema_by_id`, schemas by id
    cached. Failures raise :class:`SchemaRegistryError` naming the URL and
    the HTTP status."""

    def __init__(self, url: str, *, timeout: float = 10.0):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"schema registry URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._schemas: dict[int, str] = {}

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.url!r})"

    def register(self, subject: str, schema_str: str) -> int:
        """Register ``schema_str`` (Avro JSON) under ``subject``; its id.
        Registering the same schema again returns the same id."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        reply, url = self._request("POST", path, {"schema": schema_str})
        sid = reply.get("id")
        if not isinstance(sid, int) or isinstance(sid, bool):
            raise SchemaRegistryError("POST", url, 200, f"reply has no integer 'id': {str(reply)[:200]}")
        self._schemas[sid] = schema_str
        return sid

    def schema_by_id(self, schema_id: int) -> str:
        """The schema (Avro JSON text) registered with ``schema_id``."""
        schema_id = int(schema_id)
        try:
            return self._schemas[schema_id]
        except KeyError:
            pass
        reply, url = self._request("GET", f"/schemas/ids/{schema_id}")
        schema = reply.get("schema")
        if not isinstance(schema, str):
            raise SchemaRegistryError("GET", url, 200, f"reply has no 'schema' string: {str(reply)[:200]}")
        self._schemas[schema_id] = schema
        return schema

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[dict, str]:
        url = self.url + path
        headers = {"Accept": f"{_CONTENT_TYPE}, application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = _CONTENT_TYPE
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as exc:
            payload = exc.read() or b""
            message, code = payload.decode("utf-8", "replace")[:300].strip() or exc.reason, None
            try:
                parsed = json.loads(payload)
                message = parsed.get("message", message)
                code = parsed.get("error_code")
            except (ValueError, AttributeError):
                pass
            raise SchemaRegistryError(method, url, exc.code, str(message), code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(method, url, None, f"cannot reach the schema registry: {reason}") from None
        try:
            reply = json.loads(payload)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise SchemaRegistryError(method, url, status, f"reply is not a JSON object: {payload[:200]!r}")
        return reply, url
