"""Learner state: per-coordinate NumPy arrays, global scalars and a JSON header.

Saved as a zip of ``header.json`` plus one ``.npy`` member per array, written
with ``allow_pickle=False`` and read back the same way, so loading a model
file can never execute code. Each array's shape, dtype and SHA-256 are in the
header and checked on load; a file is treated as untrusted input (members
stored uncompressed and bounded in size, plain identifiers as array names,
plain numeric dtypes, each ``.npy`` header checked against ``header.json``
before its data is read: see :func:`load_state`). Floats in the header are written by ``json``
with ``repr`` precision, so a saved learner continues bit-identically.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import tempfile
import zipfile
from dataclasses import dataclass, field

import numpy as np

FORMAT = "scinol-state"
FORMAT_VERSION = 1
MAX_STATE_BYTES = 1 << 34
"""Default bound on the arrays of one state file (16 GiB), far above real models."""
MAX_HEADER_BYTES = 16 << 20
_ARRAY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_NUMERIC_KINDS = "fiub"  # float, signed, unsigned, bool: never object, void/structured, strings


class StateFileError(ValueError):
    """A model file that is not a valid scinol state."""


@dataclass
class LearnerState:
    """What a learner knows. ``arrays`` have the coordinate as first axis."""

    arrays: dict[str, np.ndarray]
    scalars: dict[str, float] = field(default_factory=dict)
    fill: dict[str, list] = field(default_factory=dict)
    """Initial value of a new coordinate's entries in each array (broadcast
    over the array's trailing axes), used when coordinates are added."""

    @property
    def n_coords(self) -> int:
        return next(iter(self.arrays.values())).shape[0]

    def grow(self, n_coords: int) -> None:
        """Make room for coordinates up to ``n_coords``: capacity doubles, so
        growing one feature at a time stays linear, but stops at the next
        2^k + 1 that holds them (a hashed space and the bias): rows of 2^20
        hashed features whose first batch reached 2^20 - 3 would otherwise
        double a 32 MB state to 64 MB for 4 coordinates."""
        have = self.n_coords
        if n_coords <= have:
            return
        space = (1 << max(n_coords - 2, 0).bit_length()) + 1  # the least 2^k + 1 >= n_coords
        new = max(n_coords, min(2 * have, space))
        for name, arr in self.arrays.items():
            grown = np.empty((new,) + arr.shape[1:], dtype=arr.dtype)
            grown[:have] = arr
            grown[have:] = np.asarray(self.fill.get(name, 0.0))
            self.arrays[name] = grown

    def copy(self) -> "LearnerState":
        return LearnerState(
            {k: v.copy() for k, v in self.arrays.items()}, dict(self.scalars), dict(self.fill)
        )

    def check_like(self, expected: "LearnerState", name: str) -> None:
        """ValueError unless this state has ``expected``'s arrays (any number
        of coordinates, the same trailing shape and dtype) and scalars."""
        if set(self.arrays) != set(expected.arrays) or set(self.scalars) != set(expected.scalars):
            raise ValueError(f"state fields do not match {name}")
        for field_name, arr in expected.arrays.items():
            got = self.arrays[field_name]
            if got.shape[1:] != arr.shape[1:] or got.dtype != arr.dtype:
                raise ValueError(f"array {field_name!r} is {got.dtype}{list(got.shape)}, {name} needs "
                                 f"{arr.dtype}[n, {', '.join(map(str, arr.shape[1:]))}]")


