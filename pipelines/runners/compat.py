"""Every adjustment scinol-stream makes to Beam's internals, in one place.

Each one was written for the Beam version this project pins
(:data:`BEAM_VERSION`, the same as setup.py's). Each checks that the code it
adjusts is still the code it was written for; if not, it changes nothing
and logs a warning naming itself, and tests/runners/test_compat.py fails
naming it, so a Beam upgrade cannot change behaviour silently.

``end_bundles_promptly`` (the Python SDK harness: :mod:`pipelines.runners.harness`
and ``scinol run``'s own process). Beam's Python SDK harness (2.77, 2.78) times each bundle's steps with a sampler
thread. The thread's sleep grows from 2 ms to 200 ms over a bundle's first
second, and ending the bundle joins it: a bundle that ran for a second or more
then idles for up to 200 ms (100 ms on average) after its last step. Our Kafka
read checkpoints after a second of reading, so every live bundle paid it, on
every runner whose workers are Python harnesses (the FnApiRunner, Flink,
Prism), and events arriving meanwhile waited: it was most of exact mode's
p99 latency at 5,000 events/s (138 ms; docs/benchmarks.md, "Latency at a
fixed offered load").

:func:`end_bundles_promptly` caps the sampler's period at 10 ms in this
process, so a bundle ends within 10 ms of its work. The cost is a thread
waking every 10 ms per running bundle, taking a lock without the GIL.

``consolidate_metrics_eagerly`` (the in-process runner, ``scinol run``). After each bundle, Beam's FnApiRunner (2.77, 2.78) folds the bundle's monitoring
infos into its stage's with a generator, ``consolidate(chain(new, previous))``,
that nothing reads before the run ends. So an unbounded run keeps every
bundle's metrics, one more nested generator per bundle (about 170 a minute
in ``scinol run`` at 27,000 events/s), and a run of more than about 1,000
bundles of one stage (a bounded backfill of a quarter of an hour, at one
bundle a second) cannot read its metrics when it ends: the nested
generators raise RecursionError, so the run's summary was lost.

:func:`consolidate_metrics_eagerly` makes the runner fold each bundle's
metrics into a list at once: the same metrics, merged by the same function,
kept as one entry per metric and step instead of one per bundle (for a
gauge, its latest value: Beam's merge kept every bundle's).

``stop_only_ended_workers`` (a worker pool: LOOPBACK's in ``scinol run``'s
process, and the pool ``scinol flink up`` starts). Beam's Flink runner names
its SDK workers per TaskManager JVM ("1-1" for the first job a TaskManager
runs, "2-1" for its second), so two TaskManagers sharing one pool ask it for
workers under the same id. The pool (2.78) keeps one worker per id, the last
started, and StopWorker stops that one: when one TaskManager's tasks ended
first, it stopped the other TaskManager's worker in the middle of its work
("SDK harness closed connection", "Unknown process bundle instruction id",
the job failed or restarted). A runner closes its control stream before it
asks for the stop, and a worker whose stream is closed ends by itself, so
:func:`stop_only_ended_workers` makes the pool keep every worker under its
id and, when several share it, let StopWorker forget one that has ended (it
waits up to :data:`STOP_WAIT_S` for one) instead of stopping a live one.

``size_cached_state_quickly`` (every Python SDK harness: the FnApiRunner's,
Flink's and Prism's workers). Beam's state cache (2.78) weighs each value it
keeps with ``objsize``, which first walks the globals of every loaded module
(about 1,500 modules here) to leave their dictionaries out: 3 ms a call whatever the value,
and each write of a value state calls it twice (clear, then extend). A
stateful step writes its state every bundle, so in sharded mode at staleness 0
(a bundle per event, three stateful steps) 13 of the 36 ms a bundle took were
this walk (cProfile of ``scinol run --shards 1 --max-staleness 0``, 300
events). :func:`size_cached_state_quickly` keeps the set of those globals'
ids and walks the modules again only when one was imported since: the same
weights, by the same size, referent and filter functions.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time

log = logging.getLogger(__name__)

BEAM_VERSION = "2.78.0"
"""The apache-beam version the adjustments below were written for and tested with."""

SAMPLING_PERIOD_MS = 10

STOP_WAIT_S = 10.0
"""How long a pool's StopWorker waits for one of several workers under an id to end by itself."""


