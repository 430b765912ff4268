"""The codec against a schema registry: registers its schemas, frames records
with the registry's ids, and resolves ids it does not know through the
registry. The registry here is a small in-process HTTP stand-in."""

import io
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest
from fastavro import parse_schema, schemaless_writer

from schemas import catalog
from schemas.codec import Codec, DecodeError
from schemas.registry import SchemaRegistry, SchemaRegistryError

T0 = 1_700_000_000_000
EVENT = {"id": "e1", "timestamp": T0, "model": "ctr", "features": {"indices": [1, 5], "values": [0.5, -2.0]},
         "label": 1.0, "weight": 3.0}
PREDICTION = {"event_id": "e1", "model": "ctr", "model_version": 1, "score": 0.2, "scores": [0.2],
              "probability": 0.55, "predicted_class": 1, "label": 1.0, "loss": 0.6,
              "event_timestamp": T0, "latency_ms": 4.0}
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class StandInSchemaRegistry:
    """A stand-in for a Confluent schema registry, for tests only. It
    implements just the two endpoints the codec uses:

    - ``POST /subjects/{subject}/versions`` with ``{"schema": ...}``: returns
      ``{"id": n}``; the same schema text (as parsed JSON) always gets the same
      id; ids start at 101 so they never coincide with the checked-in ones;
    - ``GET /schemas/ids/{id}``: returns ``{"schema": ...}``, or 404 with
      Confluent's error body (error_code 40403).

    It records every request (``requests``: method, path, content type) and
    can be told to fail: ``fail = (status, body bytes)`` answers every request
    that way.
    """

    FIRST_ID = 101

    def __init__(self):
        self.schemas: dict[int, str] = {}
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.fail: tuple[int, bytes] | None = None
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, status, payload):
                body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                registry.requests.append(("GET", self.path, None))
                if registry.fail:
                    return self._reply(*registry.fail)
                prefix = "/schemas/ids/"
                if self.path.startswith(prefix) and self.path[len(prefix):].isdigit():
                    sid = int(self.path[len(prefix):])
                    if sid in registry.schemas:
                        return self._reply(200, {"schema": registry.schemas[sid]})
                    return self._reply(404, {"error_code": 40403, "message": f"Schema {sid} not found"})
                return self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

            def do_POST(self):
                content_type = self.headers.get("Content-Type")
                registry.requests.append(("POST", self.path, content_type))
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if registry.fail:
                    return self._reply(*registry.fail)
                parts = self.path.split("/")
                if len(parts) != 4 or parts[1] != "subjects" or parts[3] != "versions":
                    return self._reply(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
                try:
                    schema = json.loads(body)["schema"]
                    json.loads(schema)
                except (ValueError, KeyError, TypeError):
                    return self._reply(422, {"error_code": 42201, "message": "Invalid schema"})
                return self._reply(200, {"id": registry.add(unquote(parts[2]), schema)})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="StandInSchemaRegistry", daemon=True)

    def add(self, subject: str, schema: str) -> int:
        for sid, known in self.schemas.items():
            if json.loads(known) == json.loads(schema):
                break
        else:
            sid = self.FIRST_ID + len(self.schemas)
            self.schemas[sid] = schema
        if sid not in self.subjects.setdefault(subject, []):
            self.subjects[subject].append(sid)
        return sid

    def count(self, method: str, path: str) -> int:
        return sum(1 for m, p, _ in self.requests if m == method and p == path)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def registry():
    with StandInSchemaRegistry() as r:
        yield r


def test_codec_registers_encodes_with_registry_ids_and_another_codec_resolves_them(registry):
    writer = Codec(SchemaRegistry(registry.url))
    assert registry.requests == []  # nothing registered before it is needed
    data = writer.encode("Event", EVENT)
    assert list(registry.subjects) == ["scinol.Event"]
    (sid,) = registry.subjects["scinol.Event"]
    assert sid >= StandInSchemaRegistry.FIRST_ID and sid != catalog.schema_id("Event")
    assert data[:5] == b"\x00" + sid.to_bytes(4, "big")
    assert json.loads(registry.schemas[sid]) == catalog.load_schema("Event")
    assert registry.requests == [("POST", "/subjects/scinol.Event/versions", CONTENT_TYPE)]
    # the same codec decodes its own ids without asking
    assert writer.decode(data, "Event") == EVENT
    assert writer.encode("Event", EVENT) == data and len(registry.requests) == 1

    reader = Codec(registry.url)  # a URL is enough
    assert reader.decode(data, expected="Event") == EVENT
    assert registry.count("GET", f"/schemas/ids/{sid}") == 1
    assert reader.decode(data) == EVENT and registry.count("GET", f"/schemas/ids/{sid}") == 1  # cached

    p = writer.encode("scinol.Prediction", PREDICTION)
    pid = registry.subjects["scinol.Prediction"][0]
    assert pid != sid and int.from_bytes(p[1:5], "big") == pid == writer.schema_id("Prediction")
    assert reader.decode(p, "Prediction") == PREDICTION
    with pytest.raises(DecodeError) as info:
        reader.decode(p, expected="Event")
    assert info.value.reason == "wrong_record_type" and "scinol.Prediction" in info.value.detail


