"""librdkafka's connection errors in one line naming the broker and the cause.

A client that cannot log in or does not trust the broker's certificate does
not fail: librdkafka retries for ever, reports ``_AUTHENTICATION`` or
``_SSL`` to the ``error_cb`` and logs ``FAIL`` lines to stderr, and a
metadata request ends in a bare ``_TRANSPORT`` ("Broker transport
failure"). :func:`check_connection` asks once for metadata with librdkafka's
own log routed away from stderr, and turns what went wrong into a
:class:`KafkaConnectionError` whose message is one line, say::

    Kafka broker 127.0.0.1:9093 rejected the SASL login of user 'scinol'
    (SCRAM-SHA-512): wrong user name or password

The message never holds a password: librdkafka's strings do not carry
configuration values, and any configured secret is masked all the same.
"""

from __future__ import annotations

import logging
import re
import time

SECRET_KEYS = ("sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.key.pem",
               "sasl.oauthbearer.client.secret")

# What librdkafka reports first for each trouble; later errors
# (_ALL_BROKERS_DOWN, _TRANSPORT) only say that the broker is unusable.
_PRIORITY = ("_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED", "_TRANSPORT", "_ALL_BROKERS_DOWN")


class KafkaConnectionError(RuntimeError):
    """A client could not talk to the broker; the message is one line."""


def describe_kafka_error(error, bootstrap: str, config: dict | None = None) -> str:
    """One line for a ``confluent_kafka.KafkaError`` met talking to ``bootstrap``."""
    config = config or {}
    name, text = error.name(), _core(error.str())
    broker = f"Kafka broker {bootstrap}"
    if name in ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"):
        line = _describe_login(broker, text, config)
    elif name == "_SSL":
        line = _describe_tls(broker, text, config)
    elif "connection refused" in text.lower():
        line = f"cannot connect to {broker}: connection refused (is it running, and is the port right?)"
    else:
        line = f"{broker}: {name}: {text}"
    return mask_secrets(line, config)


def _describe_login(broker: str, text: str, config: dict) -> str:
    user = config.get("sasl.username", "?")
    mechanism = config.get("sasl.mechanisms", config.get("sasl.mechanism", "?"))  # librdkafka takes both
    if "invalid credentials" in text:
        return f"{broker} rejected the SASL login of user {user!r} ({mechanism}): wrong user name or password"
    offered = re.search(r"supported mechanisms: ([\w,-]+)", text)
    if offered and mechanism in offered.group(1).split(","):  # tansu's reply when it has no SASL at all
        return f"{broker} refused the SASL handshake for {mechanism}, though it names it (is SASL enabled there?)"
    if offered:
        return f"{broker} does not offer SASL mechanism {mechanism} (it offers {offered.group(1)})"
    return f"{broker}: SASL login of user {user!r} failed: {text}"


def _describe_tls(broker: str, text: str, config: dict) -> str:
    if "certificate verify failed" in text:
        where = config.get("ssl.ca.location")
        trusted = f"ssl.ca.location ({where})" if where else "the system's CA store (set ssl.ca.location)"
        return f"{broker} presented a TLS certificate signed by no CA in {trusted}: untrusted certificate"
    if "wrong version number" in text or "packet length too long" in text:
        return f"{broker} does not speak TLS on this port (is security.protocol right?)"
    return f"{broker}: TLS handshake failed: {text}"


def _core(text: str) -> str:
    """librdkafka's message without the ``proto://host:port/id:`` prefix and
    the ``(after N ms in state S)`` suffix."""
    text = re.sub(r"^\S+://\S+?/\S+?: ", "", text)
    return re.sub(r"\s*\(after \d+ms in state \w+\)$", "", text).strip()


def mask_secrets(line: str, config: dict) -> str:
    for key in SECRET_KEYS:
        secret = config.get(key)
        if secret:
            line = line.replace(str(secret), "***")
    return line


def check_connection(bootstrap: str, config: dict | None = None, timeout: float = 10.0) -> None:
    """Ask ``bootstrap`` for metadata as a client with ``config`` would;
    :class:`KafkaConnectionError` (one line) if that fails."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    config = {key: value for key, value in (config or {}).items() if key != "bootstrap.servers"}
    errors, logs = [], _CollectingHandler()
    _QUIET.addHandler(logs)
    try:
        admin = AdminClient({**config, "bootstrap.servers": bootstrap, "error_cb": errors.append, "logger": _QUIET})
        deadline = time.monotonic() + timeout
        while True:
            try:
                admin.list_topics(timeout=min(1.0, timeout))
                return
            except KafkaException as exc:
                admin.poll(0.2)  # serves the error callbacks and log lines, which say why
                if _decisive(errors) or time.monotonic() >= deadline:
                    line = _worst_line(errors or [exc.args[0]], logs.messages, bootstrap, config)
                    break
    finally:
        _QUIET.removeHandler(logs)
    raise KafkaConnectionError(line)


def is_decisive(error) -> bool:
    """A ``KafkaError`` retrying will not cure (a refused login, an untrusted certificate)."""
    return error.name() in _PRIORITY[:3]


def _decisive(errors: list) -> bool:
    return any(is_decisive(e) for e in errors)


def _worst_line(errors: list, log_lines: list[str], bootstrap: str, config: dict) -> str:
    errors = sorted(errors, key=lambda e: _PRIORITY.index(e.name()) if e.name() in _PRIORITY else len(_PRIORITY))
    if errors[0].name() in ("_ALL_BROKERS_DOWN", "_TRANSPORT"):
        if any("Connection refused" in ln for ln in log_lines):
            return f"cannot connect to Kafka broker {bootstrap}: connection refused (is it running, and is the port right?)"
        if any("closed by peer" in ln for ln in log_lines):
            used = config.get("security.protocol", "PLAINTEXT")
            return (f"Kafka broker {bootstrap} closed every connection at the first request: does it expect "
                    f"another security.protocol than {used} (SSL, SASL_SSL)?")
    return describe_kafka_error(errors[0], bootstrap, config)


# librdkafka's log lines of the check go here, not to stderr: the one line
# raised is what the user should see.
_QUIET = logging.getLogger("pipelines.kafka.check")
_QUIET.propagate = False
_QUIET.setLevel(logging.DEBUG)


class _CollectingHandler(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record) -> None:
        self.messages.append(record.getMessage())
