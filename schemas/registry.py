"""The schema registry, through Confluent's own client
(``confluent_kafka.schema_registry.SchemaRegistryClient``), with Confluent's
conventions for where a record's schema lives:

* Subjects by Confluent's naming strategies (``SUBJECT_STRATEGIES``):
  ``TopicNameStrategy`` (the default of Confluent's serializers:
  ``<topic>-value``), ``RecordNameStrategy`` (``scinol.Prediction``) and
  ``TopicRecordNameStrategy`` (``<topic>-scinol.Prediction``).
* ``auto_register=False`` is lookup-only, for a pipeline with read-only
  access: the id of this version's schema if it is registered under the
  subject, else the subject's latest version (written with that schema),
  else a clear error; nothing is ever registered.
* Authentication and TLS: ``config`` takes the keys ``SchemaRegistryClient``
  takes (``basic.auth.user.info``, ``ssl.ca.location``, ...); credentials in
  the URL (``https://user:secret@host``) are moved there. No secret appears
  in any message: URLs are shown without credentials and secret values are
  replaced by ``***`` in every error text.

Failures of the registry (unreachable, refused, HTTP errors) raise
:class:`SchemaRegistryError`; an id the registry does not know is ``None``
from :meth:`Registry.schema_by_id`, for the codec to turn into a dead letter.
"""

from __future__ import annotations

import functools
import urllib.parse
from types import SimpleNamespace


@functools.cache
def _client_api() -> SimpleNamespace:
    """Confluent's client and what goes with it, imported on first use: it
    brings authlib and an HTTP client (about 0.15 s), which a run without a
    schema registry never needs."""
    from confluent_kafka import schema_registry
    from confluent_kafka.schema_registry.error import OAuthTokenError, SchemaRegistryError as ClientError
    from confluent_kafka.serialization import MessageField, SerializationContext

    try:  # the HTTP client Confluent's client uses: httpx2 where installed, else httpx
        import httpx2 as httpx
    except ImportError:  # pragma: no cover
        import httpx
    return SimpleNamespace(registry=schema_registry, ClientError=ClientError, MessageField=MessageField,
                           SerializationContext=SerializationContext,
                           # what a registry that cannot be reached (or authenticated with, for OAuth) raises
                           unreachable=(httpx.TransportError, OSError, OAuthTokenError))


SUBJECT_STRATEGIES = {  # Confluent's names -> its functions in confluent_kafka.schema_registry
    "TopicNameStrategy": "topic_subject_name_strategy",
    "RecordNameStrategy": "record_subject_name_strategy",
    "TopicRecordNameStrategy": "topic_record_subject_name_strategy",
}
DEFAULT_STRATEGY = "TopicNameStrategy"
SECRET_KEYS = ("basic.auth.user.info", "ssl.key.password", "bearer.auth.token", "bearer.auth.client.secret")
"""Config keys whose values are secrets: never shown."""


class SchemaRegistryError(RuntimeError):
    """A registry request failed. ``status``: the HTTP status (None when the
    registry could not be reached); ``error_code``: Confluent's error code
    when the reply carried one. The message names the registry by its URL
    without credentials."""

    def __init__(self, action: str, url: str, status: int | None, message: str, error_code: int | None = None):
        where = f"HTTP {status}" if status is not None else "no reply"
        super().__init__(f"schema registry at {url}: {action} failed ({where}): {message}")
        self.action, self.url, self.status, self.error_code, self.message = action, url, status, error_code, message


