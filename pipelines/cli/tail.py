"""``scinol tail``: decode and print the Avro records of a topic."""

from __future__ import annotations

import base64
import csv
import datetime
import json
import sys

from .errors import UsageError
from .options import add_bootstrap_option, add_client_options, kafka_settings, registry_settings


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


def _text(data: bytes | None):
    """A key or header value as text when it is UTF-8, else ``base64:...``."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def _record(codec, msg) -> dict:
    """The decoded record, or an error object: undecodable messages are shown, not skipped."""
    from schemas.codec import DecodeError  # imported here: `scinol learn` starts without the codec

    try:
        return _plain(codec.decode(msg.value))
    except DecodeError as exc:
        return {"error": exc.reason, "detail": str(exc), "partition": msg.partition, "offset": msg.offset}


def _framed(msg, record: dict, key: bool, headers: bool) -> dict:
    """With --print-key/--print-headers: the message around its record."""
    out = {"partition": msg.partition, "offset": msg.offset, "timestamp": msg.timestamp_ms}
    if key:
        out["key"] = _text(msg.key)
    if headers:
        out["headers"] = [[k, _text(v)] for k, v in msg.headers or ()]
    out["value"] = record
    return out


def tail(bootstrap: str, topic: str, *, fmt: str = "json", max_records: int | None = None,
         timeout: float | None = 10.0, kafka_config: dict | None = None, registry=None, start="beginning",
         print_key: bool = False, print_headers: bool = False, out=None) -> int:
    """Print records from ``start`` (``"beginning"``, ``"end"`` or an offset,
    in every partition) until ``max_records`` or ``timeout`` seconds without
    a new message (None: follow for ever). Returns the count printed."""
    out = out or sys.stdout
    from pipelines.kafka.consumer import read_topic
    from schemas.codec import Codec

    codec = Codec(registry)
    writer, count = None, 0
    for msg in read_topic(bootstrap, topic, start=start, limit=max_records, idle_timeout=timeout, config=kafka_config):
        record = _record(codec, msg)
        if print_key or print_headers:
            record = _framed(msg, record, print_key, print_headers)
        if fmt == "json":
            print(json.dumps(record, sort_keys=True), file=out, flush=timeout is None)
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
                       description="Prints every record from the start of each partition (or from its end, or an "
                                   "offset). A Prediction's raw score ŷ is the field `score`.")
    p.add_argument("topic", metavar="TOPIC")
    add_bootstrap_option(p)
    p.add_argument("--format", choices=["json", "csv"], default="json")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", dest="start", action="store_const", const="beginning",
                       help="start at the beginning of every partition (the default)")
    start.add_argument("--from-end", dest="start", action="store_const", const="end",
                       help="print only what arrives from now on")
    start.add_argument("--offset", type=int, metavar="N", help="start at offset N of every partition")
    p.add_argument("--follow", action="store_true", help="keep printing as records arrive (until Ctrl-C or --max)")
    p.add_argument("--print-key", action="store_true",
                   help="print each record inside {partition, offset, timestamp, key, value}")
    p.add_argument("--print-headers", action="store_true", help="likewise, with the message headers")
    p.add_argument("--max", type=int, default=None, metavar="N", help="stop after N records")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="stop after S seconds without a record")
    add_client_options(p)
    p.set_defaults(func=run, start="beginning")


def run(args) -> int:
    from pipelines.kafka.consumer import TopicMissing

    if args.offset is not None and args.offset < 0:
        raise UsageError(f"tail: --offset must be at least 0, not {args.offset}")
    try:
        tail(args.bootstrap, args.topic, fmt=args.format, max_records=args.max,
             timeout=None if args.follow else args.timeout,
             kafka_config=kafka_settings(args.kafka_config, args.kafka_config_file),
             registry=registry_settings(args), start=args.start if args.offset is None else args.offset,
             print_key=args.print_key,
             print_headers=args.print_headers)
    except TopicMissing:
        raise UsageError(f"topic {args.topic!r} does not exist on {args.bootstrap}") from None
    return 0
