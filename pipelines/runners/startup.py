"""Start-up of the project's own processes: two optional imports numba makes
that they skip, and OpenBLAS's thread pool they do without.

numba's first compile or cache load in a process imports its typing and
lowering modules, and two of them probe for optional packages the
project's kernels never use:

* ``numba.np.arraymath`` imports ``scipy.linalg`` (0.1-0.4 s on these
  machines) only to decide whether numba's ``np.correlate`` and
  ``np.convolve`` may call BLAS (``_HAVE_BLAS``); numba's ``np.dot`` and
  ``np.linalg`` import it themselves when they are first compiled, so they
  still work;
* ``numba.core.typing.cffi_utils`` imports ``cffi`` (with its C parser,
  about 0.05 s) to type cffi functions called from compiled code.

The ``scinol`` command (``pipelines.cli.main``) and the worker harness
(``pipelines.runners.harness``) run in processes of their own, so they let
those two probes fail (each probing module then takes its own fallback)
and nothing else: the packages import as usual at any other time, a
process that imported them already is not touched, and a program that
imports the project as a library keeps numba's behaviour.
"""

from __future__ import annotations

import importlib.abc
import os
import sys

SKIPPED_PROBES = {"numba.np.arraymath": "scipy.linalg", "numba.core.typing.cffi_utils": "cffi"}
"""numba's probing module -> the optional package it imports, refused while that module is importing."""


def _importing(name: str) -> bool:
    """Whether module ``name``'s body is running right now."""
    module = sys.modules.get(name)
    return module is not None and getattr(getattr(module, "__spec__", None), "_initializing", False)


class _SkipProbes(importlib.abc.MetaPathFinder):
    """Refuses a probed package while its prober is importing; finds nothing
    otherwise (the next finder imports as usual). It stays on
    ``sys.meta_path``: removing a finder while the import system walks the
    list would skip the next one for that import."""

    def __init__(self, probes: dict[str, str]):
        self.probes = {skipped: prober for prober, skipped in probes.items()}

    def find_spec(self, fullname, path, target=None):
        prober = self.probes.get(fullname)
        if prober is not None and _importing(prober):
            raise ImportError(f"{fullname} is not imported for {prober}'s probe at start-up")
        return None


def skip_numba_probes() -> None:
    """Install the finder, once, for the probes that have not run yet."""
    if any(isinstance(finder, _SkipProbes) for finder in sys.meta_path):
        return
    pending = {prober: skipped for prober, skipped in SKIPPED_PROBES.items()
               if prober not in sys.modules and skipped not in sys.modules}
    if pending:
        sys.meta_path.insert(0, _SkipProbes(pending))


def one_blas_thread() -> None:
    """OpenBLAS, NumPy's BLAS, with one thread unless the environment sets
    ``OPENBLAS_NUM_THREADS``. Nothing these processes run leans on BLAS (the
    learners are compiled loops), yet OpenBLAS starts a thread per core when
    NumPy loads, and it spins before it sleeps: about 0.1 CPU-s of every
    ``scinol learn`` on two cores, taken from the parser, the learner and
    the broker. It counts only if called before NumPy is imported."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
