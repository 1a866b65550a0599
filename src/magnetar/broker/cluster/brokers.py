"""The broker registry: the live brokers of the cluster, each under its ephemeral
`/loadbalance/brokers/{advertisedAddress}:{webServicePort}` holding Pulsar's LocalBrokerData JSON.

Owns: this broker's LocalBrokerData (its URLs, listeners and load figures: the CPU usage, the message
rates and each bundle's NamespaceBundleStats under `lastStats`) and writing it, and reading every live
broker's. Must not touch: which broker gets a bundle (load_manager.py), measuring (load_report.py) or
ownership.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.config import ConfigError
from magnetar.metadata.store import BadVersionError, ConnectionLostError, MetadataStore, NotFoundError

__all__ = ["BROKERS_ROOT", "BrokerRegistry", "LocalBrokerData", "NamespaceBundleStats", "ResourceUsage"]

log = logging.getLogger("magnetar.broker.cluster")

BROKERS_ROOT = "/loadbalance/brokers"
# How long past its session timeout a predecessor's registration may stay before it is taken for another
# live broker's: ZooKeeper expires a session within the timeout, checked at every tick.
PREDECESSOR_MARGIN_S = 5.0
PREDECESSOR_POLL_S = 0.25


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """Pulsar's ResourceUsage: a usage against its limit (both 0: not measured)."""

    usage: float = 0.0
    limit: float = 0.0

    def percent_usage(self) -> float:
        """Pulsar's `percentUsage`: 0 without a limit."""
        return 100 * self.usage / self.limit if self.limit > 0 else 0.0

    def to_json(self) -> dict[str, float]:
        return {"usage": self.usage, "limit": self.limit}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ResourceUsage:
        data = data or {}
        return cls(float(data.get("usage", 0.0)), float(data.get("limit", 0.0)))


