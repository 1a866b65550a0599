"""The cluster service: what Pulsar's NamespaceService decides, over bundles, ownership, the broker
registry and the leader.

Owns: joining the cluster (this broker's registration, the election) and leaving it (every owned bundle
unloaded first), a lookup's answer (`findBrokerServiceUrl` and `searchForCandidateBroker`: the owner's
URLs as Connect; without an owner, the least loaded broker chosen by the leader, by any broker when there
is no live leader, or by the receiving broker itself when the request is authoritative; a non-leader
sends the client to the leader), whether this broker may serve a topic, the `Check` of its ownership,
unloading bundles, and the session's events (SESSION_LOST: stop serving at once; SESSION_REESTABLISHED:
register again). Must not touch: the wire, or a topic's state beyond unloading it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from magnetar.broker.cluster.brokers import BrokerRegistry, LocalBrokerData
from magnetar.broker.cluster.bundles import Bundle, BundleDirectory
from magnetar.broker.cluster.leader import LeaderElection
from magnetar.broker.cluster.lease import SessionLease
from magnetar.broker.cluster.load_manager import select_broker_for_assignment
from magnetar.broker.cluster.ownership import BundleNotOwnedError, OwnerData, OwnershipCache
from magnetar.broker.config import BrokerConfig, UnknownListener, parse_advertised_listeners
from magnetar.broker.topic_name import TopicName
from magnetar.clock import Clock
from magnetar.metadata.store import Check, MetadataStore, SessionEvent
from magnetar.storage.errors import LedgerFencedError

__all__ = ["ClusterService", "LookupResult", "ServedTopics", "broker_id_of"]

log = logging.getLogger("magnetar.broker.cluster")


class ServedTopics(Protocol):
    """The loaded topics, as far as unloading a bundle needs them (the topic registry and the admin
    operations give it)."""

    def loaded_topics(self) -> list[TopicName]: ...

    async def unload_topic(self, name: TopicName) -> None: ...


@dataclass(frozen=True, slots=True)
class LookupResult:
    """Pulsar's LookupResult: Connect to the owner (authoritative), or Redirect to a broker that will
    decide, `authoritative` when it must take the bundle itself."""

    broker_url: str
    broker_url_tls: str | None
    http_url: str
    http_url_tls: str | None
    redirect: bool
    authoritative: bool


def broker_id_of(web_url: str) -> str:
    """Pulsar's broker id: the host and port of its web service URL."""
    return urlsplit(web_url).netloc


def _listener_urls(
    urls: tuple[str, str | None], listeners: dict[str, tuple[str, str | None]], listener_name: str
) -> tuple[str, str | None]:
    if not listener_name:
        return urls
    found = listeners.get(listener_name)
    if found is None:
        raise UnknownListener(f"the broker do not have {listener_name} listener")
    return found


