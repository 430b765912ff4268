"""Maven artifacts and their runtime dependencies, copied into a cache folder.

Maven itself resolves the dependency tree (version mediation, exclusions,
scopes): a minimal pom listing the wanted artifacts is written to a temporary
folder and ``maven-dependency-plugin``'s ``copy-dependencies`` goal copies
every runtime jar into the target folder. Downloads go through a local
repository inside the cache, shared by all parts, so a jar two parts need is
fetched once.

``SCINOL_MAVEN_REPOSITORY`` names a mirror to use instead of Maven Central
(a company repository manager, say).
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from xml.sax.saxutils import escape

from .cache import ProvisionError, cache_root, provision_part, require_tool, run_client

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MIRROR_ENV = "SCINOL_MAVEN_REPOSITORY"
_COORDINATE = re.compile(r"^[\w.-]+:[\w.-]+:[\w.+-]+$")


class ArtifactNotFound(ProvisionError):
    """The repository answered, without the artifact asked for."""


def registry_name() -> str:
    return os.environ.get(MIRROR_ENV) or "Maven Central"


def local_repository() -> Path:
    return cache_root() / "maven" / "repository"


def check_java_and_maven() -> None:
    """A one-line :class:`ProvisionError` if ``java`` or ``mvn`` is missing."""
    require_tool(["java", "-version"], "fetching and running Java parts")
    require_tool(["mvn", "-v"], "fetching Java parts from Maven")


def provision_maven(name: str, coordinates: list[str], exclude: tuple[str, ...] = ()) -> Path:
    """A cache folder ``<cache>/<name>`` holding the jars of ``coordinates``
    (``group:artifact:version``) and all their runtime dependencies.
    ``exclude`` lists ``group:artifact`` pairs left out of the tree."""
    def build(folder: Path) -> dict:
        copy_dependencies(coordinates, folder, exclude)
        jars = sorted(folder.glob("*.jar"))
        return {"artifacts": coordinates, "jars": len(jars), "bytes": sum(j.stat().st_size for j in jars)}

    return provision_part(cache_root() / name, build)


def copy_dependencies(coordinates: list[str], into: Path, exclude: tuple[str, ...] = (),
                      transitive: bool = True) -> None:
    """Copy ``coordinates`` and (``transitive``) their runtime dependencies into ``into``:
    the one place that runs Maven."""
    for coordinate in coordinates:
        if not _COORDINATE.match(coordinate):
            raise ProvisionError(f"not a Maven coordinate (group:artifact:version): {coordinate!r}")
    check_java_and_maven()
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scinol-mvn-") as work:
        Path(work, "pom.xml").write_text(minimal_pom(coordinates, exclude))
        # -U: retry what an earlier, failed attempt left marked as missing.
        cmd = ["mvn", "-q", "-B", "-U", "-Dstyle.color=never", f"-Dmaven.repo.local={local_repository()}",
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={into}", "-DincludeScope=runtime",
               f"-DexcludeTransitive={'false' if transitive else 'true'}"]
        if os.environ.get(MIRROR_ENV):
            Path(work, "settings.xml").write_text(_mirror_settings(os.environ[MIRROR_ENV]))
            cmd[1:1] = ["-s", str(Path(work, "settings.xml"))]
        try:
            run_client(cmd, registry=registry_name(), command="mvn dependency:copy-dependencies", cwd=Path(work))
        except ProvisionError as exc:
            missing = _missing_artifact(str(exc))
            if missing:
                needed_by = "" if missing in coordinates else f" (needed by {', '.join(coordinates)})"
                raise ArtifactNotFound(f"{registry_name()} has no {missing}{needed_by}") from None
            raise


def _missing_artifact(message: str) -> str | None:
    """``group:artifact:version`` of the artifact Maven reported missing."""
    found = (re.search(r"(?:Could not find artifact|Failure to find) ([\w.-]+):([\w.-]+):\w+:([\w.+-]+)", message)
             or re.search(r"([\w.-]+):([\w.-]+):\w+:([\w.+-]+) was not found in", message))
    return f"{found.group(1)}:{found.group(2)}:{found.group(3)}" if found else None


def minimal_pom(coordinates: list[str], exclude: tuple[str, ...] = ()) -> str:
    exclusions = "".join(f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
                         for g, a in (pair.split(":") for pair in exclude))
    dependencies = "".join(
        f"<dependency><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId><version>{escape(v)}</version>"
        f"<exclusions>{exclusions}</exclusions></dependency>"
        for g, a, v in (coordinate.split(":") for coordinate in coordinates))
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            "<groupId>scinol.provision</groupId><artifactId>fetch</artifactId><version>0</version>"
            f"<packaging>pom</packaging><dependencies>{dependencies}</dependencies></project>\n")


def _mirror_settings(url: str) -> str:
    return ("<settings><mirrors><mirror><id>scinol-mirror</id><mirrorOf>*</mirrorOf>"
            f"<url>{escape(url)}</url></mirror></mirrors></settings>\n")
