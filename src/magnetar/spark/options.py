"""The data source's options: parsed and checked once, at planning time, each error naming its option.

Owns: the option names (Spark's Kafka source's style, with Pulsar's `service.url` / `admin.url`
accepted as aliases), their defaults, and their validation; the pulsar-spark connector's TLS and
authentication options: `pulsar.client.authPluginClassName`, `pulsar.client.authParams`,
`pulsar.client.tlsTrustCertsFilePath`, `pulsar.client.tlsAllowInsecureConnection` for the binary protocol,
and the same names under `pulsar.admin.` for the admin API, each falling back to its `pulsar.client.` one
when not given, as the connector does. Must not touch: the network or Spark.

Options arrive as strings in a case-insensitive mapping.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from magnetar.client.security import ClientSecurity
from magnetar.client.wire import normalize_topic
from magnetar.spark.offsets import check_ranges, even_ranges

__all__ = ["OptionError", "SinkOptions", "SourceOptions", "parse_sink_options", "parse_source_options"]

# Read ranges no finer than this: each range is a Spark task and a broker reader.
HASH_RANGES_MAX = 1024
# The pulsar-spark connector's prefixes of the binary client's and the admin client's settings.
CLIENT_PREFIX = "pulsar.client."
ADMIN_PREFIX = "pulsar.admin."


class OptionError(ValueError):
    """A bad option; the message starts with the option's name."""


# A per-topic starting or ending point: "earliest", "latest", or the (ledgerId, entryId) of a message.
PositionSpec = str | tuple[int, int]


@dataclass(frozen=True)
class SourceOptions:
    service_url: str
    admin_url: str
    topics: tuple[str, ...]
    topics_pattern: str | None
    starting: str | dict[str, PositionSpec]
    ending: str | dict[str, PositionSpec]
    max_entries_per_trigger: int | None
    max_records_per_trigger: int | None
    fail_on_data_loss: bool
    hash_ranges: tuple[tuple[int, int], ...]
    subscription_name: str | None
    poll_timeout_ms: int
    # TLS trust and credentials of the binary connections and of the admin calls.
    security: ClientSecurity = field(default_factory=ClientSecurity)
    admin_security: ClientSecurity = field(default_factory=ClientSecurity)

    @property
    def subscribed(self) -> str:
        """How the option that names the topics was given, for error messages."""
        if self.topics_pattern is not None:
            return "topicsPattern"
        return "topic" if len(self.topics) == 1 else "topics"


@dataclass(frozen=True)
class SinkOptions:
    service_url: str
    admin_url: str
    topic: str | None
    batching_max_messages: int
    batching_max_bytes: int
    security: ClientSecurity = field(default_factory=ClientSecurity)
    admin_security: ClientSecurity = field(default_factory=ClientSecurity)


def _get(options: Mapping[str, str], *names: str) -> str | None:
    for name in names:
        value = options.get(name)
        if value is not None:
            return value
    return None


def _service_url(options: Mapping[str, str]) -> str:
    url = _get(options, "serviceUrl", "service.url")
    if not url:
        raise OptionError("serviceUrl: required, e.g. pulsar://127.0.0.1:6650")
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl") or not parts.hostname or not parts.port:
        raise OptionError(f"serviceUrl: must look like pulsar://host:port or pulsar+ssl://host:port, not {url!r}")
    return url


def _admin_url(options: Mapping[str, str], service_url: str) -> str:
    url = _get(options, "adminUrl", "admin.url")
    if url is None:
        # Pulsar's convention: the admin API on port 8080 of the broker's host (8443 with TLS).
        service = urlsplit(service_url)
        if service.scheme == "pulsar+ssl":
            return f"https://{service.hostname}:8443"
        return f"http://{service.hostname}:8080"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise OptionError(f"adminUrl: must look like http://host:port, not {url!r}")
    return url


