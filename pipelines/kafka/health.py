"""Reporting Kafka broker trouble (refused connections, timeouts, all brokers
down) from every client the pipeline creates, in our own words.

librdkafka already rides out a broker that is down or paused: it reconnects
with exponential back-off (``reconnect.backoff.ms`` .. ``reconnect.backoff.max.ms``),
re-sends timed-out requests and keeps produced messages queued for up to
``message.timeout.ms``. What it does not do is tell the operator in terms of
the pipeline. :class:`BrokerErrorReporter` is the clients' ``error_cb``: it
logs one warning per client per ``interval`` seconds while errors continue
(a refused port produces several errors a second), counts them, and logs
when the client is working again. Fatal errors (e.g. a broken idempotent
producer) are logged as errors; what to do about them is the caller's call.

No secrets here: librdkafka's error strings name brokers and error codes,
never configuration values.
"""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("pipelines.kafka")

LIBRDKAFKA_LOG = logging.getLogger("pipelines.kafka.librdkafka")
"""librdkafka's own log lines ("Connect to ... failed", "Disconnected"): they
repeat what the error callbacks report in the pipeline's words, so they are
off unless asked for (``logging.getLogger("pipelines.kafka.librdkafka").setLevel(logging.DEBUG)``)."""
LIBRDKAFKA_LOG.setLevel(logging.CRITICAL)


def quiet(config: dict) -> dict:
    """``config`` with librdkafka's log lines sent to :data:`LIBRDKAFKA_LOG`
    instead of stderr (unless the caller chose a logger)."""
    return config if "logger" in config else {**config, "logger": LIBRDKAFKA_LOG}


class BrokerErrorReporter:
    """``error_cb`` of one Kafka client; see the module docstring."""

    def __init__(self, client: str, interval: float = 10.0, counter=None):
        self.client = client
        self.interval = interval
        self.counter = counter  # a Beam counter, optional (errors are served inside bundles)
        self.errors = 0
        self._unreported = 0
        self._first_error: float | None = None  # start of the current trouble
        self.last_error = -float("inf")  # monotonic time of the latest error
        self._last_log = -float("inf")
        self._lock = threading.Lock()

    def __call__(self, err) -> None:
        now = time.monotonic()
        with self._lock:
            self.errors += 1
            self._unreported += 1
            self.last_error = now
            if self._first_error is None:
                self._first_error = now
            due = now - self._last_log >= self.interval
            if due:
                self._last_log = now
                count, self._unreported = self._unreported, 0
                since = now - self._first_error
        if self.counter is not None:
            try:
                self.counter.inc()
            except Exception:  # noqa: BLE001 - outside a bundle's metrics context: the log still reports it
                pass
        if err.fatal():
            log.error("Kafka %s: fatal error %s: %s", self.client, err.name(), err.str())
        elif due:
            log.warning("Kafka %s: broker trouble (%s: %s; %d errors in %.0f s); retrying with back-off, "
                        "nothing is dropped", self.client, err.name(), err.str(), count, since)

    def recovered(self) -> None:
        """Call when the client got an answer again (a message read or delivered)."""
        if self._first_error is None:
            return
        with self._lock:
            first, self._first_error = self._first_error, None
            self._last_log = -float("inf")
            self._unreported = 0
        log.warning("Kafka %s: working again after %.0f s of broker errors", self.client, time.monotonic() - first)

    @property
    def in_trouble(self) -> bool:
        return self._first_error is not None


def with_error_reporting(config: dict, client: str, counter=None) -> tuple[dict, BrokerErrorReporter | None]:
    """``config`` plus an ``error_cb`` reporter, unless the caller set their own."""
    if "error_cb" in config:
        return quiet(config), None
    reporter = BrokerErrorReporter(client, counter=counter)
    return quiet({**config, "error_cb": reporter}), reporter
