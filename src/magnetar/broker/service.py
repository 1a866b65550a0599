"""The broker service: storage, topics, lookups and partition metadata for every connection.

Owns: opening the data directory, finding or creating topics (auto-creation, partitioned topics served
as `-partition-N`), what a lookup answers, the topics of a namespace, and the clean shutdown of storage.
Also the operations of the admin API that span topics (clusters, tenants, namespaces and their policies,
creating, deleting and unloading topics) and how namespace and topic policies apply to loaded topics.
Must not touch: the wire (connections) or ordering (the core).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from magnetar.broker.auth import AuthenticationService
from magnetar.broker.authorization import AuthorizationService
from magnetar.broker.compactor import CompactionMonitor
from magnetar.broker.config import BrokerConfig
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.topic import PersistentTopic, delayed_delivery_path
from magnetar.broker.topic_name import TopicName
from magnetar.client.security import ClientSecurity
from magnetar.core.settings import DispatcherSettings
from magnetar.replication.remote_admin import RemoteAdminError, ensure_partitioned_topic
from magnetar.replication.remote_cluster import remote_security, remote_urls
from magnetar.storage import ManagedLedgerFactory
from magnetar.storage.clock import LoopClock
from magnetar.storage.metadata import BadVersionError, MetadataStore, NotFoundError
from magnetar.storage.sqlite_engine import SqliteEngine

__all__ = ["TOPIC_DOMAINS", "BrokerService", "NamespaceNotEmptyError", "TopicBusyError", "TopicNotFoundError"]

log = logging.getLogger(__name__)

# Both of Pulsar's topic domains. magnetar keeps a non-persistent topic's messages as it keeps a
# persistent topic's; the domain still names the topic, and listings separate the two as Pulsar does.
TOPIC_DOMAINS = ("persistent", "non-persistent")


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class TopicNotFoundError(Exception):
    server_error = "TopicNotFound"


class TopicBusyError(Exception):
    """A topic with producers or consumers cannot be deleted without force."""


class NamespaceNotEmptyError(Exception):
    """A namespace (or a tenant's namespaces) still holds topics and is not deleted without force."""


class BrokerService:
    def __init__(
        self,
        config: BrokerConfig,
        data_dir: str | Path,
        *,
        clock_ms: Callable[[], int] | None = None,
        storage_engine: SqliteEngine | None = None,
    ) -> None:
        """`clock_ms` (epoch milliseconds: dispatchers' timers and deliver_at_time) and `storage_engine`
        are the wall clock and the threaded engine unless the shell simulator injects its own."""
        self.config = config
        self.now_ms: Callable[[], int] = clock_ms or _wall_clock_ms
        self._storage_engine = storage_engine
        self.data_dir = Path(data_dir)
        self.dispatcher_settings: DispatcherSettings = config.dispatcher_settings()
        self.storage: ManagedLedgerFactory | None = None
        self.topics: dict[str, PersistentTopic] = {}
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        self.subscription_types_enabled = config.subscription_types_enabled()
        self._expiry: asyncio.Task[None] | None = None
        self._replication_check: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        # Topics and namespaces whose deletion is under way: nobody may load (and so re-create) their
        # topics meanwhile, as clients closed by the deletion reconnect at once.
        self._deleting: set[str] = set()
        self._deleting_namespaces: set[str] = set()
        self.schemas = SchemaRegistry(self, self.now_ms)
        self.compaction_monitor = CompactionMonitor(self)
        # Who clients are and what they may do (docs/security.md); both off unless configured.
        self.authentication = AuthenticationService(config)
        self.authorization = AuthorizationService(config, lambda: self.metadata)

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.storage = await ManagedLedgerFactory.open(
            str(self.data_dir),
            self.config.storage_config(),
            self._storage_engine,
            LoopClock(asyncio.get_running_loop(), self.now_ms),
        )
        await self.storage.metadata.ensure_defaults(self.config["clusterName"])
        await self.schemas.import_legacy_records()
        self._expiry = asyncio.get_running_loop().create_task(self._expire_periodically())
        await self._load_replicated_topics()
        self._replication_check = asyncio.get_running_loop().create_task(self._check_replication_periodically())
        self.compaction_monitor.start()

    # ------------------------------------------------------------------------------- replication

    def replication_clusters(self, name: TopicName) -> list[str]:
        """The clusters a topic replicates between: its own policy, else its namespace's."""
        clusters = self.topic_policies(name).get("replicationClusters")
        if clusters is None:
            clusters = self._namespace_policy(name.namespace_name, "replication_clusters")
        return list(clusters or [])

    def broker_service_url(self, cluster: str) -> str | None:
        """Where a replicator reaches `cluster`: the brokerServiceUrl registered for it (brokerServiceUrlTls
        when replication to it uses TLS, replication/remote_cluster.py)."""
        record = self.metadata.get(f"/admin/clusters/{cluster}")
        return None if record is None else remote_urls(record[0], self.config)[0]

    def admin_service_url(self, cluster: str) -> str | None:
        """The serviceUrl (admin API) registered for `cluster` (serviceUrlTls with TLS)."""
        record = self.metadata.get(f"/admin/clusters/{cluster}")
        return None if record is None else remote_urls(record[0], self.config)[1]

    def replication_security(self, cluster: str) -> ClientSecurity:
        """TLS trust and credentials for reaching `cluster`: its registration's, else this broker's
        brokerClient* settings. Raises ValueError when they cannot be read."""
        record = self.metadata.get(f"/admin/clusters/{cluster}")
        return remote_security({} if record is None else record[0], self.config)

    def _replicates(self, name: TopicName) -> bool:
        local = self.config["clusterName"]
        return any(cluster != local for cluster in self.replication_clusters(name))

    async def _load_replicated_topics(self) -> None:
        """Topics of replicating namespaces are loaded at start, so that what they had not replicated
        before a restart goes without waiting for a client to load them."""
        for key in self.opened_storage.topics():
            name = TopicName.parse(key)
            if self.namespace_exists(name.namespace_name) and self._replicates(name):
                try:
                    await self.get_topic(name, create=False)
                except Exception:
                    log.exception("[%s] Could not load the topic to resume its replication", key)

    async def _check_replication_periodically(self) -> None:
        interval = float(self.config["replicationPolicyCheckDurationSeconds"])
        while True:
            await asyncio.sleep(interval)
            for topic in list(self.topics.values()):
                try:
                    await topic.check_replication(self.replication_clusters(topic.name))
                except Exception:
                    log.exception("[%s] Replication check failed", topic.name)

    async def _expire_periodically(self) -> None:
        interval = float(self.config["messageExpiryCheckIntervalInMinutes"]) * 60
        while True:
            await asyncio.sleep(interval)
            now_ms = self.now_ms()
            for topic in list(self.topics.values()):
                ttl = self.message_ttl_seconds(topic.name)
                if ttl > 0:
                    try:
                        await topic.expire_messages(ttl, now_ms)
                    except Exception:
                        log.exception("message expiry failed on %s", topic.name)

    def message_ttl_seconds(self, name: TopicName) -> int:
        """The namespace's message_ttl_in_seconds policy, else ttlDurationDefaultInSeconds."""
        try:
            policies = self.metadata.namespace_policies(name.namespace_name)
        except NotFoundError:  # a namespace without a policy record uses the broker default
            policies = {}
        ttl = policies.get("message_ttl_in_seconds")
        return int(ttl) if ttl is not None else int(self.config["ttlDurationDefaultInSeconds"])

    async def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        if self._replication_check is not None:
            self._replication_check.cancel()
        self.compaction_monitor.stop()
        for topic in list(self.topics.values()):
            topic.compaction.cancel()
        for task in list(self._background):
            task.cancel()
        for topic in list(self.topics.values()):
            await topic.stop_replicators()
        if self.storage is not None:
            await self.storage.flush_cursors()
            await self.storage.close()
            self.storage = None

    @property
    def opened_storage(self) -> ManagedLedgerFactory:
        """The storage, open from start() to close()."""
        assert self.storage is not None, "the broker service is not started"
        return self.storage

    @property
    def metadata(self) -> MetadataStore:
        return self.opened_storage.metadata

    # ------------------------------------------------------------------------------- topics

    def partitions(self, name: TopicName) -> int:
        """Partitions of a partitioned topic, 0 for a plain topic or a partition of one."""
        if name.partition_index >= 0:
            return 0
        return self.metadata.partitioned_topic_metadata(str(name))

    async def partitions_for_lookup(self, name: TopicName) -> int:
        """PARTITIONED_METADATA: auto-creates a partitioned topic when configured to."""
        partitions = self.partitions(name)
        if partitions or name.partition_index >= 0:
            return partitions
        if (
            self.config["allowAutoTopicCreation"]
            and self.config["allowAutoTopicCreationType"] == "partitioned"
            and str(name) not in self.opened_storage.topics()
        ):
            partitions = int(self.config["defaultNumPartitions"])
            await self.metadata.create_partitioned_topic(str(name), partitions)
            log.info("[%s] Created partitioned topic with %d partitions (auto-created)", name, partitions)
        return partitions

    def topic_exists(self, name: TopicName) -> bool:
        """A non-partitioned topic or a partition that is stored (a partitioned topic is not a topic)."""
        key = str(name)
        return key in self.topics or key in self.opened_storage.topics()

    def namespace_exists(self, namespace: str) -> bool:
        tenant = namespace.split("/", 1)[0]
        return tenant in self.metadata.tenants() and namespace in self.metadata.namespaces(tenant)

    async def get_topic(self, name: TopicName, create: bool = True, explicit: bool = False) -> PersistentTopic:
        """The loaded topic, loading it; a topic that does not exist is created when `create` and either
        auto-creation is on, the caller creates it `explicit`ly (the admin API), or it is a partition
        of a declared partitioned topic (which exists as soon as its partitioned topic does)."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if key in self._deleting or name.namespace_name in self._deleting_namespaces:
            raise TopicNotFoundError(f"Topic {key} is being deleted")
        loading = self._loading.get(key)
        if loading is not None:
            return await asyncio.shield(loading)
        exists = key in self.opened_storage.topics()
        if not exists:
            if not create:
                raise TopicNotFoundError(f"Topic {key} does not exist")
            if not self.namespace_exists(name.namespace_name):
                raise TopicNotFoundError(f"Namespace {name.namespace_name} does not exist")
            if name.partition_index >= 0:
                if self.partitions(name.partitioned_base) == 0:
                    raise TopicNotFoundError(f"{name.partitioned_base} is not a partitioned topic")
            elif not (explicit or self.config["allowAutoTopicCreation"]):
                raise TopicNotFoundError(f"Topic {key} does not exist")
        future: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        started = time.perf_counter()
        try:
            ledger = await self.opened_storage.open_ledger(key)
            # Before anything else runs: the ledger's first trim is already scheduled.
            ledger.set_retention(self.retention_policy(name))
            topic = PersistentTopic(self, name, ledger)
            if topic.deduplication_enabled:
                await topic.restore_deduplication()
            # Before any producer appends: a new replicator's cursor starts at the end of the topic.
            await topic.check_replication(self.replication_clusters(name))
            self.topics[key] = topic
            log.info(
                "[%s] %s topic in %.0f ms: %d entries, %d subscriptions, deduplication %s",
                key,
                "Loaded" if exists else "Created",
                (time.perf_counter() - started) * 1000,
                ledger.number_of_entries,
                len(topic.subscriptions),
                "enabled" if topic.deduplication_enabled else "disabled",
            )
            future.set_result(topic)
            return topic
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved here so a failure nobody else awaits is not logged twice
            raise
        finally:
            del self._loading[key]

    def topics_of_namespace(self, namespace: str, domains: tuple[str, ...] = ("persistent",)) -> list[str]:
        """The namespace's topics in the given domains (partitions by their own names), as clients expect;
        persistent ones only unless asked, as GET_TOPICS_OF_NAMESPACE's default mode in Pulsar."""
        prefixes = tuple(f"{domain}://{namespace}/" for domain in domains)
        names = {t for t in self.opened_storage.topics() if t.startswith(prefixes)}
        for base in self.metadata.partitioned_topics(namespace):
            if base.startswith(prefixes):
                count = self.metadata.partitioned_topic_metadata(base)
                names.update(f"{base}-partition-{i}" for i in range(count))
        return sorted(names)

    # ------------------------------------------------------------------------------ policies
    # Pulsar's precedence: a topic's own policy, else its namespace's, else the broker's setting.

    def _namespace_policy(self, namespace: str, key: str) -> Any:
        record = self.metadata.get(f"/admin/policies/{namespace}")
        return None if record is None else record[0].get(key)

    def topic_policies(self, name: TopicName) -> dict[str, Any]:
        """The topic-level policies of a topic (a partition has its partitioned topic's)."""
        record = self.metadata.get(_topic_policies_path(name.partitioned_base))
        return {} if record is None else dict(record[0])

    def deduplication_enabled(self, name: TopicName) -> bool:
        enabled = self.topic_policies(name).get("deduplicationEnabled")
        if enabled is None:
            enabled = self._namespace_policy(name.namespace_name, "deduplicationEnabled")
        if enabled is None:
            enabled = self.config["brokerDeduplicationEnabled"]
        return bool(enabled)

    def retention_policy(self, name: TopicName) -> tuple[int, int] | None:
        """The namespace's retention as (minutes, megabytes), None for the broker's defaults."""
        retention = self._namespace_policy(name.namespace_name, "retention_policies")
        if retention is None:
            return None
        return int(retention["retentionTimeInMinutes"]), int(retention["retentionSizeInMB"])

    def subscription_type_allowed(self, name: TopicName, subscription_type: str) -> bool:
        """subscriptionTypesEnabled: the namespace's set when it has one, else the broker's."""
        enabled = self._namespace_policy(name.namespace_name, "subscription_types_enabled")
        return subscription_type in (set(enabled) if enabled else self.subscription_types_enabled)

    async def _apply_policies(self, loaded: list[PersistentTopic]) -> None:
        for topic in loaded:
            topic.ledger.set_retention(self.retention_policy(topic.name))
            await topic.set_deduplication(self.deduplication_enabled(topic.name))
            await topic.check_replication(self.replication_clusters(topic.name))

    async def set_namespace_policies(self, namespace: str, changes: dict[str, Any]) -> None:
        """Change some of a namespace's policies (a value of None removes one), then apply them to the
        namespace's loaded topics. Raises NotFoundError when the namespace does not exist."""
        while True:
            policies = dict(self.metadata.namespace_policies(namespace))
            for key, value in changes.items():
                if value is None:
                    policies.pop(key, None)
                else:
                    policies[key] = value
            try:
                await self.metadata.set_namespace_policies(namespace, policies)
                break
            except BadVersionError:
                continue  # another change of this namespace's policies came first: apply ours to it
        await self._apply_policies([t for t in self.topics.values() if t.name.namespace_name == namespace])

    async def set_topic_policies(self, name: TopicName, changes: dict[str, Any]) -> None:
        """Change a topic's own policies (None removes one), for it and, if partitioned, its partitions."""
        path = _topic_policies_path(name)
        policies = self.topic_policies(name)
        for key, value in changes.items():
            if value is None:
                policies.pop(key, None)
            else:
                policies[key] = value
        if policies:
            await self.metadata.put(path, policies)
        elif self.metadata.get(path) is not None:
            await self.metadata.delete(path)
        await self._apply_policies([t for t in self.topics.values() if t.name.partitioned_base == name])

    # ------------------------------------------------------------------------------ admin operations
    # The admin API checks its preconditions (existence, names, bodies) and calls these to change state.

    async def create_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        await self.metadata.create_cluster(cluster, data)

    async def update_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        path = f"/admin/clusters/{cluster}"
        record = self.metadata.get(path)
        if record is None:
            raise NotFoundError(f"{path}: not found")
        await self.metadata.put(path, data, expected_version=record[1])

    async def delete_cluster(self, cluster: str) -> None:
        """Forget a cluster's registration (NotFoundError when there is none). What names it stays, as in
        Pulsar: a replicator to it finds no URLs the next time it connects."""
        await self.metadata.delete_cluster(cluster)

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self.metadata.create_tenant(tenant, info)

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        path = f"/admin/policies/{tenant}"
        record = self.metadata.get(path)
        if record is None:
            raise NotFoundError(f"{path}: not found")
        await self.metadata.put(path, info, expected_version=record[1])

    async def delete_tenant(self, tenant: str, force: bool) -> None:
        namespaces = self.metadata.namespaces(tenant)
        if namespaces and not force:
            raise NamespaceNotEmptyError("The tenant still has active namespaces")
        for namespace in namespaces:
            await self.delete_namespace(namespace, force=True)
        await self.metadata.delete_tenant(tenant)

    async def create_namespace(self, namespace: str, policies: dict[str, Any]) -> None:
        await self.metadata.create_namespace(namespace, policies)

    async def delete_namespace(self, namespace: str, force: bool) -> None:
        partitioned = self.metadata.partitioned_topics(namespace)
        topics = self.topics_of_namespace(namespace, TOPIC_DOMAINS)
        if (partitioned or topics) and not force:
            raise NamespaceNotEmptyError("Cannot delete non empty namespace")
        self._deleting_namespaces.add(namespace)
        try:
            for base in partitioned:
                await self.delete_partitioned_topic(TopicName.parse(base), force=True)
            for topic in self.topics_of_namespace(namespace, TOPIC_DOMAINS):
                await self.delete_topic(TopicName.parse(topic), force=True)
            await self.metadata.delete_namespace(namespace)
        finally:
            self._deleting_namespaces.discard(namespace)

    async def create_topic(self, name: TopicName) -> PersistentTopic:
        """A non-partitioned topic (or a partition), created now rather than on first use."""
        return await self.get_topic(name, create=True, explicit=True)

    async def delete_topic(self, name: TopicName, force: bool) -> None:
        """Delete a topic's entries, cursors and records; with `force` its clients are closed first
        (they may re-create it when they reconnect, as in Pulsar), without it a topic in use is refused."""
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None and topic.has_clients() and not force:
            raise TopicBusyError("Topic has active producers/subscriptions")
        self._deleting.add(key)
        try:
            if topic is not None:
                topic.close_clients()
                del self.topics[key]
                await topic.stop_replicators()
            for path in (delayed_delivery_path(name), _topic_policies_path(name)):
                if self.metadata.get(path) is not None:
                    await self.metadata.delete(path)
            if name.partition_index < 0:
                # A partition's schema is its partitioned topic's, deleted with that.
                await self.schemas.delete_storage(name)
            if key in self.opened_storage.topics():
                await self.opened_storage.delete_ledger(key)
            log.info("[%s] Deleted topic%s", key, " (force)" if force else "")
        finally:
            self._deleting.discard(key)

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        await self.metadata.create_partitioned_topic(str(name), partitions)
        log.info("[%s] Created partitioned topic with %d partitions", name, partitions)
        self._propagate_partitions(name, partitions)

    async def update_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        """Raise the number of partitions. The number it has already changes nothing here but still goes
        to the other clusters, as Pulsar's update does: one that has fewer gets them."""
        if partitions != self.partitions(name):
            await self.metadata.update_partitioned_topic(str(name), partitions)
            log.info("[%s] Updated partitioned topic to %d partitions", name, partitions)
        self._propagate_partitions(name, partitions)

    def _propagate_partitions(self, name: TopicName, partitions: int) -> None:
        """A partitioned topic of a replicating namespace gets as many partitions in the other clusters
        (in the background: a cluster that is away gets them when its replicators connect)."""
        local = self.config["clusterName"]
        for cluster in self.replication_clusters(name):
            admin = self.admin_service_url(cluster) if cluster != local else None
            if admin:
                task = asyncio.get_running_loop().create_task(self._ensure_partitions(cluster, admin, name, partitions))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def _ensure_partitions(self, cluster: str, admin: str, name: TopicName, partitions: int) -> None:
        try:
            await ensure_partitioned_topic(admin, str(name), partitions, self.replication_security(cluster))
        except (RemoteAdminError, ValueError) as error:
            log.warning("[%s] Could not give cluster %s %d partitions now: %s", name, cluster, partitions, error)

    async def delete_partitioned_topic(self, name: TopicName, force: bool) -> None:
        """Delete the partitioned topic and every partition (none when some are in use and not `force`).
        The metadata goes first, as Pulsar marks it deleted first: clients closed by the deletion then
        cannot re-create a partition when they reconnect."""
        partitions = [name.partition(i) for i in range(self.partitions(name))]
        if not force:
            for partition in partitions:
                topic = self.topics.get(str(partition))
                if topic is not None and topic.has_clients():
                    raise TopicBusyError("Topic has active producers/subscriptions")
        await self.metadata.delete_partitioned_topic(str(name))
        if self.metadata.get(_topic_policies_path(name)) is not None:
            await self.metadata.delete(_topic_policies_path(name))
        await self.schemas.delete_storage(name)
        for partition in partitions:
            if self.topic_exists(partition):
                await self.delete_topic(partition, force=True)
        log.info("[%s] Deleted partitioned topic with %d partitions", name, len(partitions))

    async def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic: its clients reconnect and load it again from storage, as after a
        restart. Readers' cursors go with it (they are never persisted)."""
        topic = self.topics.pop(str(name), None)
        if topic is None:
            return
        topic.close_clients()
        await topic.stop_replicators()
        for subscription in list(topic.subscriptions.values()):
            if not subscription.durable:
                await topic.ledger.delete_cursor(subscription.name)
        log.info("[%s] Unloaded topic", name)


def _topic_policies_path(name: TopicName) -> str:
    return f"/topic-policies/{name.tenant}/{name.namespace}/{name.domain}/{name.local}"