def adjust_beam() -> dict[str, bool]:
    """Apply every adjustment to this process's Beam; which ones applied."""
    return {"end_bundles_promptly": end_bundles_promptly(),
            "consolidate_metrics_eagerly": consolidate_metrics_eagerly(),
            "stop_only_ended_workers": stop_only_ended_workers(),
            "size_cached_state_quickly": size_cached_state_quickly()}


def _not_applied(name: str, why: str) -> None:
    import apache_beam

    log.warning("compat adjustment %s not applied to apache-beam %s (written for %s): %s",
                name, apache_beam.__version__, BEAM_VERSION, why)


def end_bundles_promptly(period_ms: int = SAMPLING_PERIOD_MS) -> bool:
    """Make Beam's step-time sampler, in samplers made from now on in this
    process, sleep at most ``period_ms``. False (and nothing changed) if the
    installed Beam's sampler is not the one this was written for."""
    from apache_beam.runners.worker import statesampler

    init = statesampler.StateSampler.__init__
    param = inspect.signature(init).parameters.get("sampling_period_ms")
    if param is None or init.__defaults__ not in ((statesampler.DEFAULT_SAMPLING_PERIOD_MS,), (period_ms,)):
        _not_applied("end_bundles_promptly", "Beam's StateSampler.__init__ no longer takes the default period "
                     "it was written for; bundles may idle up to 200 ms after their work")
        return False
    init.__defaults__ = (period_ms,)
    return True


def consolidate_metrics_eagerly() -> bool:
    """Make the FnApiRunner of this process merge each bundle's metrics at
    once. False (and nothing changed) if the installed Beam's runner no
    longer merges them with the function this was written for."""
    from apache_beam.metrics import monitoring_infos as infos
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    current = getattr(fn_runner, "consolidate_monitoring_infos", None)
    if current is _consolidated_list:
        return True
    if current is not infos.consolidate:
        _not_applied("consolidate_metrics_eagerly", "fn_runner.consolidate_monitoring_infos is no longer "
                     "Beam's consolidate; a long in-process run may lose its metrics")
        return False
    fn_runner.consolidate_monitoring_infos = _consolidated_list
    return True


def _consolidated_list(metrics, key=None) -> list:
    """Beam's merge, as a list, keeping only the latest value of each gauge
    (Beam's merge keeps them all: it has no combiner for gauges, and the
    runner's results read only the latest)."""
    from apache_beam.metrics import monitoring_infos as infos

    key = key or infos.to_key
    merged, gauges = [], {}
    for info in infos.consolidate(metrics, key):
        if not infos.is_gauge(info):
            merged.append(info)
            continue
        k = key(info)
        if k not in gauges or infos.extract_gauge_value(info)[0] > infos.extract_gauge_value(gauges[k])[0]:
            gauges[k] = info
    return merged + list(gauges.values())


def size_cached_state_quickly() -> bool:
    """Make Beam's state cache in this process weigh its values without
    walking every module's globals on each call. False (and nothing changed)
    if the installed Beam no longer weighs them with the function this was
    written for."""
    from apache_beam.runners.worker import statecache

    current = statecache.get_deep_size
    if current is _deep_size:
        return True
    helpers = ("_size_func", "_get_referents_func", "_filter_func")
    if current.__module__ != statecache.__name__ or not all(hasattr(statecache, h) for h in helpers):
        _not_applied("size_cached_state_quickly", "statecache.get_deep_size is no longer the objsize call it was "
                     "written for; each state write may cost milliseconds")
        return False
    statecache.get_deep_size = _deep_size
    return True


_module_globals: tuple[int, frozenset] = (-1, frozenset())
"""(how many modules were loaded, the ids of their globals dictionaries) when last walked."""


