"""Model checkpoints: a model's full state plus the stream position it covers.

One checkpoint is one file ``<dir>/<model>/ckpt-<events>.scinol`` (the
learner's no-pickle state file, written by the durable store of
:mod:`pipelines.state.store`: temp file, fsync, rename;
``<model>`` is the model name when it is a plain file name, else a stem and a
hash of it, so names from events never collide or climb out) whose
header also holds the next Kafka offset per partition that the state covers,
the event count and the schema version, so state and position can never
disagree. A JSON sidecar with the file's SHA-256 follows it; on load a file
whose checksum (or any array's) fails is skipped, with a warning, for the
previous one. The newest ``keep`` checkpoints of each model are kept.

``directory`` may be a local folder or a URL of any filesystem Beam has
registered (``gs://``, ``s3://``, ``hdfs://``): see :mod:`pipelines.state.store`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time

from learners import OnlineLearner
from learners.state import StateFileError

from pipelines.kafka.offsets import Offsets, offsets_records, offsets_from_records

from . import store as fs
from .store import sidecar_path, verify, write_durably

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_NAME = re.compile(r"^ckpt-(\d{12})\.scinol$")
_TEMP = re.compile(r"^(ckpt-\d{12}\.(scinol|json|scinol\.json)(\.\d+-[0-9a-f]+)?\.tmp|\.tmp-.*\.scinol)$")
STALE_TEMP_SECONDS = 600.0
_reported: set[str] = set()  # invalid checkpoints already warned about


def _safe(model: str) -> str:
    """A model name as one directory name. Names come from events, so two
    names must never share a directory (one model would load the other's
    state) and none may climb out (``..``) or exceed a file name's length.
    Plain names are their own directory; any other gets a readable stem and
    a hash of the exact name after a ``~``, which no plain name contains."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", model)
    if plain == model and 0 < len(model) <= 100 and not model.startswith("."):
        return model
    digest = hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{plain.lstrip('.')[:60]}~{digest}"


class Checkpoint:
    """A loaded checkpoint: the learner and where in the stream it stands."""

    def __init__(self, path: str, learner: OnlineLearner):
        self.path = path
        self.learner = learner
        h = learner.loaded_header
        self.model: str = h["model"]
        self.event_count: int = int(h["event_count"])
        self.source: dict | None = h.get("source")
        """The Kafka cluster and topic the state was learnt from (see pipelines.state.resume)."""
        self.offsets = offsets_from_records(h["offsets"])


class CheckpointStore:
    def __init__(self, directory: str, keep: int = 3, source: dict | None = None):
        fs.check_location(directory)
        self.directory = directory
        self.keep = keep
        self.source = source  # recorded in every checkpoint written

    def model_dir(self, model: str) -> str:
        return fs.join(self.directory, _safe(model))

    def save(self, model: str, learner: OnlineLearner, offsets: Offsets,
             event_count: int, aux: dict | None = None, labels_learned: int = 0) -> dict:
        """Write a checkpoint durably; returns its manifest (the ModelCheckpoint
        header). ``aux``: arrays kept with the state (events awaiting labels);
        the file is named by the records (events and delayed labels) it covers."""
        folder = self.model_dir(model)
        path = fs.join(folder, f"ckpt-{event_count + labels_learned:012d}.scinol")
        header = {
            "model": model,
            "event_count": int(event_count),
            "labels_learned": int(labels_learned),
            "offsets": offsets_records(offsets),
            "schema_version": SCHEMA_VERSION,
            "source": self.source,
        }
        # The time goes in the sidecar only: two attempts writing this
        # checkpoint at once then write the same bytes, so whichever file and
        # whichever sidecar win the renames, the checksum matches.
        manifest = {**header, **learner.header(), "uri": fs.absolute(path), "n_coords": learner.state.n_coords,
                    "created_ms": int(time.time() * 1000)}
        manifest = write_durably(path, lambda tmp: learner.save(tmp, extra=header, aux=aux), manifest)
        self._prune(folder)
        return manifest

    def _paths(self, folder: str) -> list[str]:
        names = sorted((n for n in fs.listdir(folder) if _NAME.match(n)), reverse=True)
        return [fs.join(folder, n) for n in names]

    def _prune(self, folder: str) -> None:
        for path in self._paths(folder)[self.keep:]:
            fs.delete(path, sidecar_path(path))
        # Temp files a crash left behind (never loaded: their names do not
        # match); only old ones, in case another writer is mid-write.
        now = time.time()
        for name in fs.listdir(folder):
            victim = fs.join(folder, name)
            if _TEMP.match(name) and now - fs.mtime(victim) > STALE_TEMP_SECONDS:
                fs.delete(victim)

    def latest(self, model: str) -> Checkpoint | None:
        """The newest valid checkpoint of ``model``; corrupt ones are skipped with a warning."""
        return self._newest(self.model_dir(model), model)

    def models(self) -> list[str]:
        """Names of the models with a valid checkpoint (as stored in them)."""
        found = (self._newest(fs.join(self.directory, entry)) for entry in sorted(fs.listdir(self.directory)))
        return [c.model for c in found if c is not None]

    def _newest(self, folder: str, model: str | None = None) -> Checkpoint | None:
        for path in self._paths(folder):
            try:
                source = fs.loadable(path)  # a remote file is read once: for its checksum and its load
                problem = verify(path, source if isinstance(source, bytes) else None)
            except OSError as exc:
                problem = f"unreadable ({exc})"
            if problem is None:
                try:
                    ckpt = Checkpoint(path, OnlineLearner.load(source))
                    if model is None or ckpt.model == model:
                        return ckpt
                    problem = f"it is model {ckpt.model[:100]!r}'s"
                except (StateFileError, KeyError, ValueError, TypeError, OSError) as exc:
                    problem = str(exc)
            if path not in _reported:  # once per process: the store is consulted several times at start
                _reported.add(path)
                log.warning("skipping checkpoint %s: %s; using an older one", path, problem)
        return None


CHECKPOINT_FIELDS = ("model", "learner", "params", "loss", "loss_param", "n_outputs", "bias", "n_coords",
                     "event_count", "offsets", "schema_version", "checksum", "uri", "created_ms")


def checkpoint_record(manifest: dict) -> dict:
    """A manifest as a ``ModelCheckpoint`` Avro record (the compacted topic's value)."""
    record = {k: manifest[k] for k in CHECKPOINT_FIELDS}
    record["params"] = {k: float(v) for k, v in record["params"].items()}
    return record
