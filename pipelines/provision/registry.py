"""A schema registry that speaks Confluent's REST API, provisioned here:
Apicurio Registry (in-memory storage) with its Confluent-compatible API at
``/apis/ccompat/v7``, as its release distribution on Maven Central
(``io.apicurio:apicurio-registry-app:<version>:tar.gz:all``), fetched with
Maven into ``$SCINOL_CACHE/registry/`` once and run as a local JVM.

* :func:`install` is idempotent (a ``.complete`` marker, a lock file while
  unpacking) and raises :class:`ProvisionError` with one line naming what
  is missing (Maven, a Java runtime new enough, the download).
* :class:`LocalRegistry` starts it on a free loopback port, optionally with
  HTTP basic authentication (Quarkus's own embedded users and permission
  policy, so every request to ``/apis`` needs valid credentials) and HTTPS
  only (a PEM certificate and key), waits until it answers, and stops it (a
  context manager).
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import re
import shutil
import socket
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request

from pipelines.provision.processes import dying_with_parent

APICURIO_VERSION = "3.3.3"
ARTIFACT = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
JAVA_RELEASE = 21
"""Apicurio Registry 3.3 is built for Java 21."""
CCOMPAT_PATH = "/apis/ccompat/v7"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"


class ProvisionError(RuntimeError):
    """Something the registry needs is not there; the message says what."""


def cache_dir() -> str:
    return os.environ.get("SCINOL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "scinol")


def java_runtime() -> str:
    """A ``java`` of release :data:`JAVA_RELEASE` or newer: ``$JAVA_HOME``,
    then the one on PATH, then the newest under /usr/lib/jvm."""
    candidates = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(os.path.join(os.environ["JAVA_HOME"], "bin", "java"))
    if shutil.which("java"):
        candidates.append(shutil.which("java"))
    candidates += sorted(glob.glob("/usr/lib/jvm/*/bin/java"), reverse=True)
    seen = []
    for java in candidates:
        release = _java_release(java)
        if release is not None and release >= JAVA_RELEASE:
            return java
        seen.append(f"{java} ({release or 'unknown'})")
    raise ProvisionError(f"Apicurio Registry {APICURIO_VERSION} needs Java {JAVA_RELEASE} or newer; found "
                         f"{', '.join(seen) or 'no java'} (set JAVA_HOME)")


def _java_release(java: str) -> int | None:
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 else major  # "1.8" is Java 8


def install(version: str = APICURIO_VERSION) -> str:
    """The unpacked distribution's folder (downloading it the first time)."""
    home = os.path.join(cache_dir(), "registry", f"apicurio-registry-{version}")
    if os.path.exists(os.path.join(home, ".complete")):
        return home
    os.makedirs(os.path.dirname(home), exist_ok=True)
    with open(home + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time; the others find it done
        if not os.path.exists(os.path.join(home, ".complete")):
            _download_and_unpack(version, home)
    return home


def _download_and_unpack(version: str, home: str) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ProvisionError("Apicurio Registry is fetched with Maven, and `mvn` is not on PATH")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(home)) as tmp:
        cmd = [mvn, "-B", "-q", f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={ARTIFACT.format(version=version)}",
               f"-DoutputDirectory={tmp}", f"-Dmaven.repo.local={os.path.join(cache_dir(), 'maven', 'repository')}"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        archives = glob.glob(os.path.join(tmp, "*.tar.gz"))
        if done.returncode != 0 or len(archives) != 1:
            error = next((line for line in done.stdout.splitlines() if "[ERROR]" in line), done.stderr.strip())
            raise ProvisionError(f"cannot fetch {ARTIFACT.format(version=version)} with Maven: {error[:300]}")
        unpacked = os.path.join(tmp, "unpacked")
        with tarfile.open(archives[0]) as tar:
            try:
                tar.extractall(unpacked, filter="data")  # no links or paths out of the folder
            except TypeError:  # a Python before the extraction filters (3.10.11, 3.11.3)
                tar.extractall(unpacked)
        if not os.path.exists(os.path.join(unpacked, "quarkus-run.jar")):
            raise ProvisionError(f"{os.path.basename(archives[0])} has no quarkus-run.jar")
        shutil.rmtree(home, ignore_errors=True)
        os.replace(unpacked, home)
    open(os.path.join(home, ".complete"), "w").close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalRegistry:
    """Apicurio Registry on loopback. ``users``: ``{name: password}`` for
    HTTP basic authentication (None: open); ``tls``: ``(certificate file,
    key file)`` in PEM to serve HTTPS only (None: plain HTTP). ``url`` is its
    Confluent API."""

    def __init__(self, users: dict[str, str] | None = None, *, tls: tuple[str, str] | None = None,
                 version: str = APICURIO_VERSION, startup_timeout: float = 180.0):
        self.users, self.version, self.startup_timeout = dict(users or {}), version, startup_timeout
        self.tls = tls
        self.process: subprocess.Popen | None = None
        self.port = None
        self.log_path = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    def _command(self, home: str) -> list[str]:
        props = {"quarkus.http.host": "127.0.0.1", "quarkus.http.port": self.port,
                 # its management interface (health, metrics) would listen on 0.0.0.0:9000
                 "quarkus.management.host": "127.0.0.1", "quarkus.management.port": _free_port()}
        if self.tls:
            props.update({"quarkus.http.port": _free_port(), "quarkus.http.ssl-port": self.port,
                          "quarkus.http.ssl.certificate.files": os.path.abspath(self.tls[0]),
                          "quarkus.http.ssl.certificate.key-files": os.path.abspath(self.tls[1]),
                          "quarkus.http.insecure-requests": "disabled"})
        if self.users:
            props.update({"quarkus.http.auth.basic": "true", "quarkus.security.users.embedded.enabled": "true",
                          "quarkus.security.users.embedded.plain-text": "true",
                          "quarkus.http.auth.permission.registry.paths": "/apis/*",
                          "quarkus.http.auth.permission.registry.policy": "authenticated"})
            props.update({f"quarkus.security.users.embedded.users.{u}": p for u, p in self.users.items()})
        return [java_runtime(), "-Xmx512m", *(f"-D{k}={v}" for k, v in props.items()), "-jar",
                os.path.join(home, "quarkus-run.jar")]

    def start(self) -> "LocalRegistry":
        home = install(self.version)
        self.port = _free_port()
        fd, self.log_path = tempfile.mkstemp(prefix="apicurio-registry-", suffix=".log")
        with os.fdopen(fd, "w") as log:
            self.process = subprocess.Popen(dying_with_parent(self._command(home)), cwd=home, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_until_ready()
        return self

    def _wait_until_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ProvisionError(f"Apicurio Registry exited with status {self.process.returncode} while "
                                     f"starting; its log: {self.log_path}")
            try:
                context = ssl.create_default_context(cafile=self.tls[0]) if self.tls else None
                urllib.request.urlopen(self.url + "/subjects", timeout=2, context=context).close()
                return
            except urllib.error.HTTPError as exc:
                if exc.code == 401:  # answering, and asking for credentials
                    return
            except OSError:
                pass
            time.sleep(0.5)
        self._end()  # its log stays: the error names it
        raise ProvisionError(f"Apicurio Registry did not answer at {self.url} within {self.startup_timeout:.0f} s; "
                             f"its log: {self.log_path}")

    def stop(self) -> None:
        """End it and remove its log."""
        self._end()
        if self.log_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.log_path)
            self.log_path = None

    def _end(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)

    def __enter__(self) -> "LocalRegistry":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
