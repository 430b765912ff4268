"""The one durable store for learner state files (model checkpoints, the
parts of sharded checkpoint cuts, and the run's progress records), on a
local folder or, through Beam's ``FileSystems``, on any filesystem Beam has
registered: ``gs://``, ``s3://``, ``hdfs://``, ``azfs://`` where the
matching Beam extra is installed (as on Dataflow and on Flink clusters that
ship it).

Local paths keep the os-level path, because only there can a write be made
atomic: the file is written whole under a temp name in its folder, fsynced,
renamed into place and the folder fsynced, so a crash at any moment leaves
either no new file or a complete one. Each write has its own temp name
(:func:`temp_name`): a runner may run the same key's work twice at once
(Prism re-runs a bundle while the first attempt is still writing), and both
attempts write the same state under the same final name.

Remote paths (``scheme://...``) go through ``FileSystems``. Object stores
have no atomic rename (GCS and S3 rename is copy then delete), and HDFS
shows a file while it is being written, so nothing is renamed there: the
file is made in a local temp folder, uploaded under its final, unique name
(``ckpt-<records>``, ``cut-<seq>/shard-<s>-of-<K>``: a name is only ever
rewritten with the same state, after a replay), its size is checked, and
then its sidecar is uploaded. A crash mid-upload leaves at worst a
truncated file whose sidecar is missing or stale; readers verify every file
(sidecar checksum, and the state file's own header and per-array checksums
on load) and take the newest valid one, so such a file is skipped for the
previous one exactly as a torn local write would be.

A JSON sidecar (``<name>.json``) with the file's SHA-256 and whatever the
caller records follows each state file. On reading, a file whose sidecar
checksum fails is refused (the state file's own per-array checksums are
checked when it is loaded, sidecar or not).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
from typing import Callable

from .faults import pause_point

STATE_SUFFIX = ".scinol"
_SCHEME = re.compile(r"^([a-zA-Z][-a-zA-Z0-9+.]*)://")


class StoreLocationError(ValueError):
    """A checkpoint location no filesystem here can serve; the message is one line."""


def sidecar_path(path: str) -> str:
    """``ckpt-1.scinol`` -> ``ckpt-1.json``."""
    return path[: -len(STATE_SUFFIX)] + ".json" if path.endswith(STATE_SUFFIX) else path + ".json"


# -- where: local folder or Beam filesystem ----------------------------------

def is_remote(path: str) -> bool:
    """Whether ``path`` is a URL (``scheme://...``), served by Beam's FileSystems."""
    return _SCHEME.match(path) is not None


def _beam():
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def check_location(path: str) -> None:
    """StoreLocationError, one line, unless ``path`` is local or a URL whose
    scheme a Beam filesystem installed here serves."""
    if not is_remote(path):
        return
    scheme = _SCHEME.match(path).group(1)
    from apache_beam.io.filesystem import FileSystem

    try:
        _beam().get_filesystem(path)
    except Exception as exc:  # ValueError (no such scheme) or BeamIOError (its client library is missing)
        known = sorted({fs.scheme() for fs in FileSystem.get_all_subclasses() if fs.scheme()})
        cause = getattr(exc, "exception_details", None)
        why = (f"its filesystem cannot start ({next(iter(cause.values()))})".splitlines()[0] if cause
               else "no Beam filesystem for that scheme is installed")
        raise StoreLocationError(
            f"{path}: cannot keep checkpoints at {scheme}://: {why} (schemes available here: "
            f"{', '.join(known) or 'none'}; gs:// needs apache-beam[gcp], s3:// apache-beam[aws], "
            f"hdfs:// apache-beam[hadoop])") from None


def join(folder: str, *names: str) -> str:
    return "/".join([folder.rstrip("/"), *names]) if is_remote(folder) else os.path.join(folder, *names)


def absolute(path: str) -> str:
    return path if is_remote(path) else os.path.abspath(path)


def basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1] if is_remote(path) else os.path.basename(os.path.normpath(path))


def listdir(folder: str) -> list[str]:
    """Names in ``folder`` (files and sub-folders; on an object store the
    first component of each key under it); [] if there is none."""
    if not is_remote(folder):
        try:
            return os.listdir(folder)
        except (FileNotFoundError, NotADirectoryError):
            return []
    prefix = folder.rstrip("/") + "/"
    return sorted({path[len(prefix):].split("/", 1)[0] for path in _under(folder) if path.startswith(prefix)})


def _under(folder: str) -> list[str]:
    """The remote paths under ``folder``: every key below it on an object
    store, the folder's entries on HDFS (whose delete and rename take a
    whole folder); [] if it does not exist."""
    from apache_beam.io.filesystem import BeamIOError

    try:
        return [m.path for m in _beam().match([folder.rstrip("/") + "/**"])[0].metadata_list]
    except BeamIOError:
        if not _beam().exists(folder):  # HDFS: listing a folder that does not exist fails
            return []
        raise


