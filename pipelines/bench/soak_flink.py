"""What the soak (``scinol bench soak``) asks Flink's REST API: the last
completed checkpoint, each step's state in it, and the TaskManagers' heap."""

from __future__ import annotations


def checkpoint_figures(answer: dict) -> dict:
    """From ``GET /jobs/<id>/checkpoints``: the last completed checkpoint's id,
    size (bytes) and duration (ms), and the counts so far."""
    counts = answer.get("counts", {})
    last = (answer.get("latest") or {}).get("completed") or {}
    return {"id": last.get("id"), "size_bytes": last.get("state_size", last.get("checkpointed_size")),
            "duration_ms": last.get("end_to_end_duration"), "completed": counts.get("completed", 0),
            "failed": counts.get("failed", 0)}


def checkpoint_steps(cluster, job: str, checkpoint_id: int | None) -> dict[str, int]:
    """Each step's (Flink vertex's) state in checkpoint ``checkpoint_id``, in
    bytes (``GET /jobs/<id>/checkpoints/details/<checkpoint id>``): which step grows."""
    if checkpoint_id is None:
        return {}
    names = {v["id"]: v["name"] for v in cluster.rest(f"/jobs/{job}")["vertices"]}
    tasks = cluster.rest(f"/jobs/{job}/checkpoints/details/{checkpoint_id}").get("tasks", {})
    return {names.get(vid, vid): t.get("state_size", t.get("checkpointed_size", 0)) for vid, t in tasks.items()}


def heap_used_mib(cluster) -> dict[str, float]:
    """Each TaskManager's JVM heap in use (Flink's ``Status.JVM.Memory.Heap.Used``),
    MiB: whether a growing RSS is live data or heap pages touched for the first time."""
    out = {}
    for i, resource in enumerate(sorted(cluster.taskmanagers)):
        try:
            answer = cluster.rest(f"/taskmanagers/{resource}/metrics?get=Status.JVM.Memory.Heap.Used")
            out[f"tm{i}"] = float(answer[0]["value"]) / 2**20
        except (OSError, ValueError, LookupError):  # not served (yet): the row goes on without it
            out[f"tm{i}"] = float("nan")
    return out
