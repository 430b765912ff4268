"""Apache Flink for the pipeline: a Flink distribution (for a session
cluster) and Beam's Flink job server (for ``--runner=FlinkRunner``).

Flink distribution
    The ``apache-flink`` and ``apache-flink-libraries`` wheels from PyPI
    carry a complete Flink (``pyflink/bin``, ``lib``, ``conf``, ``opt``).
    They are installed with ``pip --no-deps --target`` into their own folder
    under the cache (isolated from the project's environment like a venv,
    but relocatable, and no interpreter is needed: the cluster is Java and
    shell scripts). ``FLINK_HOME`` is that folder's ``pyflink``.

Job server
    Beam's Python FlinkRunner starts ``java -jar <job server>``. The jar
    Beam publishes for this is ``org.apache.beam:beam-runners-flink-<flink
    minor>-job-server:<beam version>``, a shaded jar whose main class is the
    ``FlinkJobServerDriver`` of the runner library. It is taken from Maven
    when served. Where it is not (Maven mirrors that serve only part of
    Central), the same program is assembled from the runner library and its
    dependencies: they are copied into ``lib/`` and a jar holding only a
    manifest (``Main-Class`` and ``Class-Path``) stands in for the shaded jar.
    :data:`ASSEMBLED_RUNNERS` names the runner release used for that per
    Flink minor version; it may be older than the installed Beam, and the
    marker file records which one was used.

Version (see :data:`DEFAULT_FLINK_VERSION`): Flink 1.19 is the minor that
both sides have here: Beam 2.77's Python SDK accepts 1.19, 1.20, 2.0, 2.1 and
2.2, PyPI has wheels for all of them, but the only Beam Flink runner that
Maven serves on this machine is ``beam-runners-flink-1.19`` (2.62.0 and
2.70.0). With the official job-server jar reachable, 1.20 (Flink's
long-term-support 1.x line) is the better choice.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path
from typing import NamedTuple

from .cache import ProvisionError, cache_root, part_facts, provision_part, run_client
from .maven import ArtifactNotFound, copy_dependencies

DEFAULT_FLINK_VERSION = "1.19"

FLINK_WHEEL_VERSIONS = {"1.19": "1.19.3", "1.20": "1.20.5", "2.0": "2.0.2", "2.1": "2.1.3", "2.2": "2.2.1"}
"""The apache-flink release installed for each Flink minor version: its newest patch release."""

JOB_SERVER_MAIN = "org.apache.beam.runners.flink.FlinkJobServerDriver"


class AssembledRunner(NamedTuple):
    """A Beam Flink runner library and what to put beside it to run its job server."""

    runner: str
    """org.apache.beam:beam-runners-flink-<minor> release."""
    extra: tuple = ()
    """Further Maven coordinates: modules of the same release that Maven does
    not serve, replaced by the nearest release it does serve."""
    exclude: tuple = ()
    """group:artifact pairs left out of the runner's dependencies (replaced by ``extra``)."""


ASSEMBLED_RUNNERS = {
    # beam-runners-java-job-service 2.70.0 is not served; 2.65.0 is, and the
    # 2.70.0 runner runs with it (the pipelines of tests/runners prove it).
    # It brings no expansion service of its own once excluded: take 2.70.0's.
    "1.19": AssembledRunner(
        runner="2.70.0",
        extra=("org.apache.beam:beam-runners-java-job-service:2.65.0",
               "org.apache.beam:beam-sdks-java-expansion-service:2.70.0",
               "org.slf4j:slf4j-simple:2.0.16"),  # the runner's slf4j-api: its log lines reach stderr
        exclude=("org.apache.beam:beam-runners-java-job-service",)),
}


def flink_wheel_version(flink_version: str) -> str:
    if flink_version in FLINK_WHEEL_VERSIONS:
        return FLINK_WHEEL_VERSIONS[flink_version]
    if flink_version.count(".") == 2:
        return flink_version  # an exact release asked for
    raise ProvisionError(f"Flink {flink_version!r}: choose one of {', '.join(FLINK_WHEEL_VERSIONS)} "
                         f"or an exact release such as 1.19.3")


def flink_minor(flink_version: str) -> str:
    return ".".join(flink_version.split(".")[:2])


def provision_flink(flink_version: str = DEFAULT_FLINK_VERSION) -> Path:
    """FLINK_HOME of a Flink distribution from the apache-flink wheels (cached)."""
    release = flink_wheel_version(flink_version)
    part = cache_root() / "flink" / f"flink-{release}"

    def build(folder: Path) -> dict:
        run_client([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check",
                    "--retries", "2", "--target", str(folder / "site"),
                    f"apache-flink=={release}", f"apache-flink-libraries=={release}"],
                   registry="PyPI", command=f"pip install apache-flink=={release}")
        home = folder / "site" / "pyflink"
        for script in ("jobmanager.sh", "taskmanager.sh", "config.sh"):
            if not (home / "bin" / script).is_file():
                raise ProvisionError(f"apache-flink {release} has no bin/{script}: not a Flink distribution")
        return {"flink": release}

    return provision_part(part, build) / "site" / "pyflink"


def provision_flink_job_server(flink_version: str = DEFAULT_FLINK_VERSION) -> Path:
    """The job-server jar for the installed Beam and this Flink minor version
    (for ``--flink_job_server_jar``), cached."""
    import apache_beam

    beam = apache_beam.__version__
    minor = flink_minor(flink_version)
    part = cache_root() / "flink-job-server" / f"beam-{beam}-flink-{minor}"

    def build(folder: Path) -> dict:
        official = f"org.apache.beam:beam-runners-flink-{minor}-job-server:{beam}"
        try:
            copy_dependencies([official], folder, transitive=False)
            (jar,) = folder.glob("*.jar")
            return {"jar": jar.name, "source": official}
        except ArtifactNotFound:
            pass
        recipe = ASSEMBLED_RUNNERS.get(minor)
        if recipe is None:
            raise ProvisionError(f"Maven serves no {official} and no stand-in is known for Flink {minor} "
                                 f"(known: {', '.join(ASSEMBLED_RUNNERS)})")
        runner = f"org.apache.beam:beam-runners-flink-{minor}:{recipe.runner}"
        copy_dependencies([runner, *recipe.extra], folder / "lib", exclude=recipe.exclude)
        write_launcher_jar(folder / "job-server.jar", JOB_SERVER_MAIN, sorted((folder / "lib").glob("*.jar")))
        return {"jar": "job-server.jar", "source": f"assembled from {runner}", "extra": list(recipe.extra),
                "note": f"{official} is not served"}

    folder = provision_part(part, build)
    return folder / part_facts(folder)["jar"]


def write_launcher_jar(jar: Path, main_class: str, classpath: list[Path]) -> None:
    """A jar with only a manifest: ``java -jar`` runs ``main_class`` with
    ``classpath`` (paths relative to the jar's folder, as the manifest requires)."""
    entries = " ".join(p.relative_to(jar.parent).as_posix() for p in classpath)
    lines = ["Manifest-Version: 1.0", f"Main-Class: {main_class}", *_manifest_wrap(f"Class-Path: {entries}")]
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "\r\n".join(lines) + "\r\n\r\n")


def _manifest_wrap(line: str) -> list[str]:
    """Manifest lines hold at most 72 bytes; continuations start with a space."""
    data = line.encode()
    out = [data[:72]]
    data = data[72:]
    while data:
        out.append(b" " + data[:71])
        data = data[71:]
    return [chunk.decode() for chunk in out]  # entries are ASCII paths: no character is cut in two
