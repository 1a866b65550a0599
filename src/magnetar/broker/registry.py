"""The loaded topics: finding, loading and auto-creating them, and the periodic checks that walk them.

Owns: the map of loaded topics, loading one at most once at a time, whether a topic may be created
(auto-creation, explicit creation, a partition of a declared partitioned topic), partitioned topics
served as `-partition-N`, the topics of a namespace, the topics whose deletion is under way (nobody
loads them meanwhile), and the periodic message expiry and replication checks.
Must not touch: the wire (connections), ordering (the core), or what an admin operation changes
(broker/operations.py); policies are read through the policy store.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_context import TopicContext
from magnetar.broker.topic_name import TopicName
from magnetar.storage import ManagedLedgerFactory

__all__ = ["TOPIC_DOMAINS", "TopicNotFoundError", "TopicOwnership", "TopicRegistry"]

log = logging.getLogger(__name__)

# Both of Pulsar's topic domains. magnetar keeps a non-persistent topic's messages as it keeps a
# persistent topic's; the domain still names the topic, and listings separate the two as Pulsar does.
TOPIC_DOMAINS = ("persistent", "non-persistent")


class TopicNotFoundError(Exception):
    server_error = "TopicNotFound"


class TopicOwnership(Protocol):
    """Whether this broker may serve a topic: in a cluster, only the owner of its bundle does
    (broker/cluster/service.py); a broker alone serves every topic and has none."""

    async def check_serving(self, name: TopicName) -> None:
        """Raises (ServiceNotReady) unless this broker may serve `name`."""
        ...


class TopicRegistry:
    def __init__(self, context: TopicContext, storage: ManagedLedgerFactory) -> None:
        self.context = context
        self.storage = storage
        # Set by the composition root for a broker of a cluster.
        self.ownership: TopicOwnership | None = None
        self.topics: dict[str, PersistentTopic] = {}
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        # Topics and namespaces whose deletion is under way: nobody may load (and so re-create) their
        # topics meanwhile, as clients closed by the deletion reconnect at once.
        self.deleting_topics: set[str] = set()
        self.deleting_namespaces: set[str] = set()

    # ---------------------------------------------------------------------------- lookups

    def partitions(self, name: TopicName) -> int:
        """Partitions of a partitioned topic, 0 for a plain topic or a partition of one."""
        if name.partition_index >= 0:
            return 0
        return self.context.metadata.partitioned_topic_metadata(str(name))

    def topic_exists(self, name: TopicName) -> bool:
        """A non-partitioned topic or a partition that is stored (a partitioned topic is not a topic)."""
        key = str(name)
        return key in self.topics or key in self.storage.topics()

    def namespace_exists(self, namespace: str) -> bool:
        metadata = self.context.metadata
        tenant = namespace.split("/", 1)[0]
        return tenant in metadata.tenants() and namespace in metadata.namespaces(tenant)

    def topics_of_namespace(self, namespace: str, domains: tuple[str, ...] = ("persistent",)) -> list[str]:
        """The namespace's topics in the given domains (partitions by their own names), as clients expect;
        persistent ones only unless asked, as GET_TOPICS_OF_NAMESPACE's default mode in Pulsar."""
        metadata = self.context.metadata
        prefixes = tuple(f"{domain}://{namespace}/" for domain in domains)
        names = {t for t in self.storage.topics() if t.startswith(prefixes)}
        for base in metadata.partitioned_topics(namespace):
            if base.startswith(prefixes):
                count = metadata.partitioned_topic_metadata(base)
                names.update(f"{base}-partition-{i}" for i in range(count))
        return sorted(names)

    # ---------------------------------------------------------------------------- loading

    async def get_topic(self, name: TopicName, create: bool = True, explicit: bool = False) -> PersistentTopic:
        """The loaded topic, loading it; a topic that does not exist is created when `create` and either
        auto-creation is on, the caller creates it `explicit`ly (the admin API), or it is a partition
        of a declared partitioned topic (which exists as soon as its partitioned topic does)."""
        key = str(name)
        if self.ownership is not None:
            await self.ownership.check_serving(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if key in self.deleting_topics or name.namespace_name in self.deleting_namespaces:
            raise TopicNotFoundError(f"Topic {key} is being deleted")
        loading = self._loading.get(key)
        if loading is not None:
            return await asyncio.shield(loading)
        exists = key in self.storage.topics()
        if not exists:
            self._check_creatable(name, create, explicit)
        future: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            topic = await self._load(name, exists)
            future.set_result(topic)
            return topic
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved here so a failure nobody else awaits is not logged twice
            raise
        finally:
            del self._loading[key]

    def _check_creatable(self, name: TopicName, create: bool, explicit: bool) -> None:
        key = str(name)
        if not create:
            raise TopicNotFoundError(f"Topic {key} does not exist")
        if not self.namespace_exists(name.namespace_name):
            raise TopicNotFoundError(f"Namespace {name.namespace_name} does not exist")
        if name.partition_index >= 0:
            if self.partitions(name.partitioned_base) == 0:
                raise TopicNotFoundError(f"{name.partitioned_base} is not a partitioned topic")
        elif not (explicit or self.context.config["allowAutoTopicCreation"]):
            raise TopicNotFoundError(f"Topic {key} does not exist")

    async def _load(self, name: TopicName, exists: bool) -> PersistentTopic:
        key = str(name)
        policies = self.context.policies
        started = self.context.clock.monotonic()
        ledger = await self.storage.open_ledger(key)
        # Before anything else runs: the ledger's first trim is already scheduled.
        ledger.set_retention(policies.retention_policy(name))
        topic = PersistentTopic(self.context, name, ledger)
        if topic.deduplication_enabled:
            await topic.restore_deduplication()
        # Before any producer appends: a new replicator's cursor starts at the end of the topic.
        await topic.check_replication(policies.replication_clusters(name))
        self.topics[key] = topic
        log.info(
            "[%s] %s topic in %.0f ms: %d entries, %d subscriptions, deduplication %s",
            key,
            "Loaded" if exists else "Created",
            (self.context.clock.monotonic() - started) * 1000,
            ledger.number_of_entries,
            len(topic.subscriptions),
            "enabled" if topic.deduplication_enabled else "disabled",
        )
        return topic

    async def load_replicated_topics(self) -> None:
        """Topics of replicating namespaces are loaded at start, so that what they had not replicated
        before a restart goes without waiting for a client to load them."""
        for key in self.storage.topics():
            name = TopicName.parse(key)
            if self.namespace_exists(name.namespace_name) and self.context.policies.replicates(name):
                try:
                    await self.get_topic(name, create=False)
                except Exception:
                    log.exception("[%s] Could not load the topic to resume its replication", key)

    async def apply_policies(self, loaded: list[PersistentTopic]) -> None:
        """Policies changed: loaded topics take their retention, deduplication and replication anew."""
        policies = self.context.policies
        for topic in loaded:
            topic.ledger.set_retention(policies.retention_policy(topic.name))
            await topic.set_deduplication(policies.deduplication_enabled(topic.name))
            await topic.check_replication(policies.replication_clusters(topic.name))

    # ---------------------------------------------------------------------- periodic checks

    async def check_replication_periodically(self) -> None:
        """replicationPolicyCheckDurationSeconds: replicators follow their topic's clusters."""
        clock, policies = self.context.clock, self.context.policies
        interval = float(self.context.config["replicationPolicyCheckDurationSeconds"])
        while True:
            await clock.sleep(interval)
            for topic in list(self.topics.values()):
                try:
                    await topic.check_replication(policies.replication_clusters(topic.name))
                except Exception:
                    log.exception("[%s] Replication check failed", topic.name)

    async def expire_periodically(self) -> None:
        """messageExpiryCheckIntervalInMinutes: subscriptions skip what outlived the topic's TTL."""
        clock, policies = self.context.clock, self.context.policies
        interval = float(self.context.config["messageExpiryCheckIntervalInMinutes"]) * 60
        while True:
            await clock.sleep(interval)
            now_ms = clock.time_ms()
            for topic in list(self.topics.values()):
                ttl = policies.message_ttl_seconds(topic.name)
                if ttl > 0:
                    try:
                        await topic.expire_messages(ttl, now_ms)
                    except Exception:
                        log.exception("message expiry failed on %s", topic.name)

    async def compact_periodically(self) -> None:
        """brokerServiceCompactionMonitorIntervalInSeconds: topics past their threshold are compacted."""
        clock, policies = self.context.clock, self.context.policies
        interval = float(self.context.config["brokerServiceCompactionMonitorIntervalInSeconds"])
        while True:
            await clock.sleep(interval)
            for topic in list(self.topics.values()):
                try:
                    topic.compaction.check(policies.compaction_threshold(topic.name))
                except Exception:
                    log.exception("[%s] Compaction check failed", topic.name)

    async def close(self) -> None:
        """The broker stops: compactions and replicators stop; ledgers stay for storage to close."""
        for topic in list(self.topics.values()):
            topic.compaction.cancel()
        for topic in list(self.topics.values()):
            await topic.stop_replicators()