def _sha256(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _specs(arrays: dict[str, np.ndarray]) -> dict:
    return {name: {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": _sha256(a)} for name, a in arrays.items()}


def save_state(path: str, state: LearnerState, header: dict, aux: dict[str, np.ndarray] | None = None) -> None:
    """Write atomically: a temp file in the same directory, then rename.
    ``aux``: more numeric arrays kept with the state (e.g. a pipeline's
    events awaiting labels), of any length, under names of their own."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".scinol", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw:
            write_state(raw, state, header, aux)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def state_bytes(state: LearnerState, header: dict, aux: dict[str, np.ndarray] | None = None) -> bytes:
    """The state file's bytes, in memory (e.g. to keep a model in a runner's state store)."""
    buf = io.BytesIO()
    write_state(buf, state, header, aux)
    return buf.getvalue()


def write_state(raw, state: LearnerState, header: dict, aux: dict[str, np.ndarray] | None = None) -> None:
    """The state file format, written to the binary file object ``raw``."""
    aux = aux or {}
    clash = set(aux) & set(state.arrays)
    if clash:
        raise ValueError(f"aux arrays {sorted(clash)} clash with the state's arrays")
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **header,
        "scalars": state.scalars,
        "fill": state.fill,
        "arrays": _specs(state.arrays),
        "aux_arrays": _specs(aux),
    }
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(_member_info("header.json"), json.dumps(meta, indent=1, sort_keys=True))
        for name, arr in {**state.arrays, **aux}.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
            zf.writestr(_member_info(f"{name}.npy"), buf.getvalue())


def _member_info(name: str) -> zipfile.ZipInfo:
    """A member dated 1980-01-01 (zip's earliest date) rather than now, so
    that a state's file is the same bytes whenever it is written: two
    snapshots of one model compare equal, even across a clock tick."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.external_attr = 0o600 << 16  # what writestr gives a member named by a string
    return info


def load_state(path: str, max_bytes: int = MAX_STATE_BYTES) -> tuple[LearnerState, dict]:
    """Read and validate a state file; returns the state and its header
    (see :func:`load_state_with_aux` for the checks)."""
    state, meta, _ = load_state_with_aux(path, max_bytes)
    return state, meta


def load_state_with_aux(path: str | bytes, max_bytes: int = MAX_STATE_BYTES) -> tuple[LearnerState, dict, dict]:
    """Read and validate a state file (a path, or its bytes); returns the
    state, its header and its aux arrays.

    Untrusted input is expected: nothing is unpickled or extracted (members
    are read by name into memory), every member must be stored uncompressed
    (as :func:`save_state` writes them, so a small file cannot expand into a
    huge allocation), array names are plain identifiers, dtypes plain
    numbers, each ``.npy`` header must agree with ``header.json`` before its
    data is read, and the arrays together may not exceed ``max_bytes``.
    Anything else is a :class:`StateFileError` naming the problem."""
    source = io.BytesIO(path) if isinstance(path, bytes) else path
    path = "(in memory)" if isinstance(path, bytes) else path
    try:
        zf = zipfile.ZipFile(source)
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise StateFileError(f"{path}: not a readable scinol model file ({exc})") from None
    with zf:
        meta = _read_header(zf, path)
        specs = _array_specs(meta.get("arrays"), path, max_bytes)
        aux_specs = _array_specs(meta.get("aux_arrays") or {}, path, max_bytes, required=False)
        if set(aux_specs) & set(specs):
            raise StateFileError(f"{path}: aux arrays {sorted(set(aux_specs) & set(specs))} clash with the state's")
        arrays = {name: _read_array(zf, path, name, *spec) for name, spec in specs.items()}
        aux = {name: _read_array(zf, path, name, *spec) for name, spec in aux_specs.items()}
    lengths = {a.shape[0] for a in arrays.values()}
    if len(lengths) > 1:
        raise StateFileError(f"{path}: arrays disagree on the number of coordinates {sorted(lengths)}")
    try:
        scalars = {str(k): _number(v) for k, v in meta.pop("scalars").items()}
        fill = {str(k): np.asarray(v, dtype=np.float64).tolist() for k, v in meta.pop("fill").items()}
    except (KeyError, AttributeError, TypeError, ValueError) as exc:
        raise StateFileError(f"{path}: header 'scalars'/'fill' are not names of numbers ({exc})") from None
    meta.pop("arrays")
    meta.pop("aux_arrays", None)
    return LearnerState(arrays, scalars, fill), meta, aux


def _member(zf: zipfile.ZipFile, path: str, name: str, limit: int) -> bytes:
    """A member's bytes, refusing compressed members and sizes over ``limit``."""
    try:
        info = zf.getinfo(name)
    except KeyError:
        raise StateFileError(f"{path}: member {name!r} missing (file unreadable)") from None
    if info.compress_type != zipfile.ZIP_STORED:
        raise StateFileError(f"{path}: member {name!r} is compressed; scinol model files store members "
                             f"uncompressed (file unreadable)")
    if info.file_size > limit:
        raise StateFileError(f"{path}: member {name!r} declares {info.file_size} bytes, more than the "
                             f"{limit} allowed (file unreadable)")
    try:
        return zf.read(info)
    except (zipfile.BadZipFile, OSError, EOFError, RuntimeError, ValueError, NotImplementedError) as exc:
        raise StateFileError(f"{path}: member {name!r} unreadable ({exc})") from None


def _read_header(zf: zipfile.ZipFile, path: str) -> dict:
    try:
        raw = _member(zf, path, "header.json", MAX_HEADER_BYTES)
    except StateFileError as exc:
        raise StateFileError(f"missing or invalid header.json: {exc}") from None
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise StateFileError(f"{path}: missing or invalid header.json ({str(exc)[:200]})") from None
    if not isinstance(meta, dict):
        raise StateFileError(f"{path}: missing or invalid header.json (not a JSON object)")
    if meta.get("format") != FORMAT:
        raise StateFileError(f"{path}: not a scinol model file (format {str(meta.get('format'))[:60]!r})")
    if meta.get("format_version") != FORMAT_VERSION:
        raise StateFileError(f"{path}: unsupported format version {str(meta.get('format_version'))[:60]!r}")
    return meta


def _array_specs(arrays, path: str, max_bytes: int,
                 required: bool = True) -> dict[str, tuple[tuple[int, ...], np.dtype, str]]:
    """name -> (shape, dtype, sha256) from header.json, checked before any array is read."""
    if not isinstance(arrays, dict) or (required and not arrays):
        raise StateFileError(f"{path}: header.json lists no arrays")
    specs, total = {}, 0
    for name, spec in arrays.items():
        if not _ARRAY_NAME.match(name):
            raise StateFileError(f"{path}: array name {name[:80]!r} is not a plain identifier")
        try:
            shape = tuple(spec["shape"])
            dtype = np.dtype(spec["dtype"]) if isinstance(spec["dtype"], str) else None
            digest = spec["sha256"]
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFileError(f"{path}: array {name!r}: bad entry in header.json ({str(exc)[:200]})") from None
        if dtype is None or dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
            raise StateFileError(f"{path}: array {name!r} has dtype {str(spec.get('dtype'))[:40]!r}; only plain "
                                 f"numeric dtypes are allowed")
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape) or len(shape) > 4:
            raise StateFileError(f"{path}: array {name!r} has shape {str(spec['shape'])[:80]}, not up to 4 sizes >= 0")
        total += math.prod(shape) * dtype.itemsize
        if total > max_bytes:
            raise StateFileError(f"{path}: arrays declare more than {max_bytes} bytes; refusing to load")
        specs[name] = (shape, dtype, digest)
    return specs


def _read_array(zf, path, name, shape, dtype, digest) -> np.ndarray:
    nbytes = math.prod(shape) * dtype.itemsize
    raw = _member(zf, path, f"{name}.npy", nbytes + 65536)  # + the .npy header
    fo = io.BytesIO(raw)
    try:  # the .npy header first: its shape and dtype must be the declared ones before any data is read
        version = np.lib.format.read_magic(fo)
        if version == (1, 0):
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_1_0(fo)
        elif version == (2, 0):
            got_shape, fortran, got_dtype = np.lib.format.read_array_header_2_0(fo)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, EOFError, SyntaxError, TypeError) as exc:
        raise StateFileError(f"{path}: array {name!r} unreadable ({str(exc)[:200]})") from None
    if tuple(got_shape) != shape or got_dtype != dtype or fortran:
        raise StateFileError(f"{path}: array {name!r} unreadable: its .npy header says {got_dtype.str}"
                             f"{list(got_shape)}{' (Fortran order)' if fortran else ''}, header.json says "
                             f"{dtype.str}{list(shape)}")
    if len(raw) - fo.tell() != nbytes:
        raise StateFileError(f"{path}: array {name!r} has {len(raw) - fo.tell()} data bytes, {nbytes} expected "
                             f"(file truncated or corrupted)")
    arr = np.frombuffer(raw, dtype=dtype, count=math.prod(shape), offset=fo.tell()).reshape(shape).copy()
    if _sha256(arr) != digest:
        raise StateFileError(f"{path}: array {name!r} fails its checksum (file corrupted)")
    return arr


def _number(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{str(value)[:40]!r} is not a number")
    return float(value)