def test_registering_the_same_schema_again_gives_the_same_id(registry):
    client = SchemaRegistry(registry.url + "/")
    text = catalog.schema_text("Event")
    first = client.register("scinol.Event", text)
    assert client.register("scinol.Event", text) == first
    assert Codec(client).schema_id("Event") == first
    assert json.loads(client.schema_by_id(first)) == json.loads(text)
    assert SchemaRegistry(registry.url).schema_by_id(first) == text  # as first registered, fetched by GET
    assert registry.count("GET", f"/schemas/ids/{first}") == 1


def test_old_writer_schema_from_the_registry_reads_as_the_current_version(registry):
    old_producer = SchemaRegistry(registry.url)
    v1_id = old_producer.register("scinol.Event", catalog.schema_text("Event", 1))
    record = {k: v for k, v in EVENT.items() if k != "weight"}
    out = io.BytesIO()
    out.write(b"\x00" + v1_id.to_bytes(4, "big"))
    schemaless_writer(out, parse_schema(catalog.load_schema("Event", 1)), record)
    decoded = Codec(registry.url).decode(out.getvalue(), "Event")
    assert decoded == {**record, "weight": None}


def test_ids_unknown_to_the_registry(registry):
    codec = Codec(registry.url)
    body = Codec().encode("Event", EVENT)[5:]
    for sid in (7777, catalog.schema_id("Event")):  # the checked-in ids mean nothing to a registry codec
        with pytest.raises(DecodeError) as info:
            codec.decode(b"\x00" + sid.to_bytes(4, "big") + body)
        assert info.value.reason == "unknown_schema_id"
        assert str(sid) in info.value.detail and registry.url in info.value.detail
    # remembered for a while: a flood of such messages is not a flood of requests
    with pytest.raises(DecodeError):
        codec.decode(b"\x00" + (7777).to_bytes(4, "big") + body)
    assert registry.count("GET", "/schemas/ids/7777") == 1


def test_a_foreign_record_in_the_registry(registry):
    foreign = json.dumps({"type": "record", "name": "Thing", "namespace": "other", "fields": [{"name": "x", "type": "long"}]})
    sid = SchemaRegistry(registry.url).register("other.Thing", foreign)
    data = b"\x00" + sid.to_bytes(4, "big") + b"\x02"
    codec = Codec(registry.url)
    with pytest.raises(DecodeError) as info:
        codec.decode(data, expected="Event")
    assert info.value.reason == "wrong_record_type" and "other.Thing" in info.value.detail
    with pytest.raises(DecodeError) as info:
        codec.decode(data)
    assert info.value.reason == "unknown_schema_id" and "other.Thing" in info.value.detail
    assert registry.count("GET", f"/schemas/ids/{sid}") == 1


def test_registry_errors_name_the_url_and_status(registry):
    registry.fail = (500, json.dumps({"error_code": 50001, "message": "Error in the backend data store"}).encode())
    codec = Codec(registry.url)
    with pytest.raises(SchemaRegistryError) as info:
        codec.encode("Event", EVENT)
    err = info.value
    assert err.status == 500 and err.error_code == 50001 and err.method == "POST"
    assert err.url == f"{registry.url}/subjects/scinol.Event/versions"
    assert str(err) == (f"schema registry POST {registry.url}/subjects/scinol.Event/versions failed (HTTP 500): "
                        "Error in the backend data store")
    # while decoding, a failing registry is an error of its own, not a bad message
    data = b"\x00" + (101).to_bytes(4, "big") + b"\x00"
    with pytest.raises(SchemaRegistryError, match=r"GET .*/schemas/ids/101 failed \(HTTP 500\)"):
        codec.decode(data)
    registry.fail = (409, json.dumps({"error_code": 409, "message": "Schema being registered is incompatible"}).encode())
    with pytest.raises(SchemaRegistryError, match=r"\(HTTP 409\): Schema being registered is incompatible"):
        SchemaRegistry(registry.url).register("scinol.Event", catalog.schema_text("Event"))
    registry.fail = (200, b"<html>not a registry</html>")
    with pytest.raises(SchemaRegistryError, match=r"failed \(HTTP 200\): reply is not a JSON object"):
        SchemaRegistry(registry.url).schema_by_id(101)
    registry.fail = (502, b"Bad Gateway")
    with pytest.raises(SchemaRegistryError, match=r"\(HTTP 502\): Bad Gateway"):
        SchemaRegistry(registry.url).schema_by_id(101)
    registry.fail = None
    with pytest.raises(SchemaRegistryError, match=r"\(HTTP 422\): Invalid schema"):
        SchemaRegistry(registry.url).register("scinol.Event", "{not json")


def test_unreachable_registry():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again on exit: nothing listens there
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(SchemaRegistryError) as info:
        Codec(SchemaRegistry(url, timeout=2)).encode("Event", EVENT)
    assert info.value.status is None
    assert str(info.value).startswith(f"schema registry POST {url}/subjects/scinol.Event/versions failed (no reply): "
                                      "cannot reach the schema registry")
    with pytest.raises(ValueError, match="must start with http"):
        SchemaRegistry("localhost:8081")
