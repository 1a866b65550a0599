"""Broker configuration: `broker.conf` with Pulsar's setting names and defaults, plus overrides.

Owns: the one table of broker-level keys (key, default, meaning, dynamic), reading a broker.conf-style
file (`key=value`, `#` comments), applying command-line overrides, and handing each layer its part:
`DispatcherSettings` for the core, `StorageConfig` for storage.
Must not touch: sockets or files other than the configuration file it is given.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from magnetar.broker.logs import parse_log_level
from magnetar.broker.schema_compatibility import STRATEGIES
from magnetar.core.settings import PULSAR_KEYS, DispatcherSettings
from magnetar.storage import StorageConfig

MODULAR_LOAD_MANAGER = "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"
THRESHOLD_SHEDDER = "org.apache.pulsar.broker.loadbalance.impl.ThresholdShedder"
LEAST_LONG_TERM_MESSAGE_RATE = "org.apache.pulsar.broker.loadbalance.impl.LeastLongTermMessageRate"
RANGE_EQUALLY_DIVIDE = "range_equally_divide"

__all__ = ["AdvertisedListener", "BrokerConfig", "ConfigError", "BROKER_KEYS", "UnknownListener", "load_config"]


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


class UnknownListener(LookupError):
    """A lookup named a listener that advertisedListeners does not have."""


@dataclass(frozen=True)
class AdvertisedListener:
    """One named listener's URLs, as Pulsar's AdvertisedListener: a lookup naming it is answered its
    pulsar:// and pulsar+ssl:// URLs; the internal listener's http:// and https:// ones, when given, are
    this broker's web service URLs."""

    broker_url: str
    broker_url_tls: str | None
    http_url: str | None = None
    https_url: str | None = None


_LISTENER_SCHEMES = ("pulsar", "pulsar+ssl", "http", "https")


