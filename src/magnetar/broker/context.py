"""Everything a connection's commands and the admin API reach of a broker: its parts, built once by the
composition root (broker/root.py).

Owns: nothing but the references. Each part owns its own decisions: topics loaded (registry), policies
and their precedence (policies), what an admin operation changes (operations), what a lookup answers
(lookup), the cluster a broker belongs to (cluster), schemas, who a client is and what it may do
(authentication, authorization), how many bytes of SENDs the broker holds unanswered (publish_buffer)
and how fast it reads them (publish_rate).
Must not touch: sockets (the broker's listeners) or ordering.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from magnetar.broker.auth import AuthenticationService
from magnetar.broker.authorization import AuthorizationService
from magnetar.broker.cluster.service import ClusterService
from magnetar.broker.config import BrokerConfig
from magnetar.broker.lookup import Lookup
from magnetar.broker.operations import AdminOperations
from magnetar.broker.peer import ConnectionCount
from magnetar.broker.policies import PolicyStore
from magnetar.broker.publish_limits import PublishBuffer, PublishRate
from magnetar.broker.registry import TopicRegistry
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.topic_context import TopicContext
from magnetar.clock import Clock
from magnetar.replication.remote_cluster import RemoteClusters
from magnetar.storage import ManagedLedgerFactory
from magnetar.storage.metadata import MetadataStore

__all__ = ["BrokerContext"]


@dataclass(frozen=True, slots=True)
class BrokerContext:
    config: BrokerConfig
    clock: Clock
    data_dir: Path
    storage: ManagedLedgerFactory
    metadata: MetadataStore
    policies: PolicyStore
    clusters: RemoteClusters
    schemas: SchemaRegistry
    registry: TopicRegistry
    lookup: Lookup
    operations: AdminOperations
    authentication: AuthenticationService
    authorization: AuthorizationService
    topics: TopicContext
    connections: ConnectionCount
    publish_buffer: PublishBuffer
    publish_rate: PublishRate
    # A broker of a cluster: its bundles, their owners, the brokers and the leader; None for a broker alone.
    cluster: ClusterService | None = None
