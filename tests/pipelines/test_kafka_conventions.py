"""The pipeline as a Kafka and Confluent shop would use it, on the real
broker (``kafka_bootstrap``) and a real schema registry (``schema_registry``,
Apicurio Registry's Confluent-compatible API, with basic auth), Confluent's
own serializers on the other side: keyed predictions that join their events,
dead letters that keep the original key, headers and timestamp with the
error context in headers, ``<topic>-value`` subjects, one-line failures
without secrets, the end-of-run summary, and the dead-letter ratio stop."""

import re

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from pipelines.cli.main import main
from pipelines.kafka.admin import KafkaAdmin, TopicSpec
from pipelines.kafka.consumer import read_topic
from pipelines.records.dead_letters import ERROR_HEADERS
from schemas import catalog
from schemas.codec import Codec

from tests.support.runs import toy_stream


def run_args(bootstrap, topic, *extra):
    return ["run", "--bootstrap-server", bootstrap, "--topic", topic, "--predictions-topic", topic + ".pred",
            *extra]


def registry_args(schema_registry):
    return ["--schema-registry", schema_registry.url, "--schema-registry-config",
            f"basic.auth.user.info={schema_registry.user}:{schema_registry.password}",
            "--schema-registry-config", f"ssl.ca.location={schema_registry.ca_file}"]


def one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("scinol: error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    return errors[0]


@pytest.mark.slow
def test_keyed_predictions_and_dead_letters_through_a_registry(kafka_bootstrap, schema_registry, topic_name,
                                                               tmp_path, capsys):
    client = SchemaRegistryClient({"url": schema_registry.url, **schema_registry.config})
    serialize = AvroSerializer(client, catalog.schema_text("Event"))
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 2)])
    _, _, events = toy_stream(120)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    sent = {}  # (partition, offset) -> (key, headers, timestamp) of every message
    def remember(key, headers):
        def delivered(err, msg):
            assert err is None
            sent[(msg.partition(), msg.offset())] = (key, headers, msg.timestamp()[1])
        return delivered
    for i, event in enumerate(events):
        key = None if i % 5 == 0 else f"user-{i % 7}".encode()  # some without a key
        headers = [("trace", f"t{i}".encode())] if i % 3 == 0 else None
        producer.produce(topic_name, serialize(event, ctx), key, partition=i % 2, headers=headers,
                         on_delivery=remember(key, headers))
    bad = [(b"\x07garbage", b"bad-1", [("trace", b"x"), ("empty", None)]), (None, b"tombstone", None)]
    for value, key, headers in bad:
        producer.produce(topic_name, value, key, partition=0, headers=headers, on_delivery=remember(key, headers),
                         timestamp=1_650_000_000_000)
    producer.flush(10)

    assert main(run_args(kafka_bootstrap, topic_name, "--bounded", "--checkpoint-dir", str(tmp_path / "ckpt"),
                         "--group-id", topic_name, *registry_args(schema_registry))) == 0
    err = capsys.readouterr().err
    assert "scinol run: done: 122 messages read, 120 predictions written, 2 dead letters (undecodable 2)" in err
    assert schema_registry.password not in err

    subjects = set(client.get_subjects())
    for topic in (topic_name, f"{topic_name}.pred", f"{topic_name}.dlq", f"{topic_name}.pred.checkpoints"):
        assert f"{topic}-value" in subjects  # TopicNameStrategy, Confluent's default

    # Predictions: keyed by the event's key (its id without one), saying where the event was
    deserialize = AvroDeserializer(client)
    predictions = [(m, deserialize(m.value, SerializationContext(m.topic, MessageField.VALUE)))
                   for m in read_topic(kafka_bootstrap, topic_name + ".pred", limit=120, timeout=60)]
    assert len(predictions) == 120
    by_position = {}
    for msg, p in predictions:
        assert p["source_topic"] == topic_name
        key, _, _ = sent[(p["source_partition"], p["source_offset"])]
        assert msg.key == (key if key is not None else p["event_id"].encode())
        by_position[(p["source_partition"], p["source_offset"])] = p["event_id"]
    event_at = {}
    for m in read_topic(kafka_bootstrap, topic_name, limit=122, timeout=60):
        if m.value and m.value[:1] == b"\x00" and m.key not in (b"bad-1",):
            event_at[(m.partition, m.offset)] = deserialize(m.value, ctx)["id"]
    assert by_position == event_at  # every prediction joins its event, and only it

    # Dead letters: Kafka Connect's way, original key/headers/timestamp plus the error context
    dead = list(read_topic(kafka_bootstrap, topic_name + ".dlq", limit=2, timeout=60))
    assert len(dead) == 2
    for msg in dead:
        record = deserialize(msg.value, SerializationContext(msg.topic, MessageField.VALUE))
        key, headers, timestamp = sent[(record["partition"], record["offset"])]
        assert msg.key == key == record["key"] and msg.timestamp_ms == timestamp == 1_650_000_000_000
        original = list(headers or [])
        assert msg.headers[:len(original)] == original
        assert [(h["key"], h["value"]) for h in record["headers"] or []] == original
        context = dict(msg.headers[len(original):])
        assert list(context) == list(ERROR_HEADERS)
        assert context["scinol.error.reason"] == record["reason"].encode() == b"undecodable"
        assert context["scinol.error.topic"] == topic_name.encode()
        assert context["scinol.error.partition"] == str(record["partition"]).encode()
        assert context["scinol.error.offset"] == str(record["offset"]).encode()