@dataclass(frozen=True, slots=True)
class NamespaceBundleStats:
    """Pulsar's NamespaceBundleStats: one bundle's rates (per second, bytes for throughput) and counts, as
    its owner measured them last."""

    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    consumer_count: int = 0
    producer_count: int = 0
    topics: int = 0

    def to_json(self) -> dict[str, float | int]:
        return {
            "msgRateIn": self.msg_rate_in,
            "msgThroughputIn": self.msg_throughput_in,
            "msgRateOut": self.msg_rate_out,
            "msgThroughputOut": self.msg_throughput_out,
            "consumerCount": self.consumer_count,
            "producerCount": self.producer_count,
            "topics": self.topics,
            "cacheSize": 0,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NamespaceBundleStats:
        return cls(
            float(data.get("msgRateIn", 0.0)),
            float(data.get("msgThroughputIn", 0.0)),
            float(data.get("msgRateOut", 0.0)),
            float(data.get("msgThroughputOut", 0.0)),
            int(data.get("consumerCount", 0)),
            int(data.get("producerCount", 0)),
            int(data.get("topics", 0)),
        )


@dataclass(slots=True)
class LocalBrokerData:
    """Pulsar's LocalBrokerData, the figures magnetar has: `cpu` (the CPU of the one core magnetar's event
    loop runs on, limit 100), the message rates and counts summed over `last_stats`, the bundles owned.
    Memory, direct memory and bandwidth are not measured: written as 0 of limit 0."""

    web_service_url: str
    web_service_url_tls: str | None
    pulsar_service_url: str
    pulsar_service_url_tls: str | None
    advertised_listeners: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    num_topics: int = 0
    num_bundles: int = 0
    num_producers: int = 0
    num_consumers: int = 0
    bundles: list[str] = field(default_factory=list)
    last_update: int = 0
    start_timestamp: int = 0
    cpu: ResourceUsage = ResourceUsage()
    last_stats: dict[str, NamespaceBundleStats] = field(default_factory=dict)

    def update_stats(self, cpu: ResourceUsage, stats: dict[str, NamespaceBundleStats]) -> None:
        """Pulsar's `update(systemResourceUsage, bundleStats)`: the new figures, and the sums over them."""
        self.cpu = cpu
        self.last_stats = stats
        self.msg_rate_in = sum(s.msg_rate_in for s in stats.values())
        self.msg_rate_out = sum(s.msg_rate_out for s in stats.values())
        self.msg_throughput_in = sum(s.msg_throughput_in for s in stats.values())
        self.msg_throughput_out = sum(s.msg_throughput_out for s in stats.values())
        self.num_topics = sum(s.topics for s in stats.values())
        self.num_consumers = sum(s.consumer_count for s in stats.values())
        self.num_producers = sum(s.producer_count for s in stats.values())

    def to_json(self) -> bytes:
        unused = ResourceUsage().to_json()
        data: dict[str, Any] = {
            "webServiceUrl": self.web_service_url,
            "webServiceUrlTls": self.web_service_url_tls,
            "pulsarServiceUrl": self.pulsar_service_url,
            "pulsarServiceUrlTls": self.pulsar_service_url_tls,
            "persistentTopicsEnabled": True,
            "nonPersistentTopicsEnabled": True,
            "cpu": self.cpu.to_json(),
            "memory": unused,
            "directMemory": unused,
            "bandwidthIn": unused,
            "bandwidthOut": unused,
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "msgRateIn": self.msg_rate_in,
            "msgRateOut": self.msg_rate_out,
            "lastUpdate": self.last_update,
            "lastStats": {bundle: stats.to_json() for bundle, stats in self.last_stats.items()},
            "numTopics": self.num_topics,
            "numBundles": self.num_bundles,
            "numConsumers": self.num_consumers,
            "numProducers": self.num_producers,
            "bundles": self.bundles,
            "lastBundleGains": [],
            "lastBundleLosses": [],
            "advertisedListeners": {
                name: {"brokerServiceUrl": url, "brokerServiceUrlTls": url_tls}
                for name, (url, url_tls) in self.advertised_listeners.items()
            },
            "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl",
            "startTimestamp": self.start_timestamp,
            "loadReportType": "LocalBrokerData",
        }
        return json.dumps(data).encode()

    @classmethod
    def from_json(cls, value: bytes) -> LocalBrokerData:
        data = json.loads(value)
        listeners = {
            name: (urls.get("brokerServiceUrl"), urls.get("brokerServiceUrlTls"))
            for name, urls in (data.get("advertisedListeners") or {}).items()
        }
        return cls(
            data["webServiceUrl"],
            data.get("webServiceUrlTls"),
            data["pulsarServiceUrl"],
            data.get("pulsarServiceUrlTls"),
            listeners,
            float(data.get("msgRateIn", 0.0)),
            float(data.get("msgRateOut", 0.0)),
            float(data.get("msgThroughputIn", 0.0)),
            float(data.get("msgThroughputOut", 0.0)),
            int(data.get("numTopics", 0)),
            int(data.get("numBundles", 0)),
            int(data.get("numProducers", 0)),
            int(data.get("numConsumers", 0)),
            list(data.get("bundles") or []),
            int(data.get("lastUpdate", 0)),
            int(data.get("startTimestamp", 0)),
            ResourceUsage.from_json(data.get("cpu")),
            {bundle: NamespaceBundleStats.from_json(stats) for bundle, stats in (data.get("lastStats") or {}).items()},
        )


class BrokerIdInUseError(ConfigError):
    """Another live broker of the cluster is registered under this broker's id (advertised address and web
    port): a setup mistake, said in one line."""


class BrokerRegistry:
    def __init__(self, store: MetadataStore, broker_id: str, data: LocalBrokerData) -> None:
        self._store = store
        self.broker_id = broker_id
        self.data = data
        self._version: int | None = None
        # One write at a time: a second update asked meanwhile is written after it, with its version.
        self._writing = False
        self._dirty = False

    @property
    def path(self) -> str:
        return f"{BROKERS_ROOT}/{self.broker_id}"

    async def register(self) -> None:
        """Create this broker's node (again, after a new session). A node of this session is written
        over. A node of another session is a predecessor's on this address and port (a broker killed
        and started again before its session expired): it waits for ZooKeeper to expire it, as long as
        the session timeout and a margin, with a line in the log; a node still there after that is a
        live broker's, and BrokerIdInUseError says so."""
        waited_since: float | None = None
        while True:
            try:
                stat = await self._store.put(self.path, self.data.to_json(), -1, ephemeral=True)
                break
            except BadVersionError:
                found = await self._store.exists(self.path)
                if found is None:
                    continue
                if found.created_by_self:
                    stat = await self._store.put(self.path, self.data.to_json())
                    break
            waited_since = self._wait_for_predecessor(waited_since)
            await asyncio.sleep(PREDECESSOR_POLL_S)
        if waited_since is not None:
            log.info(
                "The earlier registration %s expired after %.1f s: registered",
                self.path,
                asyncio.get_running_loop().time() - waited_since,
            )
        self._version = stat.version

    def _wait_for_predecessor(self, waited_since: float | None) -> float:
        now = asyncio.get_running_loop().time()
        limit_s = self._store.session_timeout_ms / 1000 + PREDECESSOR_MARGIN_S
        if waited_since is None:
            log.warning(
                "%s is registered by another metadata session: this broker's previous run, stopped without"
                " unregistering (kill -9)? Waiting up to %.0f s for its session to expire",
                self.path,
                limit_s,
            )
            return now
        if now - waited_since > limit_s:
            raise BrokerIdInUseError(
                f"{self.path} is still registered by another metadata session after {limit_s:.0f} s: another"
                f" live broker advertises {self.broker_id}; give this one another advertisedAddress or"
                " webServicePort"
            )
        return waited_since

    async def update(self) -> None:
        """Write this broker's figures (`writeBrokerDataOnZooKeeper`), unless it is not registered."""
        if self._writing:
            self._dirty = True
            return
        self._writing = True
        try:
            while self._version is not None:
                self._dirty = False
                try:
                    stat = await self._store.put(self.path, self.data.to_json(), self._version)
                except (NotFoundError, BadVersionError):
                    # The session was lost: the next register() writes it.
                    self._version = None
                    return
                except ConnectionLostError as error:
                    # The store is out of reach for now; the next report writes the figures.
                    log.warning("The broker's load report was not written: %s", error)
                    return
                self._version = stat.version
                if not self._dirty:
                    return
        finally:
            self._writing = False

    def forget(self) -> None:
        self._version = None

    async def unregister(self) -> None:
        if self._version is None:
            return
        try:
            await self._store.delete(self.path, self._version)
        except (NotFoundError, BadVersionError):
            pass
        self._version = None

    async def live_brokers(self) -> dict[str, LocalBrokerData]:
        """Every registered broker's data by its id (host:port), sorted by id."""
        brokers = {}
        for broker_id in await self._store.get_children(BROKERS_ROOT):
            found = await self._store.get(f"{BROKERS_ROOT}/{broker_id}")
            if found is not None:
                brokers[broker_id] = LocalBrokerData.from_json(found.value)
        return brokers
