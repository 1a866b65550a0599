"""The composition root: the one function that builds a broker from its configuration.

Owns: which parts a broker is made of and how they are wired: one clock, the storage (and its metadata
store) with its engine, the policy store, the remote clusters, the schema registry, the topics'
context, the topic registry, lookup, admin operations, authentication and authorization. `magnetar
standalone` (cli/standalone.py), the tests and the shell simulator all build a broker here, each passing
its own parts: the simulator its virtual clock and its event-loop storage engine.
Must not touch: what any part decides; a part never builds another.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from magnetar.broker.auth import AuthenticationService
from magnetar.broker.authorization import AuthorizationService
from magnetar.broker.cluster.service import ClusterService
from magnetar.broker.cluster.store import open_metadata_store
from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.context import BrokerContext
from magnetar.broker.lookup import Lookup
from magnetar.broker.operations import AdminOperations
from magnetar.broker.peer import ConnectionCount
from magnetar.broker.policies import PolicyStore
from magnetar.broker.publish_limits import PublishBuffer, PublishRate
from magnetar.broker.registry import TopicRegistry
from magnetar.broker.schemas import SchemaRegistry
from magnetar.broker.server import Broker
from magnetar.broker.tasks import BackgroundTasks
from magnetar.broker.topic_context import TopicContext
from magnetar.clock import Clock, LoopClock
from magnetar.metadata.store import MetadataStore
from magnetar.replication.remote_cluster import RemoteClusters
from magnetar.storage import ManagedLedgerFactory
from magnetar.storage.bookkeeper_engine import BookKeeperEngine
from magnetar.storage.engine import StorageEngine

__all__ = ["open_broker"]


async def open_broker(
    config: BrokerConfig,
    data_dir: str | Path,
    *,
    clock: Clock | None = None,
    storage_engine: StorageEngine | None = None,
    create_defaults: bool = True,
    metadata_store: MetadataStore | None = None,
    configuration_store: MetadataStore | None = None,
) -> Broker:
    """A broker on `data_dir`, its storage open and its periodic checks running, its listeners not yet
    bound (`Broker.listen`). `clock` is the event loop's with the system's wall clock unless given;
    `storage_engine` the threaded SQLite engine unless given (any `StorageEngine`: the simulator's, BookKeeper's). The standalone's cluster, tenant and
    namespace are created now unless `create_defaults` is false: `magnetar standalone` creates them
    once its listeners serve (`Broker.create_defaults`), as Pulsar's standalone does. Raises what
    opening storage raises (a data directory another process holds, a damaged one) and ConfigError for
    settings it cannot use.

    `metadata_store` makes the broker one of a cluster (docs/cluster.md): the store its bundles' owners,
    the brokers and the leader are kept in; without one, `metadataStoreUrl` names it, and when that is
    empty the broker is alone and owns every topic. `configuration_store` (else
    `configurationMetadataStoreUrl`, else the metadata store) holds the namespaces' policies. A broker of a
    cluster joins it once its listeners are bound (`Broker.join_cluster`). With `bookkeeperMetadataServiceUri`
    (and a metadata store) its topics are kept on those bookies, their ledger lists and cursors in the
    metadata store, every write of them checked against this broker's ownership of the topic's bundle."""
    clock = clock or LoopClock(asyncio.get_running_loop())
    data_dir = Path(data_dir)
    # Before storage opens: settings it cannot use are refused without touching the data directory.
    authentication = AuthenticationService(config)
    opened_store: MetadataStore | None = None
    if metadata_store is None and config["metadataStoreUrl"]:
        metadata_store = opened_store = await open_metadata_store(
            config["metadataStoreUrl"],
            session_timeout_ms=config["metadataStoreSessionTimeoutMillis"],
            time_ms=clock.time_ms,
            data_dir=data_dir,
        )
    if metadata_store is not None and configuration_store is None and config["configurationMetadataStoreUrl"]:
        configuration_store = await open_metadata_store(
            config["configurationMetadataStoreUrl"],
            session_timeout_ms=config["metadataStoreSessionTimeoutMillis"],
            time_ms=clock.time_ms,
            data_dir=data_dir,
        )
    storage_config = config.storage_config()
    if storage_engine is None and storage_config.bookkeeperMetadataServiceUri:
        if metadata_store is None:
            raise ConfigError(
                "bookkeeperMetadataServiceUri needs metadataStoreUrl: the managed ledgers' lists and cursors "
                "are kept in the metadata store"
            )
        try:
            storage_engine = await BookKeeperEngine.connect(
                storage_config, metadata_store, clock, owns_store=metadata_store is opened_store
            )
        except ValueError as failure:
            raise ConfigError(f"bookkeeperMetadataServiceUri: {failure}") from None
    bookkeeper_engine = storage_engine if isinstance(storage_engine, BookKeeperEngine) else None
    data_dir.mkdir(parents=True, exist_ok=True)
    storage = await ManagedLedgerFactory.open(str(data_dir), storage_config, storage_engine, clock)
    try:
        metadata = storage.metadata
        policies = PolicyStore(config, metadata)
        clusters = RemoteClusters(metadata, config)
        schemas = SchemaRegistry(config, metadata, policies, clock)
        await schemas.import_legacy_records()
        tasks = BackgroundTasks("broker")
        topics = TopicContext(config, clock, metadata, policies, clusters, config.dispatcher_settings(), tasks)
        registry = TopicRegistry(topics, storage)
        operations = AdminOperations(registry, schemas, tasks)
        metadata.add_listener(operations.record_changed)
        cluster = None
        if metadata_store is not None:
            cluster = ClusterService(config, clock, metadata_store, operations, tasks.spawn, configuration_store)
            registry.ownership = cluster
            if bookkeeper_engine is not None:
                bookkeeper_engine.checks = cluster.storage_checks
        context = BrokerContext(
            config=config,
            clock=clock,
            data_dir=data_dir,
            storage=storage,
            metadata=metadata,
            policies=policies,
            clusters=clusters,
            schemas=schemas,
            registry=registry,
            lookup=Lookup(config, registry, cluster),
            operations=operations,
            authentication=authentication,
            authorization=AuthorizationService(config, metadata),
            topics=topics,
            connections=ConnectionCount(),
            publish_buffer=PublishBuffer(config["maxMessagePublishBufferSizeInMB"]),
            publish_rate=PublishRate(
                clock,
                config["brokerPublisherThrottlingMaxMessageRate"],
                config["brokerPublisherThrottlingMaxByteRate"],
            ),
            cluster=cluster,
        )
        broker = Broker(context, tasks)
        if create_defaults:
            await broker.create_defaults()
        await broker.open()
    except BaseException:
        await storage.close()
        raise
    return broker
