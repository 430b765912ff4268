"""``java`` for Beam's Flink job server, bound to the process that starts it.

Beam starts its Flink job server as a child JVM (which also hosts the
embedded Flink of ``--flink_master=[local]`` and the job running in it) and
stops it from an atexit handler. A process killed with SIGKILL (``kill -9``,
the OOM killer, a supervisor's timeout) runs no handler: the JVM went on
running without a parent, its job restarting against a Python harness that
was gone (seen: ``scinol run --runner flink`` killed, its job server still
there a minute later).

Beam's ``--job_server_java_launcher`` names the program it runs in place of
``java``. This one asks Linux to send it SIGTERM when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, which ``exec`` keeps), then becomes ``java``
with the same arguments. Linux sends the signal when the *thread* that
started the child ends: Beam starts the job server in the thread that runs
the pipeline, which waits for it. Elsewhere than Linux it is plain ``java``.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
from pathlib import Path

_CODE = """
import ctypes, os, sys
parent = os.getppid()
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, 15, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGTERM
except (OSError, AttributeError):
    pass  # no prctl: not Linux
if os.getppid() != parent:
    sys.exit(143)  # the parent died before the signal was asked for
try:
    os.execvp("java", ["java", *sys.argv[1:]])
except OSError as exc:
    sys.exit(f"scinol java launcher: cannot run java: {exc.strerror}")
"""

# A shell script that runs this Python on the code above: a "#!" line to
# the interpreter itself would break on a path with a space in it.
_SCRIPT = """#!/bin/sh
# java, sent SIGTERM when the process that started it dies: written by
# pipelines/runners/java_launcher.py for Beam's --job_server_java_launcher.
exec {python} -I -S -c {code} "$@"
"""


def java_launcher() -> Path:
    """The launcher script for this Python, written once into the download
    cache (its name holds a digest of its text, so interpreters do not
    overwrite each other's)."""
    from pipelines.provision.cache import cache_root

    text = _SCRIPT.format(python=shlex.quote(sys.executable), code=shlex.quote(_CODE))
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = cache_root() / "flink-job-server" / f"java-bound-to-parent-{digest}"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".launcher-")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(tmp, 0o755)
        os.replace(tmp, path)  # whole or not at all, with two processes writing
    return path
