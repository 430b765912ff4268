"""Fixtures and markers shared by the whole suite.

Markers (``-m``): ``kafka`` (talks to a real broker; every test using the
``kafka_bootstrap`` fixture gets it), ``registry`` (talks to a real schema
registry, Apicurio Registry through its Confluent-compatible API; every test
using the ``schema_registry`` fixture gets it), ``flink`` (runs on Apache
Flink), ``slow`` (ten seconds or more). Under ``CI=true`` a skipped
``kafka``, ``registry`` or ``flink`` test fails the run: an integration test
that did not run has not passed.
"""

import os
import re
import uuid
from typing import NamedTuple

import pytest

MARKERS = {
    "kafka": "talks to a real Kafka-protocol broker",
    "registry": "talks to a real schema registry (Apicurio Registry, Confluent's REST API)",
    "flink": "runs a pipeline on Apache Flink",
    "slow": "takes ten seconds or more",
}
INTEGRATION = ("kafka", "registry", "flink")


def pytest_configure(config):
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "kafka_bootstrap" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.kafka)
        if "schema_registry" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.registry)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    in_ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    if in_ci and report.skipped and any(item.get_closest_marker(m) for m in INTEGRATION):
        report.outcome = "failed"
        report.longrepr = f"skipped integration test under CI=true (a skip is a failure here): {report.longrepr}"


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """A real Kafka-protocol broker (tansu, memory storage) for the session."""
    from pipelines.kafka.broker import EmbeddedBroker

    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@pytest.fixture
def topic_name(request):
    """A topic name unique to the test (the session's broker is shared)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", request.node.name)[:80] + "-" + uuid.uuid4().hex[:8]


class RegistryAccess(NamedTuple):
    url: str  # the Confluent-compatible API, https, without credentials
    user: str
    password: str
    ca_file: str  # the certificate it serves (self-signed): what a client must trust

    @property
    def config(self) -> dict:
        """SchemaRegistryClient settings that trust it and authenticate."""
        return {"basic.auth.user.info": f"{self.user}:{self.password}", "ssl.ca.location": self.ca_file}


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    """A real schema registry for the session: Apicurio Registry (in-memory)
    through its Confluent-compatible API, provisioned into the cache folder
    the first time, served over HTTPS only (a self-signed certificate made
    here) and requiring HTTP basic authentication (a fresh password)."""
    import subprocess

    from pipelines.provision.registry import LocalRegistry, ProvisionError

    folder = tmp_path_factory.mktemp("registry-tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    password = "pw-" + uuid.uuid4().hex
    try:
        registry = LocalRegistry({"scinol": password}, tls=(cert, key)).start()
    except ProvisionError as exc:
        pytest.skip(f"no schema registry: {exc}")
    try:
        yield RegistryAccess(registry.url, "scinol", password, cert)
    finally:
        registry.stop()
