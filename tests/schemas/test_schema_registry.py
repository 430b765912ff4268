"""The codec against a real schema registry (Apicurio Registry through its
Confluent-compatible REST API, the ``schema_registry`` fixture, served over
HTTPS only and asking for HTTP basic authentication), with Confluent's own AvroSerializer and
AvroDeserializer on the other side: subjects named as Confluent's
serializers name them, lookup-only mode, authentication accepted and
refused without a secret in any message, TLS trust, ids the registry does
not know.

Only the failures of a broken proxy in front of a registry (HTTP 500, a
non-JSON page, 502) use a stand-in server, as a real registry does not
fail that way on demand."""

import datetime
import json
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas import catalog
from schemas.codec import Codec, DecodeError
from schemas.registry import Registry, SchemaRegistryError, redact_url

T0 = 1_700_000_000_000
EVENT = {"id": "e1", "timestamp": T0, "model": "ctr", "features": {"indices": [1, 5], "values": [0.5, -2.0]},
         "label": 1.0, "weight": 3.0}
PREDICTION = {"event_id": "e1", "model": "ctr", "model_version": 1, "score": 0.2, "scores": [0.2],
              "probability": 0.55, "predicted_class": 1, "label": 1.0, "loss": 0.6,
              "event_timestamp": T0, "latency_ms": 4.0, "source_topic": "events", "source_partition": 2,
              "source_offset": 17}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def confluent(schema_registry) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": schema_registry.url, **schema_registry.config})


def registry(schema_registry, **kw) -> Registry:
    return Registry(schema_registry.url, schema_registry.config, **kw)


def millis(record: dict) -> dict:
    """Confluent's deserializer gives timestamp-millis as datetimes; ours are int ms."""
    return {k: int(v.timestamp() * 1000) if isinstance(v, datetime.datetime) else v for k, v in record.items()}


# ------------------------------------------------------------------ subjects


def test_topic_name_strategy_is_the_default_and_confluent_reads_what_the_codec_writes(schema_registry):
    topic = unique("predictions")
    codec = Codec(registry(schema_registry))
    data = codec.encode("Prediction", PREDICTION, topic)
    client = confluent(schema_registry)
    latest = client.get_latest_version(f"{topic}-value")
    assert data[:5] == b"\x00" + latest.schema_id.to_bytes(4, "big")
    assert json.loads(latest.schema.schema_str) == catalog.load_schema("Prediction")
    assert f"scinol.Prediction" not in client.get_subjects()  # not under the record name any more
    read = AvroDeserializer(client)(data, SerializationContext(topic, MessageField.VALUE))
    assert millis(read) == PREDICTION
    assert codec.decode(data, "Prediction") == PREDICTION
    # a second topic is a second subject; the same schema keeps its id
    other = unique("predictions")
    again = codec.encode("Prediction", PREDICTION, other)
    assert client.get_latest_version(f"{other}-value").schema_id == latest.schema_id == codec.schema_id("Prediction", other)
    assert again == data
    with pytest.raises(ValueError, match="give the topic"):
        codec.encode("Prediction", PREDICTION)


@pytest.mark.parametrize("strategy, subject", [("RecordNameStrategy", "scinol.Feedback"),
                                               ("TopicRecordNameStrategy", "{topic}-scinol.Feedback")])
def test_the_other_naming_strategies(schema_registry, strategy, subject):
    topic = unique("feedback")
    record = {"event_id": "e", "model": "m", "run_id": "r", "seq": 1, "partition": 0, "offset": 3, "g": [0.5],
              "scalars": {"t": 1.0}, "checkpoint": False}
    data = Codec(registry(schema_registry, subject_strategy=strategy)).encode("Feedback", record, topic)
    sid = confluent(schema_registry).get_latest_version(subject.format(topic=topic)).schema_id
    assert data[1:5] == sid.to_bytes(4, "big")


