"""What LOOKUP and PARTITIONED_METADATA answer: which broker serves a topic, and how many partitions it has.

Owns: the URLs a lookup answers (the listener a client names, else the internal one; Pulsar answers a
name it does not have with ServiceNotReady), and the partition count a client is told, creating a
partitioned topic when `allowAutoTopicCreationType=partitioned` says so. A broker alone serves every
topic, so a lookup answers Connect to itself; a broker of a cluster answers what its cluster service
decides (broker/cluster/service.py: Connect to the owner, or Redirect).
Must not touch: the wire (the lookup commands write the answers) or loaded topics.
"""

from __future__ import annotations

import logging

from magnetar.broker.cluster.service import ClusterService, LookupResult
from magnetar.broker.config import BrokerConfig
from magnetar.broker.registry import TopicRegistry
from magnetar.broker.topic_name import TopicName

__all__ = ["Lookup"]

log = logging.getLogger(__name__)


class Lookup:
    def __init__(self, config: BrokerConfig, registry: TopicRegistry, cluster: ClusterService | None = None) -> None:
        self._config = config
        self._registry = registry
        self.cluster = cluster

    async def lookup(self, name: TopicName, listener_name: str, authoritative: bool) -> LookupResult:
        """Which broker serves `name`, for a client of `listener_name`. Raises UnknownListener, and in a
        cluster BundleNotOwnedError (ServiceNotReady) when no broker can take it now."""
        if self.cluster is not None:
            return await self.cluster.lookup(name, authoritative, listener_name.strip())
        url, url_tls = self.broker_urls(listener_name)
        config = self._config
        return LookupResult(
            url, url_tls, config.advertised_web_url, config.advertised_web_url_tls, redirect=False, authoritative=True
        )

    def broker_urls(self, listener_name: str) -> tuple[str, str | None]:
        """The pulsar:// and pulsar+ssl:// URLs for a client of `listener_name` (Java's listenerName, Go's
        ListenerName, Python's listener_name; empty for none). Raises UnknownListener."""
        return self._config.lookup_urls(listener_name.strip())

    async def partitions(self, name: TopicName) -> int:
        """PARTITIONED_METADATA: auto-creates a partitioned topic when configured to."""
        registry = self._registry
        partitions = registry.partitions(name)
        if partitions or name.partition_index >= 0:
            return partitions
        config = self._config
        if (
            config["allowAutoTopicCreation"]
            and config["allowAutoTopicCreationType"] == "partitioned"
            and str(name) not in registry.storage.topics()
        ):
            partitions = int(config["defaultNumPartitions"])
            await registry.context.metadata.create_partitioned_topic(str(name), partitions)
            log.info("[%s] Created partitioned topic with %d partitions (auto-created)", name, partitions)
        return partitions