def split_credentials(url: str) -> tuple[str, str | None]:
    """``(url without user info, "user:password" or None)``."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    userinfo = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), userinfo


def redact_url(url: str) -> str:
    """The URL as it may be shown: without its credentials."""
    try:
        return split_credentials(url)[0]
    except ValueError:  # not even parseable: show nothing of it
        return "<unparseable URL>"


class Registry:
    """A schema registry as the codec uses it; see the module docstring.

    ``url``: one URL (or several, comma-separated, as Confluent's client
    takes them); ``config``: further ``SchemaRegistryClient`` settings;
    ``subject_strategy``: a key of :data:`SUBJECT_STRATEGIES`. Pickles
    without its client (Beam ships it to workers), which is made on first use.
    """

    def __init__(self, url: str, config: dict | None = None, *, subject_strategy: str = DEFAULT_STRATEGY,
                 auto_register: bool = True):
        if not isinstance(url, str) or not url.strip().startswith(("http://", "https://")):
            raise ValueError(f"schema registry URL must start with http:// or https://, got {redact_url(str(url))!r}")
        if subject_strategy not in SUBJECT_STRATEGIES:
            raise ValueError(f"unknown subject name strategy {subject_strategy!r}; choose one of "
                             f"{', '.join(SUBJECT_STRATEGIES)}")
        config = dict(config or {})
        clean = []
        for one in url.split(","):
            bare, userinfo = split_credentials(one.strip().rstrip("/"))
            clean.append(bare)
            if userinfo is not None:
                if "basic.auth.user.info" in config:
                    raise ValueError("schema registry credentials given twice: in the URL and as basic.auth.user.info")
                config["basic.auth.user.info"] = userinfo
        self.url = ",".join(clean)
        self.config = config
        self.subject_strategy = subject_strategy
        self.auto_register = bool(auto_register)
        self._client = None
        self._client_conf()  # bad keys fail here, at configuration time

    def __repr__(self) -> str:
        return f"Registry({self.url!r}, {self.subject_strategy}, auto_register={self.auto_register})"

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # -- the client

    def _client_conf(self) -> dict:
        conf = {"url": self.url, "timeout": 10, **self.config}
        source = conf.pop("basic.auth.credentials.source", None)  # Java clients' key; the user info says it
        if source not in (None, "USER_INFO", "URL"):
            raise ValueError(f"schema registry config: basic.auth.credentials.source {source!r} is not supported "
                             f"(use USER_INFO with basic.auth.user.info, or credentials in the URL)")
        for key in ("timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms", "cache.capacity",
                    "cache.latest.ttl.sec"):
            if isinstance(conf.get(key), str):  # from a KEY=VALUE file: the client wants numbers
                try:
                    conf[key] = float(conf[key]) if "." in conf[key] else int(conf[key])
                except ValueError:
                    raise ValueError(f"schema registry config: {key} must be a number") from None
        if isinstance(conf.get("ssl.ca.location"), str) and conf["ssl.ca.location"].lower() == "false":
            conf["ssl.ca.location"] = False  # Confluent's spelling for "do not verify"
        try:
            _client_api().registry.SchemaRegistryClient(conf).close()  # Confluent's own checks; connects to nothing
        except (ValueError, TypeError) as exc:
            raise ValueError(f"schema registry config: {self.scrub(str(exc))}") from None
        return conf

    @property
    def client(self):
        """Confluent's ``SchemaRegistryClient``, made on first use."""
        if self._client is None:
            self._client = _client_api().registry.SchemaRegistryClient(self._client_conf())
        return self._client

    def scrub(self, text: str) -> str:
        """``text`` with every secret value of the config replaced by ``***``."""
        for key in SECRET_KEYS:
            value = self.config.get(key)
            if not value:
                continue
            secrets = [value] + ([value.split(":", 1)[1]] if key == "basic.auth.user.info" and ":" in value else [])
            for secret in secrets:
                if secret:
                    text = text.replace(secret, "***")
        return text

    def _call(self, action: str, fn, *args, missing_ok: bool = False):
        """``fn(*args)`` on the client; None for a 404 when ``missing_ok``;
        every failure as a :class:`SchemaRegistryError` without secrets."""
        api = _client_api()
        try:
            return fn(*args)
        except api.ClientError as exc:
            if missing_ok and exc.http_status_code == 404:
                return None
            raise SchemaRegistryError(action, self.url, exc.http_status_code, self.scrub(str(exc.error_message)),
                                      exc.error_code) from None
        except api.unreachable as exc:  # connection refused, DNS, TLS, timeouts
            reason = " ".join(self.scrub(f"{type(exc).__name__}: {exc}").split())
            raise SchemaRegistryError(action, self.url, None, f"cannot reach the schema registry ({reason})") from None

    # -- what the codec asks

    def subject(self, record_name: str, topic: str | None) -> str:
        """The subject of ``record_name`` written to ``topic`` (value side)."""
        if topic is None and self.subject_strategy != "RecordNameStrategy":
            raise ValueError(f"{self.subject_strategy} names subjects after the topic: give the topic "
                             f"{record_name} is written to")
        api = _client_api()
        ctx = api.SerializationContext(topic, api.MessageField.VALUE)
        return getattr(api.registry, SUBJECT_STRATEGIES[self.subject_strategy])(ctx, record_name)

    def writer_schema(self, record_name: str, topic: str | None, schema_text: str) -> tuple[int, str]:
        """``(id, schema text)`` to frame ``record_name`` with on ``topic``:
        ``schema_text`` registered (auto-register), or looked up; lookup-only
        falls back to the subject's latest version."""
        subject = self.subject(record_name, topic)
        schema = _client_api().registry.Schema(schema_text, "AVRO")
        if self.auto_register:
            return self._call(f"registering {record_name} under subject {subject!r}", self.client.register_schema,
                              subject, schema), schema_text
        found = self._call(f"looking up {record_name} under subject {subject!r}", self.client.lookup_schema,
                           subject, schema, missing_ok=True)
        if found is not None:
            return found.schema_id, schema_text
        latest = self._call(f"reading the latest schema of subject {subject!r}", self.client.get_latest_version,
                            subject, missing_ok=True)
        if latest is None:
            raise SchemaRegistryError(
                f"looking up {record_name} under subject {subject!r}", self.url, 404,
                f"no schema is registered under subject {subject!r} and auto-registration is off "
                f"(--no-auto-register): register {record_name} there first, or let the pipeline register it")
        return latest.schema_id, latest.schema.schema_str

    def schema_by_id(self, schema_id: int) -> str | None:
        """The schema (Avro JSON text) registered with ``schema_id``; None if there is none."""
        found = self._call(f"reading schema id {schema_id}", self.client.get_schema, int(schema_id), missing_ok=True)
        return None if found is None else found.schema_str

    def register(self, subject: str, schema_text: str) -> int:
        """Register ``schema_text`` under ``subject`` (tests, tools); its id."""
        return self._call(f"registering under subject {subject!r}", self.client.register_schema, subject,
                          _client_api().registry.Schema(schema_text, "AVRO"))

