"""A new cluster's metadata, as Pulsar's PulsarClusterMetadataSetup (`initialize-cluster-metadata`) writes it.

Owns: what a cluster needs before its first broker starts: in the configuration store the cluster's
ClusterData (`/admin/clusters/{cluster}`), the tenants `public` and `pulsar` allowed on it, the namespaces
`public/default` and `pulsar/system` (Pulsar's Policies JSON with their bundles and replication cluster);
in the metadata store `/namespace` and, unless the cluster uses an existing BookKeeper, BookKeeper's
`/ledgers` layout. Existing nodes are kept, a tenant or namespace gains the cluster, as Pulsar's does.
Must not touch: brokers, ownership.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from magnetar.broker.cluster.bundles import default_boundaries
from magnetar.metadata.store import MetadataStore

__all__ = ["ClusterMetadata", "initialize_cluster_metadata"]

# BookKeeper's ledger layout: format version 2, the hierarchical ledger manager, version 1.
_BOOKKEEPER_LAYOUT = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n"
# PulsarClusterMetadataSetup's --default-namespace-bundle-number.
DEFAULT_NAMESPACE_BUNDLES = 16


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    cluster: str
    web_service_url: str
    broker_service_url: str
    web_service_url_tls: str | None = None
    broker_service_url_tls: str | None = None
    existing_bk_metadata_service_uri: str | None = None
    default_namespace_bundles: int = DEFAULT_NAMESPACE_BUNDLES


async def initialize_cluster_metadata(
    setup: ClusterMetadata, metadata_store: MetadataStore, configuration_store: MetadataStore
) -> None:
    cluster_data = {
        "serviceUrl": setup.web_service_url,
        "serviceUrlTls": setup.web_service_url_tls,
        "brokerServiceUrl": setup.broker_service_url,
        "brokerServiceUrlTls": setup.broker_service_url_tls,
    }
    await _create_if_absent(metadata_store, "/namespace", b"")
    if setup.existing_bk_metadata_service_uri is None:
        await _create_bookkeeper_layout(metadata_store)
    await _create_if_absent(configuration_store, "/admin/policies", b"")
    await configuration_store.put(f"/admin/clusters/{setup.cluster}", _json(cluster_data))
    for tenant in ("public", "pulsar"):
        await _add_cluster(configuration_store, f"/admin/policies/{tenant}", "allowedClusters", setup, _tenant)
    for namespace in ("public/default", "pulsar/system"):
        await _add_cluster(
            configuration_store, f"/admin/policies/{namespace}", "replication_clusters", setup, _policies
        )


async def _create_bookkeeper_layout(store: MetadataStore) -> None:
    for path in ("/ledgers", "/ledgers/available", "/ledgers/available/readonly"):
        await _create_if_absent(store, path, b"")
    await _create_if_absent(store, "/ledgers/LAYOUT", _BOOKKEEPER_LAYOUT)
    await _create_if_absent(store, "/ledgers/INSTANCEID", str(uuid.uuid4()).encode())


def _tenant(setup: ClusterMetadata) -> dict[str, Any]:
    return {"adminRoles": [], "allowedClusters": [setup.cluster]}


def _policies(setup: ClusterMetadata) -> dict[str, Any]:
    boundaries = default_boundaries(setup.default_namespace_bundles)
    return {
        "bundles": {"boundaries": [f"0x{b:08x}" for b in boundaries], "numBundles": len(boundaries) - 1},
        "replication_clusters": [setup.cluster],
    }


async def _add_cluster(store: MetadataStore, path: str, key: str, setup: ClusterMetadata, new: Any) -> None:
    """Create the node with `new(setup)`, or add the cluster to its list `key` when it lacks it."""
    found = await store.get(path)
    if found is None:
        await store.put(path, _json(new(setup)), -1)
        return
    data = json.loads(found.value)
    if setup.cluster not in data.get(key, []):
        data[key] = [*data.get(key, []), setup.cluster]
        await store.put(path, _json(data), found.stat.version)


async def _create_if_absent(store: MetadataStore, path: str, value: bytes) -> None:
    if await store.exists(path) is None:
        await store.put(path, value, -1)


def _json(data: dict[str, Any]) -> bytes:
    return json.dumps(data).encode()
