"""The pieces of ``scinol bench scaling`` that run without Flink: CPU
control groups (a quota holds a busy process to it, and its CPU is
counted), finding the ports a process listens on, and CPU at a moment
between two samples."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from pipelines.bench.cpu_groups import CpuGroup, available
from pipelines.bench.scaling import at, check, control_port, descendants, listening_ports, table


def _cpu_seconds_of(pid: int) -> float:
    """The process's own CPU time (user + system) as the kernel counts it."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(available() is not None, reason=f"no CPU control groups here: {available()}")
def test_a_quota_holds_a_busy_process_and_its_cpu_is_counted():
    group = CpuGroup(f"scinol-test-{time.time_ns()}", cores=0.25)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        group.add(busy.pid)
        assert group.pids() == [busy.pid]
        group.reset()
        before = _cpu_seconds_of(busy.pid)
        time.sleep(3.0)
        used, own = group.cpu_seconds(), _cpu_seconds_of(busy.pid) - before
    finally:
        busy.kill()
        busy.wait()
        group.remove()
    # The quota is a ceiling: a quarter of a core, not the whole one the loop
    # would take (on a loaded machine it may get less, never more).
    assert 0.0 < used < 0.25 * 3.0 * 1.2, used
    assert abs(used - own) < 0.05, (used, own)  # the group counts what the process used


def test_the_ports_a_process_listens_on_are_found():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        assert server.getsockname()[1] in listening_ports(descendants(os.getpid()))
    finally:
        server.close()


def test_a_harness_is_known_by_its_control_port_and_others_are_not():
    harness = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "pipelines.runners.harness",
                                "--id=1-1", "--control_endpoint=localhost:41234"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        assert (control_port(harness.pid), control_port(other.pid)) == (41234, None)
    finally:
        for proc in (harness, other):
            proc.kill()
            proc.wait()


def test_cpu_between_samples_is_interpolated():
    samples = [(10.0, {"a": 1.0}), (12.0, {"a": 3.0}), (14.0, {"a": 3.0})]
    assert [at(samples, t)["a"] for t in (9.0, 11.0, 12.0, 13.5, 20.0)] == [1.0, 2.0, 3.0, 3.0, 3.0]


def test_settings_that_cannot_run_say_why():
    from argparse import Namespace

    base = dict(events=10, wide_events=10, nnz=5, batch=100, staleness=1024, cores_per_worker=0.5)
    assert "at least --batch" in check(Namespace(**{**base, "staleness": 10}, parallelism="1,2"))
    assert "numbers separated by commas" in check(Namespace(**base, parallelism="1,two"))
    assert "more than this machine's" in check(Namespace(**{**base, "cores_per_worker": 64.0}, parallelism="1,2"))


def test_a_failed_run_is_a_row_that_says_why_and_gives_no_ratio():
    ran = {"run": "wide-exact-p1", "parallelism": 1, "events_per_s": 1000.0, "cpu_s_per_1000": 0.5,
           "tm_share_of_mean": [1.0], "records_per_subtask": {}, "task_failures": 0}
    failed = {"run": "wide-sharded-k2", "parallelism": 2, "failed": "2,050 of 20,000 events predicted, none for 180 s"}
    lines = table([ran, failed])
    assert "| wide-sharded-k2 | 2 | failed: 2,050 of 20,000 events predicted, none for 180 s |" in lines[3]
    assert "| wide-exact-p1 | 1 | 1,000 | 0.50 |" in lines[2]
    assert not any("sharded K = 2 on 2 workers" in line for line in lines)
