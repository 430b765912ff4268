"""CPU quotas and CPU accounting for a benchmark's processes, through Linux
control groups (version 1: the ``cpu`` and ``cpuacct`` hierarchies; version
2: ``cpu.max`` and ``cpu.stat`` in the unified hierarchy).

A group gets a quota (``cores``: 0.6 = 60 ms of CPU every 100 ms, however
many threads) or none (accounting only); a process moved in takes its
threads and its later children with it. Needs a writable cgroup file
system (root in a container that mounts it read-write); :func:`available`
says why not when it is not."""

from __future__ import annotations

import os
import time
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


def _v1_dirs(name: str) -> tuple[Path, Path]:
    return ROOT / "cpu" / name, ROOT / "cpuacct" / name


def _unified() -> Path:
    return ROOT if (ROOT / "cgroup.controllers").exists() else ROOT / "unified"


def available() -> str | None:
    """None if CPU groups can be made here, else why not (one line)."""
    cpu, acct = ROOT / "cpu", ROOT / "cpuacct"
    if (cpu / "cpu.cfs_quota_us").exists() and (acct / "cpuacct.usage").exists():
        if os.access(cpu, os.W_OK) and os.access(acct, os.W_OK):
            return None
        return f"{cpu} and {acct} are not writable (run as root with the cgroup file system mounted read-write)"
    control = _unified() / "cgroup.subtree_control"
    if control.exists() and "cpu" in control.read_text().split():
        return None if os.access(control.parent, os.W_OK) else f"{control.parent} is not writable"
    return f"no cgroup cpu controller under {ROOT} (neither v1 cpu and cpuacct nor v2 with cpu enabled)"


def remove_stale(prefix: str) -> list[str]:
    """Remove the empty groups named ``<prefix>-<pid>-...`` whose ``pid`` has
    ended (left by a benchmark that was killed); their names."""
    removed = []
    for hierarchy in (ROOT / "cpu", ROOT / "cpuacct", _unified()):
        for d in hierarchy.glob(f"{prefix}-*") if hierarchy.is_dir() else ():
            pid = d.name[len(prefix) + 1:].split("-", 1)[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists() and not (d / "cgroup.procs").read_text().split():
                d.rmdir()
                removed.append(d.name)
    return removed


class CpuGroup:
    """One control group: ``cores`` of CPU at most (None: no limit), and the
    CPU its processes used since it was made."""

    def __init__(self, name: str, cores: float | None = None):
        why = available()
        if why is not None:
            raise RuntimeError(f"CPU groups: {why}")
        self.name, self.cores = name, cores
        self.v1 = (ROOT / "cpu" / "cpu.cfs_quota_us").exists()
        if self.v1:
            self.dirs = list(_v1_dirs(name))
        else:
            self.dirs = [_unified() / name]
        for d in self.dirs:
            d.mkdir(exist_ok=True)
        quota = -1 if cores is None else int(cores * PERIOD_US)
        if self.v1:
            (self.dirs[0] / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (self.dirs[0] / "cpu.cfs_quota_us").write_text(str(quota))
        else:
            (self.dirs[0] / "cpu.max").write_text(f"{'max' if quota < 0 else quota} {PERIOD_US}")
        self._start = self._usage_ns()

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into the group."""
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def pids(self) -> list[int]:
        return [int(p) for p in (self.dirs[0] / "cgroup.procs").read_text().split()]

    def _usage_ns(self) -> int:
        if self.v1:
            return int((self.dirs[1] / "cpuacct.usage").read_text())
        stat = dict(line.split() for line in (self.dirs[0] / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) * 1000

    def cpu_seconds(self) -> float:
        """CPU seconds its processes used since the group was made (or :meth:`reset`)."""
        return (self._usage_ns() - self._start) / 1e9

    def reset(self) -> None:
        self._start = self._usage_ns()

    def remove(self, timeout: float = 10.0) -> None:
        """Remove the group once its processes have ended (moved to the root if still alive)."""
        deadline = time.monotonic() + timeout
        for d in reversed(self.dirs):
            if not d.exists():
                continue
            parent = d.parent
            for pid in (d / "cgroup.procs").read_text().split():
                try:
                    (parent / "cgroup.procs").write_text(pid)
                except OSError:
                    pass  # ended meanwhile
            while True:
                try:
                    d.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
