"""Fixtures and markers shared by the whole suite.

Markers (``-m``): ``kafka`` (talks to a real broker; every test using the
``kafka_bootstrap``, ``tansu_bootstrap`` or ``broker_kind`` fixture gets
it), ``registry`` (talks to a real schema registry, Apicurio Registry
through its Confluent-compatible API; every test using the
``schema_registry`` fixture gets it), ``flink`` (runs on Apache Flink),
``slow`` (ten seconds or more). Under ``CI=true`` a skipped ``kafka``,
``registry`` or ``flink`` test fails the run: an integration test that did
not run has not passed.

Brokers: ``kafka_bootstrap`` is parametrised over both brokers the project
supports, the embedded tansu broker and Apache Kafka 4.x (KRaft), so every
Kafka-facing test runs on each (test ids end in ``[tansu]`` / ``[kafka]``)
and a quirk of one cannot hide a bug (``-m tansu`` or ``-m apache_kafka``
picks one half). One broker of each kind per session, started on first
use. A test about the pipeline's own logic rather than the
broker may take ``tansu_bootstrap`` instead (the embedded broker only):
that halves its time, and is a choice to state, not a default. The
command-line runner tests (Flink, Prism) take ``tansu_bootstrap``; the
pipeline's Flink tests (tests/runners/test_flink_scinol.py) run on Apache
Kafka with a broker of their own. ``apache_kafka_bootstrap`` gives the
session's Apache Kafka alone.
"""

import os
import re
import tempfile
import uuid
from typing import NamedTuple

import pytest

from learners.jit import KERNELS_DIR_ENV

# The processes the tests start (`python -m pipelines.cli`, Flink's Python
# workers) import this checkout, not the one pip's editable install last
# pointed at (another clone on the same machine, for one).
_CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_CHECKOUT, os.environ.get("PYTHONPATH")]))

MARKERS = {
    "kafka": "talks to a real Kafka-protocol broker",
    "registry": "talks to a real schema registry (Apicurio Registry, Confluent's REST API)",
    "flink": "runs a pipeline on Apache Flink",
    "slow": "takes ten seconds or more",
    "tansu": "the kafka_bootstrap instance on the embedded tansu broker",
    "apache_kafka": "the kafka_bootstrap instance on Apache Kafka 4.x",
}
INTEGRATION = ("kafka", "registry", "flink")


def pytest_configure(config):
    # Kernels from numba's JIT in every test and every process a test starts,
    # whether or not `scinol compile` filled the default folder; the tests
    # of compiled-ahead kernels (tests/cli/test_compile.py) name their own.
    os.environ[KERNELS_DIR_ENV] = os.path.join(tempfile.gettempdir(), f"scinol-tests-no-kernels-{uuid.uuid4().hex}")
    for name, what in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    if _in_ci() and config.option.durations is None:  # 0 asks for every test's
        config.option.durations = 25  # CI has a time budget: show where it goes


def pytest_collection_modifyitems(config, items):
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if {"kafka_bootstrap", "tansu_bootstrap", "apache_kafka_bootstrap", "broker_kind"} & fixtures:
            item.add_marker(pytest.mark.kafka)
        if "apache_kafka_bootstrap" in fixtures:
            item.add_marker(pytest.mark.apache_kafka)
        if "schema_registry" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.registry)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and report.skipped and any(item.get_closest_marker(m) for m in INTEGRATION):
        report.outcome = "failed"
        report.longrepr = f"skipped integration test under CI=true (a skip is a failure here): {report.longrepr}"


# Each instance carries a marker: ``-m apache_kafka`` runs only the Apache Kafka half.
BROKERS = (pytest.param("tansu", marks=pytest.mark.tansu), pytest.param("kafka", marks=pytest.mark.apache_kafka))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture(scope="session")
def _brokers():
    """The session's brokers by kind, each started the first time a test
    asks for it and stopped at the end of the session."""
    started: dict = {}
    yield started
    for broker in started.values():
        if not isinstance(broker, Exception):
            broker.stop()


