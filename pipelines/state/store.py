"""The one durable store for learner state files (model checkpoints and
the parts of sharded checkpoint cuts).

A file is written whole under a temp name in its folder, fsynced, renamed
into place and the folder fsynced, so a crash at any moment leaves either
no new file or a complete one. A JSON sidecar (``<name>.json``) with the
file's SHA-256 and whatever the caller records follows the same way. On
reading, a file whose sidecar checksum fails is refused (the state file's
own per-array checksums are checked when it is loaded, sidecar or not).
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Callable

from .faults import pause_point

STATE_SUFFIX = ".scinol"


def sidecar_path(path: str) -> str:
    """``ckpt-1.scinol`` -> ``ckpt-1.json``."""
    return path[: -len(STATE_SUFFIX)] + ".json" if path.endswith(STATE_SUFFIX) else path + ".json"


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: str) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_durably(path: str, save: Callable[[str], None], sidecar: dict, kind: str = "checkpoint") -> dict:
    """Write a state file with ``save(temp_path)``, then its sidecar
    (``sidecar`` plus the checksum); returns the sidecar. ``kind`` names the
    fault-injection points (``<kind>-before-rename``, ``<kind>-before-manifest``)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    save(tmp)
    _fsync_file(tmp)
    pause_point(f"{kind}-before-rename")  # fault window for the crash tests (no-op otherwise)
    checksum = file_sha256(tmp)
    os.replace(tmp, path)
    fsync_dir(folder)
    pause_point(f"{kind}-before-manifest")
    manifest = {**sidecar, "checksum": checksum}
    write_json_durably(sidecar_path(path), manifest)
    return manifest


def write_json_durably(path: str, obj: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def verify(path: str) -> str | None:
    """None if the sidecar checksum matches (or there is no sidecar: the
    state file's own per-array checksums are checked on load), else why not."""
    sidecar = sidecar_path(path)
    if not os.path.exists(sidecar):
        return None
    try:
        with open(sidecar) as f:
            want = json.load(f)["checksum"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest ({exc})"
    try:
        have = file_sha256(path)
    except OSError as exc:
        return f"unreadable ({exc.strerror})"
    return None if have == want else "checksum mismatch (file truncated or corrupted)"
