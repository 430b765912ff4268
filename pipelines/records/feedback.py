"""Sharded mode's feedback in batches: one ``scinol.FeedbackBatch`` record
carries the Feedback of many consecutive events of a model as columns, so
the combine step writes one Kafka message per batch, and the shards and the
feedback reader decode one and work on its columns, instead of one record
per event. The record's fields are those of ``scinol.Feedback``, one column
each (its schema file documents them)."""

from __future__ import annotations

BATCH_BYTES = 512 * 1024
"""About the most one FeedbackBatch holds, under Kafka's default 1 MB message limit."""


def feedback_batches(records: list[dict]) -> list[dict]:
    """Feedback records (dicts of ``scinol.Feedback``'s fields) of one model
    and run, in order, as FeedbackBatch records of at most about
    :data:`BATCH_BYTES` each (a new one also wherever the scalars' names
    change, as between a control record and an event's)."""
    width = max((len(r["g"]) for r in records), default=0)
    out, group, names = [], [], None
    for r in records:
        these = list(r["scalars"])
        if group and (these != names or len(group) >= BATCH_BYTES // (8 * (width + len(names)) + 64)):
            out.append(_batch(group, names, width))
            group = []
        group.append(r)
        names = these
    return out + ([_batch(group, names, width)] if group else [])


def _batch(records: list[dict], names: list[str], width: int) -> dict:
    blank = [0.0] * width
    return {"model": records[0]["model"], "run_id": records[0]["run_id"],
            "event_ids": [r["event_id"] for r in records], "seqs": [r["seq"] for r in records],
            "partitions": [r["partition"] for r in records], "offsets": [r["offset"] for r in records],
            "learned": [bool(r["g"]) for r in records], "g_width": width,
            "g": [x for r in records for x in (r["g"] or blank)], "scalar_names": names,
            "scalars": [r["scalars"][name] for r in records for name in names],
            "checkpoints": [r["checkpoint"] for r in records]}


def feedback_records(batch: dict) -> list[dict]:
    """The Feedback records a FeedbackBatch holds, in order (the inverse of
    :func:`feedback_batches`; for tests and tools, not the hot path)."""
    width, names = batch["g_width"], batch["scalar_names"]
    g, scalars, m = batch["g"], batch["scalars"], len(names)
    return [{"event_id": event_id, "model": batch["model"], "run_id": batch["run_id"], "seq": seq,
             "partition": partition, "offset": offset, "g": g[i * width: (i + 1) * width] if learned else [],
             "scalars": dict(zip(names, scalars[i * m: (i + 1) * m])), "checkpoint": checkpoint}
            for i, (event_id, seq, partition, offset, learned, checkpoint)
            in enumerate(zip(batch["event_ids"], batch["seqs"], batch["partitions"], batch["offsets"],
                             batch["learned"], batch["checkpoints"]))]


def end_markers(batches: list[dict]) -> bool:
    """Whether any of these batches holds the feedback reader's end marker
    (a control record: no event id, checkpoint set)."""
    return any(not event_id and checkpoint
               for b in batches for event_id, checkpoint in zip(b["event_ids"], b["checkpoints"]))
