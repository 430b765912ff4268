"""Provisioning Flink, Beam's Flink job server and Prism: a second call runs
no registry client, and an unreachable registry is one line naming it
(the cache's own rules are in tests/provision)."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest

from pipelines.provision import cache
from pipelines.provision.cache import ProvisionError

pytestmark = pytest.mark.flink


@pytest.fixture
def no_clients(monkeypatch):
    """Any registry client started from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a provisioned part ran a client again: {args[0] if args else kwargs}")

    monkeypatch.setattr(cache.subprocess, "run", refuse)


def test_second_calls_run_no_client(flink_home, flink_job_server_jar, prism_binary, no_clients):
    from pipelines.provision.flink import provision_flink, provision_flink_job_server
    from pipelines.provision.prism import provision_prism

    began = time.monotonic()
    assert provision_flink() == flink_home
    assert provision_flink_job_server() == flink_job_server_jar
    assert provision_prism() == prism_binary
    assert time.monotonic() - began < 1.0
    assert (flink_home / "bin" / "jobmanager.sh").is_file()
    assert flink_job_server_jar.is_file() and os.access(prism_binary, os.X_OK)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when we return: connections are refused


def _unreachable_env(monkeypatch, tmp_path):
    """Every registry behind a proxy that refuses connections, and an empty cache."""
    proxy = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path / "cache"))
    for name in ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY"):
        monkeypatch.setenv(name, proxy)
    monkeypatch.setenv("PIP_FIND_LINKS", "")
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.setenv("GOPROXY", proxy)
    host, port = proxy.rsplit(":", 1)
    monkeypatch.setenv("MAVEN_OPTS", f"-Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort={port} "
                                     f"-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort={port}")


@pytest.mark.parametrize("part, registry", [("flink", "PyPI"), ("job_server", "Maven Central"),
                                            ("prism", "the Go module proxy")])
def test_unreachable_registry_is_one_clear_line(monkeypatch, tmp_path, part, registry):
    _unreachable_env(monkeypatch, tmp_path)
    from pipelines.provision.flink import provision_flink, provision_flink_job_server
    from pipelines.provision.prism import provision_prism

    provision = {"flink": provision_flink, "job_server": provision_flink_job_server, "prism": provision_prism}[part]
    began = time.monotonic()
    with pytest.raises(ProvisionError) as caught:
        provision()
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"cannot reach {registry} (")
    assert "refused" in message.lower() or "cannot connect to proxy" in message.lower()
    assert time.monotonic() - began < 60
    assert not any((tmp_path / "cache").rglob(cache.MARKER))  # nothing marked as provisioned


def test_registry_answering_no_is_told_apart(tmp_path):
    """A registry that answers without the artifact is not 'unreachable'."""
    from pipelines.provision.maven import ArtifactNotFound, copy_dependencies

    if subprocess.run(["mvn", "-v"], capture_output=True).returncode != 0:
        pytest.fail("mvn is not installed")
    try:
        for _ in range(2):  # the second answer comes from Maven's record of the first miss
            with pytest.raises(ArtifactNotFound, match="scinol-no-such-artifact"):
                copy_dependencies(["org.apache.beam:scinol-no-such-artifact:0.0.1"], tmp_path / "out",
                                  transitive=False)
    except ProvisionError as exc:  # raised instead when Maven Central cannot be reached at all
        if "cannot reach" in str(exc) and os.environ.get("CI", "").lower() != "true":
            pytest.skip(str(exc))
        raise