def _positive_int(options: Mapping[str, str], name: str, default: int | None = None) -> int | None:
    value = options.get(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise OptionError(f"{name}: must be a positive integer, not {value!r}") from None
    if number < 1:
        raise OptionError(f"{name}: must be a positive integer, not {value!r}")
    return number


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
    if value is None:
        return default
    if value.lower() not in ("true", "false"):
        raise OptionError(f"{name}: must be true or false, not {value!r}")
    return value.lower() == "true"


def _security(options: Mapping[str, str], prefix: str) -> ClientSecurity:
    """The TLS and authentication options under `prefix` (`pulsar.client.` or `pulsar.admin.`); an
    admin option not given is the client's."""

    def get(name: str) -> str | None:
        value = options.get(prefix + name)
        if value is None and prefix == ADMIN_PREFIX:
            value = options.get(CLIENT_PREFIX + name)
        return value

    plugin = get("authPluginClassName")
    insecure = (get("tlsAllowInsecureConnection") or "false").strip().lower()
    if insecure not in ("true", "false"):
        raise OptionError(f"{prefix}tlsAllowInsecureConnection: must be true or false, not {insecure!r}")
    try:
        return ClientSecurity.from_options(plugin, get("authParams"), get("tlsTrustCertsFilePath"), insecure == "true")
    except (OSError, ValueError) as error:
        message = str(error).replace("--auth-plugin", "authPluginClassName").replace("--auth-params", "authParams")
        raise OptionError(f"{prefix}authPluginClassName/authParams: {message}") from None


def _topic(name: str, option: str) -> str:
    try:
        return normalize_topic(name.strip())
    except ValueError as error:
        raise OptionError(f"{option}: {error}") from None


def _positions(options: Mapping[str, str], name: str, default: str) -> str | dict[str, PositionSpec]:
    value = options.get(name)
    if value is None:
        return default
    if value.strip().lower() in ("earliest", "latest"):
        return value.strip().lower()
    try:
        given = json.loads(value)
    except json.JSONDecodeError as error:
        raise OptionError(
            f"{name}: not 'earliest', 'latest' or JSON of message ids per topic "
            f'(e.g. {{"persistent://public/default/t": {{"ledgerId": 5, "entryId": 12}}}}): {error}'
        ) from None
    if not isinstance(given, dict) or not given:
        raise OptionError(f"{name}: the JSON must be an object mapping topics to message ids")
    positions: dict[str, PositionSpec] = {}
    for topic, position in given.items():
        full = _topic(str(topic), name)
        if position in ("earliest", "latest"):
            positions[full] = position
            continue
        if (
            not isinstance(position, dict)
            or set(position) - {"ledgerId", "entryId"}
            or not all(
                isinstance(position.get(k), int) and not isinstance(position.get(k), bool)
                for k in ("ledgerId", "entryId")
            )
        ):
            raise OptionError(
                f'{name}: the message id of {topic!r} must be "earliest", "latest" or '
                f'{{"ledgerId": <int>, "entryId": <int>}}, not {json.dumps(position)}'
            )
        positions[full] = (position["ledgerId"], position["entryId"])
    return positions


def _hash_ranges(options: Mapping[str, str]) -> tuple[tuple[int, int], ...]:
    value = options.get("keyHashRanges")
    if value is None:
        return even_ranges(1)
    text = value.strip()
    if text.isdigit():
        count = int(text)
        if not 1 <= count <= HASH_RANGES_MAX:
            raise OptionError(f"keyHashRanges: a count must be between 1 and {HASH_RANGES_MAX}, not {count}")
        return even_ranges(count)
    ranges: list[tuple[int, int]] = []
    try:
        if text.startswith("["):
            ranges = [(int(lo), int(hi)) for lo, hi in json.loads(text)]
        else:
            for part in text.split(","):
                match = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", part)
                if match is None:
                    raise ValueError(part)
                ranges.append((int(match.group(1)), int(match.group(2))))
    except (ValueError, TypeError):
        raise OptionError(
            f"keyHashRanges: a count (e.g. 4) or ranges of sticky key hashes (e.g. 0-32767,32768-65535 "
            f"or [[0,32767],[32768,65535]]), not {value!r}"
        ) from None
    problem = check_ranges(ranges)
    if problem is not None:
        raise OptionError(f"keyHashRanges: the ranges must cover 0-65535 exactly once: {problem}")
    return tuple(sorted(ranges))


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    service_url = _service_url(options)
    given = [name for name in ("topic", "topics", "topicsPattern") if options.get(name)]
    if len(given) != 1:
        raise OptionError("topic: exactly one of the options topic, topics or topicsPattern is required")
    topics: tuple[str, ...] = ()
    pattern = None
    if given[0] == "topic":
        topics = (_topic(options["topic"], "topic"),)
    elif given[0] == "topics":
        topics = tuple(_topic(t, "topics") for t in options["topics"].split(",") if t.strip())
        if not topics:
            raise OptionError("topics: names no topic")
    else:
        pattern = options["topicsPattern"]
        try:
            re.compile(pattern)
        except re.error as error:
            raise OptionError(f"topicsPattern: not a regular expression: {error}") from None
    ending = _positions(options, "endingOffsets", "latest")
    if streaming and options.get("endingOffsets") is not None:
        raise OptionError("endingOffsets: only for batch reads (spark.read); a stream has no end")
    subscription = options.get("subscriptionName")
    if subscription is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]+", subscription):
        raise OptionError(f"subscriptionName: letters, digits, '_', '.' and '-' only, not {subscription!r}")
    return SourceOptions(
        service_url=service_url,
        admin_url=_admin_url(options, service_url),
        topics=topics,
        topics_pattern=pattern,
        starting=_positions(options, "startingOffsets", "latest" if streaming else "earliest"),
        ending=ending,
        max_entries_per_trigger=_positive_int(options, "maxEntriesPerTrigger"),
        max_records_per_trigger=_positive_int(options, "maxRecordsPerTrigger"),
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        hash_ranges=_hash_ranges(options),
        subscription_name=subscription,
        poll_timeout_ms=_positive_int(options, "pollTimeoutMs", 120_000) or 120_000,
        security=_security(options, CLIENT_PREFIX),
        admin_security=_security(options, ADMIN_PREFIX),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    service_url = _service_url(options)
    topic = options.get("topic")
    return SinkOptions(
        service_url=service_url,
        admin_url=_admin_url(options, service_url),
        topic=_topic(topic, "topic") if topic else None,
        batching_max_messages=_positive_int(options, "batchingMaxMessages", 1000) or 1000,
        batching_max_bytes=_positive_int(options, "batchingMaxBytes", 128 * 1024) or 128 * 1024,
        security=_security(options, CLIENT_PREFIX),
        admin_security=_security(options, ADMIN_PREFIX),
    )
