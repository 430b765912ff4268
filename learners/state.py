"""Learner state: per-coordinate NumPy arrays, global scalars and a JSON header.

Saved as a zip of ``header.json`` plus one ``.npy`` member per array, written
with ``allow_pickle=False`` and read back the same way, so loading a model
file can never execute code. Each array's shape, dtype and SHA-256 are in the
header and checked on load. Floats in the header are written by ``json``
with ``repr`` precision, so a saved learner continues bit-identically.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field

import numpy as np

FORMAT = "scinol-state"
FORMAT_VERSION = 1


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
        """Make room for coordinates up to ``n_coords`` (capacity doubles, so
        growing one feature at a time stays linear)."""
        have = self.n_coords
        if n_coords <= have:
            return
        new = max(n_coords, 2 * have)
        for name, arr in self.arrays.items():
            extra = np.full((new - have,) + arr.shape[1:], np.asarray(self.fill.get(name, 0.0)), dtype=arr.dtype)
            self.arrays[name] = np.concatenate([arr, extra])

    def copy(self) -> "LearnerState":
        return LearnerState(
            {k: v.copy() for k, v in self.arrays.items()}, dict(self.scalars), dict(self.fill)
        )


def _sha256(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def save_state(path: str, state: LearnerState, header: dict) -> None:
    """Write atomically: a temp file in the same directory, then rename."""
    meta = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        **header,
        "scalars": state.scalars,
        "fill": state.fill,
        "arrays": {
            name: {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": _sha256(a)}
            for name, a in state.arrays.items()
        },
    }
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".scinol", dir=directory)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("header.json", json.dumps(meta, indent=1, sort_keys=True))
            for name, arr in state.arrays.items():
                buf = io.BytesIO()
                np.lib.format.write_array(buf, np.ascontiguousarray(arr), allow_pickle=False)
                zf.writestr(f"{name}.npy", buf.getvalue())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load_state(path: str) -> tuple[LearnerState, dict]:
    """Read and validate a state file; returns the state and its header."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise StateFileError(f"{path}: not a readable scinol model file ({exc})") from None
    with zf:
        try:
            meta = json.loads(zf.read("header.json"))
        except (KeyError, ValueError) as exc:
            raise StateFileError(f"{path}: missing or invalid header.json ({exc})") from None
        if meta.get("format") != FORMAT:
            raise StateFileError(f"{path}: not a scinol model file (format {meta.get('format')!r})")
        if meta.get("format_version") != FORMAT_VERSION:
            raise StateFileError(f"{path}: unsupported format version {meta.get('format_version')!r}")
        arrays = {}
        for name, spec in meta["arrays"].items():
            try:
                arr = np.lib.format.read_array(io.BytesIO(zf.read(f"{name}.npy")), allow_pickle=False)
            except (KeyError, ValueError) as exc:
                raise StateFileError(f"{path}: array {name!r} unreadable ({exc})") from None
            if list(arr.shape) != spec["shape"] or arr.dtype.str != spec["dtype"]:
                raise StateFileError(
                    f"{path}: array {name!r} is {arr.dtype.str}{list(arr.shape)}, header says {spec['dtype']}{spec['shape']}"
                )
            if _sha256(arr) != spec["sha256"]:
                raise StateFileError(f"{path}: array {name!r} fails its checksum (file corrupted)")
            arrays[name] = arr
    lengths = {a.shape[0] for a in arrays.values()}
    if len(lengths) > 1:
        raise StateFileError(f"{path}: arrays disagree on the number of coordinates {sorted(lengths)}")
    scalars = {k: float(v) for k, v in meta.pop("scalars").items()}
    fill = {k: np.asarray(v, dtype=np.float64).tolist() for k, v in meta.pop("fill").items()}
    meta.pop("arrays")
    return LearnerState(arrays, scalars, fill), meta
