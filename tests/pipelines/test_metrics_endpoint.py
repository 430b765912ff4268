"""``scinol run --metrics-port``: the run's Prometheus metrics, scraped over
HTTP from a real bounded run on the direct runner against the tansu broker,
and by a real Prometheus server queried with PromQL."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from pipelines import telemetry
from pipelines.cli.main import main
from pipelines.records.topics import produce_events
from tests.support.prometheus import PrometheusServer, dashboard_queries_answer, scrape, total
from tests.support.runs import toy_stream
from tests.support.waiting import wait_for


def _run(bootstrap: str, topic: str, tmp_path, *extra: str) -> int:
    return main(["run", "--bootstrap", bootstrap, "--topic", topic, "--predictions-topic", topic + ".pred",
                 "--checkpoint-dir", str(tmp_path / "ckpt"), "--metrics-host", "127.0.0.1", "--runner", "direct",
                 *extra])


@pytest.fixture
def metrics_off():
    telemetry.stop()
    yield
    telemetry.stop()


@pytest.mark.kafka
@pytest.mark.slow
def test_a_bounded_run_serves_its_counts_by_model_partition_and_reason(tansu_bootstrap, topic_name, tmp_path,
                                                                       metrics_off, capsys):
    _, _, events = toy_stream(300)
    events = [{**e, "model": "ab"[i % 2]} for i, e in enumerate(events)]
    produce_events(tansu_bootstrap, topic_name, events, partitions=2, progress=False)
    producer = Producer({"bootstrap.servers": tansu_bootstrap})
    for i in range(7):
        producer.produce(topic_name, b"not an event %d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    started = time.time()
    assert _run(tansu_bootstrap, topic_name, tmp_path, "--bounded", "--metrics-port", "0") == 0
    assert "Prometheus metrics at http://127.0.0.1:" in capsys.readouterr().err
    samples = scrape()
    assert total(samples, "scinol_messages_read_total") == 307
    assert {p: total(samples, "scinol_messages_read_total", partition=p) for p in "01"} == {"0": 154, "1": 153}
    assert total(samples, "scinol_events_total") == 300
    assert {m: total(samples, "scinol_predictions_total", model=m) for m in "ab"} == {"a": 150, "b": 150}
    reasons = {dict(ls)["reason"]: v for (n, ls), v in samples.items() if n == "scinol_dead_letters_total"}
    assert sum(reasons.values()) == 7 and len(reasons) == 1, reasons
    assert {p: total(samples, "scinol_consumer_lag_messages", partition=p) for p in "01"} == {"0": 0, "1": 0}
    for model in "ab":
        assert total(samples, "scinol_checkpoint_events", model=model) == 150
        assert started <= total(samples, "scinol_last_checkpoint_timestamp_seconds", model=model) <= time.time()
        assert 0 < total(samples, "scinol_progressive_loss", model=model) < 1  # logistic loss of a learnt model
        assert 0.5 < total(samples, "scinol_progressive_accuracy_ratio", model=model) <= 1
        assert total(samples, "scinol_waiting_messages", model=model) == 0
        assert total(samples, "scinol_prediction_latency_seconds_count", model=model) == 150
        mean = total(samples, "scinol_prediction_latency_seconds_sum", model=model) / 150  # toy events: late 2023
        assert total(samples, "scinol_prediction_latency_seconds_bucket", model=model, le="300.0") == 0
        assert 365 * 86400 < mean < time.time() - 1.6e9  # over a year, under the time since 2020


@pytest.mark.kafka
@pytest.mark.slow
def test_a_sharded_run_serves_the_same_names_as_exact_mode(tansu_bootstrap, topic_name, tmp_path, metrics_off):
    """Sharded mode (K = 2): the combine step serves the latency histogram
    and the progressive loss, and each shard's checkpoint its time."""
    _, _, events = toy_stream(300)
    produce_events(tansu_bootstrap, topic_name, events, partitions=1, progress=False)
    started = time.time()
    assert _run(tansu_bootstrap, topic_name, tmp_path, "--bounded", "--metrics-port", "0", "--shards", "2",
                "--checkpoint-every", "100") == 0
    samples = scrape()
    assert total(samples, "scinol_predictions_total", model="default") == 300
    assert total(samples, "scinol_prediction_latency_seconds_count", model="default") == 300
    assert 365 * 86400 < total(samples, "scinol_prediction_latency_seconds_sum", model="default") / 300
    assert 0 < total(samples, "scinol_progressive_loss", model="default") < 1
    assert 0.5 < total(samples, "scinol_progressive_accuracy_ratio", model="default") <= 1
    assert started <= total(samples, "scinol_last_checkpoint_timestamp_seconds", model="default") <= time.time()
    assert total(samples, "scinol_checkpoint_events", model="default") in (100, 200, 300)


