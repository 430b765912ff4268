"""The embedded broker: starts from the pip install, speaks Kafka, stops cleanly."""

import os
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.kafka.broker import EmbeddedBroker, _port_open
from tests.support.processes import alive

pytestmark = pytest.mark.kafka


def test_round_trip_through_the_session_broker(kafka_bootstrap, topic_name):
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic_name, num_partitions=2, replication_factor=1)])[topic_name].result(10)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(100):
        producer.produce(topic_name, value=str(i).encode(), partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic_name, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic_name, p, 0) for p in range(2)])
    got, deadline = [], time.monotonic() + 20
    while len(got) < 100 and time.monotonic() < deadline:
        got += [int(m.value()) for m in consumer.consume(100, timeout=0.5) if not m.error()]
    consumer.close()
    assert sorted(got) == list(range(100))


def test_start_and_stop_free_the_port():
    broker = EmbeddedBroker()
    broker.start()
    pid = broker.process.pid
    assert _port_open(broker.host, broker.port)
    broker.stop()
    assert not _port_open(broker.host, broker.port)
    assert broker.process is None
    assert not alive(pid)


def test_scinol_broker_prints_its_address_and_stops_on_ctrl_c():
    # started with SIGINT ignored, as from a script's background job: Ctrl-C must still stop it
    # (by the shell, not a preexec_fn: no Python between fork and exec in this threaded process)
    proc = subprocess.Popen(["sh", "-c", 'trap "" INT; exec "$0" -m pipelines.cli broker', sys.executable],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        address = proc.stdout.readline().strip()
        host, port = address.split(":")
        assert host == "127.0.0.1" and _port_open(host, int(port))
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
        assert "broker stopped" in proc.stderr.read()
        assert not _port_open(host, int(port))
    finally:
        if proc.poll() is None:
            proc.kill()


def test_broker_dies_with_a_killed_parent():
    code = ("from pipelines.kafka.broker import EmbeddedBroker; import time; b = EmbeddedBroker(); b.start(); "
            "print(b.port, b.process.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    port, pid = map(int, parent.stdout.readline().split())
    assert _port_open("127.0.0.1", port)
    # its output goes to a file without a name: nothing is left in /tmp by a killed run
    assert os.readlink(f"/proc/{pid}/fd/1").endswith(" (deleted)")
    parent.kill()  # SIGKILL: no cleanup code runs in the parent
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _port_open("127.0.0.1", port):
        time.sleep(0.1)
    assert not _port_open("127.0.0.1", port)
