"""Where a restart of exact mode may start reading each partition.

Each model's checkpoint says which offsets its own state covers, but a model
covers a partition only up to its own last part of it, and a model that has
no checkpoint yet (new since the last one, or killed while its first was
being written) says nothing; the other models' offsets must not make a
restart skip its events. So:

* the driver writes ``run-start.json`` when a run starts: the offsets it
  starts reading each partition from;
* the sequencing step (keyed by partition, it sees every batch's models in
  offset order) writes ``sequenced-<topic>-<partition>.json`` every few
  seconds: how far the partition has been sequenced, and every model that
  has had a part of it since the run started;
* a restart reads a partition from the smallest of: how far it was
  sequenced, and each of those models' covered offset (the run's start for
  a model whose checkpoint does not cover the partition). A model that had
  no part of the partition since the run started has nothing of it between
  the run's start and how far it was sequenced, and nothing before the
  run's start that its checkpoint lacks (the run started where every model
  was covered), so it does not hold the restart back. Without a record for
  a partition, the restart reads it from the run's start (or from below it,
  where a model's checkpoint covers less).

Files live in ``<checkpoint dir>/.progress/`` (a name no model directory
can have) and are written durably; records older than ``run-start.json``
belong to an earlier run and are ignored.
"""

from __future__ import annotations

import time

from pipelines.kafka.offsets import Offsets, Stream, offsets_records, offsets_from_records, lowest_offsets

from . import store as fs
from .store import write_json_durably

FOLDER = ".progress"

def _folder(checkpoint_dir: str) -> str:
    return fs.join(checkpoint_dir, FOLDER)


def write_run_start(checkpoint_dir: str, starts: dict[Stream, int]) -> None:
    fs.makedirs(_folder(checkpoint_dir))
    write_json_durably(fs.join(_folder(checkpoint_dir), "run-start.json"),
                       {"written_ns": time.time_ns(), "offsets": offsets_records(starts)})


def _sequenced_name(stream: Stream) -> str:
    return f"sequenced-{stream[0]}-{stream[1]}.json"  # Kafka topic names are [a-zA-Z0-9._-]


def write_sequenced(checkpoint_dir: str, stream: Stream, end: int, models: list[str]) -> None:
    """``stream`` has been sequenced up to ``end``; ``models`` had parts of it since the run started."""
    fs.makedirs(_folder(checkpoint_dir))
    write_json_durably(fs.join(_folder(checkpoint_dir), _sequenced_name(stream)),
                       {"written_ns": time.time_ns(), "topic": stream[0], "partition": stream[1], "end": int(end),
                        "models": list(models)})


def restart_offsets(checkpoint_dir: str, covered: dict[str, Offsets]) -> Offsets:
    """Per partition, the offset a restart reads from, given each model's
    newest checkpoint's covered offsets (``covered``: model -> offsets)."""
    folder = _folder(checkpoint_dir)
    start = fs.read_json(fs.join(folder, "run-start.json"))
    lowest = lowest_offsets(covered.values())
    if start is None:
        return lowest
    out: Offsets = {}
    for stream, run_start in offsets_from_records(start["offsets"]).items():
        record = fs.read_json(fs.join(folder, _sequenced_name(stream)))
        if record is None or record["written_ns"] <= start["written_ns"]:
            out[stream] = min(run_start, lowest.get(stream, run_start))
            continue
        out[stream] = min([int(record["end"])] + [covered.get(m, {}).get(stream, run_start)
                                                   for m in record["models"]])
    for stream, offset in lowest.items():  # partitions the run did not read
        out.setdefault(stream, offset)
    return out
