"""Apache Kafka 4.x on loopback: one KRaft node that is both broker and
controller, run from the jars :func:`provision_kafka` put in the cache.

Same interface as the embedded tansu broker (``start()`` returns the
bootstrap address, ``stop()``, a context manager, dies with its parent),
plus what only a real broker has: data on disk that survives
:meth:`ApacheKafkaBroker.restart`, transactions, and optionally SASL/SCRAM
over TLS on the client listener (``secure=True``).

Layout of the data folder (a temporary folder, deleted by ``stop()``)::

    server.properties  log4j2.properties  broker.log
    data/              the log segments and the KRaft metadata log
    tls/               ca.pem (the test CA), broker.p12 (key and chain)
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import NamedTuple

from pipelines.kafka.broker import DEFAULT_HOST, BrokerError, _port_open, free_port
from pipelines.provision.kafka import DEFAULT_KAFKA_VERSION, provision_kafka
from pipelines.provision.processes import dying_with_parent

SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_ITERATIONS = 8192
DEFAULT_HEAP = "512m"
# Only the client compiler (C1): start-up and restart take about 40% less
# time, and a single broker on loopback is not the bottleneck of any Python
# client here (same produce/consume rates measured with and without it).
JVM_OPTIONS = ("-XX:+UseG1GC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

# A single node: internal topics cannot have more replicas than brokers, and
# a consumer group need not wait for more members to join before its first
# rebalance. Few partitions for the internal topics: created on first use,
# 50 of each would only slow that first use down.
SINGLE_NODE_SETTINGS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = out
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
"""


