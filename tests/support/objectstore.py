"""A Beam filesystem with an object store's semantics, kept in a local
folder: what lets the tests take the checkpoint store's remote code path
(the one ``gs://``, ``s3://`` and ``hdfs://`` take on a cluster) on this
machine, through Beam's real ``FileSystems`` dispatch.

``localobj://<absolute local path>`` names the file at that path. As on GCS
and S3: there are no folders (``has_dirs`` is False; listing is by key
prefix), an object becomes visible only once its upload is closed, and a
rename is a copy then a delete, not atomic (each is counted in
``LocalObjectStore.renames``, so a test can prove the writes never rely on
one). Importing this module registers the scheme (Beam finds filesystems
as subclasses of ``FileSystem``).
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile

from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem

SCHEME = "localobj"
PREFIX = SCHEME + "://"


def url(local_path) -> str:
    """The ``localobj://`` URL of a local path."""
    return PREFIX + os.path.abspath(str(local_path))


class _Upload(io.FileIO):
    """Written to a staging file outside the namespace; published on close."""

    def __init__(self, target: str):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        fd, self._staging = tempfile.mkstemp(prefix="localobj-upload-")
        os.close(fd)
        super().__init__(self._staging, "wb")
        self._target = target

    def close(self):
        if not self.closed:
            super().close()
            os.replace(self._staging, self._target)


class LocalObjectStore(FileSystem):
    renames = 0

    @classmethod
    def scheme(cls):
        return SCHEME

    @staticmethod
    def _local(path: str) -> str:
        if not path.startswith(PREFIX):
            raise ValueError(f"not a {PREFIX} path: {path}")
        return path[len(PREFIX):]

    def join(self, basepath, *paths):
        return "/".join([basepath.rstrip("/"), *paths])

    def split(self, path):
        head, _, tail = path.rstrip("/").rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass  # no folders in an object store

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        prefix = self._local(dir_or_prefix)
        root = prefix if os.path.isdir(prefix) else os.path.dirname(prefix)
        for folder, _, files in os.walk(root):
            for name in files:
                local = os.path.join(folder, name)
                if local.startswith(prefix):
                    yield FileMetadata(PREFIX + local, os.path.getsize(local), os.path.getmtime(local))

    def create(self, path, mime_type="application/octet-stream", compression_type=None):
        return _Upload(self._local(path))

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        return open(self._local(path), "rb")

    def copy(self, source_file_names, destination_file_names):
        for source, destination in zip(source_file_names, destination_file_names):
            os.makedirs(os.path.dirname(self._local(destination)), exist_ok=True)
            shutil.copyfile(self._local(source), self._local(destination))

    def rename(self, source_file_names, destination_file_names):
        type(self).renames += len(source_file_names)
        self.copy(source_file_names, destination_file_names)
        self.delete(source_file_names)

    def exists(self, path):
        return os.path.isfile(self._local(path))

    def size(self, path):
        return os.path.getsize(self._local(path))

    def last_updated(self, path):
        return os.path.getmtime(self._local(path))

    def checksum(self, path):
        return str(self.size(path))

    def metadata(self, path):
        return FileMetadata(path, self.size(path), self.last_updated(path))

    def delete(self, paths):
        missing = {}
        for path in paths:
            try:
                os.remove(self._local(path))
            except FileNotFoundError as exc:
                missing[path] = exc
        if missing:
            raise BeamIOError("Delete operation failed", missing)
