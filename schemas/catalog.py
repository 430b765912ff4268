"""The schema catalog: the ``scinol`` records' Avro schemas, one
``<record>.v<N>.avsc`` file per version next to this module (record names in
snake case, namespace ``scinol``), and ``schema_ids.json``, the checked-in
id map::

    {"scinol.Event": {"current": 2, "versions": {"1": 1, "2": 2}}, ...}

Ids are stable: never renumber or reuse one; a new version gets a new .avsc
file and the next unused id, and old versions' files are kept.
"""

from __future__ import annotations

import json
import os
import re

NAMESPACE = "scinol"
SCHEMA_DIR = os.path.dirname(os.path.abspath(__file__))
ID_MAP_FILE = os.path.join(SCHEMA_DIR, "schema_ids.json")


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
