"""Screening untrusted Kafka messages: every message becomes a valid event
or a dead letter with a reason, and nothing about its bytes can raise out of
the pipeline or make it allocate without bound.

- Size first: a value over ``max_message_bytes`` is ``oversized`` before any
  decoding (decoding a message costs memory in proportion to its size).
- Then the codec (:meth:`schemas.codec.Codec.decode`: ``undecodable``,
  ``unknown_schema_id``, ``wrong_record_type``) and the event checks
  (:func:`pipelines.records.validation.validate_event`), with ``max_index`` bounding sparse
  indices and dense lengths (``index_out_of_range``): the learner keeps
  state for every coordinate below the largest index it sees, so the bound
  is what keeps one hostile event from asking for terabytes.
- A dead letter keeps at most :data:`MAX_ORIGINAL_BYTES` of the original
  value (the detail says when it was cut): a DeadLetter larger than the
  broker's message size limit (1 MB by default) would fail to be produced
  and stop the pipeline on the very message it was meant to set aside.

A dead letter is published as Kafka Connect publishes its dead-letter
queue: with the original message's key, headers and timestamp, the error
context added as headers (:data:`ERROR_HEADERS`); the DeadLetter record
(the value) carries the same key and headers too.

Errors of the infrastructure rather than of the message (a schema registry
that does not answer) are not dead letters; they propagate.
"""

from __future__ import annotations

from pipelines.kafka.producer import OutgoingMessage
from schemas.codec import DecodeError
from schemas.reasons import OVERSIZED

from .labels import check_label
from .validation import validate_event

DEFAULT_MAX_INDEX = 1 << 22
"""Coordinates a model may have: 4,194,304 (128 MiB of ScInOL2 state);
``scinol run --max-index`` raises it for larger sparse index spaces."""
DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
"""Largest message decoded (16 MiB: a million sparse entries fit)."""
MAX_ORIGINAL_BYTES = 512 << 10
"""Most bytes of the original value a dead letter carries."""


def screen(codec, value, loss: str, n_classes: int | None, *, max_index: int = DEFAULT_MAX_INDEX,
           max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> tuple[dict | None, tuple[str, str] | None]:
    """``(event, None)`` for a valid Event, ``(None, (reason, detail))`` otherwise."""
    size = len(value) if isinstance(value, (bytes, bytearray, memoryview)) else 0
    if size > max_message_bytes:
        return None, (OVERSIZED, f"message of {size} bytes, more than the limit of {max_message_bytes}")
    try:
        event = codec.decode(value, expected="scinol.Event")
    except DecodeError as exc:
        return None, (exc.reason, str(exc))
    problem = validate_event(event, loss, n_classes, max_index=max_index)
    return (None, problem) if problem is not None else (event, None)


def screen_label(codec, value, loss: str, n_classes: int | None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> tuple[dict | None, tuple[str, str] | None]:
    """``(label record, None)`` for a usable ``scinol.Label``, ``(None, (reason, detail))`` otherwise."""
    size = len(value) if isinstance(value, (bytes, bytearray, memoryview)) else 0
    if size > max_message_bytes:
        return None, (OVERSIZED, f"message of {size} bytes, more than the limit of {max_message_bytes}")
    try:
        record = codec.decode(value, expected="scinol.Label")
    except DecodeError as exc:
        return None, (exc.reason, str(exc))
    problem = check_label(record, loss, n_classes)
    return (None, problem) if problem is not None else (record, None)


def dead_letter(msg, reason: str, detail: str) -> dict:
    """The DeadLetter record of a Kafka message (``pipelines.kafka.consumer.KafkaMessage``)."""
    detail = detail if len(detail) <= 2000 else detail[:2000] + "..."  # error texts can quote the input
    original = msg.value if msg.value is not None else b""
    if len(original) > MAX_ORIGINAL_BYTES:
        detail = f"{detail} (original cut to its first {MAX_ORIGINAL_BYTES} of {len(original)} bytes)"
        original = bytes(original[:MAX_ORIGINAL_BYTES])
    headers = getattr(msg, "headers", None)
    return {"topic": msg.topic, "partition": msg.partition, "offset": msg.offset,
            "timestamp": msg.timestamp_ms, "reason": reason, "detail": detail, "original": bytes(original),
            "key": None if msg.key is None else bytes(msg.key),
            "headers": [{"key": k, "value": v} for k, v in headers] if headers else None}


ERROR_HEADERS = ("scinol.error.reason", "scinol.error.topic", "scinol.error.partition", "scinol.error.offset")
"""Headers a dead letter gets besides the original ones (UTF-8 text), as
Kafka Connect adds ``__connect.errors.*``."""


def dead_letter_message(record: dict, value: bytes) -> OutgoingMessage:
    """The Kafka message of a DeadLetter ``record`` whose encoding is ``value``."""
    headers = [(h["key"], h["value"]) for h in record.get("headers") or ()]
    context = (record["reason"], record["topic"], record["partition"], record["offset"])
    headers += [(name, str(v).encode()) for name, v in zip(ERROR_HEADERS, context)]
    return OutgoingMessage(value, record.get("key"), headers, record["timestamp"])
