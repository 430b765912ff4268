"""The ``java`` that Beam's Flink job server is started with
(pipelines/runners/java_launcher.py): it is java, with the arguments given,
and it ends when the process that started it is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pipelines.runners.java_launcher import java_launcher
from tests.support.processes import alive, gone_within

SLEEPER = "public class Sleep { public static void main(String[] a) throws Exception { Thread.sleep(600000); } }\n"


@pytest.fixture
def launcher(tmp_path, monkeypatch):
    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path / "cache"))
    return java_launcher()


def test_it_is_written_once_executable_and_runs_java_with_the_arguments_given(launcher):
    written = launcher.stat().st_mtime_ns
    assert os.access(launcher, os.X_OK) and java_launcher() == launcher
    assert launcher.stat().st_mtime_ns == written  # the second call found it and wrote nothing
    done = subprocess.run([str(launcher), "-version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "version" in done.stderr
    bad = subprocess.run([str(launcher), "-no-such-flag"], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "-no-such-flag" in bad.stderr  # java's own complaint, passed through


def test_the_jvm_gets_sigterm_when_its_parent_is_killed(launcher, tmp_path):
    (tmp_path / "Sleep.java").write_text(SLEEPER)
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
                               f"child = subprocess.Popen([{str(launcher)!r}, {str(tmp_path / 'Sleep.java')!r}])\n"
                               "print(child.pid, flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        jvm = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        while not open(f"/proc/{jvm}/cmdline", "rb").read().startswith(b"java\0"):
            assert time.monotonic() < deadline, "the launcher did not become java"
            time.sleep(0.1)
        time.sleep(1)
        assert alive(jvm)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    assert gone_within(jvm, 30), "the JVM outlived the process that started it"