def test_events_from_confluents_serializer_old_and_new_writers(schema_registry):
    topic = unique("events")
    client = confluent(schema_registry)
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = AvroSerializer(client, catalog.schema_text("Event", 1))  # an old producer, auto-registering
    v2 = AvroSerializer(client, catalog.schema_text("Event", 2))
    old = {k: v for k, v in EVENT.items() if k != "weight"}
    framed_v1, framed_v2 = v1(old, ctx), v2(EVENT, ctx)
    assert framed_v1[1:5] != framed_v2[1:5]
    reader = Codec(registry(schema_registry))
    assert reader.decode(framed_v1, "Event") == {**old, "weight": None}
    assert reader.decode(framed_v2, "Event") == EVENT
    # Java producers add string properties to their schemas; still the same record
    java = json.loads(catalog.schema_text("Event"))
    java["fields"][0]["type"] = {"type": "string", "avro.java.string": "String"}
    framed_java = AvroSerializer(client, json.dumps(java))(EVENT, ctx)
    assert reader.decode(framed_java, "Event") == EVENT


# --------------------------------------------------------------- lookup-only


def test_lookup_only_uses_what_is_registered_and_fails_clearly_without_it(schema_registry):
    topic = unique("predictions")
    client = confluent(schema_registry)
    lookup = registry(schema_registry, auto_register=False)
    with pytest.raises(SchemaRegistryError) as info:
        Codec(lookup).encode("Prediction", PREDICTION, topic)
    assert f"no schema is registered under subject '{topic}-value'" in str(info.value)
    assert "--no-auto-register" in str(info.value) and "\n" not in str(info.value)
    assert f"{topic}-value" not in client.get_subjects()  # lookup-only registered nothing

    # an older version registered by someone else: written with it, the new fields left out
    v1_id = client.register_schema(f"{topic}-value", Schema(catalog.schema_text("Prediction", 1), "AVRO"))
    data = Codec(lookup).encode("Prediction", PREDICTION, topic)
    assert data[1:5] == v1_id.to_bytes(4, "big")
    read = AvroDeserializer(client)(data, SerializationContext(topic, MessageField.VALUE))
    assert millis(read) == {k: v for k, v in PREDICTION.items() if not k.startswith("source_")}
    assert Codec(registry(schema_registry)).decode(data, "Prediction") == {
        **PREDICTION, "source_topic": None, "source_partition": None, "source_offset": None}

    # this version registered too (not the latest): looked up by its text
    v2_id = client.register_schema(f"{topic}-value", Schema(catalog.schema_text("Prediction", 2), "AVRO"))
    client.register_schema(f"{topic}-value", Schema(catalog.schema_text("Prediction", 1), "AVRO"))
    assert Codec(lookup).encode("Prediction", PREDICTION, topic)[1:5] == v2_id.to_bytes(4, "big")
    assert [v for v in client.get_versions(f"{topic}-value")] == [1, 2]  # nothing new registered


# ---------------------------------------------------------------------- auth


def test_basic_auth_accepted_from_config_or_url_and_no_secret_is_shown(schema_registry):
    host = schema_registry.url.split("://", 1)[1]
    user, password = schema_registry.user, schema_registry.password
    trust = {"ssl.ca.location": schema_registry.ca_file}
    in_url = Registry(f"https://{user}:{password}@{host}", trust)
    assert password not in in_url.url and password not in repr(in_url)
    topic = unique("events")
    assert Codec(in_url).schema_id("Event", topic) == confluent(schema_registry).get_latest_version(
        f"{topic}-value").schema_id
    with pytest.raises(ValueError, match="credentials given twice"):
        Registry(f"https://{user}:{password}@{host}", {"basic.auth.user.info": f"{user}:{password}"})


