"""A Flink cluster's REST API, as much of it as the project uses: jobs,
their state, cancelling one, and the records each subtask read (Flink's
"REST API" documentation: ``GET /jobs/overview``, ``GET /jobs/<id>``,
``PATCH /jobs/<id>?mode=cancel``, ``GET /jobs/<id>/vertices/<id>``).

Cancelling a Beam pipeline result on a Flink *session* cluster goes to
Beam's job server, which stops waiting for the job but does not cancel it
there: the job keeps running and keeps its task slots. So whoever started
the job cancels it here, by the job's name (Beam's ``--job_name``)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

ENDED = ("CANCELED", "FINISHED", "FAILED")


def rest(master: str, path: str, method: str = "GET", timeout: float = 15.0, attempts: int = 3):
    """The JSON answer of the cluster at ``master`` (``host:port``) to ``method path``.

    A JobManager busy submitting or restoring a job on a loaded machine can
    leave a request unanswered for seconds, so a read that times out or is
    reset is asked again (``attempts`` in all); an HTTP error answer is not."""
    request = urllib.request.Request(f"http://{master}{path}", method=method)
    for attempt in range(1, attempts + 1):
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:
                body = resp.read()
            return json.loads(body) if body else {}
        except urllib.error.HTTPError:  # an answer, not a silence
            raise
        except (TimeoutError, ConnectionError, urllib.error.URLError):
            if attempt == attempts:
                raise
            time.sleep(1.0)


def jobs(master: str) -> list[dict]:
    """Each job's id (``jid``), name, state, start and end time."""
    return rest(master, "/jobs/overview")["jobs"]


def cancel_live_jobs(master: str, name: str | None = None, timeout: float = 60.0) -> list[str]:
    """Cancel the jobs that have not ended (those called ``name``, or all),
    waiting for each to end; their ids."""
    live = [job["jid"] for job in jobs(master) if name in (None, job["name"]) and job["state"] not in ENDED]
    for job_id in live:
        cancel_job(master, job_id, timeout)
    return live


def cancel_job(master: str, job_id: str, timeout: float = 60.0) -> None:
    """Cancel job ``job_id`` and wait until it has ended (TimeoutError if not in ``timeout`` s)."""
    rest(master, f"/jobs/{job_id}?mode=cancel", method="PATCH")
    deadline = time.monotonic() + timeout
    while rest(master, f"/jobs/{job_id}")["state"] not in ENDED:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Flink job {job_id} on {master} did not end within {timeout:.0f} s of its "
                               f"cancellation")
        time.sleep(0.5)


def records_per_subtask(master: str, job_id: str) -> dict[str, list[int]]:
    """Each step (Flink vertex) of a job: the records each of its subtasks read."""
    found = {}
    for vertex in rest(master, f"/jobs/{job_id}")["vertices"]:
        subtasks = rest(master, f"/jobs/{job_id}/vertices/{vertex['id']}")["subtasks"]
        found[vertex["name"]] = [s["metrics"]["read-records"] for s in sorted(subtasks, key=lambda s: s["subtask"])]
    return found


def settled_records(master: str, job_id: str, timeout: float = 90.0) -> dict[str, list[int]]:
    """:func:`records_per_subtask` once two reads 11 s apart agree: the REST
    API serves metrics it fetches from the TaskManagers every 10 s
    (``metrics.fetcher.update-interval``)."""
    deadline, last = time.monotonic() + timeout, None
    while (now := records_per_subtask(master, job_id)) != last:
        if time.monotonic() > deadline:
            raise TimeoutError(f"Flink's record counts for job {job_id} still moving after {timeout:.0f} s: {now}")
        last = now
        time.sleep(11)
    return now
