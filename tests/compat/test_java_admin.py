"""The official Java admin client (pulsar-client-admin 4.0.x, compat/java) against magnetar's HTTP API:
the calls users make most."""

from __future__ import annotations

import uuid


def test_clusters_tenants_namespaces_and_topics(java):
    tenant = f"compat-{uuid.uuid4().hex[:8]}"
    namespace = f"{tenant}/ns"
    seen = java("admin_namespaces", tenant=tenant)
    assert seen["clusters"] == ["standalone"]
    assert seen["createTenant"] == "ok"
    assert tenant in seen["tenants"]
    assert seen["tenantClusters"] == ["standalone"]
    assert seen["createNamespace"] == "ok"
    assert seen["namespaces"] == [namespace]
    assert seen["createTopic"] == "ok"
    assert seen["createPartitionedTopic"] == "ok"
    assert isinstance(seen["topics"], list), seen["topics"]
    assert sorted(seen["topics"]) == sorted(
        [f"persistent://{namespace}/plain"] + [f"persistent://{namespace}/parts-partition-{i}" for i in range(3)]
    )
    assert seen["partitionedTopics"] == [f"persistent://{namespace}/parts"]
    assert seen["partitionedMetadata"] == 3
    assert seen["updatePartitionedTopic"] == 4
    assert seen["deleteTopic"] == "ok"
    assert seen["deletePartitionedTopic"] == "ok"
    assert seen["topicsAfterDelete"] == []
    assert seen["deleteNamespace"] == "ok"
    assert seen["namespacesAfterDelete"] == []
    assert seen["deleteTenant"] == "ok"
    assert tenant not in seen["tenantsAfterDelete"]


def test_stats_and_subscriptions(java, topic):
    seen = java("admin_subscriptions", topic=topic)
    assert seen["createEarliest"] == "ok"
    assert seen["createLatest"] == "ok"
    assert sorted(seen["subscriptions"]) == ["from-earliest", "from-latest"]
    assert seen["msgInCounter"] == 10
    assert seen["backlogs"] == {"from-earliest": 10, "from-latest": 0}
    assert seen["peek"] == ["m-0", "m-1"]
    assert seen["backlogAfterSkip3"] == 7
    assert seen["backlogAfterResetToSixthByTime"] == 5
    assert seen["backlogAfterResetToThirdById"] == 8
    assert seen["consumedAfterReset"] == [f"m-{i}" for i in range(2, 10)]
    assert seen["backlogAfterSkipAll"] == 0
    assert seen["lastMessageId"][2:] == [-1, -1]
    assert seen["deleteSubscription"] == ["from-earliest"]
    assert seen["partitionedStatsMsgIn"] == 6


def test_brokers_endpoints(java, module_broker):
    broker_id = module_broker.http_url.removeprefix("http://")
    seen = java("admin_brokers")
    assert seen["healthcheck"] == "ok"
    assert seen["leader"] == {"serviceUrl": module_broker.http_url, "brokerId": broker_id}
    assert seen["activeBrokers"] == [broker_id]
    assert seen["activeBrokersOfThisCluster"] == [broker_id]
    assert seen["ownedNamespaces"]["public/default/0x00000000_0xffffffff"] == {
        "broker_assignment": "shared",
        "is_controlled": False,
        "is_active": True,
    }
    names = seen["dynamicConfigurationNames"]
    assert "allowAutoTopicCreation" in names and "clusterName" not in names
    assert seen["dynamicConfigurations"] == {}
    runtime = seen["runtimeConfigurations"]
    assert runtime["clusterName"] == "standalone"
    assert runtime["allowAutoTopicCreation"] == "true"


def test_http_service_url_looks_plain_and_partitioned_topics_up(java, topic):
    seen = java("http_lookup", topic=topic)
    assert seen["plain"] == ["m-0", "m-1", "m-2", "m-3"]
    assert seen["partitioned"] == ["m-0", "m-1", "m-2", "m-3"]
    assert seen["partitions"] == [f"{topic}-parts-partition-{i}" for i in range(2)]