def exists(path: str) -> bool:
    return _beam().exists(path) if is_remote(path) else os.path.exists(path)


def mtime(path: str) -> float:
    """Seconds since the epoch; +inf when the file is gone (so it is never stale)."""
    try:
        return _beam().last_updated(path) if is_remote(path) else os.path.getmtime(path)
    except Exception:  # OSError, or BeamIOError from a filesystem
        return float("inf")


def read_bytes(path: str) -> bytes:
    """The whole file (OSError if it cannot be read)."""
    if not is_remote(path):
        with open(path, "rb") as f:
            return f.read()
    from apache_beam.io.filesystem import BeamIOError, CompressionTypes

    try:
        with _beam().open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            return f.read()
    except BeamIOError as exc:
        raise OSError(f"cannot read {path}: {exc}") from None


def loadable(path: str) -> str | bytes:
    """What ``load_state`` / ``OnlineLearner.load`` take: a local path as
    is, a remote file as its bytes (read once)."""
    return read_bytes(path) if is_remote(path) else path


def delete(*paths: str) -> None:
    """Delete files (or, remotely, everything under a prefix); missing ones are fine."""
    for path in paths:
        if not is_remote(path):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            continue
        victims = _under(path) + ([path] if _beam().exists(path) else [])
        if victims:
            _beam().delete(victims)


def move(source: str, destination: str) -> None:
    """Rename (local: atomic os.replace; remote: every file under
    ``source``, copied then deleted, as object stores do)."""
    if not is_remote(source):
        os.replace(source, destination)
        return
    prefix = source.rstrip("/")
    files = _under(source) or ([source] if _beam().exists(source) else [])
    _beam().rename(files, [destination.rstrip("/") + f[len(prefix):] for f in files])


def makedirs(folder: str) -> None:
    """A folder (a no-op on object stores, which have none; Beam's
    filesystems create a file's parents themselves, but HDFS needs a
    folder to exist before something is renamed into it)."""
    if not is_remote(folder):
        os.makedirs(folder, exist_ok=True)
        return
    from apache_beam.io.filesystem import BeamIOError

    try:
        _beam().mkdirs(folder)
    except (BeamIOError, OSError):  # it exists already
        pass


# -- durable writes -----------------------------------------------------------

def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    if is_remote(path):
        digest.update(read_bytes(path))
        return digest.hexdigest()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def temp_name(path: str) -> str:
    """A temp name beside ``path`` that no other writer, in this process or
    another, uses: concurrent writes of one file each rename their own."""
    return f"{path}.{os.getpid()}-{secrets.token_hex(4)}.tmp"


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
    if is_remote(path):
        return _write_remote(path, save, sidecar, kind)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = temp_name(path)
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


def _write_remote(path: str, save: Callable[[str], None], sidecar: dict, kind: str) -> dict:
    """Made locally, uploaded under its final name, size checked, then the
    sidecar (see the module docstring for why there is no rename)."""
    with tempfile.TemporaryDirectory(prefix="scinol-upload-") as scratch:
        local = os.path.join(scratch, "state" + STATE_SUFFIX)
        save(local)
        with open(local, "rb") as f:
            data = f.read()
    pause_point(f"{kind}-before-rename")  # the same fault window: nothing published yet
    _upload(path, data)
    pause_point(f"{kind}-before-manifest")
    manifest = {**sidecar, "checksum": hashlib.sha256(data).hexdigest()}
    write_json_durably(sidecar_path(path), manifest)
    return manifest


def _upload(path: str, data: bytes) -> None:
    from apache_beam.io.filesystem import CompressionTypes

    with _beam().create(path, mime_type="application/octet-stream",
                        compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(data)
    size = _beam().get_filesystem(path).size(path)
    if size != len(data):
        raise OSError(f"{path}: uploaded {len(data)} bytes but the filesystem holds {size}")


def write_json_durably(path: str, obj: dict) -> None:
    text = json.dumps(obj, indent=1, sort_keys=True)
    if is_remote(path):
        _upload(path, text.encode())
        return
    tmp = temp_name(path)
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def read_json(path: str) -> dict | None:
    """A JSON file written by :func:`write_json_durably`; None if missing or unreadable."""
    try:
        return json.loads(read_bytes(path))
    except (OSError, ValueError):
        return None


def verify(path: str, data: bytes | None = None) -> str | None:
    """None if the sidecar checksum matches (or there is no sidecar: the
    state file's own per-array checksums are checked on load), else why not.
    ``data``: the file's bytes when the caller has them already (remote files)."""
    sidecar = sidecar_path(path)
    if not exists(sidecar):
        return None
    try:
        want = json.loads(read_bytes(sidecar))["checksum"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"unreadable manifest ({exc})"
    try:
        have = hashlib.sha256(data).hexdigest() if data is not None else file_sha256(path)
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
    return None if have == want else "checksum mismatch (file truncated or corrupted)"
