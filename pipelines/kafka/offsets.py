"""Where a reader or a state stands in each partition: one type, one encoding.

:data:`Offsets` maps a stream, (topic, partition), to its next offset: the
first one not yet covered. A model's checkpoint, a sharded cut's shards and
router, the restart records and the live steps all hold this one type, and
store it one way (:func:`offsets_records`, read back by
:func:`offsets_from_records`), as records sorted by stream::

    [{"topic": "events", "partition": 0, "offset": 1200}, ...]

(the ``offsets`` array of the ModelCheckpoint schema, and of the JSON
headers of sharded cuts). A plain dict, not a class of its own: the live
steps' state is pickled into runner state and savepoints, which must read
back across versions, and a step's chain shares and advances its dict.
"""

from __future__ import annotations

from typing import Iterable

Stream = tuple[str, int]
"""(topic, partition)."""

Offsets = dict[Stream, int]
"""Stream -> next offset."""


def offsets_records(offsets: Offsets) -> list[dict]:
    """The stored form: one record per stream, in stream order."""
    return [{"topic": t, "partition": p, "offset": int(o)} for (t, p), o in sorted(offsets.items())]


def offsets_from_records(records: Iterable[dict]) -> Offsets:
    """Back from :func:`offsets_records` (or any records with those three fields)."""
    return {(r["topic"], int(r["partition"])): int(r["offset"]) for r in records}


def lowest_offsets(many: Iterable[Offsets]) -> Offsets:
    """Per stream, the smallest offset of those of ``many`` that have one."""
    out: Offsets = {}
    for offsets in many:
        for stream, offset in offsets.items():
            out[stream] = min(offset, out.get(stream, offset))
    return out


def advance_offsets(offsets: Offsets, other: Offsets) -> None:
    """Move each of ``offsets`` to ``other``'s where that is further on (never back)."""
    for stream, offset in other.items():
        offsets[stream] = max(offsets.get(stream, 0), offset)