class ApacheKafkaBroker:
    """Start/stop an Apache Kafka broker; a context manager.

    >>> with ApacheKafkaBroker(secure=True) as broker:
    ...     Producer({"bootstrap.servers": broker.bootstrap, **broker.client_config()})
    """

    def __init__(self, port: int | None = None, host: str = DEFAULT_HOST, advertised_port: int | None = None, *,
                 version: str = DEFAULT_KAFKA_VERSION, secure: bool = False, username: str = "scinol",
                 heap: str = DEFAULT_HEAP, settings: dict | None = None, quorum: "Quorum | None" = None):
        self.host = host
        self.port = port or free_port(host)
        self.advertised_port = advertised_port or self.port
        self.bootstrap = f"{host}:{self.port}"
        self.version = version
        self.secure = secure
        self.username = username
        self.heap = heap
        self.settings = dict(settings or {})  # more server.properties, over the single-node defaults
        self.process: subprocess.Popen | None = None
        self.home: Path | None = None  # the data folder, kept across restart()
        self.log_path: str | None = None
        self._controller_port: int | None = None
        self.quorum = quorum  # None: a cluster of this one node
        self._password = secrets.token_urlsafe(18)
        self._inter_broker_password = secrets.token_urlsafe(18)
        self._keystore_password = secrets.token_urlsafe(18)

    # -- life cycle -------------------------------------------------------

    def start(self, timeout: float = 120.0) -> str:
        """Provision (cached), format the data folder, run the broker and
        wait until it serves metadata; the bootstrap address."""
        libs = provision_kafka(self.version)
        if self.home is None:
            try:
                self._prepare(libs)
            except BaseException:
                self.stop()
                raise
        self._launch(libs, timeout)
        return self.bootstrap

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker and delete its data folder."""
        self._terminate(timeout)
        home, self.home, self.log_path = self.home, None, None
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)

    def restart(self, *, kill: bool = False, down_for: float = 0.0, wait_for_groups: bool = True,
                timeout: float = 120.0) -> str:
        """Stop the process (SIGTERM, or SIGKILL if ``kill``: a crash), wait
        ``down_for`` seconds, and start it again on the same port and data:
        topics, messages and committed offsets are kept. Returns once the
        broker serves metadata and, if ``wait_for_groups``, committed offsets."""
        if self.home is None:
            raise BrokerError("restart() of a broker that was never started")
        if kill and self.process is not None:
            self.process.kill()
        self._terminate(timeout)
        time.sleep(down_for)
        self._launch(provision_kafka(self.version), timeout, wait_for_groups)
        return self.bootstrap

    def __enter__(self) -> "ApacheKafkaBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- clients ----------------------------------------------------------

    def client_config(self, *, password: str | None = None, ca_location: str | None = None) -> dict:
        """librdkafka settings a client needs besides ``bootstrap.servers``:
        none for a plain broker; SASL/SCRAM and the test CA for a secure one
        (``password`` and ``ca_location`` override, to test failures)."""
        if not self.secure:
            return {}
        return {"security.protocol": "SASL_SSL", "sasl.mechanisms": SCRAM_MECHANISM,
                "sasl.username": self.username, "sasl.password": password or self._password,
                "ssl.ca.location": ca_location or str(self.ca_path)}

    @property
    def ca_path(self) -> Path:
        """The PEM certificate of the CA that signed the broker's certificate."""
        if self.home is None:
            raise BrokerError("the broker's CA exists only once it is started")
        return self.home / "tls" / "ca.pem"

    # -- internals --------------------------------------------------------

    def _prepare(self, libs: Path) -> None:
        """A new data folder: certificates, configuration, formatted storage."""
        self.home = Path(tempfile.mkdtemp(prefix="apache-kafka-"))
        self.log_path = str(self.home / "broker.log")
        self._controller_port = self.quorum.controller_port if self.quorum else free_port(self.host)
        if self.secure:
            from pipelines.kafka.tls import make_ca_and_server_cert

            make_ca_and_server_cert(self.home / "tls", self.host, self._keystore_password)
        (self.home / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        write_properties(self.home / "server.properties", self.server_properties())
        self._format_storage(libs)

    def server_properties(self) -> dict:
        """The broker's ``server.properties``, as a dict."""
        controller = f"{self.host}:{self._controller_port}"
        voters = ({"controller.quorum.voters": self.quorum.voters} if self.quorum else
                  {"controller.quorum.bootstrap.servers": controller})
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.quorum.node_id if self.quorum else 1),
            **voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"CLIENT://{self.host}:{self.port},CONTROLLER://{controller}",
            "advertised.listeners": f"CLIENT://{self.host}:{self.advertised_port}",
            "inter.broker.listener.name": "CLIENT",
            "listener.security.protocol.map":
                f"CLIENT:{'SASL_SSL' if self.secure else 'PLAINTEXT'},CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            **(SINGLE_NODE_SETTINGS if self.quorum is None else self.quorum.settings),
            **self.settings,
        }
        if self.secure:
            props.update(self._security_properties())
        return props

    def _security_properties(self) -> dict:
        """SASL/SCRAM over TLS on the client listener, which the broker also
        uses to reach itself (transaction markers go over the network)."""
        tls = self.home / "tls"
        jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required '
                f'username="broker" password="{self._inter_broker_password}";')
        return {
            "sasl.enabled.mechanisms": SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
            f"listener.name.client.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": jaas,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": str(tls / "broker.p12"),
            "ssl.keystore.password": self._keystore_password,
            "ssl.key.password": self._keystore_password,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(tls / "ca.pem"),
            "ssl.client.auth": "none",
        }

    def _format_storage(self, libs: Path) -> None:
        # One node formats itself as the whole controller quorum; in a cluster the
        # quorum is the static voters list, and every node shares the cluster id.
        cmd = self._java(libs, "kafka.tools.StorageTool") + [
            "format", *(["--standalone"] if self.quorum is None else []),
            "--config", str(self.home / "server.properties"),
            "--cluster-id", self.quorum.cluster_id if self.quorum else new_cluster_id()]
        if self.secure:  # salted here: no password on a command line
            for user, password in ((self.username, self._password), ("broker", self._inter_broker_password)):
                cmd += ["--add-scram", scram_credential(user, password)]
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
        if proc.returncode != 0:
            raise BrokerError(f"kafka-storage format failed (status {proc.returncode}): "
                              f"{(proc.stdout + proc.stderr).strip()[-500:]}")

    def _java(self, libs: Path, main: str) -> list[str]:
        return ["java", f"-Xmx{self.heap}", *JVM_OPTIONS,
                f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
                "-cp", f"{libs}/*", main]

    def _launch(self, libs: Path, timeout: float, wait_for_groups: bool = True) -> None:
        self._spawn(libs)
        try:
            self._wait_until_serving(timeout, wait_for_groups)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, libs: Path) -> None:
        cmd = self._java(libs, "kafka.Kafka") + [str(self.home / "server.properties")]
        with open(self.log_path, "ab") as log:
            # Its own session (Ctrl-C in a terminal reaches us, and we stop
            # it), and SIGTERM when we die, even by SIGKILL: no leaked brokers.
            self.process = subprocess.Popen(dying_with_parent(cmd), stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.home)

    def _wait_until_serving(self, timeout: float, wait_for_groups: bool = True) -> None:
        """Until the broker lists itself in its metadata (it is then
        registered with its controller and accepts produce requests) and, if
        ``wait_for_groups``, answers for committed offsets."""
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + timeout
        while self.process.poll() is None and not _port_open(self.host, self.port):
            if time.monotonic() > deadline:
                raise BrokerError(f"Apache Kafka did not open {self.bootstrap} within {timeout:.0f} s: "
                                  f"{self.log_tail()}")
            time.sleep(0.1)
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.connection.setup.timeout.ms": 2000,
                             **self.client_config()})
        last = None
        while self.process.poll() is None and time.monotonic() < deadline:
            try:
                metadata = admin.list_topics(timeout=2.0)
                registered = self.quorum.node_id in metadata.brokers if self.quorum else bool(metadata.brokers)
                if registered and (not wait_for_groups or self._group_coordinators_loaded(metadata)):
                    return
            except Exception as exc:  # KafkaException until the listener is ready
                last = exc
            time.sleep(0.1)
        if self.process.poll() is not None:
            raise BrokerError(f"Apache Kafka exited with status {self.process.returncode}: {self.log_tail()}")
        raise BrokerError(f"Apache Kafka at {self.bootstrap} did not serve metadata within {timeout:.0f} s ({last})")

    def _group_coordinators_loaded(self, metadata) -> bool:
        """After a restart, whether every partition of the consumer offsets
        topic is loaded (until then, committed offsets are answered with
        NOT_COORDINATOR): one offset fetch for a group on each partition."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        offsets_topic = metadata.topics.get("__consumer_offsets")
        if offsets_topic is None:  # a new broker: nothing to load
            return True
        for group in probe_groups(len(offsets_topic.partitions)):
            consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group, **self.client_config()})
            try:
                consumer.committed([TopicPartition("__consumer_offsets", 0)], timeout=2.0)
            except KafkaException:
                return False
            finally:
                consumer.close()
        return True

    def _terminate(self, timeout: float) -> None:
        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # a controlled shutdown: logs flushed
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()

    def log_tail(self, chars: int = 600) -> str:
        """For error messages: the broker log's first error (and the line
        after it, the exception), else the log's end."""
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
        except (OSError, TypeError):
            return ""
        first_error = next((i for i, line in enumerate(lines) if " ERROR " in line or " FATAL " in line), None)
        if first_error is not None:
            return " / ".join(line.strip() for line in lines[first_error:first_error + 2])[:chars]
        return "\n".join(lines)[-chars:].strip()


