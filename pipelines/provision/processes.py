"""Child processes that do not outlive this one: the local services the
tests and local runs start (brokers, the schema registry, Flink)."""

from __future__ import annotations

import shutil
import sys


def dying_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run so that it gets SIGTERM when this process dies, even by
    SIGKILL (Linux PR_SET_PDEATHSIG, set by util-linux's ``setpriv`` and kept
    across its exec); where there is no ``setpriv``, ``argv`` as it is.
    Not a ``preexec_fn``: Python code run in the child between fork and exec
    of a process with threads (grpc's, librdkafka's) can crash the child."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "SIGTERM", "--", *argv] if setpriv else list(argv)
