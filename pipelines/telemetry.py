"""A run's Prometheus metrics, served over HTTP by ``scinol run --metrics-port``.

The pipeline's steps report through the functions here, once per batch
(never per event); they do nothing until :func:`serve` has started the
endpoint in this process. So the endpoint sees the steps that run in the
process that serves it: the in-process runner's (``--runner direct``) and
Flink's when their SDK harness is this process's (``LOOPBACK``, the
default of ``scinol run --runner flink`` without ``--worker-pool``, on an
embedded Flink or a session cluster). Prism's workers and a worker pool's
are processes of their own and do not report here: a session cluster
started with ``scinol flink up --metrics-ports FIRST-LAST`` gives each of
its Python workers an endpoint of its own, on the first free port of that
range (:func:`serve_first_free`), beside Flink's Prometheus reporter on
the same range.
The Beam counters the run summary reads are kept as they are, beside these.

Names follow Prometheus's conventions (``scinol_`` prefix, the unit in the
name, ``_total`` for counters, labels for what a value is of). A last
checkpoint's age is ``time() - scinol_last_checkpoint_timestamp_seconds``
in PromQL, so a stalled run shows an age that grows by itself.
"""

from __future__ import annotations

import threading
import time

import numpy as np

_COUNTERS = {
    "messages_read": ("scinol_messages_read_total", "Kafka messages read, by topic and partition",
                      ("topic", "partition")),
    "events": ("scinol_events_total", "Events decoded", ()),
    "predictions": ("scinol_predictions_total", "Predictions written, by model", ("model",)),
    "dead_letters": ("scinol_dead_letters_total", "Messages sent to the dead-letter topic, by reason", ("reason",)),
}
_GAUGES = {
    "consumer_lag": ("scinol_consumer_lag_messages", "End offset minus the position read, by topic and partition",
                     ("topic", "partition")),
    "last_checkpoint": ("scinol_last_checkpoint_timestamp_seconds", "Unix time of the last checkpoint, by model",
                        ("model",)),
    "checkpoint_events": ("scinol_checkpoint_events", "Events covered by the last checkpoint, by model", ("model",)),
    "progressive_loss": ("scinol_progressive_loss", "Mean loss of each prediction before its update, since the "
                         "model's start, by model", ("model",)),
    "progressive_accuracy": ("scinol_progressive_accuracy_ratio", "Share of right predictions before their "
                             "update, since the model's start, by model (classification)", ("model",)),
    "waiting_messages": ("scinol_waiting_messages", "Messages waiting for an earlier offset of their partition, "
                         "by model", ("model",)),
}

LATENCY_BUCKETS = np.array([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0])
"""Upper bounds (seconds) of the prediction latency histogram's buckets."""

_metrics: dict | None = None  # name -> prometheus_client metric, once serving
_server = None
_lock = threading.Lock()


class MetricsPortError(OSError):
    """The metrics endpoint could not listen (a port in use, a bad host)."""


def serve(port: int, host: str = "0.0.0.0") -> tuple[str, int]:
    """Start the endpoint (``/metrics``) on ``host:port`` (port 0: any free
    one); returns the address it listens on. One at a time per process."""
    global _metrics, _server
    from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

    with _lock:
        if _metrics is not None:
            raise MetricsPortError("the metrics endpoint is already serving in this process")
        registry = CollectorRegistry()
        try:
            server, _thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise MetricsPortError(f"--metrics-port {port}: cannot listen on {host}:{port} "
                                   f"({exc.strerror or exc})") from None
        metrics = {name: Counter(full, doc, labels, registry=registry)
                   for name, (full, doc, labels) in _COUNTERS.items()}
        metrics.update({name: Gauge(full, doc, labels, registry=registry)
                        for name, (full, doc, labels) in _GAUGES.items()})
        metrics["latency"] = _BatchHistogram(
            "scinol_prediction_latency_seconds", "Seconds from an event's timestamp to its prediction, by model",
            "model", LATENCY_BUCKETS)
        registry.register(metrics["latency"])
        for name, (_full, _doc, labels) in {**_COUNTERS, **_GAUGES}.items():
            if not labels:  # shown as 0 from the start, not absent until the first event
                metrics[name].inc(0) if name in _COUNTERS else metrics[name].set(0)
        _metrics, _server = metrics, server
        return server.server_address[0], server.server_address[1]


