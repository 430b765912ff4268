"""Apache Kafka 4.x, provisioned from Maven into the cache and run as one
KRaft node: round trips, consumer groups, transactions, restarts, and
SASL/SCRAM over TLS with one-line errors for a wrong password and an
untrusted certificate.

Outside CI a machine without Java or Maven skips these tests; under
``CI=true`` a provisioning failure fails them.
"""

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pipelines.kafka.broker import BrokerError, _port_open, free_port
from tests.support.brokers import started
from pipelines.kafka.apache_broker import ApacheKafkaBroker
from pipelines.kafka.group_offsets import committed_offsets
from pipelines.kafka.errors import KafkaConnectionError, check_connection
from pipelines.kafka.tls import make_ca
from pipelines.provision.cache import MARKER, ProvisionError
from pipelines.provision.kafka import DEFAULT_KAFKA_VERSION, check_kafka_libs, provision_kafka
from tests.support.processes import gone_within

PARTITIONS = 4
pytestmark = pytest.mark.kafka  # a real broker: under CI=true a skip fails the run


@pytest.fixture(scope="module")
def broker():
    broker = started(ApacheKafkaBroker())
    yield broker
    broker.stop()


def _config(broker, **overrides) -> dict:
    return {"bootstrap.servers": broker.bootstrap, **broker.client_config(), **overrides}


def _create_topic(broker, topic, partitions=PARTITIONS):
    admin = AdminClient(_config(broker))
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)


def _produce(broker, topic, values, **config):
    producer = Producer(_config(broker, **config))
    for value in values:
        producer.produce(topic, key=value.encode(), value=value.encode())
    assert producer.flush(30) == 0


