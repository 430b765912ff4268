"""Whether a process still runs, for the tests that kill a parent and check
its children went with it; a process reaped when a test leaves it."""

from __future__ import annotations

import time
from contextlib import contextmanager


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped, does not)."""
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` has stopped running within ``seconds``."""
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not alive(pid)


@contextmanager
def reaped(proc):
    """``proc``, killed and waited for on the way out if it still runs (a test that failed midway)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
