"""Namespace and topic policies, and which one applies to a topic.

Owns: reading and writing the policy records (`/admin/policies/{tenant}/{namespace}` and
`/topic-policies/{tenant}/{namespace}/{domain}/{topic}`), and Pulsar's precedence for each policy: a
topic's own policy, else its namespace's, else the broker's setting.
Must not touch: loaded topics (admin operations apply a change to them, broker/operations.py) or the wire.
"""

from __future__ import annotations

from typing import Any

from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic_name import TopicName
from magnetar.storage.metadata import BadVersionError, MetadataStore

__all__ = ["PolicyStore", "topic_policies_path"]


def topic_policies_path(name: TopicName) -> str:
    return f"/topic-policies/{name.tenant}/{name.namespace}/{name.domain}/{name.local}"


class PolicyStore:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self._config = config
        self._metadata = metadata
        self._subscription_types_enabled = config.subscription_types_enabled()

    def namespace_policy(self, namespace: str, key: str) -> Any:
        """One policy of a namespace, None when it is not set (or the namespace has no record)."""
        record = self._metadata.get(f"/admin/policies/{namespace}")
        return None if record is None else record[0].get(key)

    def topic_policies(self, name: TopicName) -> dict[str, Any]:
        """The topic-level policies of a topic (a partition has its partitioned topic's)."""
        record = self._metadata.get(topic_policies_path(name.partitioned_base))
        return {} if record is None else dict(record[0])

    # ----------------------------------------------------------------------- effective values

    def replication_clusters(self, name: TopicName) -> list[str]:
        """The clusters a topic replicates between: its own policy, else its namespace's."""
        clusters = self.topic_policies(name).get("replicationClusters")
        if clusters is None:
            clusters = self.namespace_policy(name.namespace_name, "replication_clusters")
        return list(clusters or [])

    def replicates(self, name: TopicName) -> bool:
        local = self._config["clusterName"]
        return any(cluster != local for cluster in self.replication_clusters(name))

    def deduplication_enabled(self, name: TopicName) -> bool:
        enabled = self.topic_policies(name).get("deduplicationEnabled")
        if enabled is None:
            enabled = self.namespace_policy(name.namespace_name, "deduplicationEnabled")
        if enabled is None:
            enabled = self._config["brokerDeduplicationEnabled"]
        return bool(enabled)

    def retention_policy(self, name: TopicName) -> tuple[int, int] | None:
        """The namespace's retention as (minutes, megabytes), None for the broker's defaults."""
        retention = self.namespace_policy(name.namespace_name, "retention_policies")
        if retention is None:
            return None
        return int(retention["retentionTimeInMinutes"]), int(retention["retentionSizeInMB"])

    def message_ttl_seconds(self, name: TopicName) -> int:
        """The namespace's message_ttl_in_seconds policy, else ttlDurationDefaultInSeconds."""
        ttl = self.namespace_policy(name.namespace_name, "message_ttl_in_seconds")
        return int(ttl) if ttl is not None else int(self._config["ttlDurationDefaultInSeconds"])

    def subscription_type_allowed(self, name: TopicName, subscription_type: str) -> bool:
        """subscriptionTypesEnabled: the namespace's set when it has one, else the broker's."""
        enabled = self.namespace_policy(name.namespace_name, "subscription_types_enabled")
        return subscription_type in (set(enabled) if enabled else self._subscription_types_enabled)

    def compaction_threshold(self, name: TopicName) -> int:
        """The topic's compactionThreshold, else its namespace's compaction_threshold, else
        brokerServiceCompactionThresholdInBytes (PersistentTopic.checkCompaction); 0 turns it off."""
        threshold = self.topic_policies(name).get("compactionThreshold")
        if threshold is None:
            threshold = self.namespace_policy(name.namespace_name, "compaction_threshold")
        if threshold is None:
            threshold = self._config["brokerServiceCompactionThresholdInBytes"]
        return int(threshold)

    # ---------------------------------------------------------------------------------- writes

    async def set_namespace_policies(self, namespace: str, changes: dict[str, Any]) -> None:
        """Change some of a namespace's policies (a value of None removes one). Raises NotFoundError when
        the namespace does not exist."""
        while True:
            policies = dict(self._metadata.namespace_policies(namespace))
            for key, value in changes.items():
                if value is None:
                    policies.pop(key, None)
                else:
                    policies[key] = value
            try:
                await self._metadata.set_namespace_policies(namespace, policies)
                return
            except BadVersionError:
                continue  # another change of this namespace's policies came first: apply ours to it

    async def set_topic_policies(self, name: TopicName, changes: dict[str, Any]) -> None:
        """Change a topic's own policies (None removes one); a partitioned topic's are its partitions'."""
        path = topic_policies_path(name)
        policies = self.topic_policies(name)
        for key, value in changes.items():
            if value is None:
                policies.pop(key, None)
            else:
                policies[key] = value
        if policies:
            await self._metadata.put(path, policies)
        elif self._metadata.get(path) is not None:
            await self._metadata.delete(path)