def test_lookup_only_run_without_the_subject_fails_in_one_line(kafka_bootstrap, schema_registry, topic_name, capsys):
    assert main(run_args(kafka_bootstrap, topic_name, "--bounded", "--no-auto-register",
                         *registry_args(schema_registry))) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"subject '{topic_name}.pred-value'" in line and "--no-auto-register" in line
    assert schema_registry.password not in line


def test_registry_credentials_refused_in_one_line_without_the_secret(kafka_bootstrap, schema_registry, topic_name,
                                                                     capsys):
    host = schema_registry.url.split("://", 1)[1]
    wrong = "wrong-" + schema_registry.password
    url = f"https://{schema_registry.user}:{wrong}@{host}"
    assert main(run_args(kafka_bootstrap, topic_name, "--bounded", "--schema-registry", url,
                         "--schema-registry-config", f"ssl.ca.location={schema_registry.ca_file}")) == 2
    err = capsys.readouterr().err
    line = one_error_line(err)
    assert "(HTTP 401)" in line and f"schema registry at {schema_registry.url}:" in line
    assert wrong not in err and schema_registry.password not in err


def registry_framed_events(n: int) -> list[bytes]:
    """Events framed as a registry that numbered Event version 2 as id 1
    frames them: the checked-in map says id 1 is version 1."""
    _, _, events = toy_stream(n)
    return [b"\x00" + (1).to_bytes(4, "big") + Codec().encode("Event", e)[5:] for e in events]


def test_registry_framed_events_read_without_a_registry_end_with_a_warning(kafka_bootstrap, topic_name, capsys):
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    for value in registry_framed_events(50):
        producer.produce(topic_name, value)
    producer.flush(10)
    assert main(run_args(kafka_bootstrap, topic_name, "--bounded")) == 0
    err = capsys.readouterr().err
    assert "scinol run: done: 50 messages read, 0 predictions written, 50 dead letters (undecodable 50)" in err
    warning = next(line for line in err.splitlines() if line.startswith("scinol run: warning:"))
    assert "every message became a dead letter" in warning and "--schema-registry" in warning
    dead = Codec().decode(next(read_topic(kafka_bootstrap, topic_name + ".dlq", limit=1, timeout=30)).value)
    assert "bytes left over" in dead["detail"] and "--schema-registry" in dead["detail"]


