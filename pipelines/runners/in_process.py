"""Beam's in-process runner (the FnApiRunner), with run metrics that stay
the same size however long the run.

After each bundle, Beam's FnApiRunner (2.77, 2.78) folds the bundle's monitoring
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
"""

from __future__ import annotations

import logging

from apache_beam.metrics import monitoring_infos as infos
from apache_beam.runners.portability.fn_api_runner import fn_runner

log = logging.getLogger(__name__)


def consolidate_metrics_eagerly() -> bool:
    """Make the FnApiRunner of this process merge each bundle's metrics at
    once. False (and nothing changed) if the installed Beam's runner no
    longer merges them with the function this was written for."""
    current = getattr(fn_runner, "consolidate_monitoring_infos", None)
    if current is _consolidated_list:
        return True
    if current is not infos.consolidate:
        log.info("Beam's FnApiRunner has changed how it merges metrics; left as it is")
        return False
    fn_runner.consolidate_monitoring_infos = _consolidated_list
    return True


def _consolidated_list(metrics, key=None) -> list:
    """Beam's merge, as a list, keeping only the latest value of each gauge
    (Beam's merge keeps them all: it has no combiner for gauges, and the
    runner's results read only the latest)."""
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
