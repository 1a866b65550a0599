"""The admin HTTP client of `magnetar admin`: Pulsar's `/admin/v2` paths, JSON in and out, errors as their `reason`.

Owns: building request paths from tenant, namespace and topic names (as pulsar-admin does), sending
requests, turning a non-2xx answer into `AdminError(status, reason)`, and decoding the raw-message
answers of peek and examine (Pulsar's `X-Pulsar-*` headers, batches split as the Java admin client does).
Must not touch: the broker's state, storage or anything but HTTP (it borrows only the broker's pure
TopicName parser and protocol's batch splitting, so paths and batches read as the broker reads them);
rendering (output.py); argument parsing (admin.py).
"""

from __future__ import annotations

import base64
import html
import http
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.protocol.framing import ProtocolError
from magnetar.protocol.messages import split_batch

if TYPE_CHECKING:
    from magnetar.cli.auth_options import Credentials

__all__ = ["AdminClient", "AdminError", "decode_messages", "namespace_path", "schema_path", "segment", "topic_path"]

# Long enough for a delete that closes many consumers or a large skip; a hung broker still ends the command.
REQUEST_TIMEOUT_S = 60
MAX_REDIRECTS = 20
PROPERTY_HEADER = "x-pulsar-property-"
# An error page's summary on one line of a terminal: its title, or the first line of a text body.
SUMMARY_CHARS_MAX = 200
_HTML_TITLE = re.compile(r"<title>(.*?)</title>", re.IGNORECASE | re.DOTALL)


class _Redirect(Exception):
    """A 307 or 308 that urllib did not follow itself (it follows a GET's only)."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


class AdminError(Exception):
    """An admin request failed: the HTTP status (0 when the broker was not reached) and Pulsar's `reason`."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def segment(value: str) -> str:
    """One path segment: a `/` or `?` inside a name must not change the path."""
    return urllib.parse.quote(value, safe="")


def namespace_path(namespace: str) -> str:
    """`tenant/namespace` as Pulsar's v2 paths spell it; anything else is refused before a request is sent."""
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise AdminError(0, f"invalid namespace name {namespace!r}: expected tenant/namespace")
    return "/".join(segment(part) for part in parts)


def topic_path(topic: str) -> str:
    """`/admin/v2/{persistent|non-persistent}/tenant/namespace/topic` for a full or short topic name."""
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName as error:
        raise AdminError(0, str(error)) from None
    parts = (name.tenant, name.namespace, name.local)
    return f"/admin/v2/{name.domain}/" + "/".join(segment(part) for part in parts)


def schema_path(topic: str) -> str:
    """`/admin/v2/schemas/tenant/namespace/topic`: a schema is the topic's whatever its domain."""
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName as error:
        raise AdminError(0, str(error)) from None
    return "/admin/v2/schemas/" + "/".join(segment(part) for part in (name.tenant, name.namespace, name.local))


class AdminClient:
    """One broker's admin API at `base_url` (e.g. http://127.0.0.1:8080)."""

    def __init__(self, base_url: str, credentials: Credentials | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        # --auth-plugin/--auth-params and the TLS options (auth_options.py), for a secured broker.
        self._authorization = credentials.authorization_header() if credentials else None
        self._ssl = credentials.ssl_context() if credentials and self.base_url.startswith("https:") else None

    def get(self, path: str, params: Mapping[str, object] | None = None) -> Any:
        return self._json(self._send("GET", path, params))

    def put(self, path: str, body: object = None, params: Mapping[str, object] | None = None) -> Any:
        return self._json(self._send("PUT", path, params, body))

    def post(self, path: str, body: object = None, params: Mapping[str, object] | None = None) -> Any:
        return self._json(self._send("POST", path, params, body))

    def delete(self, path: str, params: Mapping[str, object] | None = None) -> Any:
        return self._json(self._send("DELETE", path, params))

    def get_raw(self, path: str, params: Mapping[str, object] | None = None) -> tuple[dict[str, str], bytes]:
        """Headers (names lower-cased) and body of a GET, for the endpoints that answer raw message bytes."""
        return self._send("GET", path, params)

    def _send(
        self, method: str, path: str, params: Mapping[str, object] | None, body: object = None
    ) -> tuple[dict[str, str], bytes]:
        url = self.base_url + path
        if params:
            url += "?" + urllib.parse.urlencode({key: _query_value(value) for key, value in params.items()})
        data = None if body is None else json.dumps(body).encode()
        # A broker of a cluster sends a request about a topic another broker owns there with a 307, as
        # Pulsar does; the same request follows it (urllib follows a GET's alone), up to Java's 20 hops.
        for _hop in range(MAX_REDIRECTS):
            try:
                return self._send_once(method, url, data)
            except _Redirect as redirect:
                url = redirect.location
        raise AdminError(0, f"{self.base_url + path}: more than {MAX_REDIRECTS} redirects")

    def _send_once(self, method: str, url: str, data: bytes | None) -> tuple[dict[str, str], bytes]:
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self._authorization:
            request.add_header("Authorization", self._authorization)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S, context=self._ssl) as response:
                return {name.lower(): value for name, value in response.headers.items()}, response.read()
        except urllib.error.HTTPError as error:
            location = error.headers.get("Location") if error.code in (307, 308) else None
            if location:
                raise _Redirect(urllib.parse.urljoin(url, location)) from None
            raise AdminError(error.code, _reason(error.code, error.read(), url.partition("?")[0])) from None
        except (urllib.error.URLError, OSError) as error:
            cause = error.reason if isinstance(error, urllib.error.URLError) else error
            parts = urllib.parse.urlsplit(url)
            raise AdminError(0, f"cannot reach the admin API at {parts.scheme}://{parts.netloc}: {cause}") from None

    @staticmethod
    def _json(answer: tuple[dict[str, str], bytes]) -> Any:
        _headers, body = answer
        if not body:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")


