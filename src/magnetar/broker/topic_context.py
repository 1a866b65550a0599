"""What a topic and everything it owns (subscriptions, producers, consumers, replicators, compaction) may
reach of the broker: a narrow, read-mostly set of parts, built once by the composition root
(broker/root.py) and shared by every topic.

Owns: nothing but the references. Must not touch: the topic registry, connections or admin operations:
a topic never looks up another topic or the broker around it.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.broker.config import BrokerConfig
from magnetar.broker.policies import PolicyStore
from magnetar.broker.tasks import BackgroundTasks
from magnetar.clock import Clock
from magnetar.core.settings import DispatcherSettings
from magnetar.replication.remote_cluster import RemoteClusters
from magnetar.storage.metadata import MetadataStore

__all__ = ["TopicContext"]


@dataclass(frozen=True, slots=True)
class TopicContext:
    config: BrokerConfig
    clock: Clock
    metadata: MetadataStore
    policies: PolicyStore
    clusters: RemoteClusters
    dispatcher_settings: DispatcherSettings
    # Work a topic starts and nobody awaits (a metadata write, a reader's cleanup): owned here, so that
    # its failure is logged and the broker's shutdown cancels it.
    tasks: BackgroundTasks