def _read_all(broker, topic, partitions=PARTITIONS, **config) -> dict:
    """{partition: [values in offset order]} of the whole topic, read to its end."""
    consumer = Consumer(_config(broker, **{"group.id": "check-" + uuid.uuid4().hex, "enable.auto.commit": False,
                                           "enable.partition.eof": True, **config}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got, eof, deadline = {p: [] for p in range(partitions)}, set(), time.monotonic() + 30
    while len(eof) < partitions and time.monotonic() < deadline:
        for m in consumer.consume(500, timeout=0.2):
            if m.error() and m.error().code() == KafkaError._PARTITION_EOF:
                eof.add(m.partition())
            elif m.error():
                raise AssertionError(m.error())
            else:
                eof.discard(m.partition())
                got[m.partition()].append(m.value().decode())
    consumer.close()
    assert len(eof) == partitions, "did not reach the end of every partition"
    return got


def _consume_in_group(broker, topic, group, count) -> list[str]:
    """``count`` values read by a member of ``group``, offsets committed."""
    consumer = Consumer(_config(broker, **{"group.id": group, "enable.auto.commit": False,
                                           "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        for m in consumer.consume(count - len(got), timeout=0.5):
            assert not m.error(), m.error()
            got.append(m.value().decode())
    if got:
        consumer.commit(asynchronous=False)
    consumer.close()
    return got


def _committed(broker, topic, group, partitions=PARTITIONS) -> dict:
    consumer = Consumer(_config(broker, **{"group.id": group}))
    offsets = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    consumer.close()
    return {tp.partition: tp.offset for tp in offsets}


# --------------------------------------------------------------------------- plain broker

def test_round_trip_over_partitions_and_group_offsets(broker, topic_name):
    _create_topic(broker, topic_name)
    values = [f"v{i}" for i in range(400)]
    _produce(broker, topic_name, values)
    by_partition = _read_all(broker, topic_name)
    assert sorted(v for vs in by_partition.values() for v in vs) == sorted(values)
    assert sum(1 for vs in by_partition.values() if vs) == PARTITIONS  # keys spread over every partition

    group = topic_name + "-group"
    assert sorted(_consume_in_group(broker, topic_name, group, len(values))) == sorted(values)
    assert _committed(broker, topic_name, group) == {p: len(vs) for p, vs in by_partition.items()}


def test_transactions_commit_and_abort(broker, topic_name):
    _create_topic(broker, topic_name)
    producer = Producer(_config(broker, **{"transactional.id": topic_name}))
    producer.init_transactions(30)
    batches = [("commit", [f"a{i}" for i in range(30)]), ("abort", [f"x{i}" for i in range(12)]),
               ("commit", [f"b{i}" for i in range(20)])]
    for outcome, values in batches:
        producer.begin_transaction()
        for value in values:
            producer.produce(topic_name, key=value.encode(), value=value.encode())
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    committed = sorted(v for outcome, values in batches if outcome == "commit" for v in values)
    everything = sorted(v for _, values in batches for v in values)

    read = _read_all(broker, topic_name, **{"isolation.level": "read_committed"})
    assert sorted(v for vs in read.values() for v in vs) == committed
    read = _read_all(broker, topic_name, **{"isolation.level": "read_uncommitted"})
    assert sorted(v for vs in read.values() for v in vs) == everything


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_data_and_committed_offsets_survive_a_restart(broker, topic_name, kill):
    _create_topic(broker, topic_name)
    group = topic_name + "-group"
    first = [f"v{i}" for i in range(200)]
    _produce(broker, topic_name, first)
    seen = _consume_in_group(broker, topic_name, group, 120)
    before = _committed(broker, topic_name, group)
    assert sum(offset for offset in before.values() if offset >= 0) == 120  # -1001: nothing committed

    old_pid = broker.process.pid
    assert broker.restart(kill=kill) == broker.bootstrap
    assert broker.process.pid != old_pid

    assert _committed(broker, topic_name, group) == before
    second = [f"w{i}" for i in range(100)]
    _produce(broker, topic_name, second)
    rest = _consume_in_group(broker, topic_name, group, 180)
    assert sorted(seen + rest) == sorted(first + second)  # nothing lost, nothing read twice
    assert sorted(v for vs in _read_all(broker, topic_name).values() for v in vs) == sorted(first + second)


def test_committed_offsets_are_asked_again_while_the_coordinator_loads(broker, topic_name):
    """Right after a restart the group coordinator may answer NOT_COORDINATOR
    (seen on a loaded machine after a SIGKILL; how long the window lasts
    depends on the load); committed_offsets asks again instead of failing."""
    _create_topic(broker, topic_name)
    group = topic_name + "-group"
    _produce(broker, topic_name, [f"v{i}" for i in range(100)])
    _consume_in_group(broker, topic_name, group, 100)
    before = _committed(broker, topic_name, group)
    broker.restart(kill=True, wait_for_groups=False)  # returns as soon as metadata is served
    consumer = Consumer(_config(broker, **{"group.id": group}))
    found = committed_offsets(consumer, [TopicPartition(topic_name, p) for p in range(PARTITIONS)], timeout=60)
    consumer.close()
    assert {tp.partition: tp.offset for tp in found} == before
    assert sum(before.values()) == 100


def test_a_consumer_that_cannot_reach_the_group_coordinator_is_replaced_while_asking(broker, topic_name):
    """Whether a stuck transaction committed is asked of the group; a
    consumer that gets no answer (here: one pointed where nothing listens,
    as one made before a broker crash can stay) is replaced by a new one for
    the next ask, which finds the committed position."""
    from pipelines.kafka.transactions import TransactionalOutput

    _create_topic(broker, topic_name, partitions=1)
    out = TransactionalOutput(broker.bootstrap, topic_name, topic_name, broker.client_config(), timeout=30)
    try:
        out.commit([(b"v", None)], {(topic_name, 0): 5})
        silent = Consumer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "group.id": out.group})
        out.groups, out.ASK_FOR = silent, 2.0
        started = time.monotonic()
        assert out._committed({(topic_name, 0): 5}, time.monotonic() + 60)
        assert not out._committed({(topic_name, 0): 6}, time.monotonic() + 60)
        assert out.groups is not silent and time.monotonic() - started < 30
    finally:
        out.close()


def test_offsets_an_open_transaction_holds_for_the_group_do_not_stop_the_writer(broker, topic_name, caplog):
    """While a transaction holds offsets for the writer's group (an ended
    one's were seen to stay pending for minutes after an Apache Kafka
    crash), a stable ask never answers; the writer then reads the committed
    offsets without waiting, both to tell whether a stuck transaction
    committed and, in a new writer, which outputs were already written."""
    from pipelines.kafka.transactions import TransactionalOutput

    _create_topic(broker, topic_name, partitions=1)
    out = TransactionalOutput(broker.bootstrap, topic_name, topic_name, broker.client_config(), timeout=30)
    holder = Producer(_config(broker, **{"transactional.id": topic_name + "-holder", "transaction.timeout.ms": 120000}))
    try:
        out.commit([(b"v", None)], {(topic_name, 0): 5})
        holder.init_transactions(30)
        holder.begin_transaction()
        holder.send_offsets_to_transaction([TopicPartition(topic_name, 0, 9)], out.groups.consumer_group_metadata(), 30)
        with pytest.raises(KafkaException) as stable:  # what the writer faces: the stable ask times out
            committed_offsets(out.groups, [TopicPartition(topic_name, 0)], 3.0)
        assert stable.value.args[0].code() == KafkaError._TIMED_OUT
        out.ASK_FOR = 2.0
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="pipelines.kafka"):
            assert out._committed({(topic_name, 0): 5}, time.monotonic() + 60)
            assert not out._committed({(topic_name, 0): 6}, time.monotonic() + 60)
        assert time.monotonic() - started < 20
        assert "gave no stable answer" in caplog.text
        out.close()
        out = TransactionalOutput(broker.bootstrap, topic_name, topic_name, broker.client_config(), timeout=30)
        out.ASK_FOR = 2.0
        assert out.already_written(topic_name, 0, 4) and not out.already_written(topic_name, 0, 5)
    finally:
        holder.abort_transaction(30)
        out.close()


def test_stop_frees_the_port_and_deletes_the_data():
    broker = started(ApacheKafkaBroker())
    pid, home = broker.process.pid, broker.home
    assert (home / "data").is_dir()
    broker.stop()
    assert not _port_open(broker.host, broker.port)
    assert not home.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_broker_dies_with_a_killed_parent():
    code = ("from pipelines.kafka.apache_broker import ApacheKafkaBroker; import time; "
            "b = ApacheKafkaBroker(); b.start(); print(b.port, b.process.pid, b.home, flush=True); time.sleep(120)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        port, pid, home = parent.stdout.readline().split()
        assert _port_open("127.0.0.1", int(port))
    finally:
        parent.send_signal(signal.SIGKILL)  # no cleanup code runs in the parent
        parent.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _port_open("127.0.0.1", int(port)):
        time.sleep(0.2)
    assert not _port_open("127.0.0.1", int(port))
    assert gone_within(int(pid), max(0.0, deadline - time.monotonic()))
    shutil.rmtree(home)  # the data folder: its owner was killed before it could delete it


def test_a_broker_that_cannot_start_says_why_from_its_log():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = ApacheKafkaBroker(port=taken.getsockname()[1])
        with pytest.raises(BrokerError) as err:
            started(broker)
    message = str(err.value)
    assert message.startswith("Apache Kafka exited with status")
    assert "Address already in use" in message  # the broker log's tail
    assert broker.process is None and broker.home is None


# --------------------------------------------------------------------------- SASL/SCRAM over TLS

def test_right_credentials_produce_consume_and_transact(secure_broker, topic_name):
    check_connection(secure_broker.bootstrap, secure_broker.client_config())
    _create_topic(secure_broker, topic_name)
    _produce(secure_broker, topic_name, [f"v{i}" for i in range(50)])
    # Transaction markers travel broker to broker over the SASL_SSL listener.
    producer = Producer(_config(secure_broker, **{"transactional.id": topic_name}))
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, value=b"t0")
    producer.commit_transaction(30)
    read = _read_all(secure_broker, topic_name, **{"isolation.level": "read_committed"})
    assert sorted(v for vs in read.values() for v in vs) == sorted([f"v{i}" for i in range(50)] + ["t0"])


def test_wrong_password_is_one_line_naming_broker_and_cause(secure_broker):
    wrong = "not-the-password-" + uuid.uuid4().hex
    with pytest.raises(KafkaConnectionError) as err:
        check_connection(secure_broker.bootstrap, secure_broker.client_config(password=wrong), timeout=15)
    assert str(err.value) == (f"Kafka broker {secure_broker.bootstrap} rejected the SASL login of user 'scinol' "
                              f"(SCRAM-SHA-512): wrong user name or password")
    assert wrong not in str(err.value) and secure_broker.client_config()["sasl.password"] not in str(err.value)


def test_untrusted_certificate_is_one_line_naming_broker_and_cause(secure_broker, tmp_path):
    other_ca = make_ca(tmp_path / "other-ca", "some other CA")
    with pytest.raises(KafkaConnectionError) as err:
        check_connection(secure_broker.bootstrap, secure_broker.client_config(ca_location=str(other_ca)), timeout=15)
    assert str(err.value) == (f"Kafka broker {secure_broker.bootstrap} presented a TLS certificate signed by no CA "
                              f"in ssl.ca.location ({other_ca}): untrusted certificate")


def test_plaintext_client_on_the_secure_listener_is_one_line(secure_broker):
    with pytest.raises(KafkaConnectionError) as err:
        check_connection(secure_broker.bootstrap, {}, timeout=3)
    assert str(err.value) == (f"Kafka broker {secure_broker.bootstrap} closed every connection at the first "
                              f"request: does it expect another security.protocol than PLAINTEXT (SSL, SASL_SSL)?")


def test_nothing_listening_is_one_line():
    bootstrap = f"127.0.0.1:{free_port()}"
    with pytest.raises(KafkaConnectionError) as err:
        check_connection(bootstrap, {}, timeout=3)
    assert str(err.value) == (f"cannot connect to Kafka broker {bootstrap}: connection refused "
                              f"(is it running, and is the port right?)")


# --------------------------------------------------------------------------- provisioning

def test_second_provisioning_call_runs_no_process(broker, monkeypatch):
    libs = provision_kafka()
    assert (libs.parent / MARKER).is_file()

    def no_process(*args, **kwargs):
        raise AssertionError(f"a provisioned part started a process: {args[0]}")

    monkeypatch.setattr(subprocess, "run", no_process)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    assert provision_kafka(DEFAULT_KAFKA_VERSION) == libs
    check_kafka_libs(libs)


def test_a_version_maven_does_not_have_is_one_clear_error():
    with pytest.raises(ProvisionError) as err:
        provision_kafka("4.99.0")
    assert str(err.value) == ("Apache Kafka 4.99.0 cannot be provisioned: "
                              "Maven Central has no org.apache.kafka:kafka_2.13:4.99.0")


def test_a_version_that_is_not_4x_is_refused_before_any_download(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("ran a process"))
    with pytest.raises(ProvisionError, match=r"^Apache Kafka '3.9.1': give a 4.x release such as 4\."):
        provision_kafka("3.9.1")


def test_an_unreachable_repository_is_one_line_naming_it(tmp_path, monkeypatch):
    mirror = f"http://127.0.0.1:{free_port()}/maven2"  # nothing listens there
    monkeypatch.setenv("SCINOL_CACHE", str(tmp_path))
    monkeypatch.setenv("SCINOL_MAVEN_REPOSITORY", mirror)
    with pytest.raises(ProvisionError) as err:
        provision_kafka()
    message = str(err.value)
    assert message.startswith(f"cannot reach {mirror} (connection refused); mvn dependency:copy-dependencies failed: ")
    assert "\n" not in message
    assert not (tmp_path / "kafka" / f"kafka_2.13-{DEFAULT_KAFKA_VERSION}").exists()  # no half-made part left


def test_a_folder_without_the_broker_is_refused(tmp_path):
    with pytest.raises(ProvisionError, match="has no kafka_2.13 jar"):
        check_kafka_libs(tmp_path)
