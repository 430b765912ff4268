"""``scinol tail``: decode and print the Avro records of a topic."""

from __future__ import annotations

import base64
import csv
import datetime
import json
import sys
import time


def _plain(value):
    """JSON-friendly: bytes as base64, timestamps as epoch milliseconds."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def tail(bootstrap: str, topic: str, *, fmt: str = "json", max_records: int | None = None,
         timeout: float = 10.0, kafka_config: dict | None = None, registry_url: str | None = None,
         out=None) -> int:
    """Print records from the beginning of every partition until ``max_records``
    or ``timeout`` seconds without a new message. Undecodable messages are
    printed as an error object, not skipped. Returns the count printed."""
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import Codec, DecodeError

    out = out or sys.stdout
    codec = Codec(registry_url)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scinol-tail-{time.time_ns()}",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, **(kafka_config or {})})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        if topic not in meta.topics or meta.topics[topic].error:
            raise ValueError(f"topic {topic!r} does not exist on {bootstrap}")
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.topics[topic].partitions])
        writer, count, last = None, 0, time.monotonic()
        while max_records is None or count < max_records:
            msg = consumer.poll(0.2)
            if msg is None:
                if time.monotonic() - last > timeout:
                    break
                continue
            if msg.error():
                continue
            last = time.monotonic()
            try:
                record = _plain(codec.decode(msg.value()))
            except DecodeError as exc:
                record = {"error": exc.reason, "detail": str(exc), "partition": msg.partition(), "offset": msg.offset()}
            if fmt == "json":
                print(json.dumps(record, sort_keys=True), file=out)
            else:
                flat = {k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in record.items()}
                if writer is None:
                    writer = csv.DictWriter(out, fieldnames=list(flat), extrasaction="ignore")
                    writer.writeheader()
                writer.writerow(flat)
            count += 1
        out.flush()
        return count
    finally:
        consumer.close()


def read_records(bootstrap: str, topic: str, expected: int, timeout: float = 60.0, partition: int = 0) -> list[dict]:
    """Decode one partition's records from the start until ``expected`` are
    read or ``timeout`` seconds pass (for the demo, tests and benchmarks)."""
    from confluent_kafka import Consumer, TopicPartition

    from schemas.codec import Codec

    codec = Codec()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"scinol-read-{time.time_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out, deadline = [], time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            out += [codec.decode(m.value()) for m in consumer.consume(5000, timeout=0.5) if not m.error()]
    finally:
        consumer.close()
    return out
