"""``scinol run --metrics-port``: the run's Prometheus metrics, scraped over
HTTP from a real bounded run on the direct runner against the tansu broker."""

from __future__ import annotations

import socket
import time
import urllib.request

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from pipelines import telemetry
from pipelines.cli.main import main
from pipelines.records.topics import produce_events
from tests.support.runs import toy_stream


def _scrape() -> dict:
    """{(metric sample name, frozenset of labels): value} from the endpoint."""
    host, port = telemetry.address()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _total(samples: dict, name: str, **labels) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


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
    assert main(["run", "--bootstrap", tansu_bootstrap, "--topic", topic_name, "--predictions-topic",
                 topic_name + ".pred", "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"),
                 "--metrics-port", "0", "--metrics-host", "127.0.0.1", "--runner", "direct"]) == 0
    assert "Prometheus metrics at http://127.0.0.1:" in capsys.readouterr().err
    samples = _scrape()
    assert _total(samples, "scinol_messages_read_total") == 307
    assert {p: _total(samples, "scinol_messages_read_total", partition=p) for p in "01"} == {"0": 154, "1": 153}
    assert _total(samples, "scinol_events_total") == 300
    assert {m: _total(samples, "scinol_predictions_total", model=m) for m in "ab"} == {"a": 150, "b": 150}
    reasons = {dict(ls)["reason"]: v for (n, ls), v in samples.items() if n == "scinol_dead_letters_total"}
    assert sum(reasons.values()) == 7 and len(reasons) == 1, reasons
    assert {p: _total(samples, "scinol_consumer_lag_messages", partition=p) for p in "01"} == {"0": 0, "1": 0}
    for model in "ab":
        assert _total(samples, "scinol_checkpoint_events", model=model) == 150
        assert started <= _total(samples, "scinol_last_checkpoint_timestamp_seconds", model=model) <= time.time()


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
