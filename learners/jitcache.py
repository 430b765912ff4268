"""Numba's on-disk cache, keyed to every source a compiled kernel inlines."""

from __future__ import annotations

import glob
import hashlib
import os


def drop_stale_cache(module: str, dispatcher) -> None:
    """Numba keys its on-disk cache to the kernel's own file only, but the
    kernels of ``module`` (e.g. "kernels") inline the math modules and the
    losses, and fold in the constants of ``codes.py``: if any of those changed since the cache was written, a stale
    kernel would load. Drop ``module``'s cache files unless the stamp of all
    their sources matches; ``dispatcher`` is any cached kernel of it."""
    here = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(os.listdir(here)):
        if name in (f"{module}.py", "losses.py", "codes.py") or name.startswith("math_") and name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                digest.update(name.encode() + b"\0" + f.read())
    cache_dir = dispatcher._cache.cache_path
    stamp = os.path.join(cache_dir, f"{module}.sources.sha256")
    try:
        with open(stamp) as f:
            if f.read() == digest.hexdigest():
                return
    except OSError:
        pass
    try:
        for path in glob.glob(os.path.join(cache_dir, f"{module}.*.nb[ic]")):
            os.unlink(path)
        os.makedirs(cache_dir, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(digest.hexdigest())
    except OSError:  # a read-only install: numba then caches elsewhere or not at all
        pass
