"""The admin API's operations that change the broker: clusters, tenants, namespaces and their policies,
creating, deleting and unloading topics.

Owns: carrying an operation out once the admin API checked its preconditions (existence, names,
bodies): the metadata it writes, the loaded topics it closes or deletes, applying changed policies
(changed here or by another broker) to loaded topics, and sending a partition count to the other
clusters of a replicating namespace.
Must not touch: HTTP (admin/), the wire, or ordering.
"""

from __future__ import annotations

import logging
from typing import Any

from magnetar.broker.figures import TopicCounters, topic_counters
from magnetar.broker.policies import PolicyStore, topic_policies_path
from magnetar.broker.registry import TOPIC_DOMAINS, TopicRegistry
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.tasks import BackgroundTasks
from magnetar.broker.topic import PersistentTopic, delayed_delivery_path
from magnetar.broker.topic_name import TopicName
from magnetar.replication.remote_admin import RemoteAdminError, ensure_partitioned_topic
from magnetar.storage.metadata import NotFoundError

__all__ = ["AdminOperations", "NamespaceNotEmptyError", "TopicBusyError"]

log = logging.getLogger(__name__)


class TopicBusyError(Exception):
    """A topic with producers or consumers cannot be deleted without force."""


class NamespaceNotEmptyError(Exception):
    """A namespace (or a tenant's namespaces) still holds topics and is not deleted without force."""


