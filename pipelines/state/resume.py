"""Where a restarted run resumes: per model, the newest valid checkpoint
(exact mode) or complete checkpoint cut (sharded mode), and per partition
of the events topic the first offset to read, so that every model's state
is covered: the smallest next-offset over the models (events a model has
already learned are skipped by that model)."""

from __future__ import annotations

from typing import NamedTuple

from .checkpoints import CheckpointStore
from .cuts import CutStore


class ResumePoint(NamedTuple):
    models: dict[str, int]
    """Model -> the event count (exact) or sequence number (sharded) of the state it restarts from."""
    starts: dict[int, int]
    """Partition of the events topic -> first offset to read (empty: the default start)."""


def _earliest(offset_maps, topic: str) -> dict[int, int]:
    starts: dict[int, int] = {}
    for offsets in offset_maps:
        for (t, partition), offset in offsets.items():
            if t == topic:
                starts[partition] = min(offset, starts.get(partition, offset))
    return starts


def resume_exact(checkpoint_dir: str | None, topic: str) -> ResumePoint:
    """From the newest valid checkpoint of each model in ``checkpoint_dir``."""
    if not checkpoint_dir:
        return ResumePoint({}, {})
    store = CheckpointStore(checkpoint_dir)
    found = [c for c in (store.latest(m) for m in store.models()) if c is not None]
    return ResumePoint({c.model: c.event_count for c in found}, _earliest((c.offsets for c in found), topic))


def resume_sharded(checkpoint_dir: str | None, topic: str, n_shards: int) -> ResumePoint:
    """From the newest complete cut of each model; a cut made with another
    shard count is refused (ValueError) rather than silently ignored."""
    if not checkpoint_dir:
        return ResumePoint({}, {})
    store = CutStore(checkpoint_dir)
    cuts = []
    for model in store.models():
        cut = store.latest(model, n_shards)
        if cut is None:
            others = store.shard_counts(model) - {n_shards}
            if others:
                raise ValueError(f"the checkpoints of model {model!r} in {checkpoint_dir} were made with "
                                 f"--shards {min(others)}; restart with that, or use a fresh --checkpoint-dir")
            continue
        cuts.append((model, cut))
    return ResumePoint({m: c.seq for m, c in cuts}, _earliest((c.offsets for _, c in cuts), topic))