def port_range(text: str) -> range:
    """``FIRST-LAST`` (or one port) as the ports it names, both ends
    included, as Flink's ``metrics.reporter.prom.port`` reads it."""
    first, _, last = text.partition("-")
    try:
        ports = range(int(first), int(last or first) + 1)
    except ValueError:
        ports = range(0)
    if not ports or ports.start < 1 or ports.stop > 65536:
        raise ValueError(f"{text!r} is not a port range (FIRST-LAST, 1-65535)")
    return ports


def port_range_text(ports: range) -> str:
    """The inverse of :func:`port_range`."""
    return f"{ports.start}-{ports.stop - 1}"


def serve_first_free(ports: range, host: str = "0.0.0.0") -> tuple[str, int]:
    """:func:`serve` on the first of ``ports`` nothing listens on (Flink's
    reporter and the other workers take theirs from the same range)."""
    for port in ports:
        try:
            return serve(port, host)
        except MetricsPortError:
            if serving():
                raise
    raise MetricsPortError(f"no free port for the metrics endpoint in {port_range_text(ports)}")


def stop() -> None:
    """Stop serving and forget the metrics (a later :func:`serve` starts afresh)."""
    global _metrics, _server
    with _lock:
        if _server is not None:
            _server.shutdown()
            _server.server_close()
        _metrics = _server = None


def address() -> tuple[str, int] | None:
    """Where the endpoint listens; None when not serving."""
    return None if _server is None else _server.server_address[:2]


def serving() -> bool:
    return _metrics is not None


def count(name: str, n: int = 1, **labels) -> None:
    """Add ``n`` to counter ``name`` (a key of the counters above)."""
    if _metrics is not None and n:
        metric = _metrics[name]
        (metric.labels(**labels) if labels else metric).inc(n)


def gauge(name: str, value: float, **labels) -> None:
    """Set gauge ``name`` (a key of the gauges above)."""
    if _metrics is not None:
        metric = _metrics[name]
        (metric.labels(**labels) if labels else metric).set(value)


def latencies(model: str, event_ms: np.ndarray) -> None:
    """Observe, for one batch of predictions, the time from each event's
    timestamp (ms; negative: none) to now."""
    if _metrics is not None and len(event_ms):
        stamped = np.asarray(event_ms, dtype=np.int64)
        stamped = stamped[stamped >= 0]
        _metrics["latency"].observe_many(time.time() - stamped / 1000.0, model)


class _BatchHistogram:
    """A Prometheus histogram with one label, observed a batch at a time
    with NumPy (``prometheus_client``'s Histogram observes one value a call)."""

    def __init__(self, name: str, doc: str, label: str, bounds: np.ndarray):
        self.name, self.doc, self.label, self.bounds = name, doc, label, bounds
        self._series: dict[str, list] = {}  # label value -> [counts per bucket (+Inf last), sum]
        self._lock = threading.Lock()

    def observe_many(self, values: np.ndarray, label_value: str) -> None:
        counts = np.bincount(np.searchsorted(self.bounds, values, side="left"), minlength=len(self.bounds) + 1)
        with self._lock:
            series = self._series.setdefault(label_value, [np.zeros(len(self.bounds) + 1, np.int64), 0.0])
            series[0] += counts
            series[1] += float(values.sum())

    def collect(self):
        from prometheus_client.core import HistogramMetricFamily

        family = HistogramMetricFamily(self.name, self.doc, labels=[self.label])
        with self._lock:
            for value, (counts, total) in sorted(self._series.items()):
                cumulative = np.cumsum(counts).tolist()
                buckets = [(repr(float(b)), c) for b, c in zip(self.bounds, cumulative)] + [("+Inf", cumulative[-1])]
                family.add_metric([value], buckets, total)
        yield family


def checkpoint_written(model: str, events: int) -> None:
    gauge("last_checkpoint", time.time(), model=model)
    gauge("checkpoint_events", events, model=model)
