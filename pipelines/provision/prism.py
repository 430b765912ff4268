"""Prism, Beam's portable local runner, for ``--runner=PrismRunner``.

Beam's Python SDK would download a Prism release at run time; that is not
possible here, so it is built from the Go module of the installed Beam
version (``go install .../sdks/v2/go/cmd/prism@v<beam>``) into the cache.
GOPATH, GOMODCACHE and GOCACHE point inside the part's folder while it
builds (nothing lands in ~/go or ~/.cache/go-build) and are deleted
afterwards (about 1.4 GB); only ``bin/prism`` is kept.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .cache import ProvisionError, cache_root, provision_part, run_client

PRISM_MODULE = "github.com/apache/beam/sdks/v2/go/cmd/prism"


def provision_prism() -> Path:
    """The prism binary for the installed Beam version (cached)."""
    import apache_beam

    beam = apache_beam.__version__
    if not re.fullmatch(r"\d+\.\d+\.\d+", beam):
        raise ProvisionError(f"apache-beam {beam} is not a release: no Prism module version v{beam} to build")
    part = cache_root() / "prism" / f"beam-{beam}"

    def build(folder: Path) -> dict:
        work = folder / "go"
        env = {**os.environ, "GOPATH": str(work / "path"), "GOMODCACHE": str(work / "path" / "pkg" / "mod"),
               "GOCACHE": str(work / "cache"), "GOBIN": str(folder / "bin"),
               "GOFLAGS": "-modcacherw"}  # a writable module cache can be deleted with rmtree
        try:
            run_client(["go", "install", f"{PRISM_MODULE}@v{beam}"], registry="the Go module proxy",
                       command=f"go install prism@v{beam}", env=env)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        if not os.access(folder / "bin" / "prism", os.X_OK):
            raise ProvisionError(f"go install {PRISM_MODULE}@v{beam} made no bin/prism")
        return {"beam": beam, "module": f"{PRISM_MODULE}@v{beam}"}

    return provision_part(part, build) / "bin" / "prism"
