"""How far a run may safely skip: the floor under its models' checkpoints.

Each model's checkpoint says which offsets its own state covers, but a model
that has no checkpoint yet (new since the last one, or killed while its
first was being written) says nothing, and the other models' offsets must
not make a restart skip its events. So:

* the driver writes ``run-start.json`` when a run starts: the offsets it
  starts reading each partition from;
* a worker writes ``worker-<id>.json`` after each checkpoint moment in
  which it checkpointed *every* model it holds: how far it had then seen
  each partition (every model it holds covers its own events below that);
* a restart reads no partition from past the floor: the smallest of those
  offsets over the worker files written since the run started (over
  ``run-start.json`` when there are none).

A worker that never completed a moment leaves no file: the floor then stays
at its run's start for the partitions it alone saw, which only costs
re-reading. Files live in ``<checkpoint dir>/.progress/`` (a name no model
directory can have) and are written durably.
"""

from __future__ import annotations

import time

from . import store as fs
from .store import write_json_durably

FOLDER = ".progress"


def _folder(checkpoint_dir: str) -> str:
    return fs.join(checkpoint_dir, FOLDER)


def _encode(offsets: dict[tuple[str, int], int]) -> list:
    return [{"topic": t, "partition": p, "offset": int(o)} for (t, p), o in sorted(offsets.items())]


def _decode(entries: list) -> dict[tuple[str, int], int]:
    return {(e["topic"], int(e["partition"])): int(e["offset"]) for e in entries}


def write_run_start(checkpoint_dir: str, starts: dict[tuple[str, int], int]) -> None:
    fs.makedirs(_folder(checkpoint_dir))
    write_json_durably(fs.join(_folder(checkpoint_dir), "run-start.json"),
                       {"written_ns": time.time_ns(), "offsets": _encode(starts)})


def write_worker(checkpoint_dir: str, worker: str, seen: dict[tuple[str, int], int]) -> None:
    fs.makedirs(_folder(checkpoint_dir))
    write_json_durably(fs.join(_folder(checkpoint_dir), f"worker-{worker}.json"),
                       {"written_ns": time.time_ns(), "offsets": _encode(seen)})


def floor(checkpoint_dir: str) -> dict[tuple[str, int], int] | None:
    """Per partition, the offset no restart may start past (None: no record)."""
    folder = _folder(checkpoint_dir)
    start = fs.read_json(fs.join(folder, "run-start.json"))
    if start is None:
        return None
    workers = [w for w in (fs.read_json(fs.join(folder, n)) for n in sorted(fs.listdir(folder))
                           if n.startswith("worker-")) if w and w["written_ns"] > start["written_ns"]]
    if not workers:
        return _decode(start["offsets"])
    out: dict[tuple[str, int], int] = {}
    for w in workers:
        for key, offset in _decode(w["offsets"]).items():
            out[key] = min(offset, out.get(key, offset))
    for key, offset in _decode(start["offsets"]).items():  # partitions no worker has seen yet
        out.setdefault(key, offset)
    return out
