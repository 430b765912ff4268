"""A Prometheus server, for the tests that scrape ``scinol run --metrics-port``
as an operator's Prometheus would.

Debian's package, fetched once from Debian's archive (checked against its
SHA-256) and unpacked in Python (a ``.deb`` is an ``ar`` archive holding a
``data.tar.xz``); only ``usr/bin/prometheus`` is kept. No root, no apt
lists, no ``dpkg``.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

from .cache import ProvisionError, cache_root, provision_part

PROMETHEUS_VERSION = "2.42.0+ds-5+deb12u1"
PROMETHEUS_SHA256 = "81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55"
ARCHIVE = "https://deb.debian.org/debian/pool/main/p/prometheus"


def provision_prometheus() -> Path:
    """The ``prometheus`` binary (cached)."""
    part = cache_root() / "prometheus" / PROMETHEUS_VERSION

    def build(folder: Path) -> dict:
        url = f"{ARCHIVE}/prometheus_{PROMETHEUS_VERSION}_amd64.deb"
        data = _download(url)
        if hashlib.sha256(data).hexdigest() != PROMETHEUS_SHA256:
            raise ProvisionError(f"{url}: its SHA-256 is not the one expected (a changed or damaged download)")
        binary = folder / "bin" / "prometheus"
        binary.parent.mkdir(parents=True)
        binary.write_bytes(_member(_deb_member(data, "data.tar.xz"), "./usr/bin/prometheus"))
        os.chmod(binary, 0o755)
        return {"package": f"prometheus {PROMETHEUS_VERSION}", "url": url}

    return provision_part(part, build) / "bin" / "prometheus"


def _download(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        raise ProvisionError(f"Debian's archive answered {exc.code} for {url}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ProvisionError(f"cannot reach Debian's archive ({getattr(exc, 'reason', exc)}) for {url}") from None


def _deb_member(deb: bytes, name: str) -> bytes:
    """One member of a ``.deb`` (an ``ar`` archive: 8-byte magic, then
    60-byte headers each followed by its data, padded to even length)."""
    if not deb.startswith(b"!<arch>\n"):
        raise ProvisionError("the Prometheus package is not a Debian archive")
    at = 8
    while at + 60 <= len(deb):
        header = deb[at:at + 60]
        member, size = header[:16].decode().strip().rstrip("/"), int(header[48:58].decode().strip())
        if member == name:
            return deb[at + 60:at + 60 + size]
        at += 60 + size + (size & 1)
    raise ProvisionError(f"the Prometheus package holds no {name}")


def _member(tar_xz: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tar_xz), mode="r:xz") as tar:
        try:
            return tar.extractfile(name).read()
        except KeyError:
            raise ProvisionError(f"the Prometheus package holds no {name}") from None