class ClusterService:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        store: MetadataStore,
        topics: ServedTopics,
        spawn: Callable[[Coroutine[Any, Any, None], str], object],
        configuration_store: MetadataStore | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self.store = store
        self._topics = topics
        self._spawn = spawn
        self.bundles = BundleDirectory(store, int(config["defaultNumberOfNamespaceBundles"]), configuration_store)
        self._ownership: OwnershipCache | None = None
        self._registry: BrokerRegistry | None = None
        self._leader: LeaderElection | None = None
        # Bundles being unloaded: no lookup answers them and no topic of theirs loads meanwhile.
        self._unloading: set[Bundle] = set()
        self.lease = SessionLease(store, clock, spawn)
        store.register_session_listener(self._on_session_event)

    # ------------------------------------------------------------------ joining and leaving

    @property
    def broker_id(self) -> str:
        return broker_id_of(self._config.advertised_web_url)

    @property
    def ownership(self) -> OwnershipCache:
        assert self._ownership is not None, "the broker has not joined its cluster"
        return self._ownership

    @property
    def registry(self) -> BrokerRegistry:
        assert self._registry is not None, "the broker has not joined its cluster"
        return self._registry

    @property
    def leader(self) -> LeaderElection:
        assert self._leader is not None, "the broker has not joined its cluster"
        return self._leader

    async def start(self) -> None:
        """Join: once the listeners are bound, so the URLs written name the ports really bound."""
        config = self._config
        listeners, _internal = parse_advertised_listeners(config.values)
        named = {name: (listener.broker_url, listener.broker_url_tls) for name, listener in listeners.items()}
        self._ownership = OwnershipCache(
            self.store,
            OwnerData(
                config.advertised_url,
                config.advertised_url_tls,
                config.advertised_web_url,
                config.advertised_web_url_tls,
                False,
                named,
            ),
        )
        data = LocalBrokerData(
            config.advertised_web_url,
            config.advertised_web_url_tls,
            config.advertised_url,
            config.advertised_url_tls,
            named,
            last_update=self._clock.time_ms(),
            start_timestamp=self._clock.time_ms(),
        )
        self._registry = BrokerRegistry(self.store, self.broker_id, data)
        await self.lease.renew()
        self.lease.start()
        await self._registry.register()
        self._leader = LeaderElection(
            self.store, {"brokerId": self.broker_id, "serviceUrl": config.advertised_web_url}, self._spawn
        )
        await self._leader.start()
        log.info("Joined cluster %s as %s", config["clusterName"], self.broker_id)

    async def stop(self) -> None:
        """Leave: every owned bundle unloaded (its topics closed, then its node deleted), the leadership
        resigned, the registration deleted."""
        if self._ownership is None:
            return
        for bundle in self.ownership.owned:
            await self.unload_bundle(bundle)
        self.lease.stop()
        await self.leader.stop()
        await self.registry.unregister()

    # ------------------------------------------------------------------ lookups

    async def lookup(self, name: TopicName, authoritative: bool, listener_name: str = "") -> LookupResult:
        """Which broker serves `name`. Raises BundleNotOwnedError (ServiceNotReady) while its bundle is
        being unloaded or when no broker is available, UnknownListener for a listener the broker lacks."""
        bundle = await self.bundles.bundle_of(name)
        if bundle in self._unloading:
            raise BundleNotOwnedError(f"Namespace bundle {bundle} is currently being unloaded")
        owner = await self.ownership.owner(bundle)
        if owner is None:
            return await self._search_for_candidate(bundle, authoritative, listener_name)
        return self._connect(bundle, owner, listener_name)

    def _connect(self, bundle: Bundle, owner: OwnerData, listener_name: str) -> LookupResult:
        if owner.disabled:
            raise BundleNotOwnedError(f"Namespace bundle {bundle} is currently being unloaded")
        url, url_tls = _listener_urls(
            (owner.native_url, owner.native_url_tls), owner.advertised_listeners, listener_name
        )
        return LookupResult(url, url_tls, owner.http_url, owner.http_url_tls, redirect=False, authoritative=True)

    async def _search_for_candidate(self, bundle: Bundle, authoritative: bool, listener_name: str) -> LookupResult:
        brokers = await self.registry.live_brokers()
        leader = self.leader
        authoritative_redirect = leader.is_leader
        if authoritative:
            # The leader already assigned this broker as the owner.
            candidate: str | None = self.broker_id
        elif leader.is_leader or not self._leader_active(brokers):
            candidate = select_broker_for_assignment(brokers)
            authoritative_redirect = True
        else:
            assert leader.leader is not None
            candidate = broker_id_of(leader.leader["serviceUrl"])
        if candidate is None:
            raise BundleNotOwnedError(f"No broker was available to own {bundle}")
        if candidate == self.broker_id:
            owner = await self.ownership.try_acquire(bundle)
            if owner is self.ownership.self_data:
                self._report_bundles()
            return self._connect(bundle, owner, listener_name)
        target = brokers.get(candidate)
        if target is None:
            raise BundleNotOwnedError(f"Broker {candidate} is not available to own {bundle}")
        url, url_tls = _listener_urls(
            (target.pulsar_service_url, target.pulsar_service_url_tls), target.advertised_listeners, listener_name
        )
        return LookupResult(
            url,
            url_tls,
            target.web_service_url,
            target.web_service_url_tls,
            redirect=True,
            authoritative=authoritative_redirect,
        )

    def _leader_active(self, brokers: dict[str, LocalBrokerData]) -> bool:
        leader = self.leader.leader
        return leader is not None and broker_id_of(leader["serviceUrl"]) in brokers

    # ------------------------------------------------------------------ serving

    def serving(self) -> bool:
        """Whether this broker may still serve the bundles it owns: its session's lease holds (lease.py).
        When it lapsed, every bundle is given up at once, as when the session is lost; the ones whose
        nodes the session kept are taken back by the next lookups once the lease is renewed."""
        if self.lease.valid():
            return True
        if self._ownership is not None and self._ownership.owned:
            self._give_up_bundles("the metadata session's lease lapsed")
        return False

    async def check_serving(self, name: TopicName) -> None:
        """BundleNotOwnedError (ServiceNotReady) unless this broker owns the topic's bundle, as Pulsar
        refuses to load a topic of a bundle it does not own."""
        bundle = await self.bundles.bundle_of(name)
        if bundle in self._unloading or not self.serving() or not self.ownership.owns(bundle):
            raise BundleNotOwnedError(f"Namespace bundle for topic ({name}) not served by this instance")

    async def ownership_check(self, name: TopicName) -> Check:
        """The `Check` a storage engine adds to each of its `multi` writes for `name`'s topic, so that they
        fail once this broker no longer owns its bundle."""
        bundle = await self.bundles.bundle_of(name)
        return self.ownership.check(bundle)

    def storage_checks(self, topic: str) -> tuple[Check, ...]:
        """`ownership_check` for a storage engine's writes, which cannot wait: a topic the engine writes
        was loaded here, so its bundle is known. LedgerFencedError when this broker does not own it (any
        more), which stops the engine writing the topic."""
        name = TopicName.parse(topic)
        bundle = self.bundles.known_bundle_of(name)
        if bundle is None or not self.ownership.owns(bundle):
            raise LedgerFencedError(f"{topic}: this broker does not own its bundle")
        return (self.ownership.check(bundle),)

    # ------------------------------------------------------------------ unloading

    async def unload_bundle(self, bundle: Bundle) -> None:
        """Pulsar's OwnedBundle.handleUnloadRequest: refuse lookups, mark the node disabled, close the
        bundle's topics (their clients look them up again), then delete the node. BundleNotOwnedError
        when this broker does not own it."""
        check = self.ownership.check(bundle)
        self._unloading.add(bundle)
        try:
            disabled = dataclasses.replace(self.ownership.self_data, disabled=True)
            await self.store.put(check.path, disabled.to_json(), check.version)
            self.ownership.set_version(bundle, check.version + 1)
            await self._close_topics({bundle})
            await self.ownership.release(bundle)
        finally:
            self._unloading.discard(bundle)
        self._report_bundles()
        log.info("Unloaded bundle %s", bundle)

    async def unload_namespace(self, namespace: str) -> list[Bundle]:
        """Every bundle of `namespace` this broker owns, unloaded; the ones unloaded."""
        owned = [bundle for bundle in self.ownership.owned if bundle.namespace == namespace]
        for bundle in owned:
            await self.unload_bundle(bundle)
        return owned

    async def _close_topics(self, bundles: set[Bundle]) -> None:
        for name in self._topics.loaded_topics():
            if await self.bundles.bundle_of(name) in bundles:
                await self._topics.unload_topic(name)

    # ------------------------------------------------------------------ the session

    def _on_session_event(self, event: SessionEvent) -> None:
        if self._ownership is None:
            return
        if event is SessionEvent.SESSION_LOST:
            # Nothing is ours any more: stop serving at once, before any write could be attempted.
            self.lease.end()
            self.leader.forget()
            self.registry.forget()
            self._give_up_bundles("Metadata session lost")
        elif event is SessionEvent.SESSION_REESTABLISHED:
            self._spawn(self._rejoin(), "joining the cluster again")

    def _give_up_bundles(self, reason: str) -> None:
        lost = set(self.ownership.forget_all())
        log.warning("%s: stopped serving %d bundles", reason, len(lost))
        self._spawn(self._close_topics(lost), "closing the topics of lost bundles")

    async def _rejoin(self) -> None:
        await self.registry.register()
        await self.leader.elect()
        log.info("Metadata session reestablished: registered again as %s", self.broker_id)

    def _report_bundles(self) -> None:
        """The load figures the load manager reads, after ownership changed."""
        data = self.registry.data
        owned = self.ownership.owned
        data.num_bundles = len(owned)
        data.bundles = [str(bundle) for bundle in owned]
        data.num_topics = len(self._topics.loaded_topics())
        data.last_update = self._clock.time_ms()
        self._spawn(self.registry.update(), "broker data update")
