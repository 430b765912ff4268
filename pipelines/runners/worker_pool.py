"""Beam's SDK worker pool (the EXTERNAL environment's ``--environment_config``),
with :func:`pipelines.runners.compat.stop_only_ended_workers` applied: one pool
serves every TaskManager of a :class:`~pipelines.runners.flink_cluster.FlinkSessionCluster`,
and Beam's Flink runner gives their workers the same ids, so Beam's pool
alone lets one TaskManager's end stop another's worker.

Run as ``python -m pipelines.runners.worker_pool`` with Beam's
``worker_pool_main`` flags (``--service_port``, ``--container_executable``)."""

from __future__ import annotations

from .compat import stop_only_ended_workers


def main(argv=None) -> None:
    stop_only_ended_workers()
    from apache_beam.runners.worker import worker_pool_main

    worker_pool_main.main(argv)


if __name__ == "__main__":
    main()
