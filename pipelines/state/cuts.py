"""Sharded mode's checkpoints: one *cut* per checkpoint, written in parts.

A cut at sequence number t is a directory ``<dir>/<model>/cut-<t>/`` holding
``shard-<s>-of-<K>.scinol`` for each shard s: the shard's coordinates and
their state after applying the feedback of events 1..t, with the model's
global scalars at t (the no-pickle state file with per-array checksums,
written by the durable store of :mod:`pipelines.state.store`). Shard 0's
header also holds the next offset per events-topic partition that events
1..t cover and the model version: it is what the route and combine steps
restart from.

The combine step asks for a cut by marking event t's feedback (and the
feedback reader asks for a last one at the end of a bounded run); each
shard writes its part when it has applied exactly that far, so all parts
describe the state after events 1..t: one consistent cut, however far ahead
the shards had predicted. A cut is usable when all K parts are present and
valid; on start the newest usable cut is loaded (an older one when the
newest is damaged, with a warning) and the events topic is read from its
offsets.

``directory`` may be a local folder or a URL of any filesystem Beam has
registered (``gs://``, ``s3://``, ``hdfs://``): see :mod:`pipelines.state.store`.
"""

from __future__ import annotations

import logging
import re
import time

import numpy as np

from learners import OnlineLearner
from learners.state import LearnerState, StateFileError, load_state, load_state_with_aux, save_state

from pipelines.kafka.offsets import offsets_from_records

from .checkpoints import _safe
from . import store as fs
from .store import verify, write_durably

log = logging.getLogger(__name__)

_CUT = re.compile(r"^cut-(\d{12})$")
_PART = re.compile(r"^shard-\d+-of-(\d+)\.scinol$")


def shard_file(shard: int, n_shards: int) -> str:
    return f"shard-{shard}-of-{n_shards}.scinol"


LATE_PARTS = ("router", "combiner")
"""With delayed labels a cut has two more parts, written by the route and
combine steps at the cut's event: the events and labels waiting (with the
offsets taken in), and the predictions held for their labels. Shard 0's
header then says ``late_labels``, so a cut without them is incomplete."""


def part_file(name: str) -> str:
    return f"{name}.scinol"


class Cut:
    """A complete, verified cut."""

    def __init__(self, path: str, seq: int, n_shards: int, head: dict):
        self.path, self.seq, self.n_shards = path, seq, n_shards
        self.head = head  # shard 0's header
        self.learned = int(head["learned"])
        self.source: dict | None = head.get("source")
        self.scalars = dict(head["scalars"])
        self.offsets = offsets_from_records(head["offsets"])

    def shard(self, s: int) -> tuple[np.ndarray, LearnerState, dict]:
        """(global coordinates, state, header) of shard ``s``'s part."""
        state, header = _load(fs.join(self.path, shard_file(s, self.n_shards)))
        coords = state.arrays.pop("coords")
        state.fill.pop("coords", None)
        return coords, state, header

    def part(self, name: str) -> tuple[dict, dict]:
        """(header, arrays) of one of the :data:`LATE_PARTS`."""
        _, header, aux = load_state_with_aux(fs.loadable(fs.join(self.path, part_file(name))))
        return header, aux

    def merged_learner(self, make_learner=None) -> OnlineLearner:
        """The K shard parts put back together as one learner (for
        inspection, export, or continuing in exact mode); configured as the
        parts' headers say unless ``make_learner`` is given."""
        learner = make_learner() if make_learner else OnlineLearner.from_header(self.head, self.path)
        parts = [self.shard(s) for s in range(self.n_shards)]
        n_coords = max((int(c.max(initial=-1)) + 1 for c, _, _ in parts), default=0)
        learner._ensure_state(max(n_coords - learner.bias, 0))
        for coords, state, _ in parts:
            for name, arr in learner.state.arrays.items():
                arr[coords] = state.arrays[name]
        learner.state.scalars = dict(parts[0][1].scalars)
        learner.loaded_header = {k: v for k, v in self.head.items() if k != "scalars"}
        return learner


def _load(path: str):
    """load_state of a local or remote part (a remote one read once, as bytes)."""
    try:
        return load_state(fs.loadable(path))
    except OSError as exc:
        raise StateFileError(f"{path}: unreadable ({exc})") from None


def load_cut(path: str) -> Cut:
    """The cut in directory ``path`` (StateFileError if incomplete or damaged)."""
    parts = [n for n in fs.listdir(path) if _PART.match(n)]
    m = _CUT.match(fs.basename(path))
    if not parts or m is None:
        raise StateFileError(f"{path}: not a checkpoint cut directory (cut-<seq>/shard-<s>-of-<K>.scinol)")
    n_shards = int(_PART.match(parts[0]).group(1))
    cut, problem = CutStore._check(path, int(m.group(1)), n_shards)
    if cut is None:
        raise StateFileError(f"{path}: {problem}")
    return cut