def test_the_dead_letter_guard_judges_windows_of_messages():
    from pipelines.steps import DeadLetterGuard, DeadLetterRatioExceeded

    guard = DeadLetterGuard(0.5)
    guard.count(60, 60)  # all dead, but fewer than 100 messages: not judged yet
    with pytest.raises(DeadLetterRatioExceeded, match="60 of the last 100 messages"):
        guard.count(40, 0)  # 60 of 100: judged, and over the ratio
    calm = DeadLetterGuard(0.5)
    for _ in range(9):
        calm.count(100, 50)  # exactly half: allowed
    calm.count(100, 0)  # the 1000-message window ends: counts start again
    calm.count(100, 40)
    assert (calm.seen, calm.dead) == (100, 40)
    with pytest.raises(DeadLetterRatioExceeded, match="101 of the last 200"):
        calm.count(100, 61)


def test_max_dead_letter_ratio_stops_an_unbounded_run(kafka_bootstrap, topic_name, capsys):
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    KafkaAdmin(kafka_bootstrap).ensure_topics([TopicSpec(topic_name, 1)])
    for i in range(300):
        producer.produce(topic_name, b"not avro %d" % i)
    producer.flush(10)
    assert main(run_args(kafka_bootstrap, topic_name, "--max-dead-letter-ratio", "0.5")) == 3  # no --bounded
    line = one_error_line(capsys.readouterr().err)
    assert re.search(r"(\d+) of the last \1 messages became dead letters, more than the --max-dead-letter-ratio "
                     r"of 0\.5; stopping", line), line


def test_topics_get_partitions_replication_and_settings(kafka_bootstrap, topic_name, caplog):
    from confluent_kafka.admin import ConfigResource, ResourceType

    from pipelines.config import RunConfig
    from pipelines.kafka.admin import TopicSetupError
    from pipelines.launch import ensure_topics, topic_specs

    cfg = RunConfig(kafka_bootstrap, topic_name, topic_name + ".pred", topic_partitions=3,
                    topic_config={"retention.ms": "86400000"})
    ensure_topics(cfg, KafkaAdmin(kafka_bootstrap))
    admin = KafkaAdmin(kafka_bootstrap)
    topics = admin.topics()
    assert (topics[cfg.predictions_topic], topics[cfg.dlq_topic], topics[cfg.ckpt_topic]) == (3, 3, 1)
    for spec in topic_specs(cfg):
        resource = ConfigResource(ResourceType.TOPIC, spec.name)
        found = admin.client.describe_configs([resource])[resource].result(10)
        assert found["retention.ms"].value == "86400000"
        policy = found["cleanup.policy"].value if "cleanup.policy" in found else "delete"  # tansu lists only what was set
        assert policy == ("compact" if spec.name == cfg.ckpt_topic else "delete")
    assert admin.differences(topic_specs(cfg)[0]) == []
    # an existing topic is not changed, but each difference is said
    changed = RunConfig(kafka_bootstrap, topic_name, topic_name + ".pred", topic_partitions=2,
                        topic_config={"retention.ms": "1000"})
    with caplog.at_level("WARNING"):
        ensure_topics(changed, KafkaAdmin(kafka_bootstrap))
    said = [r.getMessage() for r in caplog.records if f"topic {cfg.predictions_topic!r} exists" in r.getMessage()]
    assert len(said) == 2 and "3 partitions, not 2" in said[0] and "retention.ms=86400000, not 1000" in said[1]
    assert admin.topics()[cfg.predictions_topic] == 3
    # A replication factor beyond the cluster: created as asked (a broker that takes it, as the
    # one-node tansu does), or refused in one line naming it (as a one-node Apache Kafka does).
    wanted = TopicSpec(topic_name + ".rf", 1, 3)
    try:
        admin.ensure_topics([wanted])
    except TopicSetupError as exc:
        assert "replication factor 3" in str(exc) and "\n" not in str(exc)
    else:
        md = admin.client.list_topics(wanted.name, timeout=10).topics[wanted.name]
        assert [len(p.replicas) for p in md.partitions.values()] == [3]