def _query_value(value: object) -> str:
    # Pulsar's query flags are Java booleans: "true"/"false", not Python's "True".
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _reason(status: int, body: bytes, url: str) -> str:
    """Pulsar answers errors as {"reason": "..."}. Anything else (the web server's HTML error page for a path
    it does not serve or a caller it does not know, another program's page) becomes one line: the status,
    the page's title or first line, and for a 404 the question whether the URL is an admin API at all."""
    try:
        decoded = json.loads(body)
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("reason"), str):
        return decoded["reason"]
    text = body.decode(errors="replace").strip()
    title = _HTML_TITLE.search(text)
    if title:
        # Jetty's page, as Pulsar and magnetar write it, is titled "Error 401 Authentication required".
        summary = html.unescape(title[1]).strip().removeprefix(f"Error {status}").strip()
    elif text.startswith("<"):
        summary = ""
    else:
        summary = next((line.strip() for line in text.splitlines() if line.strip()), "")
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    if len(summary) > SUMMARY_CHARS_MAX:
        summary = summary[: SUMMARY_CHARS_MAX - 1] + "…"
    line = f"HTTP {status} {phrase}".rstrip()
    if summary and summary != phrase:
        line += f": {summary}"
    if status == 404:
        line += f" ({url} is not a path of Pulsar's admin API: is the admin URL a magnetar or Pulsar broker?)"
    return line


def decode_messages(headers: Mapping[str, str], body: bytes) -> list[dict[str, Any]]:
    """The messages of one entry answered by peek or examine, one dict per message (a batch gives several).

    Pulsar sends the entry's (uncompressed) payload with its metadata in headers: X-Pulsar-Message-ID
    `ledger:entry`, X-Pulsar-publish-time, X-Pulsar-PROPERTY-<name>, and for a batch
    X-Pulsar-num-batch-message, in which case the body is the batch payload that the Java admin client
    splits into single messages with ids `ledger:entry:batchIndex`, each with its own properties and key.
    """
    message_id = headers.get("x-pulsar-message-id", "")
    common: dict[str, Any] = {
        "publishTime": headers.get("x-pulsar-publish-time"),
        "producerName": headers.get("x-pulsar-producer-name"),
    }
    batch_size = headers.get("x-pulsar-num-batch-message")
    if batch_size is None:
        properties = _properties(headers)
        message = {
            "messageId": message_id,
            **common,
            "sequenceId": _int_or_none(headers.get("x-pulsar-sequence-id")),
            "eventTime": headers.get("x-pulsar-event-time"),
            "key": headers.get("x-pulsar-partition-key"),
            "properties": properties,
        }
        return [message | _payload(body)]
    try:
        singles = split_batch(body, int(batch_size))
    except (ValueError, ProtocolError) as error:
        raise AdminError(0, f"message {message_id}: cannot split its batch of {batch_size}: {error}") from None
    messages = []
    for index, single in enumerate(singles):
        metadata = single.metadata
        message = {
            "messageId": f"{message_id}:{index}",
            **common,
            "sequenceId": metadata.sequence_id if metadata.HasField("sequence_id") else None,
            "eventTime": metadata.event_time or None,
            "key": metadata.partition_key if metadata.HasField("partition_key") else None,
            "properties": {pair.key: pair.value for pair in metadata.properties},
        }
        messages.append(message | _payload(single.payload))
    return messages


def _properties(headers: Mapping[str, str]) -> dict[str, str]:
    """Newer Pulsar sends every property as JSON in X-Pulsar-PROPERTY (keys keep their case there);
    older ones only as one X-Pulsar-PROPERTY-<key> header each."""
    if "x-pulsar-property" in headers:
        try:
            decoded = json.loads(headers["x-pulsar-property"])
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            return {str(key): str(value) for key, value in decoded.items()}
    return {name[len(PROPERTY_HEADER) :]: value for name, value in headers.items() if name.startswith(PROPERTY_HEADER)}


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.lstrip("-").isdigit() else None


def _payload(data: bytes) -> dict[str, str]:
    """Text when the payload is UTF-8 (most are), base64 otherwise, saying which."""
    try:
        return {"payload": data.decode("utf-8"), "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"payload": base64.b64encode(data).decode(), "encoding": "base64"}
