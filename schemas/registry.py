"""A client of a Confluent-compatible schema registry."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request


class SchemaRegistryError(RuntimeError):
    """A schema registry request failed. ``status`` is the HTTP status (None
    when the registry could not be reached), ``error_code`` Confluent's error
    code when the reply carried one."""

    def __init__(self, method: str, url: str, status: int | None, message: str, error_code: int | None = None):
        where = f"HTTP {status}" if status is not None else "no reply"
        super().__init__(f"schema registry {method} {url} failed ({where}): {message}")
        self.method = method
        self.url = url
        self.status = status
        self.error_code = error_code
        self.message = message


_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistry:
    """A minimal client of a Confluent-compatible schema registry (standard
    library only): :meth:`register` and :meth:`schema_by_id`, schemas by id
    cached. Failures raise :class:`SchemaRegistryError` naming the URL and
    the HTTP status."""

    def __init__(self, url: str, *, timeout: float = 10.0):
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"schema registry URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._schemas: dict[int, str] = {}

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.url!r})"

    def register(self, subject: str, schema_str: str) -> int:
        """Register ``schema_str`` (Avro JSON) under ``subject``; its id.
        Registering the same schema again returns the same id."""
        path = f"/subjects/{urllib.parse.quote(subject, safe='')}/versions"
        reply, url = self._request("POST", path, {"schema": schema_str})
        sid = reply.get("id")
        if not isinstance(sid, int) or isinstance(sid, bool):
            raise SchemaRegistryError("POST", url, 200, f"reply has no integer 'id': {str(reply)[:200]}")
        self._schemas[sid] = schema_str
        return sid

    def schema_by_id(self, schema_id: int) -> str:
        """The schema (Avro JSON text) registered with ``schema_id``."""
        schema_id = int(schema_id)
        try:
            return self._schemas[schema_id]
        except KeyError:
            pass
        reply, url = self._request("GET", f"/schemas/ids/{schema_id}")
        schema = reply.get("schema")
        if not isinstance(schema, str):
            raise SchemaRegistryError("GET", url, 200, f"reply has no 'schema' string: {str(reply)[:200]}")
        self._schemas[schema_id] = schema
        return schema

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[dict, str]:
        url = self.url + path
        headers = {"Accept": f"{_CONTENT_TYPE}, application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = _CONTENT_TYPE
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as exc:
            payload = exc.read() or b""
            message, code = payload.decode("utf-8", "replace")[:300].strip() or exc.reason, None
            try:
                parsed = json.loads(payload)
                message = parsed.get("message", message)
                code = parsed.get("error_code")
            except (ValueError, AttributeError):
                pass
            raise SchemaRegistryError(method, url, exc.code, str(message), code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise SchemaRegistryError(method, url, None, f"cannot reach the schema registry: {reason}") from None
        try:
            reply = json.loads(payload)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise SchemaRegistryError(method, url, status, f"reply is not a JSON object: {payload[:200]!r}")
        return reply, url
