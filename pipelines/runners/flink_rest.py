"""A Flink cluster's REST API, as much of it as the project uses: jobs,
their state, cancelling one, stopping one with a savepoint, and the records
each subtask read (Flink's "REST API" documentation: ``GET /jobs/overview``,
``GET /jobs/<id>``, ``PATCH /jobs/<id>?mode=cancel``, ``POST
/jobs/<id>/stop`` and ``GET /jobs/<id>/savepoints/<trigger>``,
``GET /jobs/<id>/vertices/<id>``).

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


def rest(master: str, path: str, method: str = "GET", timeout: float = 15.0, attempts: int = 3,
         body: dict | None = None):
    """The JSON answer of the cluster at ``master`` (``host:port``) to
    ``method path`` (with ``body`` as JSON).

    A JobManager busy submitting or restoring a job on a loaded machine can
    leave a request unanswered for seconds, so a read that times out or is
    reset is asked again (``attempts`` in all); an HTTP error answer is not."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{master}{path}", method=method, data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
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


class SavepointError(RuntimeError):
    """A savepoint Flink could not take (its own reason, first line)."""


def find_job(master: str, ref: str | None) -> dict:
    """The running job whose id or name (Beam's ``--job_name``) is ``ref``;
    with ``ref`` None, the only running job. LookupError (one line) if none
    or several match."""
    running = [job for job in jobs(master) if job["state"] == "RUNNING"]
    found = running if ref is None else [job for job in running if ref in (job["jid"], job["name"])]
    if len(found) == 1:
        return found[0]
    listed = ", ".join(f"{job['jid']} ({job['name']})" for job in running) or "none"
    if not found:
        what = "no running job" if ref is None else f"no running job with id or name {ref!r}"
        raise LookupError(f"{what} on {master}; running: {listed}")
    raise LookupError(f"{len(found)} jobs are running on {master}, name one: {listed}")


def stop_with_savepoint(master: str, job_id: str, directory: str, drain: bool = False,
                        timeout: float = 300.0) -> str:
    """Stop job ``job_id`` with a savepoint in ``directory`` (Flink's
    stop-with-savepoint: the sources stop, the savepoint is taken and the
    job finishes, committing what its last checkpoint holds; ``drain``
    first sends the end of event time). The savepoint's location."""
    trigger = rest(master, f"/jobs/{job_id}/stop", method="POST",
                   body={"targetDirectory": directory, "drain": drain})["request-id"]
    deadline = time.monotonic() + timeout
    while True:
        answer = rest(master, f"/jobs/{job_id}/savepoints/{trigger}")
        if answer["status"]["id"] == "COMPLETED":
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"Flink took no savepoint of job {job_id} within {timeout:.0f} s")
        time.sleep(0.5)
    operation = answer.get("operation") or {}
    if "location" not in operation:
        cause = (operation.get("failure-cause") or {}).get("stack-trace", "no reason given")
        raise SavepointError(_first_cause(cause))
    return operation["location"]


def _first_cause(trace: str) -> str:
    """The innermost "Caused by" of a Java stack trace, or its first line."""
    lines = [ln.strip() for ln in trace.splitlines() if ln.strip()]
    causes = [ln[len("Caused by: "):] for ln in lines if ln.startswith("Caused by: ")]
    return (causes[-1] if causes else lines[0] if lines else "no reason given")[:400]


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
