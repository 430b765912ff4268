"""``scinol provision``: real processes, the real cache. A provisioned part
is found again without a download; a Maven repository that cannot be
reached is one line naming it, exit status 2, and nothing marked done."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines.cli.main import main


def scinol(*args, env=None, timeout=1800):
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout, stdin=subprocess.DEVNULL)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: connections are refused


def test_provision_kafka_prints_where_it_went_and_a_second_call_downloads_nothing():
    first = scinol("provision", "kafka")  # fetches on a fresh machine, else finds the cache
    assert first.returncode == 0, first.stderr
    began = time.monotonic()
    second = scinol("provision", "kafka")
    seconds = time.monotonic() - began
    assert second.returncode == 0, second.stderr
    assert second.stdout == first.stdout
    (line,) = second.stdout.splitlines()
    assert line.startswith("kafka: Apache Kafka 4.")
    libs = Path(line.rsplit(": ", 1)[1])
    assert list(libs.glob("kafka_2.13-4.*.jar")), f"no broker jar in {libs}"
    assert seconds < 15  # the interpreter's start-up; no Maven run (that takes ten seconds or more)


@pytest.mark.parametrize("parts", [("kafka",), ()], ids=["kafka", "default-parts"])
def test_an_unreachable_maven_repository_is_one_line_and_exit_2(tmp_path, parts):
    cache = tmp_path / "cache"
    mirror = f"http://127.0.0.1:{closed_port()}/maven2"
    proc = scinol("provision", *parts, env={"SCINOL_CACHE": str(cache), "SCINOL_MAVEN_REPOSITORY": mirror},
                  timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"scinol: error: provision kafka: cannot reach {mirror} (connection refused)")
    assert not list(cache.rglob(".complete"))  # nothing counted as provisioned


def test_an_unknown_part_is_one_line(capsys):
    assert main(["provision", "kafka", "zookeeper"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "scinol: error: provision: unknown part 'zookeeper' (choose from kafka, flink, prism, registry, prometheus)\n"