def _broker(kind: str, started: dict) -> str:
    if kind not in started:
        if kind == "tansu":
            from pipelines.kafka.broker import EmbeddedBroker as Broker
        else:
            from pipelines.kafka.apache_broker import ApacheKafkaBroker as Broker

            _provision_kafka()
        # Apache Kafka as production clusters are often set: no topic appears
        # because a client named it, so the pipeline must create every topic it uses.
        broker = Broker() if kind == "tansu" else Broker(settings={"auto.create.topics.enable": "false"})
        try:
            broker.start()
        except Exception as exc:
            started[kind] = exc  # every later test fails at once with the same cause, not after its own timeout
            raise
        started[kind] = broker
    if isinstance(started[kind], Exception):
        raise RuntimeError(f"the session's {kind} broker failed to start: {started[kind]}")
    return started[kind].bootstrap


def _provision_kafka() -> None:
    """Apache Kafka's jars in the cache (fetched once): skip the test on a
    developer's machine that cannot provision them, fail it under CI=true."""
    from pipelines.provision.cache import ProvisionError
    from pipelines.provision.kafka import provision_kafka

    if not _KAFKA_PROVISIONING:  # tried once per session, not once per module
        try:
            provision_kafka()
            _KAFKA_PROVISIONING.append(None)
        except ProvisionError as exc:
            _KAFKA_PROVISIONING.append(f"Apache Kafka could not be provisioned: {exc}")
    failure = _KAFKA_PROVISIONING[0]
    if failure and _in_ci():
        pytest.fail(failure)
    if failure:
        pytest.skip(failure)


_KAFKA_PROVISIONING: list = []  # [None] once provisioned, [why not] once that failed


@pytest.fixture(scope="module", params=BROKERS)
def kafka_bootstrap(request, _brokers):
    """The bootstrap address of a real broker: the embedded tansu broker
    (memory storage) or Apache Kafka 4.x (one KRaft node), one test per kind.
    Module scope (the brokers themselves live for the session): pytest then
    runs each module's tests grouped by broker, module by module, instead
    of reordering the whole session around a session-scoped parameter,
    which would set every module-scoped fixture up once per broker group."""
    return _broker(request.param, _brokers)


@pytest.fixture(scope="module", params=BROKERS)
def broker_kind(request):
    """``tansu`` or ``kafka``, one test per kind, for tests that start a
    broker of their own (e.g. behind a fault-injecting proxy); Apache Kafka
    is provisioned first (skipped or failed as for ``kafka_bootstrap``)."""
    if request.param == "kafka":
        _provision_kafka()
    return request.param


@pytest.fixture(scope="session")
def apache_kafka_bootstrap(_brokers):
    """The session's Apache Kafka only: for runner tests (Flink, Prism),
    whose subject is the runner, run against the production broker."""
    return _broker("kafka", _brokers)


@pytest.fixture(scope="session")
def tansu_bootstrap(_brokers):
    """The embedded tansu broker only, for tests of the pipeline's logic
    that gain nothing from a second broker (see the module docstring)."""
    return _broker("tansu", _brokers)


@pytest.fixture(scope="module")
def secure_broker():
    """Apache Kafka with SASL/SCRAM over TLS (one KRaft node), for a module's tests."""
    from pipelines.kafka.apache_broker import ApacheKafkaBroker
    from tests.support.brokers import started

    broker = started(ApacheKafkaBroker(secure=True))
    yield broker
    broker.stop()


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
        """SchemaRegistryClient settings that trust it and authenticate, with
        the request timeout the pipeline sets (schemas.registry): Confluent's
        client has none by default, and Apicurio was seen to leave one
        request of a keep-alive connection unanswered, which hung a test
        for good instead of being retried."""
        return {"basic.auth.user.info": f"{self.user}:{self.password}", "ssl.ca.location": self.ca_file,
                "timeout": 10}


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


@pytest.fixture(scope="session")
def prometheus_binary():
    """A Prometheus server's binary (Debian's package, provisioned and cached)."""
    from pipelines.provision.prometheus import provision_prometheus
    from tests.support.provisioned import provisioned

    return provisioned(provision_prometheus)
