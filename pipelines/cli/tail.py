"""``scinol tail``: decode and print the Avro records of a topic."""

from __future__ import annotations

import base64
import csv
import datetime
import json
import sys

from .errors import UsageError
from .options import kafka_settings


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


def _record(codec, msg) -> dict:
    """The decoded record, or an error object: undecodable messages are shown, not skipped."""
    from schemas.codec import DecodeError

    try:
        return _plain(codec.decode(msg.value))
    except DecodeError as exc:
        return {"error": exc.reason, "detail": str(exc), "partition": msg.partition, "offset": msg.offset}


def tail(bootstrap: str, topic: str, *, fmt: str = "json", max_records: int | None = None,
         timeout: float = 10.0, kafka_config: dict | None = None, registry_url: str | None = None,
         out=None) -> int:
    """Print records from the beginning of every partition until ``max_records``
    or ``timeout`` seconds without a new message. Returns the count printed."""
    from pipelines.kafka.consumer import read_topic
    from schemas.codec import Codec

    out = out or sys.stdout
    codec = Codec(registry_url)
    writer, count = None, 0
    for msg in read_topic(bootstrap, topic, limit=max_records, idle_timeout=timeout, config=kafka_config):
        record = _record(codec, msg)
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


def add_parser(sub) -> None:
    p = sub.add_parser("tail", help="decode and print the records of a topic",
                       description="Prints every record from the start of each partition. A Prediction's raw "
                                   "score ŷ is the field `score`.")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--bootstrap", required=True, metavar="HOST:PORT")
    p.add_argument("--format", choices=["json", "csv"], default="json")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="stop after S seconds without a record")
    p.add_argument("--kafka-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--kafka-config-file", metavar="FILE")
    p.add_argument("--schema-registry", metavar="URL")
    p.set_defaults(func=run)


def run(args) -> int:
    from pipelines.kafka.consumer import TopicMissing  # imported here: `scinol learn` starts without Kafka

    try:
        tail(args.bootstrap, args.topic, fmt=args.format, max_records=args.max, timeout=args.timeout,
             kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file), registry_url=args.schema_registry)
    except TopicMissing:
        raise UsageError(f"topic {args.topic!r} does not exist on {args.bootstrap}") from None
    return 0
