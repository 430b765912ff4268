"""Run independent benchmark tasks in order, or over ``jobs`` processes.

One pool serves a whole benchmark, so each worker imports the packages and
loads each data set once. Workers are spawned, not forked (the parent may
hold threads of numba, VW or matplotlib); numba's on-disk cache spares them
the compiles.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor


class TaskRunner:
    def __init__(self, jobs: int = 1):
        self.jobs = max(1, int(jobs))
        self._pool = None

    def __enter__(self):
        if self.jobs > 1:
            self._pool = ProcessPoolExecutor(max_workers=self.jobs,
                                             mp_context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def map(self, fn, tasks: list) -> list:
        """``[fn(t) for t in tasks]``, in parallel when there is a pool."""
        if self._pool is None or len(tasks) <= 1:
            return [fn(t) for t in tasks]
        return list(self._pool.map(fn, tasks, chunksize=1))
