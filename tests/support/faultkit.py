"""Real fault injectors for the reliability tests and benchmarks/fault_trials.py.

- :class:`TcpProxy`: a TCP forwarder between the Kafka clients and the broker.
  ``refuse()`` closes its listening socket and every connection through it, so
  the broker's advertised port answers connection attempts with a refusal
  (RST), exactly what clients see when a broker host is down; ``accept()``
  listens again on the same port.
- :class:`ProxiedBroker`: a broker (the embedded tansu broker, or Apache
  Kafka with ``kind="kafka"``) that advertises the proxy's port, so after
  bootstrapping every client talks to the broker through the proxy (tansu
  keeps nothing across its own restart, so stopping it is not a way to make
  its port refuse connections).
- :func:`pause_process`: SIGSTOP a process, SIGCONT after a while.
- :func:`scinol_run_command` / :func:`kill_at_checkpoint_pause`: start
  ``scinol run`` as a child process and kill -9 it, at a random moment or
  inside a checkpoint write (the ``SCINOL_FAULT_PAUSE`` hook of
  :mod:`pipelines.state.faults`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from pipelines.kafka.broker import EmbeddedBroker, free_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TcpProxy:
    """Forward ``127.0.0.1:port`` to ``target_port``; see the module docstring."""

    def __init__(self, target_port: int, port: int | None = None, host: str = "127.0.0.1"):
        self.host, self.target_port = host, target_port
        self.port = port or free_port(host)
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.connections_accepted = 0

    # -- control

    def accept(self) -> None:
        """Listen (again) on the proxy port."""
        with self._lock:
            if self._listener is not None:
                return
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
            self._listener = listener
        threading.Thread(target=self._accept_loop, args=(listener,), daemon=True).start()

    def refuse(self) -> None:
        """Stop listening and cut every open connection: connects are refused from now on."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for conn in conns:
            _close(conn, reset=True)

    def refusing(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1.0)
            return s.connect_ex((self.host, self.port)) != 0

    def close(self) -> None:
        self.refuse()

    def __enter__(self) -> "TcpProxy":
        self.accept()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- forwarding

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # listener closed by refuse()
                return
            try:
                upstream = socket.create_connection((self.host, self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client, reset=True)
                continue
            with self._lock:
                if self._listener is not listener:  # refused meanwhile
                    _close(client, reset=True)
                    _close(upstream, reset=True)
                    return
                self._conns.update((client, upstream))
                self.connections_accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._conns.discard(src)
                self._conns.discard(dst)
            _close(src)
            _close(dst)


def _close(sock: socket.socket, reset: bool = False) -> None:
    with contextlib.suppress(OSError):
        if reset:  # SO_LINGER 0: close with RST, like a host that lost the connection
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()


class ProxiedBroker:
    """A broker reachable only through a :class:`TcpProxy`: it advertises
    the proxy's port, so every client (the test's own included) talks to it
    through the proxy after bootstrapping on ``bootstrap``. ``kind``:
    ``tansu`` (embedded) or ``kafka`` (Apache Kafka, provisioned)."""

    def __init__(self, kind: str = "tansu"):
        self.proxy = TcpProxy(target_port=free_port())
        self.broker = make_broker(kind, port=self.proxy.target_port, advertised_port=self.proxy.port)

    @property
    def bootstrap(self) -> str:
        return f"{self.proxy.host}:{self.proxy.port}"

    @property
    def pid(self) -> int:
        return self.broker.process.pid

    def __enter__(self) -> "ProxiedBroker":
        self.proxy.accept()
        self.broker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.broker.stop()
        self.proxy.close()


def make_broker(kind: str, **kwargs):
    """An unstarted broker of ``kind`` (``tansu`` or ``kafka``)."""
    if kind == "kafka":
        from pipelines.kafka.apache_broker import ApacheKafkaBroker

        return ApacheKafkaBroker(**kwargs)
    if kind != "tansu":
        raise ValueError(f"no broker kind {kind!r} (tansu, kafka)")
    return EmbeddedBroker(**kwargs)


def pause_process(pid: int, seconds: float) -> None:
    """SIGSTOP ``pid`` for ``seconds``, then SIGCONT (always, even if interrupted)."""
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


# --------------------------------------------------------------------------- scinol run as a process

def scinol_run_command(bootstrap: str, topic: str, checkpoint_dir: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "run", "--bootstrap", bootstrap, "--topic", topic,
            "--predictions-topic", topic + ".pred", "--checkpoint-dir", checkpoint_dir, *extra]


def start_scinol_run(cmd: list[str], env: dict | None = None, stderr=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                            stderr=stderr)


def kill9(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait()


def wait_for(predicate, timeout: float, proc: subprocess.Popen | None = None, poll: float = 0.01) -> bool:
    """Poll ``predicate`` until true (True) or ``timeout`` / the process exits (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            return bool(predicate())
        time.sleep(poll)
    return False