@pytest.mark.parametrize("how", ["none", "wrong password in config", "wrong password in URL"])
def test_basic_auth_refused_without_the_secret_in_the_error(schema_registry, how):
    host = schema_registry.url.split("://", 1)[1]
    wrong = "not-" + schema_registry.password
    trust = {"ssl.ca.location": schema_registry.ca_file}
    if how == "none":
        reg = Registry(schema_registry.url, trust)
    elif how == "wrong password in config":
        reg = Registry(schema_registry.url, {**trust, "basic.auth.user.info": f"{schema_registry.user}:{wrong}"})
    else:
        reg = Registry(f"https://{schema_registry.user}:{wrong}@{host}", trust)
    with pytest.raises(SchemaRegistryError) as info:
        Codec(reg).encode("Event", EVENT, unique("events"))
    err = info.value
    assert err.status == 401 and str(err).startswith(f"schema registry at {schema_registry.url}: registering")
    for text in (str(err), repr(err), err.message, repr(reg)):
        assert wrong not in text and schema_registry.password not in text
    with pytest.raises(SchemaRegistryError) as info:  # reading too
        Codec(reg).decode(b"\x00\x00\x00\x00\x01\x00")
    assert info.value.status == 401 and wrong not in str(info.value)


def test_tls_the_registry_certificate_must_be_trusted(schema_registry):
    """HTTPS only: without its certificate in ssl.ca.location the client
    refuses the registry, in one line without the credentials."""
    untrusting = {**schema_registry.config, "max.retries": 0}
    del untrusting["ssl.ca.location"]
    with pytest.raises(SchemaRegistryError) as info:
        Codec(Registry(schema_registry.url, untrusting)).encode("Event", EVENT, unique("events"))
    text = str(info.value)
    assert info.value.status is None and "CERTIFICATE_VERIFY_FAILED" in text and "\n" not in text
    assert schema_registry.password not in text
    plain = schema_registry.url.replace("https://", "http://")
    with pytest.raises(SchemaRegistryError) as info:  # and it does not answer plain HTTP
        Codec(Registry(plain, {**schema_registry.config, "max.retries": 0})).encode("Event", EVENT, "events")
    assert info.value.status is None or info.value.status >= 400


def test_unreachable_registry_is_one_line_without_credentials():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again on exit: nothing listens there
    reg = Registry(f"http://alice:hunter2@127.0.0.1:{port}", {"max.retries": "0", "timeout": "2"})
    with pytest.raises(SchemaRegistryError) as info:
        Codec(reg).encode("Event", EVENT, "events")
    text = str(info.value)
    assert info.value.status is None and "\n" not in text and "hunter2" not in text
    assert text.startswith(f"schema registry at http://127.0.0.1:{port}: registering scinol.Event under subject "
                           f"'events-value' failed (no reply): cannot reach the schema registry")
    assert redact_url(f"https://bob:pa%20ss@[::1]:8081/x") == "https://[::1]:8081/x"


def test_bad_registry_settings_are_refused_at_once():
    with pytest.raises(ValueError, match="must start with http"):
        Registry("localhost:8081")
    with pytest.raises(ValueError, match="Unrecognized properties: no.such.key"):
        Registry("http://localhost:8081", {"no.such.key": "1"})
    with pytest.raises(ValueError, match="unknown subject name strategy"):
        Registry("http://localhost:8081", subject_strategy="TopicStrategy")
    with pytest.raises(ValueError, match="basic.auth.user.info must be in the form") as info:
        Registry("http://localhost:8081", {"basic.auth.user.info": "no-colon-secret"})
    assert "no-colon-secret" not in str(info.value)


# --------------------------------------------------------------- unknown ids