def parse_advertised_listeners(values: Mapping[str, Any]) -> tuple[dict[str, AdvertisedListener], str]:
    """advertisedListeners and the internal listener's name, checked as Pulsar 4.0's
    MultipleListenerValidator checks them (with its messages); ({}, "") when none are configured.

    One rule more, Pulsar 2.x's: a listener needs a pulsar:// URL (a lookup answer without one is refused
    by the clients that do not use TLS, and magnetar's lookup answers always carry one)."""
    text = str(values["advertisedListeners"]).strip()
    if not text:
        return {}, ""
    entries: dict[str, list[str]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, url = item.partition(":")
        if not sep or not name.strip():
            raise ConfigError(
                f"the configure entry `advertisedListeners` is invalid. because {item} do not contain listener name"
            )
        entries.setdefault(name.strip(), []).append(url.strip())
    internal = str(values["internalListenerName"]).strip() or next(iter(entries))
    if internal not in entries:
        raise ConfigError("the `advertisedListeners` configure do not contain `internalListenerName` entry")
    owners: dict[str, str] = {}
    listeners = {name: _listener(name, urls, owners) for name, urls in entries.items()}
    return listeners, internal


def _listener(name: str, urls: list[str], owners: dict[str, str]) -> AdvertisedListener:
    """One listener's URLs, at most one per scheme and a pulsar:// one among them; `owners` (host:port ->
    listener) refuses an address that two listeners name."""
    if len(urls) > 2:
        raise ConfigError(f"there are redundant configure for listener `{name}`")
    by_scheme: dict[str, str] = {}
    for url in urls:
        scheme, host_port = _listener_address(url)
        if scheme in _LISTENER_SCHEMES:
            if scheme in by_scheme:
                raise ConfigError(f"there are redundant configure for listener `{name}`")
            by_scheme[scheme] = url
        if owners.setdefault(host_port, name) != name:
            raise ConfigError(f"must not specify `{host_port}` to different listener.")
    if "pulsar" not in by_scheme:
        raise ConfigError(f"the `{name}` listener in the `advertisedListeners` do not specify `pulsar` address.")
    return AdvertisedListener(
        by_scheme["pulsar"], by_scheme.get("pulsar+ssl"), by_scheme.get("http"), by_scheme.get("https")
    )


def _listener_address(url: str) -> tuple[str, str]:
    """(scheme, host:port) of a listener's URL, the port -1 when it names none."""
    parts = urlsplit(url)
    try:
        port = parts.port if parts.port is not None else -1
    except ValueError:
        raise ConfigError(f"the value {url} in the `advertisedListeners` configure is invalid") from None
    if not parts.scheme or not parts.hostname:
        raise ConfigError(f"the value {url} in the `advertisedListeners` configure is invalid")
    return parts.scheme.lower(), f"{parts.hostname}:{port}"


@dataclass(frozen=True)
class Setting:
    key: str
    default: Any
    doc: str
    dynamic: bool = False


# Broker-level keys. Dispatcher keys live in core/settings.py (PULSAR_KEYS), storage keys in
# storage/config.py (StorageConfig); all three are read from the same broker.conf.
BROKER_KEYS: tuple[Setting, ...] = (
    Setting("bindAddress", "127.0.0.1", "Address the binary and HTTP ports listen on (Pulsar: 0.0.0.0)."),
    Setting("brokerServicePort", 6650, "Binary protocol port; 0 picks a free port."),
    Setting("webServicePort", 8080, "HTTP port (admin API, metrics, health); 0 picks a free port."),
    Setting("consoleEnabled", True, "magnetar: serve the web console at / of the HTTP port (docs/console.md)."),
    Setting("advertisedAddress", "", "Host name given to clients in lookups; empty: the bind address."),
    Setting(
        "advertisedListeners",
        "",
        "Named listeners for lookups, `name:pulsar://host:port` (a listener may add one `pulsar+ssl://` or "
        "`http://` URL), comma-separated; a client's listener name picks its URLs. Empty: one unnamed listener "
        "from advertisedAddress and the ports.",
    ),
    Setting(
        "internalListenerName",
        "",
        "The listener of advertisedListeners answered to lookups that name none; empty: the first one.",
    ),
    Setting("clusterName", "standalone", "This cluster's name."),
    # The cluster (docs/cluster.md): empty metadataStoreUrl is a broker alone that owns every topic.
    Setting(
        "metadataStoreUrl",
        "",
        "The cluster's metadata store (zk:host:port, sqlite:path, memory:name); empty: a broker alone.",
    ),
    Setting(
        "configurationMetadataStoreUrl",
        "",
        "The configuration store of the clusters (tenants, namespaces); empty: the metadata store.",
    ),
    Setting("zookeeperServers", "", "Deprecated: metadataStoreUrl=zk:<this>."),
    Setting("configurationStoreServers", "", "Deprecated: configurationMetadataStoreUrl=zk:<this>."),
    Setting("metadataStoreSessionTimeoutMillis", 30000, "The metadata store's session timeout."),
    Setting("defaultNumberOfNamespaceBundles", 4, "Bundles a namespace's hash range is cut into on first use."),
    # The load manager (docs/cluster.md, Load): Pulsar 4.0's ModularLoadManagerImpl settings, defaults
    # from its ServiceConfiguration.
    Setting(
        "loadBalancerEnabled",
        True,
        "Write load reports periodically, shed load off overloaded brokers and split hot bundles (leader).",
    ),
    Setting(
        "loadManagerClassName",
        MODULAR_LOAD_MANAGER,
        "The load manager: Pulsar's ModularLoadManagerImpl only.",
    ),
    Setting(
        "loadBalancerLoadSheddingStrategy",
        THRESHOLD_SHEDDER,
        "How the leader chooses bundles to shed: Pulsar's ThresholdShedder only.",
        True,
    ),
    Setting(
        "loadBalancerLoadPlacementStrategy",
        LEAST_LONG_TERM_MESSAGE_RATE,
        "Which broker gets a bundle nobody owns: Pulsar's LeastLongTermMessageRate only.",
    ),
    Setting(
        "loadBalancerReportUpdateThresholdPercentage",
        10,
        "Write the load report when a figure changed by more than this percentage since the last one written.",
        True,
    ),
    Setting(
        "loadBalancerReportUpdateMinIntervalMillis",
        5000,
        "How often a broker measures its load and decides whether to write its report.",
        True,
    ),
    Setting(
        "loadBalancerReportUpdateMaxIntervalMinutes",
        15,
        "Write the load report at least this often, whatever changed.",
        True,
    ),
    Setting("loadBalancerSheddingEnabled", True, "The leader sheds bundles off overloaded brokers.", True),
    Setting("loadBalancerSheddingIntervalMinutes", 1, "How often the leader looks for load to shed.", True),
    Setting(
        "loadBalancerSheddingGracePeriodMinutes",
        30,
        "A bundle shed is not shed again within this time.",
        True,
    ),
    Setting(
        "loadBalancerBrokerThresholdShedderPercentage",
        10,
        "Shed from a broker whose usage is this many points above the brokers' average usage.",
        True,
    ),
    Setting(
        "loadBalancerHistoryResourcePercentage",
        0.9,
        "Weight of a broker's past usage in its running average (the new report's weighs the rest).",
        True,
    ),
    Setting(
        "loadBalancerBundleUnloadMinThroughputThreshold",
        10.0,
        "Shed nothing from a broker that would offload less than this many MB/s of throughput.",
        True,
    ),
    Setting(
        "loadBalancerCPUResourceWeight",
        1.0,
        "Weight of the CPU usage in a broker's usage (magnetar measures no other resource).",
        True,
    ),
    Setting(
        "loadBalancerBrokerOverloadedThresholdPercentage",
        85,
        "A broker whose usage is above this percentage gets no bundle while another one can take it.",
        True,
    ),
    Setting(
        "loadBalancerBrokerMaxTopics",
        50000,
        "A broker with more topics than this gets no bundle while another one can take it.",
        True,
    ),
    Setting(
        "loadBalancerDistributeBundlesEvenlyEnabled",
        True,
        "A bundle goes to the brokers with the fewest bundles of its namespace first.",
        True,
    ),
    Setting("loadBalancerAutoBundleSplitEnabled", True, "The leader splits the bundles found hot.", True),
    Setting(
        "loadBalancerAutoUnloadSplitBundlesEnabled",
        True,
        "Unload both halves of a bundle split by the leader, so they can be placed elsewhere.",
        True,
    ),
    Setting(
        "loadBalancerNamespaceBundleMaxTopics",
        1000,
        "A bundle with more topics than this is split.",
        True,
    ),
    Setting(
        "loadBalancerNamespaceBundleMaxSessions",
        1000,
        "A bundle with more producers and consumers than this is split (-1: no limit).",
        True,
    ),
    Setting(
        "loadBalancerNamespaceBundleMaxMsgRate",
        30000,
        "A bundle with a message rate in and out above this (msg/s, long-term) is split.",
        True,
    ),
    Setting(
        "loadBalancerNamespaceBundleMaxBandwidthMbytes",
        100,
        "A bundle with a throughput in and out above this (MB/s, long-term) is split.",
        True,
    ),
    Setting(
        "loadBalancerNamespaceMaximumBundles",
        128,
        "No bundle of a namespace with this many bundles is split.",
        True,
    ),
    Setting(
        "defaultNamespaceBundleSplitAlgorithm",
        RANGE_EQUALLY_DIVIDE,
        "How a bundle is split: range_equally_divide (two halves of its hash range) only.",
        True,
    ),
    Setting("maxMessageSize", 5 * 1024 * 1024, "Largest message; frames may exceed it by 10 KiB of padding."),
    Setting(
        "dispatcherMaxReadSizeBytes",
        5 * 1024 * 1024,
        "Bytes of entries one subscription read takes at most (at least one entry).",
        True,
    ),
    Setting("allowAutoTopicCreation", True, "Create a topic on first use by a producer or consumer.", True),
    Setting(
        "allowAutoTopicCreationType",
        "non-partitioned",
        "Type of auto-created topics: non-partitioned or partitioned.",
        True,
    ),
    Setting("defaultNumPartitions", 1, "Partitions of an auto-created partitioned topic.", True),
    Setting(
        "maxNumPartitionsPerPartitionedTopic",
        1000,
        "Most partitions a partitioned topic may have (0: no limit, Pulsar's default). Every partition is "
        "a topic that listings and partitioned operations walk, so a typo of 10^9 must not be accepted.",
        True,
    ),
    Setting("brokerDeduplicationEnabled", False, "Drop messages whose producer sequence id was already stored."),
    Setting("keepAliveIntervalSeconds", 30, "Ping idle clients this often; close them after two silent intervals."),
    Setting(
        "connectionLivenessCheckTimeoutMillis",
        5000,
        "Before refusing a producer name or an Exclusive subscription held by another connection, ping that "
        "connection and close it if no PONG comes within this time (0: no check).",
    ),
    Setting("ttlDurationDefaultInSeconds", 0, "Default message TTL (0: none).", True),
    Setting(
        "messageExpiryCheckIntervalInMinutes",
        5.0,
        "How often message TTL is applied (fractions allowed, for tests).",
        False,
    ),
    Setting("delayedDeliveryEnabled", True, "Honour deliver_at_time for Shared and Key_Shared.", True),
    Setting(
        "brokerServiceCompactionMonitorIntervalInSeconds",
        60,
        "How often loaded topics are checked against their compaction threshold.",
    ),
    Setting(
        "brokerServiceCompactionThresholdInBytes",
        0,
        "Compact a topic once the bytes its compaction has not read pass this (0: never); a namespace's or "
        "topic's compactionThreshold policy overrides it.",
    ),
    Setting(
        "topicCompactionRetainNullKey",
        False,
        "Keep messages without a key in the compacted view (Pulsar drops them since 3.2).",
    ),
    Setting(
        "subscriptionTypesEnabled",
        "Exclusive,Shared,Failover,Key_Shared",
        "Subscription types clients may use.",
        True,
    ),
    Setting(
        "schemaCompatibilityStrategy",
        "FULL",
        "How a new schema version must relate to a topic's versions, unless its namespace sets one: "
        "ALWAYS_INCOMPATIBLE, ALWAYS_COMPATIBLE, BACKWARD, FORWARD, FULL or their _TRANSITIVE forms.",
    ),
    Setting(
        "isAllowAutoUpdateSchemaEnabled",
        True,
        "Producers and consumers may register new schema versions (else only existing ones match).",
        True,
    ),
    Setting(
        "isSchemaValidationEnforced",
        False,
        "Refuse producers without a schema on topics that have one.",
    ),
    Setting(
        "maxPendingPublishRequestsPerConnection",
        1000,
        "SENDs a connection may have waiting for their receipts before the broker stops reading it; it reads "
        "again at half. 0: no limit.",
    ),
    Setting(
        "maxMessagePublishBufferSizeInMB",
        64,
        "Bytes of SENDs the broker may hold unanswered, across connections, before every publishing connection "
        "stops reading; they read again at half. 0: no limit (Pulsar: half its direct memory, at least 64).",
    ),
    Setting(
        "brokerPublisherThrottlingMaxMessageRate",
        0,
        "Messages a second the broker reads from all its producers together; past it, every publishing "
        "connection waits. 0: no limit.",
    ),
    Setting(
        "brokerPublisherThrottlingMaxByteRate",
        0,
        "Bytes a second the broker reads from all its producers together; past it, every publishing "
        "connection waits. 0: no limit.",
    ),
    Setting("brokerShutdownTimeoutMs", 60000, "How long a clean shutdown waits for in-flight work."),
    Setting(
        "replicationProducerQueueSize",
        2000,
        "Entries a replicator may have sent to a remote cluster and not yet seen confirmed (Pulsar: 1000; "
        "a window twice Pulsar's covers magnetar's longer round trip, docs/replication.md).",
        True,
    ),
    Setting(
        "enableReplicatedSubscriptions",
        True,
        "Replicated subscriptions (PIP-33): snapshots taken, markers answered, a consumer's "
        "replicate_subscription_state honoured; false ignores all three.",
    ),
    Setting(
        "replicatedSubscriptionsSnapshotFrequencyMillis",
        1000,
        "How often a topic with replicated subscriptions tries to take a snapshot across its clusters.",
    ),
    Setting(
        "replicatedSubscriptionsSnapshotTimeoutSeconds",
        30,
        "How long a snapshot may wait for the other clusters' answers before it is given up.",
    ),
    Setting(
        "replicatedSubscriptionsSnapshotMaxCachedPerSubscription",
        10,
        "Snapshots a replicated subscription keeps until its mark-delete position passes them.",
    ),
    Setting(
        "replicatedSubscriptionsAckedRangesEnabled",
        True,
        "magnetar: replicated subscriptions also replicate the messages acknowledged out of order (above "
        "the mark-delete position), translated through the replicators' receipts, so that a consumer "
        "failing over receives only what was still unacknowledged (Pulsar #10054); false keeps Pulsar's rule.",
    ),
    Setting(
        "replicationPolicyCheckDurationSeconds",
        600,
        "How often loaded topics' replicators are checked against the replication policies (they are also "
        "checked when a topic loads and when a policy changes).",
    ),
    Setting(
        "logLevel",
        "info",
        "Level of the broker's log: debug, info, warning or error (Pulsar sets it in log4j2.yaml); "
        "`magnetar standalone --log-level` overrides it.",
    ),
    Setting(
        "subscriptionKeySharedUseClassicPersistentImplementation",
        False,
        "true selects keySharedOrderingMode=classic (Pulsar 3.x Key_Shared).",
        True,
    ),
    # Security (docs/security.md): everything off unless set, as in Pulsar's standalone.
    Setting(
        "brokerServicePortTls", "", "TLS binary port (Pulsar's usual 6651); empty: no TLS port; 0 picks a free port."
    ),
    Setting("webServicePortTls", "", "HTTPS port (Pulsar's usual 8443); empty: no HTTPS port; 0 picks a free port."),
    Setting("tlsCertificateFilePath", "", "The broker's certificate (PEM) on its TLS ports."),
    Setting("tlsKeyFilePath", "", "The private key (PEM) of tlsCertificateFilePath."),
    Setting("tlsTrustCertsFilePath", "", "CA certificates (PEM) that client certificates must chain to."),
    Setting("tlsRequireTrustedClientCertOnConnect", False, "Refuse TLS clients without a trusted certificate."),
    Setting("tlsProtocols", "", "TLS versions accepted, e.g. TLSv1.3,TLSv1.2; empty: the ssl module's defaults."),
    Setting("tlsCiphers", "", "TLS 1.2 cipher suites accepted (OpenSSL names, comma-separated); empty: defaults."),
    Setting("authenticationEnabled", False, "Authenticate clients on CONNECT and on HTTP."),
    Setting(
        "authenticationProviders",
        "",
        "Comma-separated providers: org.apache.pulsar.broker.authentication.AuthenticationProviderToken, "
        "...AuthenticationProviderBasic, ...AuthenticationProviderTls.",
    ),
    Setting(
        "authenticationRefreshCheckSeconds",
        60,
        "How often live connections are checked for expired credentials (then challenged to refresh them).",
    ),
    Setting("anonymousUserRole", "", "Role of clients that present no credentials; empty: they are refused."),
    Setting("tokenSecretKey", "", "HS256 key of tokens: data:;base64,... or file:///path (raw bytes)."),
    Setting("tokenPublicKey", "", "Public key of RS256/ES256 tokens: data:;base64,... or file:///path (DER or PEM)."),
    Setting("tokenAuthClaim", "sub", "The token claim that holds the role."),
    Setting("tokenAudienceClaim", "aud", "The token claim that names the audiences it is meant for."),
    Setting(
        "tokenAudience",
        "",
        "This broker's audience: tokens whose audience claim lacks it are refused; empty: unchecked.",
    ),
    Setting("basicAuthConf", "", "htpasswd file of the basic provider: a path, file:///path or data:;base64,..."),
    Setting("authorizationEnabled", False, "Check roles' permissions on produce, consume, lookup and admin calls."),
    Setting("superUserRoles", "", "Comma-separated roles allowed everything."),
    # The broker as a client of other clusters (replication; docs/security.md): used where the cluster's
    # registration names no TLS and no credentials of its own.
    Setting("brokerClientTlsEnabled", False, "Replicate to other clusters over TLS (their brokerServiceUrlTls)."),
    Setting("brokerClientTrustCertsFilePath", "", "CA certificates (PEM) other clusters' brokers must chain to."),
    Setting(
        "brokerClientAuthenticationPlugin",
        "",
        "Credentials for other clusters (with authenticationEnabled): org.apache.pulsar.client.impl.auth."
        "AuthenticationToken, ...Basic or ...Tls.",
    ),
    Setting(
        "brokerClientAuthenticationParameters",
        "",
        "The plugin's parameters: token:<jwt> or file:///path, a JSON userId and password (basic), "
        "tlsCertFile:<path>,tlsKeyFile:<path>.",
    ),
)


def _parse(key: str, raw: Any, default: Any) -> Any:
    """Convert a broker.conf string to the type of the setting's default."""
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if isinstance(default, bool):
            if text.lower() not in ("true", "false"):
                raise ValueError(text)
            return text.lower() == "true"
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError as error:
        raise ConfigError(f"{key}: cannot read {raw!r} as {type(default).__name__}") from error
    return text


def _all_defaults() -> dict[str, Any]:
    defaults = {s.key: s.default for s in BROKER_KEYS}
    for field in dataclasses.fields(StorageConfig):
        defaults.setdefault(field.name, field.default)
    settings = DispatcherSettings()
    for name, (key, _doc, _dynamic) in PULSAR_KEYS.items():
        defaults.setdefault(key, getattr(settings, name))
    return defaults


@dataclass(frozen=True)
class BrokerConfig:
    """The settings a broker runs with. One object per broker, shared by every part that reads it; only
    the ports really bound change after start (`advertise`)."""

    values: dict[str, Any]
    # What the broker should warn about once its log is set up: keys of the file it does not know.
    warnings: tuple[str, ...] = ()

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def advertise(self, ports: Mapping[str, int | str]) -> None:
        """Write the ports really bound (a setting of 0 picks a free one) into the URLs lookups answer with."""
        self.values.update(ports)
        self.__dict__.pop("_listeners", None)

    def dispatcher_settings(self) -> DispatcherSettings:
        return DispatcherSettings.from_pulsar(
            {k: v for k, v in self.values.items() if k in _DISPATCHER_KEYS}
            | {
                "subscriptionKeySharedUseClassicPersistentImplementation": self.values[
                    "subscriptionKeySharedUseClassicPersistentImplementation"
                ]
            }
        )

    def storage_config(self) -> StorageConfig:
        return StorageConfig.from_mapping(self.values)

    def subscription_types_enabled(self) -> set[str]:
        return {t.strip() for t in str(self.values["subscriptionTypesEnabled"]).split(",") if t.strip()}

    @cached_property
    def _listeners(self) -> tuple[dict[str, AdvertisedListener], str]:
        return parse_advertised_listeners(self.values)

    def lookup_urls(self, listener_name: str = "") -> tuple[str, str | None]:
        """The pulsar:// and pulsar+ssl:// URLs a lookup is answered: the named listener's (UnknownListener
        when there is none by that name, with Pulsar's message), else the internal listener's, else the
        ones made of advertisedAddress and the ports."""
        if listener_name:
            listener = self._listeners[0].get(listener_name)
            if listener is None:
                raise UnknownListener(f"the broker do not have {listener_name} listener")
            return listener.broker_url, listener.broker_url_tls
        return self.advertised_url, self.advertised_url_tls

    @property
    def advertised_url(self) -> str:
        listeners, internal = self._listeners
        if listeners:
            return listeners[internal].broker_url
        host = self.values["advertisedAddress"] or self.values["bindAddress"]
        return f"pulsar://{host}:{self.values['brokerServicePort']}"

    @property
    def advertised_web_url(self) -> str:
        listeners, internal = self._listeners
        web_url = listeners[internal].http_url if listeners else None
        if web_url:
            return web_url
        host = self.values["advertisedAddress"] or self.values["bindAddress"]
        return f"http://{host}:{self.values['webServicePort']}"

    @property
    def advertised_url_tls(self) -> str | None:
        """pulsar+ssl:// URL of the TLS binary port, None when it is off."""
        listeners, internal = self._listeners
        if listeners:
            return listeners[internal].broker_url_tls
        port = str(self.values["brokerServicePortTls"]).strip()
        host = self.values["advertisedAddress"] or self.values["bindAddress"]
        return f"pulsar+ssl://{host}:{port}" if port else None

    @property
    def advertised_web_url_tls(self) -> str | None:
        listeners, internal = self._listeners
        web_url_tls = listeners[internal].https_url if listeners else None
        if web_url_tls:
            return web_url_tls
        port = str(self.values["webServicePortTls"]).strip()
        host = self.values["advertisedAddress"] or self.values["bindAddress"]
        return f"https://{host}:{port}" if port else None


_DISPATCHER_KEYS = {key for key, _doc, _dynamic in PULSAR_KEYS.values()}


def load_config(
    path: str | Path | None = None, overrides: Iterable[tuple[str, str]] | Mapping[str, Any] = ()
) -> BrokerConfig:
    """Defaults, then the file (if any), then overrides. Unknown keys in the file are kept but unused, as
    Pulsar tolerates keys of features it does not have, and named in the config's `warnings` (with the
    known key a typo most likely meant); an unknown key among the overrides is refused."""
    defaults = _all_defaults()
    values = dict(defaults)
    unknown = [] if path is None else _read_file(Path(path), defaults, values)
    items = overrides.items() if isinstance(overrides, Mapping) else overrides
    for key, raw in items:
        if key not in defaults:
            guess = _closest_key(key, defaults)
            raise ConfigError(f"unknown setting {key!r}" + (f" (did you mean {guess}?)" if guess else ""))
        values[key] = _parse(key, raw, defaults[key])
    try:
        values["logLevel"] = parse_log_level(values["logLevel"])
    except ValueError as error:
        raise ConfigError(f"logLevel: {error}") from error
    deprecated = _apply_deprecated_store_keys(values)
    config = BrokerConfig(values, _unknown_key_warnings(path, unknown, defaults) + deprecated)
    _check(config)
    return config


def _read_file(path: Path, defaults: Mapping[str, Any], values: dict[str, Any]) -> list[tuple[int, str]]:
    """Read `key=value` lines into `values`; returns the (line number, key) of keys magnetar does not have,
    kept as text."""
    unknown: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, raw = line.partition("=")
        if not sep:
            raise ConfigError(f"{path}:{number}: expected key=value, got {line!r}")
        key = key.strip()
        if key in defaults:
            values[key] = _parse(key, raw, defaults[key])
        else:
            values[key] = raw.strip()
            unknown.append((number, key))
    return unknown


# Pulsar's deprecated ZooKeeper keys and the URL keys that replace them.
_DEPRECATED_STORE_KEYS = (
    ("zookeeperServers", "metadataStoreUrl"),
    ("configurationStoreServers", "configurationMetadataStoreUrl"),
)


def _apply_deprecated_store_keys(values: dict[str, Any]) -> tuple[str, ...]:
    """zookeeperServers and configurationStoreServers, as Pulsar still reads them: the URL keys' value
    (zk:<servers>) when those are empty, with a warning each."""
    warnings = []
    for old, new in _DEPRECATED_STORE_KEYS:
        servers = str(values[old]).strip()
        if not servers:
            continue
        warnings.append(f"{old} is deprecated: use {new}=zk:{servers}")
        if not str(values[new]).strip():
            values[new] = f"zk:{servers}"
    return tuple(warnings)


# The settings that name a class (or an algorithm) of Pulsar's: the one magnetar has.
_ONLY_OFFERED = {
    "loadManagerClassName": MODULAR_LOAD_MANAGER,
    "loadBalancerLoadSheddingStrategy": THRESHOLD_SHEDDER,
    "loadBalancerLoadPlacementStrategy": LEAST_LONG_TERM_MESSAGE_RATE,
    "defaultNamespaceBundleSplitAlgorithm": RANGE_EQUALLY_DIVIDE,
}


def _check(config: BrokerConfig) -> None:
    """What the parts built from the settings refuse, refused now with ConfigError: listeners, dispatcher
    and storage settings, the schema compatibility strategy."""
    values = config.values
    parse_advertised_listeners(values)
    try:
        config.dispatcher_settings()
        config.storage_config()
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from error
    for key, offered in _ONLY_OFFERED.items():
        if values[key] != offered:
            raise ConfigError(f"{key}: only {offered} is offered")
    if values["defaultNumberOfNamespaceBundles"] < 1:
        raise ConfigError("defaultNumberOfNamespaceBundles: a namespace needs at least one bundle")
    if values["schemaCompatibilityStrategy"] not in STRATEGIES[1:]:
        raise ConfigError(
            f"schemaCompatibilityStrategy: {values['schemaCompatibilityStrategy']!r} is not one of {', '.join(STRATEGIES[1:])}"
        )


def _closest_key(key: str, known: Iterable[str]) -> str | None:
    """The known key `key` is most likely a typo of, if any is close enough."""
    by_lower = {k.lower(): k for k in known}
    matches = difflib.get_close_matches(key.lower(), by_lower, n=1, cutoff=0.85)
    return by_lower[matches[0]] if matches else None


def _unknown_key_warnings(
    path: str | Path | None, unknown: list[tuple[int, str]], known: Iterable[str]
) -> tuple[str, ...]:
    """One warning per unknown key that looks like a typo of a known one, and one for all the others (a
    broker.conf copied from Pulsar holds many keys of features magnetar does not have)."""
    warnings, others = [], []
    for number, key in unknown:
        guess = _closest_key(key, known)
        if guess:
            warnings.append(f"{path}:{number}: unknown setting {key} is ignored (did you mean {guess}?)")
        else:
            others.append(key)
    if others:
        warnings.append(f"{path}: settings magnetar does not have are ignored: {', '.join(others)}")
    return tuple(warnings)