def _deep_size(*objs) -> int:
    """Beam's weight of ``objs`` (objsize's deep size with Beam's functions),
    leaving out module globals as objsize does, from a kept set of their ids."""
    import sys

    from apache_beam.runners.worker import statecache
    from objsize.traverse import ObjSizeSettings, TraversalContext

    global _module_globals
    loaded, ids = _module_globals
    if loaded != len(sys.modules):
        modules = list(sys.modules.values())
        ids = frozenset(id(m.__dict__) for m in modules if isinstance(getattr(m, "__dict__", None), dict))
        _module_globals = (len(modules), ids)
    context = TraversalContext(ObjSizeSettings(
        get_referents_func=statecache._get_referents_func, filter_func=statecache._filter_func,
        get_size_func=statecache._size_func, exclude_modules_globals=False))
    context.exclude_set.update(ids)
    return context.get_deep_size(*objs)


def stop_only_ended_workers() -> bool:
    """Make Beam's worker pool in this process keep every worker started
    under an id, and stop only an ended one when several share it. False
    (and nothing changed) if the installed pool no longer keeps its workers
    in the two tables this was written for."""
    from apache_beam.runners.worker import worker_pool_main

    pool = worker_pool_main.BeamFnExternalWorkerPoolServicer
    if getattr(pool.StopWorker, "keeps_twins", False):
        return True
    stop_source = inspect.getsource(pool.StopWorker)
    if not all(f"self.{table}.pop(" in stop_source for table in _WORKER_TABLES):
        _not_applied("stop_only_ended_workers", "Beam's worker pool no longer pops its workers from "
                     f"{' and '.join(_WORKER_TABLES)}; two TaskManagers sharing it may stop each other's worker")
        return False
    pool.StartWorker = _keeping_twins(pool.StartWorker)
    pool.StopWorker = _stopping_an_ended_twin(pool.StopWorker)
    return True


_WORKER_TABLES = ("_worker_processes", "_worker_threads")
_TWINS_LOCK = threading.Lock()  # the pool serves StartWorker and StopWorker on several gRPC threads


def _keeping_twins(start):
    def StartWorker(self, request, context):
        with _TWINS_LOCK:
            twins = self.__dict__.setdefault("_twins", {})
            for table in _WORKER_TABLES:
                earlier = getattr(self, table).pop(request.worker_id, None)
                if earlier is not None:
                    twins.setdefault(request.worker_id, []).append((table, earlier))
            return start(self, request, context)

    return StartWorker


def _stopping_an_ended_twin(stop):
    from apache_beam.portability.api import beam_fn_api_pb2

    def StopWorker(self, request, context):
        with _TWINS_LOCK:
            workers = _workers_under(self, request.worker_id)
        if len(workers) < 2:
            return stop(self, request, context)
        deadline = time.monotonic() + STOP_WAIT_S
        while not any(_ended(worker) for _, worker in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = next((worker for _, worker in workers if _ended(worker)), None)
        if ended is None:
            log.warning("worker pool: %d workers share the id %s and none has ended; stopping none",
                        len(workers), request.worker_id)
        else:
            with _TWINS_LOCK:
                _forget(self, request.worker_id, ended)
        return beam_fn_api_pb2.StopWorkerResponse()

    StopWorker.keeps_twins = True
    return StopWorker


def _workers_under(pool, worker_id: str) -> list[tuple[str, object]]:
    """(table, worker) of every worker started under ``worker_id``, the one Beam's table holds last."""
    current = [(t, getattr(pool, t)[worker_id]) for t in _WORKER_TABLES if worker_id in getattr(pool, t)]
    return list(pool.__dict__.get("_twins", {}).get(worker_id, [])) + current


def _forget(pool, worker_id: str, ended) -> None:
    """Drop ``ended`` from the workers under ``worker_id``; Beam's table holds the latest of the others."""
    others = [(t, w) for t, w in _workers_under(pool, worker_id) if w is not ended]
    for table in _WORKER_TABLES:
        getattr(pool, table).pop(worker_id, None)
    pool._twins[worker_id] = others[:-1]
    if others:
        table, latest = others[-1]
        getattr(pool, table)[worker_id] = latest


def _ended(worker) -> bool:
    """A harness process that exited, or a harness thread whose control stream ended."""
    poll = getattr(worker, "poll", None)
    return poll() is not None if poll else getattr(worker, "_alive", True) is False
