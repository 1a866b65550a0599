"""The broker service: storage, topics, lookups and partition metadata for every connection.

Owns: opening the data directory, finding or creating topics (auto-creation, partitioned topics served
as `-partition-N`), what a lookup answers, the topics of a namespace, and the clean shutdown of storage.
Must not touch: the wire (connections) or ordering (the core).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_name import TopicName
from magnetar.core.settings import DispatcherSettings
from magnetar.storage import ManagedLedgerFactory

__all__ = ["BrokerService", "TopicNotFoundError"]

log = logging.getLogger(__name__)


class TopicNotFoundError(Exception):
    server_error = "TopicNotFound"


class BrokerService:
    def __init__(self, config: BrokerConfig, data_dir: str | Path) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        self.dispatcher_settings: DispatcherSettings = config.dispatcher_settings()
        self.storage: ManagedLedgerFactory | None = None
        self.topics: dict[str, PersistentTopic] = {}
        self._loading: dict[str, asyncio.Future[PersistentTopic]] = {}
        self.subscription_types_enabled = config.subscription_types_enabled()
        self._expiry: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.storage = await ManagedLedgerFactory.open(str(self.data_dir), self.config.storage_config())
        await self.storage.metadata.ensure_defaults(self.config["clusterName"])
        self._expiry = asyncio.get_running_loop().create_task(self._expire_periodically())

    async def _expire_periodically(self) -> None:
        interval = float(self.config["messageExpiryCheckIntervalInMinutes"]) * 60
        while True:
            await asyncio.sleep(interval)
            now_ms = int(time.time() * 1000)
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
        except Exception:  # a namespace without a policy record uses the broker default
            policies = {}
        ttl = policies.get("message_ttl_in_seconds")
        return int(ttl) if ttl is not None else int(self.config["ttlDurationDefaultInSeconds"])

    async def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
        if self.storage is not None:
            await self.storage.flush_cursors()
            await self.storage.close()
            self.storage = None

    @property
    def metadata(self):  # noqa: ANN201 - the storage's MetadataStore
        assert self.storage is not None
        return self.storage.metadata

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
            and str(name) not in self.storage.topics()
        ):
            partitions = int(self.config["defaultNumPartitions"])
            await self.metadata.create_partitioned_topic(str(name), partitions)
        return partitions

    def namespace_exists(self, namespace: str) -> bool:
        tenant = namespace.split("/", 1)[0]
        return tenant in self.metadata.tenants() and namespace in self.metadata.namespaces(tenant)

    async def get_topic(self, name: TopicName, create: bool = True) -> PersistentTopic:
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        loading = self._loading.get(key)
        if loading is not None:
            return await asyncio.shield(loading)
        exists = key in self.storage.topics()
        if not exists:
            if not (create and self.config["allowAutoTopicCreation"]):
                raise TopicNotFoundError(f"Topic {key} does not exist")
            if not self.namespace_exists(name.namespace_name):
                raise TopicNotFoundError(f"Namespace {name.namespace_name} does not exist")
            if self.partitions(name.partitioned_base) == 0 and name.partition_index >= 0:
                raise TopicNotFoundError(f"{name.partitioned_base} is not a partitioned topic")
        future: asyncio.Future[PersistentTopic] = asyncio.get_running_loop().create_future()
        self._loading[key] = future
        try:
            ledger = await self.storage.open_ledger(key)
            topic = PersistentTopic(self, name, ledger)
            if self.config["brokerDeduplicationEnabled"]:
                await topic.restore_deduplication()
            self.topics[key] = topic
            future.set_result(topic)
            return topic
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved here so a failure nobody else awaits is not logged twice
            raise
        finally:
            del self._loading[key]

    def topics_of_namespace(self, namespace: str) -> list[str]:
        """Every persistent topic of the namespace (partitions by their own names), as clients expect."""
        prefix = f"persistent://{namespace}/"
        names = {t for t in self.storage.topics() if t.startswith(prefix)}
        for base in self.metadata.partitioned_topics(namespace):
            count = self.metadata.partitioned_topic_metadata(base)
            names.update(f"{base}-partition-{i}" for i in range(count))
        return sorted(names)
