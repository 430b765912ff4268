"""Apache Kafka (KRaft, no ZooKeeper) from Maven: the broker's jars and
their runtime dependencies in one cached ``libs`` folder, run as
``java -cp '<libs>/*' kafka.Kafka server.properties``.

Maven's ``kafka_2.13`` artifact holds the broker (``kafka.Kafka``) and the
storage tool (``kafka.tools.StorageTool``); its dependencies are the other
broker modules, the Scala library and log4j2. Only the SLF4J binding that
the release tarball adds is missing from the tree, so without it the broker
would log nothing: it is fetched in the version of the tree's log4j.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from .cache import ProvisionError, cache_root, provision_part
from .maven import ArtifactNotFound, copy_dependencies

DEFAULT_KAFKA_VERSION = "4.4.0"
"""The newest 4.x release Maven serves here; it runs on Java 17."""

SCALA = "2.13"
MAIN_CLASSES = ("kafka/Kafka.class", "kafka/tools/StorageTool.class")
_VERSION = re.compile(r"^4\.\d+\.\d+$")


def provision_kafka(version: str = DEFAULT_KAFKA_VERSION) -> Path:
    """The ``libs`` folder of Apache Kafka ``version`` (fetched once, cached)."""
    if not _VERSION.match(version):
        raise ProvisionError(f"Apache Kafka {version!r}: give a 4.x release such as {DEFAULT_KAFKA_VERSION}")
    part = cache_root() / "kafka" / f"kafka_{SCALA}-{version}"

    def build(folder: Path) -> dict:
        libs = folder / "libs"
        try:
            copy_dependencies([f"org.apache.kafka:kafka_{SCALA}:{version}"], libs)
        except ArtifactNotFound as exc:
            raise ProvisionError(f"Apache Kafka {version} cannot be provisioned: {exc}") from None
        log4j = _jar_version(libs, "log4j-core")
        copy_dependencies([f"org.apache.logging.log4j:log4j-slf4j-impl:{log4j}"], libs)
        check_kafka_libs(libs)
        jars = list(libs.glob("*.jar"))
        return {"kafka": version, "jars": len(jars), "bytes": sum(j.stat().st_size for j in jars)}

    return provision_part(part, build) / "libs"


def check_kafka_libs(libs: Path) -> None:
    """A one-line error unless ``libs`` holds the broker and the storage tool."""
    core = sorted(libs.glob(f"kafka_{SCALA}-*.jar"))
    if not core:
        raise ProvisionError(f"{libs} has no kafka_{SCALA} jar: not an Apache Kafka libs folder")
    with zipfile.ZipFile(core[0]) as jar:
        names = set(jar.namelist())
    missing = [cls for cls in MAIN_CLASSES if cls not in names]
    if missing:
        raise ProvisionError(f"{core[0].name} lacks {', '.join(missing)}: not a KRaft broker this code can run")


def _jar_version(libs: Path, artifact: str) -> str:
    for jar in libs.glob(f"{artifact}-*.jar"):
        found = re.fullmatch(rf"{re.escape(artifact)}-(\d[\w.+-]*)\.jar", jar.name)
        if found:
            return found.group(1)
    raise ProvisionError(f"the Apache Kafka dependencies in {libs} have no {artifact} jar")
