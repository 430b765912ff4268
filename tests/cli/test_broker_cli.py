"""``scinol broker`` as a user runs it: a real process that prints its
bootstrap address once the broker accepts connections, serves a produce
and a consume, and stops cleanly (exit 0, no traceback, port closed) on
SIGTERM. Both kinds: tansu (the default) and Apache Kafka 4.x."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import uuid

import pytest

from tests.support.processes import reaped

pytestmark = pytest.mark.kafka


def port_open(bootstrap: str) -> bool:
    host, port = bootstrap.rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, int(port))) == 0


def produce_and_consume(bootstrap: str) -> bytes:
    from confluent_kafka import Consumer, Producer, TopicPartition

    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"broker-cli-{uuid.uuid4().hex[:8]}"
    # Created first, not by the produce: a consumer assigned to a topic that
    # appeared a moment ago was once seen (tansu, loaded machine) to read nothing.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])  # no group rebalance to wait for
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                return msg.value()
    finally:
        consumer.close()
    raise AssertionError(f"nothing consumed from {topic}")


@pytest.mark.parametrize("kind", [None, "kafka"], ids=["tansu-default", "apache-kafka"])
def test_broker_prints_its_address_serves_and_stops_on_sigterm(kind):
    args = [sys.executable, "-m", "pipelines.cli", "broker"] + (["--kind", kind] if kind else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        bootstrap = proc.stdout.readline().strip()  # printed once it accepts connections
        assert bootstrap.startswith("127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else bootstrap
        assert port_open(bootstrap)
        assert produce_and_consume(bootstrap) == b"hello"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "broker stopped"
    assert ("Apache Kafka 4." in err) == (kind == "kafka")
    assert not port_open(bootstrap)  # the broker process is gone with the command


def test_broker_refuses_a_port_out_of_range(capsys):
    from pipelines.cli.main import main

    assert main(["broker", "--kind", "kafka", "--port", "70000"]) == 2
    assert capsys.readouterr().err == "scinol: error: broker: --port must be between 1 and 65535, got 70000\n"


@pytest.mark.slow
def test_a_three_node_cluster_prints_every_address_serves_and_stops_on_sigterm():
    with reaped(subprocess.Popen([sys.executable, "-m", "pipelines.cli", "broker", "--kind", "kafka", "--brokers", "3"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 stdin=subprocess.DEVNULL)) as proc:
        nodes = proc.stdout.readline().strip().split(",")
        assert len(nodes) == 3 and all(port_open(node) for node in nodes), nodes
        assert produce_and_consume(",".join(nodes)) == b"hello"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
    err = proc.stderr.read()
    assert "Traceback" not in err and "cluster of 3 KRaft nodes" in err
    assert not any(port_open(node) for node in nodes)


@pytest.mark.parametrize("args", [["--brokers", "3"], ["--kind", "kafka", "--brokers", "0"],
                                  ["--kind", "kafka", "--brokers", "3", "--port", "9092"]])
def test_a_cluster_that_cannot_be_is_one_line(args, capsys):
    from pipelines.cli.main import main

    assert main(["broker", *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("scinol: error: broker: "), err
