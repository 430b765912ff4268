"""The soak's processes (``scinol bench soak``): every process of the job
named by its role, and their resident memory read from ``/proc``."""

from __future__ import annotations

from pipelines.bench.scaling import control_port, descendants, listening_ports

# pipelines.bench.load_memory (rss_kib) is imported where used: `scinol` builds the
# soak's parser for every command, and that module brings numpy.

LOAD = "load producer"
"""The benchmark's own producer: shown, not judged (it is no part of the job)."""


class Processes:
    """Every process of the job by role: the JobManager, each TaskManager,
    the worker pool and each Python worker (named by the TaskManager it
    serves, found by its control port), the broker, the ``scinol run``
    client and its job server JVM, and the load producer."""

    def __init__(self, cluster, broker_pid: int, run_pid: int, load_pid: int):
        self.cluster, self.broker_pid, self.run_pid, self.load_pid = cluster, broker_pid, run_pid, load_pid
        self.workers: dict[int, str] = {}  # harness pid -> "python worker (tm0)"

    def groups(self) -> dict[str, list[int]]:
        tms = {f"tm{i}": proc.pid for i, (_, proc) in enumerate(sorted(self.cluster.taskmanagers.items()))}
        found = {"jobmanager": descendants(self.cluster.jobmanager.pid),
                 **{f"taskmanager ({name})": descendants(pid) for name, pid in tms.items()},
                 "worker pool": [self.cluster.pool.pid], "broker": descendants(self.broker_pid),
                 "scinol run": [self.run_pid], "job server": descendants(self.run_pid)[1:], LOAD: [self.load_pid]}
        for pid in descendants(self.cluster.pool.pid)[1:]:
            if pid not in self.workers and (port := control_port(pid)) is not None:
                owner = [name for name, tm in tms.items() if port in listening_ports(descendants(tm))]
                self.workers[pid] = f"python worker ({owner[0] if owner else pid})"
            if pid in self.workers:
                found.setdefault(self.workers[pid], []).append(pid)
        return found


def rss_mib(groups: dict[str, list[int]]) -> dict[str, float]:
    """Each group's resident memory in MiB (processes gone meanwhile count 0;
    a group with none alive is left out)."""
    out = {}
    for name, pids in groups.items():
        alive = [kib for kib in map(_rss_or_none, pids) if kib is not None]
        if alive:
            out[name] = sum(alive) / 1024
    return out


def _rss_or_none(pid: int) -> int | None:
    from pipelines.bench.load_memory import rss_kib

    try:
        return rss_kib(pid)
    except (OSError, StopIteration):  # gone, or a zombie without VmRSS
        return None


def mean_rss(samples: list[dict[str, float]]) -> dict[str, float]:
    """Each process's mean over the samples it appears in."""
    names = {name for sample in samples for name in sample}
    return {name: sum(s[name] for s in samples if name in s) / sum(1 for s in samples if name in s)
            for name in sorted(names)}