class AdminOperations:
    def __init__(self, registry: TopicRegistry, schemas: SchemaRegistry, tasks: BackgroundTasks) -> None:
        self._registry = registry
        self._schemas = schemas
        self._tasks = tasks
        context = registry.context
        self._metadata = context.metadata
        self._policies: PolicyStore = context.policies
        self._config = context.config
        self._clusters = context.clusters

    # ------------------------------------------------------------------------------ policies

    async def set_namespace_policies(self, namespace: str, changes: dict[str, Any]) -> None:
        """Change some of a namespace's policies (None removes one) and apply them to its loaded topics.
        Raises NotFoundError when the namespace does not exist."""
        await self._policies.set_namespace_policies(namespace, changes)
        loaded = [t for t in self._registry.topics.values() if t.name.namespace_name == namespace]
        await self._registry.apply_policies(loaded)

    async def set_topic_policies(self, name: TopicName, changes: dict[str, Any]) -> None:
        """Change a topic's own policies (None removes one), for it and, if partitioned, its partitions."""
        await self._policies.set_topic_policies(name, changes)
        loaded = [t for t in self._registry.topics.values() if t.name.partitioned_base == name]
        await self._registry.apply_policies(loaded)

    def record_changed(self, path: str) -> None:
        """Another broker of the cluster changed a record: the loaded topics whose namespace's or own
        policies it holds take them, as after a change made here."""
        parts = path.split("/")
        if len(parts) == 5 and parts[1] == "admin" and parts[2] == "policies":
            namespace = f"{parts[3]}/{parts[4]}"
            loaded = [t for t in self._registry.topics.values() if t.name.namespace_name == namespace]
        elif len(parts) == 6 and parts[1] == "topic-policies":
            base = TopicName.parse(f"{parts[4]}://{parts[2]}/{parts[3]}/{parts[5]}")
            loaded = [t for t in self._registry.topics.values() if t.name.partitioned_base == base]
        else:
            return
        if loaded:
            self._tasks.spawn(self._registry.apply_policies(loaded), name=f"policies of {path}")

    # ------------------------------------------------------------------------------ clusters

    async def create_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        await self._metadata.create_cluster(cluster, data)

    async def update_cluster(self, cluster: str, data: dict[str, Any]) -> None:
        await self._replace(f"/admin/clusters/{cluster}", data)

    async def delete_cluster(self, cluster: str) -> None:
        """Forget a cluster's registration (NotFoundError when there is none). What names it stays, as in
        Pulsar: a replicator to it finds no URLs the next time it connects."""
        await self._metadata.delete_cluster(cluster)

    async def _replace(self, path: str, data: dict[str, Any]) -> None:
        record = self._metadata.get(path)
        if record is None:
            raise NotFoundError(f"{path}: not found")
        await self._metadata.put(path, data, expected_version=record[1])

    # ------------------------------------------------------------------- tenants, namespaces

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self._metadata.create_tenant(tenant, info)

    async def update_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self._replace(f"/admin/policies/{tenant}", info)

    async def delete_tenant(self, tenant: str, force: bool) -> None:
        namespaces = self._metadata.namespaces(tenant)
        if namespaces and not force:
            raise NamespaceNotEmptyError("The tenant still has active namespaces")
        for namespace in namespaces:
            await self.delete_namespace(namespace, force=True)
        await self._metadata.delete_tenant(tenant)

    async def create_namespace(self, namespace: str, policies: dict[str, Any]) -> None:
        await self._metadata.create_namespace(namespace, policies)

    async def delete_namespace(self, namespace: str, force: bool) -> None:
        registry = self._registry
        partitioned = self._metadata.partitioned_topics(namespace)
        topics = registry.topics_of_namespace(namespace, TOPIC_DOMAINS)
        if (partitioned or topics) and not force:
            raise NamespaceNotEmptyError("Cannot delete non empty namespace")
        registry.deleting_namespaces.add(namespace)
        try:
            for base in partitioned:
                await self.delete_partitioned_topic(TopicName.parse(base), force=True)
            for topic in registry.topics_of_namespace(namespace, TOPIC_DOMAINS):
                await self.delete_topic(TopicName.parse(topic), force=True)
            await self._metadata.delete_namespace(namespace)
        finally:
            registry.deleting_namespaces.discard(namespace)

    # -------------------------------------------------------------------------------- topics

    async def create_topic(self, name: TopicName) -> PersistentTopic:
        """A non-partitioned topic (or a partition), created now rather than on first use."""
        return await self._registry.get_topic(name, create=True, explicit=True)

    async def delete_topic(self, name: TopicName, force: bool) -> None:
        """Delete a topic's entries, cursors and records; with `force` its clients are closed first
        (they may re-create it when they reconnect, as in Pulsar), without it a topic in use is refused."""
        registry, key = self._registry, str(name)
        topic = registry.topics.get(key)
        if topic is not None and topic.has_clients() and not force:
            raise TopicBusyError("Topic has active producers/subscriptions")
        registry.deleting_topics.add(key)
        try:
            if topic is not None:
                topic.close_clients()
                del registry.topics[key]
                await topic.stop_replicators()
            for path in (delayed_delivery_path(name), topic_policies_path(name)):
                if self._metadata.get(path) is not None:
                    await self._metadata.delete(path)
            if name.partition_index < 0:
                # A partition's schema is its partitioned topic's, deleted with that.
                await self._schemas.delete_storage(name)
            if key in registry.storage.topics():
                await registry.storage.delete_ledger(key)
            log.info("[%s] Deleted topic%s", key, " (force)" if force else "")
        finally:
            registry.deleting_topics.discard(key)

    async def create_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        await self._metadata.create_partitioned_topic(str(name), partitions)
        log.info("[%s] Created partitioned topic with %d partitions", name, partitions)
        self._propagate_partitions(name, partitions)

    async def update_partitioned_topic(self, name: TopicName, partitions: int) -> None:
        """Raise the number of partitions. The number it has already changes nothing here but still goes
        to the other clusters, as Pulsar's update does: one that has fewer gets them."""
        if partitions != self._registry.partitions(name):
            await self._metadata.update_partitioned_topic(str(name), partitions)
            log.info("[%s] Updated partitioned topic to %d partitions", name, partitions)
        self._propagate_partitions(name, partitions)

    def _propagate_partitions(self, name: TopicName, partitions: int) -> None:
        """A partitioned topic of a replicating namespace gets as many partitions in the other clusters
        (in the background: a cluster that is away gets them when its replicators connect)."""
        local = self._config["clusterName"]
        for cluster in self._policies.replication_clusters(name):
            admin = self._clusters.admin_service_url(cluster) if cluster != local else None
            if admin:
                self._tasks.spawn(
                    self._ensure_partitions(cluster, admin, name, partitions), f"partitions of {name} to {cluster}"
                )

    async def _ensure_partitions(self, cluster: str, admin: str, name: TopicName, partitions: int) -> None:
        try:
            await ensure_partitioned_topic(admin, str(name), partitions, self._clusters.security(cluster))
        except (RemoteAdminError, ValueError) as error:
            log.warning("[%s] Could not give cluster %s %d partitions now: %s", name, cluster, partitions, error)

    async def delete_partitioned_topic(self, name: TopicName, force: bool) -> None:
        """Delete the partitioned topic and every partition (none when some are in use and not `force`).
        The metadata goes first, as Pulsar marks it deleted first: clients closed by the deletion then
        cannot re-create a partition when they reconnect."""
        registry = self._registry
        partitions = [name.partition(i) for i in range(registry.partitions(name))]
        if not force:
            for partition in partitions:
                topic = registry.topics.get(str(partition))
                if topic is not None and topic.has_clients():
                    raise TopicBusyError("Topic has active producers/subscriptions")
        await self._metadata.delete_partitioned_topic(str(name))
        if self._metadata.get(topic_policies_path(name)) is not None:
            await self._metadata.delete(topic_policies_path(name))
        await self._schemas.delete_storage(name)
        for partition in partitions:
            if registry.topic_exists(partition):
                await self.delete_topic(partition, force=True)
        log.info("[%s] Deleted partitioned topic with %d partitions", name, len(partitions))

    def loaded_topics(self) -> list[TopicName]:
        return [topic.name for topic in self._registry.topics.values()]

    def topic_counters(self) -> dict[TopicName, TopicCounters]:
        """Each loaded topic's counters, for the load report."""
        return {topic.name: topic_counters(topic) for topic in self._registry.topics.values()}

    async def unload_topic(self, name: TopicName) -> None:
        """Close a loaded topic: its clients reconnect and load it again from storage, as after a
        restart. Readers' cursors go with it (they are never persisted)."""
        topic = self._registry.topics.pop(str(name), None)
        if topic is None:
            return
        topic.close_clients()
        await topic.stop_replicators()
        for subscription in list(topic.subscriptions.values()):
            if not subscription.durable:
                await topic.ledger.delete_cursor(subscription.name)
        await self._registry.storage.close_ledger(str(name))
        log.info("[%s] Unloaded topic", name)
