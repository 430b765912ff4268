"""The Python SDK harness, with bundles that end when their work is done
(:func:`pipelines.runners.compat.end_bundles_promptly`).

``scinol run`` applies Beam's adjustments in its own process (the
in-process runner and LOOPBACK harnesses); :func:`main` is the harness a worker pool started by
:class:`~pipelines.runners.flink_cluster.FlinkSessionCluster` runs (its
``--container_executable``), so Flink's workers get it too.

:func:`collect_garbage_rarely` is the other setting both apply: Python's
cyclic garbage collector, left at its defaults, spent 1.0-1.2 s of a 5 s
bounded run over 400,000 events in full collections alone (each walks the
quarter of a million objects Beam, numba and NumPy leave after start-up, and
every consumed Kafka message is a tracked object that counts towards the
next one).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os

from pipelines import telemetry
from pipelines.telemetry import port_range

from .compat import adjust_beam
from .startup import one_blas_thread, skip_numba_probes

log = logging.getLogger(__name__)

GC_YOUNG_THRESHOLD = 20_000
"""Tracked objects allocated between young collections (Python's default: 700)."""


def collect_garbage_rarely(young: int = GC_YOUNG_THRESHOLD) -> None:
    """Let ``young`` tracked objects be allocated between young collections,
    so a batch of 2,000 messages no longer sets off several; and, the first
    time in a process, collect once and freeze what is alive (the modules,
    Beam's and numba's machinery: never walked by a collection again, which
    also keeps a full collection from pausing a live stream for 0.1 s).
    Cycles made afterwards are collected as before, only less often.
    Measured on one bounded run of 400,000 events: 1.2 s of collections
    before, 0.15 s after."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)


def main(argv=None) -> None:
    """A worker pool's harness (Beam's container contract: it is called with
    ``--id`` and ``--control_endpoint`` among others). Runs the SDK harness
    as the pool itself would (no state cache, no data buffer time limit),
    with :func:`~pipelines.runners.compat.adjust_beam` applied first, numba's optional
    probes skipped and one OpenBLAS thread (:mod:`pipelines.runners.startup`):
    every worker loads the compiled kernels. With ``--metrics-ports`` it
    serves its metrics on the first free port of that range."""
    one_blas_thread()
    skip_numba_probes()
    parser = argparse.ArgumentParser(prog="python -m pipelines.runners.harness")
    parser.add_argument("--id", required=True)
    parser.add_argument("--control_endpoint", required=True)
    parser.add_argument("--metrics-ports", type=port_range, default=None)
    args, _ = parser.parse_known_args(argv)
    if args.metrics_ports is not None:
        serve_metrics(args.metrics_ports)
    adjust_beam()
    from apache_beam.runners.worker.sdk_worker import SdkHarness

    collect_garbage_rarely()
    SdkHarness(args.control_endpoint, worker_id=args.id, state_cache_size=0, data_buffer_time_limit_ms=-1).run()


def serve_metrics(ports: range) -> None:
    """This worker's own Prometheus endpoint (the steps it runs report there);
    a range with no free port costs the metrics, not the job."""
    try:
        host, port = telemetry.serve_first_free(ports)
    except telemetry.MetricsPortError as exc:
        log.warning("worker %d serves no metrics: %s", os.getpid(), exc)
        return
    log.info("worker %d serves Prometheus metrics at http://%s:%d/metrics", os.getpid(), host, port)


if __name__ == "__main__":
    main()