class Quorum(NamedTuple):
    """A node's place in a cluster of several (see :mod:`pipelines.kafka.apache_cluster`)."""
    node_id: int
    controller_port: int
    voters: str  # controller.quorum.voters: "1@host:port,2@host:port,..."
    cluster_id: str
    settings: dict  # the cluster's defaults (replication, min.insync.replicas), instead of a single node's


def write_properties(path: Path, props: dict) -> None:
    """A Java properties file; readable only by us (it holds passwords)."""
    lines = [f"{key}={str(value).replace(chr(92), chr(92) * 2)}" for key, value in props.items()]
    path.touch(mode=0o600)
    path.write_text("\n".join(lines) + "\n")


def probe_groups(partitions: int) -> list[str]:
    """One consumer group id per partition of the consumer offsets topic: a
    group's offsets live in partition ``abs(java hashCode(group id)) %
    partitions``."""
    found: dict[int, str] = {}
    candidate = 0
    while len(found) < partitions:
        group = f"scinol-probe-{candidate}"
        h = _java_string_hash(group)
        found.setdefault((0 if h == -(1 << 31) else abs(h)) % partitions, group)  # Kafka's Utils.abs
        candidate += 1
    return [found[p] for p in range(partitions)]


def _java_string_hash(text: str) -> int:
    """``java.lang.String.hashCode`` (ASCII text): s[0]*31^(n-1) + ... + s[n-1], as a signed 32-bit int."""
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding
    (not starting with '-', which a command line would take for an option)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def scram_credential(user: str, password: str, iterations: int = SCRAM_ITERATIONS) -> str:
    """A ``kafka-storage format --add-scram`` argument holding the salted
    password (RFC 5802 §3: Hi(password, salt, i) with HMAC-SHA-512), so the
    password itself is never on a command line."""
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return (f'{SCRAM_MECHANISM}=[name={user},iterations={iterations},'
            f'salt="{base64.b64encode(salt).decode()}",saltedpassword="{base64.b64encode(salted).decode()}"]')