@pytest.mark.kafka
@pytest.mark.slow
def test_a_prometheus_server_scrapes_an_unbounded_run_to_its_end(tansu_bootstrap, topic_name, tmp_path,
                                                                  metrics_off, prometheus_binary):
    """Prometheus scrapes while the run goes on (every second), and PromQL
    over its HTTP API gives every event counted and a lag of 0 at the end."""
    _, _, events = toy_stream(400)
    now_ms = int(time.time() * 1000)
    events = [{**e, "timestamp": now_ms} for e in events]  # latency from now, not from the toy stream's 2023
    produce_events(tansu_bootstrap, topic_name, events, partitions=2, progress=False)
    host, port = telemetry.serve(0, "127.0.0.1")
    with PrometheusServer(prometheus_binary, [f"127.0.0.1:{port}"], tmp_path / "prometheus") as prometheus:
        wait_for(lambda: prometheus.scalar("up{job='scinol'}") == 1.0, 60, "Prometheus scraping the run")
        telemetry.stop()  # the run serves its own endpoint, on the same port
        assert _run(tansu_bootstrap, topic_name, tmp_path, "--stop-after", "200", "--checkpoint-every", "100",
                    "--metrics-port", str(port)) == 0
        wait_for(lambda: prometheus.scalar("sum(scinol_events_total)") == 400, 60, "400 events in Prometheus")
        assert prometheus.scalar("sum(scinol_predictions_total)") == 400
        assert prometheus.scalar("max(scinol_consumer_lag_messages)") == 0
        assert prometheus.scalar("count(scinol_consumer_lag_messages)") == 2  # one series a partition
        age = prometheus.scalar("time() - max(scinol_last_checkpoint_timestamp_seconds)")
        assert age is not None and 0 <= age < 120
        assert prometheus.scalar("sum(scinol_prediction_latency_seconds_count)") == 400
        p99 = prometheus.scalar("histogram_quantile(0.99, sum by (le) (scinol_prediction_latency_seconds_bucket))")
        assert p99 is not None and 0 < p99 <= 60, p99  # produced just before the run: seconds, not years
        dashboard_queries_answer(prometheus)


def test_the_shipped_scrape_configuration_loads_with_a_target_for_every_port(prometheus_binary, tmp_path):
    config = Path(__file__).parents[2] / "deploy" / "monitoring" / "prometheus.yml"
    with PrometheusServer(prometheus_binary, [], tmp_path / "prometheus", config=config) as prometheus:
        targets = lambda: [t["labels"] for t in prometheus.api("targets")["activeTargets"]]  # noqa: E731
        wait_for(lambda: len(targets()) == 21, 30, "the configuration's 21 targets", lambda: str(targets()))
        targets = targets()
    assert sorted(t["instance"] for t in targets if t["job"] == "scinol-run") == ["localhost:9464"]
    assert sorted(t["instance"] for t in targets if t["job"] == "flink-session") == [
        f"localhost:{port}" for port in range(9250, 9270)]  # the README's --metrics-ports 9250-9269


