"""The cluster's configuration keys and a new cluster's metadata (initialize-cluster-metadata)."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.broker.cluster.bundles import BundleDirectory
from magnetar.broker.cluster.setup import ClusterMetadata, initialize_cluster_metadata
from magnetar.broker.cluster.store import open_metadata_store
from magnetar.broker.config import ConfigError, load_config
from magnetar.metadata.memory import MemoryMetadataServer


def test_cluster_keys_have_pulsars_defaults() -> None:
    config = load_config()
    assert config["metadataStoreUrl"] == ""
    assert config["metadataStoreSessionTimeoutMillis"] == 30000
    assert config["defaultNumberOfNamespaceBundles"] == 4
    assert config["loadManagerClassName"] == "org.apache.pulsar.broker.loadbalance.impl.ModularLoadManagerImpl"


def test_the_deprecated_zookeeper_keys_name_the_stores_and_warn() -> None:
    config = load_config(overrides={"zookeeperServers": "zk1:2181", "configurationStoreServers": "zk2:2184"})
    assert config["metadataStoreUrl"] == "zk:zk1:2181"
    assert config["configurationMetadataStoreUrl"] == "zk:zk2:2184"
    assert config.warnings == (
        "zookeeperServers is deprecated: use metadataStoreUrl=zk:zk1:2181",
        "configurationStoreServers is deprecated: use configurationMetadataStoreUrl=zk:zk2:2184",
    )
    # The URL key wins over the deprecated one.
    both = load_config(overrides={"zookeeperServers": "zk1:2181", "metadataStoreUrl": "memory:x"})
    assert both["metadataStoreUrl"] == "memory:x"


def test_only_the_modular_load_manager_and_at_least_one_bundle_are_accepted() -> None:
    with pytest.raises(ConfigError, match="loadManagerClassName"):
        load_config(
            overrides={"loadManagerClassName": "org.apache.pulsar.broker.loadbalance.impl.SimpleLoadManagerImpl"}
        )
    with pytest.raises(ConfigError, match="defaultNumberOfNamespaceBundles"):
        load_config(overrides={"defaultNumberOfNamespaceBundles": "0"})


def test_a_store_url_no_store_opens_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="etcd://e1:2379"):
        asyncio.run(open_metadata_store("etcd://e1:2379"))


def test_initialize_cluster_metadata_writes_what_pulsars_setup_writes() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        store = server.connect()
        setup = ClusterMetadata("c1", "http://b1:8080", "pulsar://b1:6650")
        await initialize_cluster_metadata(setup, store, store)
        assert json.loads(server.value("/admin/clusters/c1") or b"") == {
            "serviceUrl": "http://b1:8080",
            "serviceUrlTls": None,
            "brokerServiceUrl": "pulsar://b1:6650",
            "brokerServiceUrlTls": None,
        }
        assert json.loads(server.value("/admin/policies/public") or b"") == {
            "adminRoles": [],
            "allowedClusters": ["c1"],
        }
        assert json.loads(server.value("/admin/policies/pulsar") or b"")["allowedClusters"] == ["c1"]
        default = json.loads(server.value("/admin/policies/public/default") or b"")
        assert default["replication_clusters"] == ["c1"]
        assert default["bundles"]["numBundles"] == 16
        assert server.value("/admin/policies/pulsar/system") is not None
        assert server.children("/ledgers") == ["INSTANCEID", "LAYOUT", "available"]
        assert server.children("/ledgers/available") == ["readonly"]
        # A second cluster on the same configuration store joins the tenants and namespaces.
        await initialize_cluster_metadata(
            ClusterMetadata("c2", "http://b2:8080", "pulsar://b2:6650", existing_bk_metadata_service_uri="zk:x"),
            server.connect(),
            store,
        )
        assert json.loads(server.value("/admin/policies/public") or b"")["allowedClusters"] == ["c1", "c2"]
        # The namespace's bundles are the ones brokers start from.
        bundles = await BundleDirectory(store, 4).bundles("public/default")
        assert len(bundles.bundles) == 16

    asyncio.run(scenario())


def test_without_existing_bookkeeper_no_ledgers_layout_is_written_over_it() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        store = server.connect()
        setup = ClusterMetadata("c1", "http://b1:8080", "pulsar://b1:6650", existing_bk_metadata_service_uri="zk:bk")
        await initialize_cluster_metadata(setup, store, store)
        assert server.value("/ledgers") is None

    asyncio.run(scenario())
