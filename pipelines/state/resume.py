"""Where a restarted run resumes, and whether it may.

Per model, the newest valid checkpoint (exact mode) or complete checkpoint
cut (sharded mode); per partition of the events topic, the first offset to
read so that every model's state is covered: the smallest next-offset over
the models (events a model has already learned are skipped by that model).

Every checkpoint records the source it was learnt from: the Kafka cluster
id, the topic, the topic's id (it changes when a topic is deleted and made
again) and its partition count. A run refuses to resume from checkpoints of
another cluster or topic, or whose offsets are past the topic's end (a
different or re-made topic), with one line saying what differs and how to
start fresh: ``--from-scratch`` moves the old checkpoints aside, or use
another ``--checkpoint-dir``.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from pipelines.kafka.offsets import Offsets, lowest_offsets

from . import store as fs
from .checkpoints import CheckpointStore
from .cuts import CutStore
from .progress import restart_offsets

FRESH_START = "start fresh with --from-scratch (the old checkpoints are moved aside) or use another --checkpoint-dir"


class ResumeRefused(ValueError):
    """Checkpoints that do not belong to the stream this run reads."""


class Saved(NamedTuple):
    """One model's state on disk, as far as resuming is concerned."""
    path: str
    source: dict | None
    offsets: Offsets


class ResumePoint(NamedTuple):
    models: dict[str, int]
    """Model -> the event count (exact) or sequence number (sharded) of the state it restarts from."""
    starts: Offsets
    """First offset to read per stream (absent: the default start)."""
    saved: list = []
    """The :class:`Saved` states the run would resume from (checked by :func:`check_resume`)."""

    def starts_of(self, topic: str) -> dict[int, int]:
        """Partition of ``topic`` -> first offset to read."""
        return {p: offset for (t, p), offset in self.starts.items() if t == topic}


def resume_exact(checkpoint_dir: str | None, topic: str) -> ResumePoint:
    """From the newest valid checkpoint of each model in ``checkpoint_dir``,
    reading each partition from where :func:`pipelines.state.progress.restart_offsets` says."""
    if not checkpoint_dir:
        return ResumePoint({}, {})
    store = CheckpointStore(checkpoint_dir)
    found = [c for c in (store.latest(m) for m in store.models()) if c is not None]
    saved = [Saved(c.path, c.source, c.offsets) for c in found]
    starts = restart_offsets(checkpoint_dir, {c.model: c.offsets for c in found})
    return ResumePoint({c.model: c.event_count for c in found}, starts, saved)


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
    saved = [Saved(c.path, c.source, c.offsets) for _, c in cuts]
    return ResumePoint({m: c.seq for m, c in cuts}, lowest_offsets(s.offsets for s in saved), saved)


def source_of(cluster_id: str, topic: str, topic_id: str, partitions: int) -> dict:
    """What a checkpoint records of the stream it was learnt from."""
    return {"cluster_id": cluster_id, "topic": topic, "topic_id": topic_id, "partitions": int(partitions)}


def check_resume(point: ResumePoint, source: dict, ends: dict[int, int], bootstrap: str) -> None:
    """ResumeRefused, naming the first checkpoint that does not belong to
    ``source`` (the stream this run reads; ``ends``: its end offsets)."""
    for saved in point.saved:
        problem = _mismatch(saved, source, ends, bootstrap)
        if problem:
            raise ResumeRefused(f"{saved.path}: {problem}; {FRESH_START}")


def _mismatch(saved: Saved, source: dict, ends: dict[int, int], bootstrap: str) -> str | None:
    topic = source["topic"]
    was = saved.source or {}  # checkpoints of older versions record no source: the offsets still tell
    if was.get("cluster_id") not in (None, source["cluster_id"]):
        return (f"made from Kafka cluster {was['cluster_id']!r}, but the broker at {bootstrap} is cluster "
                f"{source['cluster_id']!r}")
    if was.get("topic") == topic and was.get("topic_id") not in (None, source["topic_id"]):
        return (f"made from topic {topic!r} with id {was['topic_id']}, but that topic now has id "
                f"{source['topic_id']} (deleted and made again, or another broker)")
    if was.get("topic") == topic and was.get("partitions") not in (None, source["partitions"]):
        return f"made from topic {topic!r} with {was['partitions']} partitions, but it has {source['partitions']} now"
    for (t, partition), offset in sorted(saved.offsets.items()):
        if t != topic:
            continue
        if partition not in ends:
            return f"covers {topic}[{partition}], a partition the topic does not have (it has {len(ends)})"
        if offset > ends[partition]:
            return (f"covers {topic}[{partition}] up to offset {offset:,}, but the topic ends at offset "
                    f"{ends[partition]:,} there (a different or re-made topic?)")
    return None


def supersede(checkpoint_dir: str) -> str | None:
    """Move everything in ``checkpoint_dir`` into a ``.superseded-<time>``
    folder inside it (nothing is deleted); returns that folder, or None when
    there was nothing to move."""
    entries = [e for e in fs.listdir(checkpoint_dir) if not e.startswith(".superseded-")]
    if not entries:
        return None
    folder = fs.join(checkpoint_dir, ".superseded-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime()))
    fs.makedirs(folder)
    for entry in entries:
        fs.move(fs.join(checkpoint_dir, entry), fs.join(folder, entry))
    return folder