def test_the_shipped_alerts_are_valid_and_catch_what_they_name(prometheus_binary, tmp_path, metrics_off):
    """The rules of deploy/monitoring/alerts.yml, evaluated by a real
    Prometheus over a live endpoint: all healthy, and a stale checkpoint,
    a dead-letter share of a half and events with no prediction make their
    alerts pending (each waits its ``for:`` before firing); a fresh model's
    checkpoint does not."""
    rules = Path(__file__).parents[2] / "deploy" / "monitoring" / "alerts.yml"
    _, port = telemetry.serve(0, "127.0.0.1")
    telemetry.checkpoint_written("fresh", 10)
    telemetry.gauge("last_checkpoint", time.time() - 7200, model="stale")
    stop = threading.Event()

    def stream():  # half the messages read are dead letters, and nothing is predicted
        while not stop.wait(0.25):
            telemetry.count("messages_read", 100, topic="t", partition="0")
            telemetry.count("events", 50)
            telemetry.count("dead_letters", 50, reason="bad-avro")

    feeder = threading.Thread(target=stream, daemon=True)
    feeder.start()
    try:
        with PrometheusServer(prometheus_binary, [f"127.0.0.1:{port}"], tmp_path / "prometheus",
                              rules=rules) as prometheus:
            loaded = lambda: prometheus.api("rules")["groups"][0]["rules"]  # noqa: E731
            wait_for(lambda: all(r["health"] == "ok" for r in loaded()), 30, "every rule evaluated",
                     lambda: str([(r["name"], r["health"], r.get("lastError")) for r in loaded()]))
            assert len(loaded()) == 7
            pending = lambda: {(a["labels"]["alertname"], a["labels"].get("model")) for a in  # noqa: E731
                               prometheus.api("alerts")["alerts"]}
            want = {("ScinolCheckpointStale", "stale"), ("ScinolDeadLetters", None), ("ScinolNoPredictions", None)}
            wait_for(lambda: pending() == want, 60, "the three alerts pending", lambda: str(pending()))
    finally:
        stop.set()
        feeder.join()


def test_a_metrics_port_in_use_is_a_one_line_usage_error(metrics_off, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code = main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p",
                     "--metrics-port", str(port), "--metrics-host", "127.0.0.1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("scinol: error: run: --metrics-port") and "in use" in err[-1], err
    assert "Traceback" not in "\n".join(err)


@pytest.mark.parametrize("port", ["-1", "65536", "http"])
def test_a_metrics_port_that_is_not_a_port_is_refused(port, capsys):
    assert main(["run", "--bootstrap", "127.0.0.1:1", "--topic", "t", "--predictions-topic", "p",
                 "--metrics-port", port]) == 2
    assert "is not a port number" in capsys.readouterr().err


def test_a_port_range_reads_as_flinks_reporter_reads_it():
    assert telemetry.port_range("9250-9259") == range(9250, 9260)
    assert telemetry.port_range("9464") == range(9464, 9465)
    assert telemetry.port_range_text(range(9250, 9260)) == "9250-9259"
    for bad in ("9259-9250", "0-3", "65535-65536", "a-b", ""):
        with pytest.raises(ValueError, match="is not a port range"):
            telemetry.port_range(bad)


def test_a_worker_serves_on_the_first_free_port_of_its_range(metrics_off):
    taken, port = _listening_before_a_free_port()
    with taken:
        _, served = telemetry.serve_first_free(range(port, port + 2), "127.0.0.1")
        assert served == port + 1
        telemetry.stop()
        with pytest.raises(telemetry.MetricsPortError, match=f"no free port for the metrics endpoint in {port}-{port}"):
            telemetry.serve_first_free(range(port, port + 1), "127.0.0.1")


def _listening_before_a_free_port() -> tuple[socket.socket, int]:
    """A listening socket on a port whose next port is free."""
    while True:
        taken = socket.socket()
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
                return taken, port
            except OSError:
                taken.close()


@pytest.mark.parametrize("ports", ["x-9", "9300-9250", "1-70000"])
def test_flink_up_with_a_bad_port_range_is_one_line_and_status_2(ports, tmp_path, capsys):
    code = main(["flink", "up", "--metrics-ports", ports, "--state-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and "is not a port range" in err[-1] and "Traceback" not in "\n".join(err), err
