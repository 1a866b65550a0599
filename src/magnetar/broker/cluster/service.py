"""The cluster service: what Pulsar's NamespaceService decides, over bundles, ownership, the broker
registry and the leader.

Owns: joining the cluster (this broker's registration, the election) and leaving it (every owned bundle
unloaded first), a lookup's answer (`findBrokerServiceUrl` and `searchForCandidateBroker`: the owner's
URLs as Connect; without an owner, the least loaded broker chosen by the leader, by any broker when there
is no live leader, or by the receiving broker itself when the request is authoritative; a non-leader
sends the client to the leader), whether this broker may serve a topic, the `Check` of its ownership,
unloading bundles, splitting one (Pulsar's `splitAndOwnBundle`), and the session's events (SESSION_LOST:
stop serving at once; SESSION_REESTABLISHED: register again). The load manager (modular_load_manager.py)
chooses the brokers, reports the load, sheds and splits through it. Must not touch: the wire, or a
topic's state beyond unloading it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

from magnetar.broker.cluster.brokers import BrokerRegistry, LocalBrokerData
from magnetar.broker.cluster.bundles import Bundle, BundleDirectory, namespace_of_local_policies, range_equally_divide
from magnetar.broker.cluster.leader import LeaderElection
from magnetar.broker.cluster.lease import SessionLease
from magnetar.broker.cluster.load_report import LoadedTopics, process_cpu_time_s
from magnetar.broker.cluster.modular_load_manager import ModularLoadManager
from magnetar.broker.cluster.owner_admin import OwnerAdmin
from magnetar.broker.cluster.ownership import BundleNotOwnedError, OwnerData, OwnershipCache
from magnetar.broker.config import BrokerConfig, UnknownListener, parse_advertised_listeners
from magnetar.broker.topic_name import TopicName
from magnetar.clock import Clock
from magnetar.metadata.store import (
    BadVersionError,
    Check,
    MetadataStore,
    MetadataStoreError,
    Notification,
    SessionEvent,
)
from magnetar.storage.errors import LedgerFencedError

__all__ = ["ClusterService", "LookupResult", "OwnerRequests", "ServedTopics", "broker_id_of"]

log = logging.getLogger("magnetar.broker.cluster")

# NamespaceService's BUNDLE_SPLIT_RETRY_LIMIT: a split whose compare-and-set of the boundaries lost to
# another write reads them again and retries, this many times, after a pause.
BUNDLE_SPLIT_RETRY_LIMIT = 7
BUNDLE_SPLIT_RETRY_DELAY_S = 0.1


class ServedTopics(LoadedTopics, Protocol):
    """The loaded topics, as far as unloading a bundle and measuring the load need them (the topic
    registry and the admin operations give it)."""

    def loaded_topics(self) -> list[TopicName]: ...

    async def unload_topic(self, name: TopicName) -> None: ...


class OwnerRequests(Protocol):
    """What the leader asks of another broker that owns a bundle (owner_admin.py, over its admin API)."""

    async def unload(self, owner: LocalBrokerData, bundle: Bundle) -> None: ...

    async def split(self, owner: LocalBrokerData, bundle: Bundle, unload: bool) -> None: ...


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
        *,
        cpu_time_s: Callable[[], float] = process_cpu_time_s,
        owner_requests: OwnerRequests | None = None,
    ) -> None:
        """`cpu_time_s` is the process's CPU time unless given (the load report's CPU usage),
        `owner_requests` the other brokers' admin API unless given."""
        self._config = config
        self._clock = clock
        self.store = store
        self._topics = topics
        self._spawn = spawn
        self._cpu_time_s = cpu_time_s
        self.owner_requests = owner_requests or OwnerAdmin(config)
        self.bundles = BundleDirectory(store, int(config["defaultNumberOfNamespaceBundles"]), configuration_store)
        self._ownership: OwnershipCache | None = None
        self._registry: BrokerRegistry | None = None
        self._leader: LeaderElection | None = None
        self._load_manager: ModularLoadManager | None = None
        # Bundles being unloaded: no lookup answers them and no topic of theirs loads meanwhile.
        self._unloading: set[Bundle] = set()
        # Closings of the topics of bundles given up (session lost, lease lapsed) under way.
        self._giving_up = 0
        self.lease = SessionLease(store, clock, spawn)
        store.register_session_listener(self._on_session_event)
        store.register_listener(self._on_notification)

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

    @property
    def load_manager(self) -> ModularLoadManager:
        assert self._load_manager is not None, "the broker has not joined its cluster"
        return self._load_manager

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
        self._load_manager = ModularLoadManager(
            config,
            self._clock,
            self._registry,
            self.bundles,
            self._leader,
            self._topics,
            _Owners(self),
            self._spawn,
            self._cpu_time_s,
        )
        self._load_manager.start()
        log.info("Joined cluster %s as %s", config["clusterName"], self.broker_id)

    async def stop(self) -> None:
        """Leave: every owned bundle unloaded (its topics closed, then its node deleted), the leadership
        resigned, the registration deleted."""
        if self._ownership is None:
            return
        self.load_manager.stop()
        self.lease.stop()
        try:
            for bundle in self.ownership.owned:
                await self.unload_bundle(bundle)
            await self.leader.stop()
            await self.registry.unregister()
        except MetadataStoreError as error:
            # ZooKeeper went first (a whole machine or cluster stopping): the topics still close, and the
            # ephemeral nodes go with the session when it expires.
            log.warning("Leaving the cluster without its metadata store: %s", error)
            await self._close_topics(set(self.ownership.forget_all()))

    # ------------------------------------------------------------------ lookups

    async def lookup(self, name: TopicName, authoritative: bool, listener_name: str = "") -> LookupResult:
        """Which broker serves `name`. Raises BundleNotOwnedError (ServiceNotReady) while its bundle is
        being unloaded or when no broker is available, UnknownListener for a listener the broker lacks."""
        return await self.lookup_bundle(await self.bundles.bundle_of(name), authoritative, listener_name)

    async def lookup_bundle(self, bundle: Bundle, authoritative: bool, listener_name: str = "") -> LookupResult:
        """Which broker serves `bundle` (`lookup`), assigning it an owner when it has none."""
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
            candidate = self.load_manager.select_broker_for_assignment(bundle, brokers)
            authoritative_redirect = True
        else:
            assert leader.leader is not None
            candidate = broker_id_of(leader.leader["serviceUrl"])
        if candidate is None:
            raise BundleNotOwnedError(f"No broker was available to own {bundle}")
        if candidate == self.broker_id:
            await self._check_still_a_bundle(bundle)
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

    async def _check_still_a_bundle(self, bundle: Bundle) -> None:
        """BundleNotOwnedError (the client looks up again) when `bundle` was split: this broker's
        boundaries may not show it yet, and nobody must own a bundle that overlaps its halves."""
        current, _version = await self.bundles.read(bundle.namespace)
        if bundle not in current.bundles:
            self.load_manager.forget(bundle)
            raise BundleNotOwnedError(f"Namespace bundle {bundle} was split")

    def _leader_active(self, brokers: dict[str, LocalBrokerData]) -> bool:
        leader = self.leader.leader
        return leader is not None and broker_id_of(leader["serviceUrl"]) in brokers

    # ------------------------------------------------------------------ serving

    def serving(self) -> bool:
        """Whether this broker may still serve the bundles it owns: its session's lease holds (lease.py).
        When it lapsed, every bundle is given up at once, as when the session is lost; the ones whose
        nodes the session kept are taken back by the next lookups once the lease is renewed. Nothing is
        served either while the topics of bundles given up are still closing: a renewal may make the lease
        valid again meanwhile (answered on a new session), and those topics are other brokers' by then."""
        if self._giving_up:
            return False
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

    # ------------------------------------------------------------------ splitting

    async def split_bundle(self, bundle: Bundle, unload: bool) -> tuple[Bundle, Bundle]:
        """Pulsar's NamespaceService.splitAndOwnBundle with range_equally_divide: own both halves of
        `bundle`, write the namespace's new boundaries by compare-and-set, then release `bundle`; its
        topics stay loaded, each now in its half. With `unload` the halves are unloaded next, so that
        they can be placed elsewhere. BundleNotOwnedError when this broker does not own `bundle`,
        ValueError when its range is too narrow to split."""
        self.ownership.check(bundle)
        boundary = range_equally_divide(bundle)
        if boundary is None:
            raise ValueError(f"{bundle} can't be split further since range not larger than 1")
        halves = (Bundle(bundle.namespace, bundle.lower, boundary), Bundle(bundle.namespace, boundary, bundle.upper))
        try:
            await self._split_and_own(bundle, boundary, halves)
        except BaseException:
            for half in halves:
                await self.ownership.release(half)
            raise
        await self.ownership.release(bundle)
        self._report_bundles()
        log.info("Split bundle %s into %s and %s", bundle, halves[0].range, halves[1].range)
        if unload:
            for half in halves:
                self._spawn(self.unload_bundle(half), "unloading a split bundle")
        return halves

    async def _split_and_own(self, bundle: Bundle, boundary: int, halves: tuple[Bundle, Bundle]) -> None:
        for _attempt in range(BUNDLE_SPLIT_RETRY_LIMIT):
            current, version = await self.bundles.read(bundle.namespace)
            if bundle not in current.bundles:
                raise BundleNotOwnedError(f"bundle {bundle} not found under namespace")
            for half in halves:
                if await self.ownership.try_acquire(half) is not self.ownership.self_data:
                    raise BundleNotOwnedError(f"failed to acquire ownership of split bundle {half}")
            try:
                await self.bundles.replace(current.split(bundle, boundary), version)
                return
            except BadVersionError:
                await self._clock.sleep(BUNDLE_SPLIT_RETRY_DELAY_S)
        raise BundleNotOwnedError(f"{bundle} not split: the namespace's bundles kept changing")

    async def _close_topics(self, bundles: set[Bundle]) -> None:
        for name in self._topics.loaded_topics():
            if await self.bundles.bundle_of(name) in bundles:
                await self._topics.unload_topic(name)

    # ------------------------------------------------------------------ the store

    def _on_notification(self, notification: Notification) -> None:
        """The boundaries of a namespace changed (a split): read them again. A broker's report changed:
        the load manager's."""
        namespace = namespace_of_local_policies(notification.path)
        if namespace is not None:
            self._spawn(self.bundles.refresh(namespace), "reading a namespace's bundles")
        if self._load_manager is not None:
            self._load_manager.on_notification(notification)

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
        # The report owns nothing either: the registration written again on the new session says so.
        if self._load_manager is not None:
            self._report_bundles()
        self._giving_up += 1
        self._spawn(self._close_lost_topics(lost), "closing the topics of lost bundles")

    async def _close_lost_topics(self, lost: set[Bundle]) -> None:
        try:
            await self._close_topics(lost)
        finally:
            self._giving_up -= 1

    async def _rejoin(self) -> None:
        await self.registry.register()
        await self.leader.elect()
        log.info("Metadata session reestablished: registered again as %s", self.broker_id)

    def _report_bundles(self) -> None:
        """The bundles this broker owns changed: its report says so at once."""
        self.load_manager.report_bundles(self.ownership.owned)


class _Owners:
    """The owners of bundles as the load manager asks them (BundleOwners): this broker itself, the others
    through their admin API."""

    def __init__(self, service: ClusterService) -> None:
        self._service = service

    async def unload(self, broker_id: str, owner: LocalBrokerData, bundle: Bundle) -> None:
        if broker_id == self._service.broker_id:
            await self._service.unload_bundle(bundle)
        else:
            await self._service.owner_requests.unload(owner, bundle)

    async def split(self, broker_id: str, owner: LocalBrokerData, bundle: Bundle, unload: bool) -> None:
        if broker_id == self._service.broker_id:
            await self._service.split_bundle(bundle, unload)
        else:
            await self._service.owner_requests.split(owner, bundle, unload)
