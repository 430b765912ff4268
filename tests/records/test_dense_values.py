"""pipelines.records.event_values.dense_values: a load generator's values, one
compiled call per batch, byte for byte what the codec writes event by event."""

import json
import uuid

import numpy as np

from learners.datasets import toy_examples
from pipelines.records.event_values import dense_values
from schemas.codec import Codec


def _rows(n: int):
    X, y = toy_examples(n, 4)
    y = y.astype(np.float64)
    y[::7] = np.nan  # unlabelled rows
    return X, y


def _codecs_frames(codec: Codec, X, y, prefix: str, first: int, ts: int, topic=None) -> list[bytes]:
    return [codec.encode("scinol.Event", {"id": f"{prefix}{first + i}", "timestamp": ts, "model": "default",
                                          "features": {"values": row}, "weight": None,
                                          "label": None if label != label else label}, topic)
            for i, (row, label) in enumerate(zip(X.tolist(), y.tolist()))]


def test_values_are_the_codecs_frames_of_the_same_events():
    X, y = _rows(500)
    codec = Codec()
    values = dense_values(codec, X, y, "m7-", first=1_000)
    ts = codec.decode(values[0])["timestamp"]
    assert values == _codecs_frames(codec, X, y, "m7-", 1_000, ts)
    decoded = [codec.decode(v) for v in values]
    assert [d["id"] for d in decoded[:2]] == ["m7-1000", "m7-1001"] and decoded[0]["label"] is None
    assert decoded[1]["label"] == y[1] and decoded[1]["features"]["values"] == X[1].tolist()


def test_an_older_registered_event_schema_takes_the_codecs_path(schema_registry):
    """A subject holding Event version 1 and a codec that does not register:
    the compiled layout (version 2) does not apply, so the values are the
    codec's, framed with the registered schema's id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    from schemas.catalog import load_schema
    from schemas.registry import Registry

    topic = f"load-{uuid.uuid4().hex[:8]}"
    client = SchemaRegistryClient({"url": schema_registry.url, **schema_registry.config})
    sid = client.register_schema(f"{topic}-value", Schema(json.dumps(load_schema("scinol.Event", 1)), "AVRO"))
    codec = Codec(Registry(schema_registry.url, schema_registry.config, auto_register=False))
    X, y = _rows(20)
    values = dense_values(codec, X, y, "m0-", topic=topic)
    assert [int.from_bytes(v[1:5], "big") for v in values] == [sid] * 20
    ts = codec.decode(values[0])["timestamp"]
    assert values == _codecs_frames(codec, X, y, "m0-", 0, ts, topic)
