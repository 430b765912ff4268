"""Deterministic fault windows for the crash tests (tests/test_faults.py,
benchmarks/fault_trials.py).

A kill -9 "during a checkpoint write" cannot be aimed by timing: the write
takes milliseconds. Instead the test sets, in the environment of the
``scinol run`` it is about to kill::

    SCINOL_FAULT_PAUSE=<point>[@<n>]   # pause at the n-th pass (default 1st) through <point>
    SCINOL_FAULT_MARKER=<file>         # created when the pause starts
    SCINOL_FAULT_SLEEP=<seconds>       # how long to stay there (default 600)

and kills the process once the marker exists: the kill lands exactly inside
the window. Points: ``checkpoint-before-rename`` (the new checkpoint is
fully written to its temp file, not yet renamed into place) and
``checkpoint-before-manifest`` (renamed into place, its checksum sidecar not
yet written); ``cut-before-rename`` and ``cut-before-manifest`` are the same
points in the writing of a sharded checkpoint cut's part. Without ``SCINOL_FAULT_PAUSE`` (always, in production)
:func:`pause_point` only counts.
"""

from __future__ import annotations

import os
import time

POINTS = ("checkpoint-before-rename", "checkpoint-before-manifest", "cut-before-rename", "cut-before-manifest")
_passes: dict[str, int] = {}


def pause_point(name: str) -> None:
    """Pause here if the environment asks for it (see the module docstring)."""
    _passes[name] = n = _passes.get(name, 0) + 1
    wanted = os.environ.get("SCINOL_FAULT_PAUSE")
    if not wanted:
        return
    point, _, at = wanted.partition("@")
    if point != name or n != int(at or 1):
        return
    marker = os.environ.get("SCINOL_FAULT_MARKER")
    if marker:
        with open(marker, "w") as f:
            f.write(f"{name}@{n} pid {os.getpid()}\n")
    time.sleep(float(os.environ.get("SCINOL_FAULT_SLEEP", "600")))