def test_ids_unknown_to_the_registry_are_dead_letters_and_remembered(schema_registry, monkeypatch):
    reg = registry(schema_registry)
    asked = []
    real = Registry.schema_by_id
    monkeypatch.setattr(Registry, "schema_by_id", lambda self, sid: asked.append(sid) or real(self, sid))
    codec = Codec(reg)
    body = Codec().encode("Event", EVENT)[5:]
    for sid in (777_777, 777_778):
        with pytest.raises(DecodeError) as info:
            codec.decode(b"\x00" + sid.to_bytes(4, "big") + body)
        assert info.value.reason == "unknown_schema_id"
        assert str(sid) in info.value.detail and schema_registry.url in info.value.detail
    with pytest.raises(DecodeError):  # remembered for a while: a flood of these is not a flood of requests
        codec.decode(b"\x00" + (777_777).to_bytes(4, "big") + body)
    assert asked == [777_777, 777_778]


def test_a_foreign_record_in_the_registry(schema_registry):
    foreign = json.dumps({"type": "record", "name": "Thing", "namespace": "other",
                          "fields": [{"name": "x", "type": "long"}]})
    sid = confluent(schema_registry).register_schema(unique("things") + "-value", Schema(foreign, "AVRO"))
    data = b"\x00" + sid.to_bytes(4, "big") + b"\x02"
    codec = Codec(registry(schema_registry))
    with pytest.raises(DecodeError) as info:
        codec.decode(data, expected="Event")
    assert info.value.reason == "wrong_record_type" and "other.Thing" in info.value.detail
    with pytest.raises(DecodeError) as info:
        codec.decode(data)
    assert info.value.reason == "unknown_schema_id" and "other.Thing" in info.value.detail


def test_registry_framed_bytes_read_without_a_registry_say_so(schema_registry):
    """Registries number from 1 as the checked-in ids do: the mis-read is named."""
    topic = unique("events")
    client = confluent(schema_registry)
    framed = AvroSerializer(client, catalog.schema_text("Event", 2))(EVENT, SerializationContext(topic, MessageField.VALUE))
    sid = int.from_bytes(framed[1:5], "big")
    local = Codec()
    bad = b"\x00" + (1 if sid != 1 else 3).to_bytes(4, "big") + framed[5:]  # as if the registry had said 1 (or 3)
    with pytest.raises(DecodeError) as info:
        local.decode(bad, "Event")
    assert info.value.reason in ("undecodable", "wrong_record_type")
    if info.value.reason == "undecodable":
        assert "--schema-registry" in info.value.detail
    with pytest.raises(DecodeError) as info:
        local.decode(b"\x00" + (900_000).to_bytes(4, "big") + framed[5:])
    assert info.value.reason == "unknown_schema_id" and "--schema-registry" in info.value.detail


# ------------------------------------------------- a broken proxy (stand-in)


class BrokenRegistryProxy:
    """A stand-in for a misbehaving proxy in front of a registry, for tests
    only: answers every request with ``reply = (status, body bytes)``."""

    def __init__(self):
        self.reply = (500, b"{}")
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, body = proxy.reply
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def test_registry_failures_name_the_url_and_status_and_are_not_dead_letters():
    with BrokenRegistryProxy() as proxy:
        reg = Registry(proxy.url, {"max.retries": 0})
        proxy.reply = (500, json.dumps({"error_code": 50001, "message": "Error in the backend data store"}).encode())
        with pytest.raises(SchemaRegistryError) as info:
            Codec(reg).encode("Event", EVENT, "events")
        err = info.value
        assert err.status == 500 and err.error_code == 50001
        assert str(err) == (f"schema registry at {proxy.url}: registering scinol.Event under subject 'events-value' "
                            "failed (HTTP 500): Error in the backend data store")
        # while decoding, a failing registry is an error of its own, not a bad message
        with pytest.raises(SchemaRegistryError, match=r"reading schema id 101 failed \(HTTP 500\)"):
            Codec(reg).decode(b"\x00" + (101).to_bytes(4, "big") + b"\x00")
        proxy.reply = (502, b"Bad Gateway")
        with pytest.raises(SchemaRegistryError, match=r"\(HTTP 502\): Unknown Schema Registry Error: b'Bad Gateway'"):
            Codec(reg).decode(b"\x00" + (102).to_bytes(4, "big") + b"\x00")