class CutStore:
    def __init__(self, directory: str, keep: int = 3, source: dict | None = None):
        fs.check_location(directory)
        self.directory, self.keep = directory, keep
        self.source = source  # recorded in every part written

    def cut_dir(self, model: str, seq: int) -> str:
        return fs.join(self.directory, _safe(model), f"cut-{seq:012d}")

    def save_shard(self, model: str, seq: int, shard: int, n_shards: int, coords: np.ndarray,
                   state: LearnerState, header: dict) -> str:
        path = fs.join(self.cut_dir(model, seq), shard_file(shard, n_shards))
        part = LearnerState({**state.arrays, "coords": coords}, state.scalars, {**state.fill, "coords": [-1]})
        where = {"model": model, "seq": int(seq), "shard": shard, "n_shards": n_shards}
        header = {**header, **where, "source": self.source}
        where["created_ms"] = int(time.time() * 1000)  # sidecar only: see CheckpointStore.save
        write_durably(path, lambda tmp: save_state(tmp, part, header), where, kind="cut")
        self._prune(model, n_shards)
        return path

    def save_part(self, model: str, seq: int, name: str, aux: dict, header: dict) -> str:
        """One of the :data:`LATE_PARTS` of the cut at ``seq``: numeric arrays and a header."""
        path = fs.join(self.cut_dir(model, seq), part_file(name))
        where = {"model": model, "seq": int(seq), "part": name}
        header = {**header, **where, "source": self.source}
        where["created_ms"] = int(time.time() * 1000)  # sidecar only: see CheckpointStore.save
        empty = LearnerState({"none": np.zeros(0)})
        write_durably(path, lambda tmp: save_state(tmp, empty, header, aux), where, kind="cut")
        return path

    def _cuts(self, model: str) -> list[tuple[int, str]]:
        return self._cuts_in(fs.join(self.directory, _safe(model)))

    @staticmethod
    def _cuts_in(folder: str) -> list[tuple[int, str]]:
        names = fs.listdir(folder)
        return sorted(((int(m.group(1)), fs.join(folder, n)) for n in names if (m := _CUT.match(n))),
                      reverse=True)

    @staticmethod
    def _check(path: str, seq: int, n_shards: int) -> tuple[Cut | None, str | None]:
        """(the cut, None) if complete and valid, else (None, why not)."""
        head = None
        present = set(fs.listdir(path))
        for s in range(n_shards):
            part = fs.join(path, shard_file(s, n_shards))
            if shard_file(s, n_shards) not in present:
                return None, f"incomplete (no part of shard {s} of {n_shards})"
            problem = verify(part)
            if problem is not None:
                return None, f"shard {s}'s part: {problem}"
            try:
                state, header = _load(part)
            except StateFileError as exc:
                return None, str(exc)
            if header.get("seq") != seq:
                return None, f"shard {s}'s part is for event #{header.get('seq')}, not #{seq}"
            if s == 0:
                head = {**header, "scalars": state.scalars}
        for name in LATE_PARTS if head.get("late_labels") else ():
            if part_file(name) not in present:
                return None, f"incomplete (no {name} part)"
            problem = verify(fs.join(path, part_file(name)))
            if problem is not None:
                return None, f"the {name} part: {problem}"
        return Cut(path, seq, n_shards, head), None

    def at(self, model: str, seq: int, n_shards: int) -> Cut:
        """The cut at ``seq``, read from shard 0's part only: for the steps of
        a run whose driver already verified the whole cut (``latest``)."""
        path = self.cut_dir(model, seq)
        state, header = _load(fs.join(path, shard_file(0, n_shards)))
        return Cut(path, seq, n_shards, {**header, "scalars": state.scalars})

    def latest(self, model: str, n_shards: int) -> Cut | None:
        """The newest complete and valid cut of ``model``."""
        for seq, path in self._cuts(model):
            cut, problem = self._check(path, seq, n_shards)
            if cut is not None:
                return cut
            if not problem.startswith("incomplete"):
                log.warning("skipping checkpoint cut %s: %s; using an older one", path, problem)
        return None

    def shard_counts(self, model: str) -> set[int]:
        """Shard counts of the cuts on disk (to refuse a mismatched restart)."""
        counts = set()
        for _, path in self._cuts(model):
            counts.update(int(m.group(1)) for n in fs.listdir(path) if (m := _PART.match(n)))
        return counts

    def models(self) -> list[str]:
        """Names of the models with cuts (as stored in their parts)."""
        names = []
        for entry in sorted(fs.listdir(self.directory)):
            for _, path in self._cuts_in(fs.join(self.directory, entry)):
                parts = sorted(n for n in fs.listdir(path) if _PART.match(n))
                try:
                    names.append(_load(fs.join(path, parts[0]))[1]["model"])
                    break
                except (IndexError, StateFileError, KeyError):
                    continue
        return names

    def _prune(self, model: str, n_shards: int) -> None:
        """Keep the newest ``keep`` complete cuts and anything newer than the
        oldest of them (cuts still being written)."""
        complete = 0
        wanted = [shard_file(s, n_shards) for s in range(n_shards)]
        for _seq, path in self._cuts(model):
            if complete >= self.keep:
                fs.delete(path)
            elif set(wanted) <= set(fs.listdir(path)):
                complete += 1
