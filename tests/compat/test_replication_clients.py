"""Geo-replication with the official Java and Go clients (compat/java Replication.java, compat/go
replication.go): two magnetar clusters, r1 and r2, wired as the replication tests wire them
(geo_helpers), each client producing in r1 and consuming in r2, the Java admin client reading the
replicator's stats.

What these clients show of a replicated message (isReplicated, getReplicatedFrom, the original producer
name, key, properties and event time) and how PulsarAdmin parses ReplicatorStats are what a user of a
Pulsar geo-replication setup relies on; the Python client shows neither.
"""

from __future__ import annotations

import re
import uuid

import pytest
from go_compat import run_scenario
from java_compat import JavaCompat

from geo_helpers import Geo, wire


@pytest.fixture(scope="module")
def pair(module_broker_factory) -> Geo:
    return wire({name: module_broker_factory(clusterName=name) for name in ("r1", "r2")}, {"ns": ["r1", "r2"]})


def test_java_client_in_two_clusters_sees_replicated_messages_and_stats(java_compat: JavaCompat, pair: Geo) -> None:
    r1, r2 = pair["r1"], pair["r2"]
    topic = f"persistent://geo/ns/java-{uuid.uuid4().hex[:8]}"
    count = 12
    seen = java_compat.run(
        "geo_replicate",
        serviceUrl=r1.url,
        httpUrl=r1.http_url,
        remoteServiceUrl=r2.url,
        remoteHttpUrl=r2.http_url,
        topic=topic,
        count=count,
    )

    received = seen["received"]
    # The two messages kept in r1 (disableReplication, replicationClusters [r1]) never reach r2.
    assert [m["value"] for m in received] == [f"m-{i}" for i in range(count)], received
    assert seen["more"] == [], seen["more"]
    for index, message in enumerate(received):
        assert (message["replicated"], message["replicatedFrom"]) == (True, "r1"), message
        assert message["producerName"] == "java-geo", message  # the original producer, not the replicator's
        assert message["key"] == f"k-{index % 3}", message
        assert message["properties"]["index"] == str(index), message
        assert message["eventTime"] == 1_000 + index, message
        assert message["sequenceId"] == index + 2, message  # after the two messages kept in r1

    replicator = seen["replicator"]
    assert (replicator["connected"], replicator["replicationBacklog"]) == (True, 0), replicator
    assert re.fullmatch(r"\[id: 0x[0-9a-f]{8}, L:/[\d.]+:\d+ - R:[^/]+/[\d.]+:\d+\]", replicator["outboundConnection"])
    assert replicator["outboundConnectedSince"].endswith("Z"), replicator
    assert "pulsar.repl.r1-->r2" in seen["remotePublishers"], seen["remotePublishers"]
    assert sorted(seen["appliedClusters"]) == ["r1", "r2"], seen["appliedClusters"]
    assert seen["policyWithoutLocal"].startswith("412 "), seen["policyWithoutLocal"]


def test_go_client_in_two_clusters_sees_replicated_messages(pair: Geo) -> None:
    r1, r2 = pair["r1"], pair["r2"]
    seen = run_scenario("geo-replicate", r1.url, r1.http_url, f"go-{uuid.uuid4().hex[:8]}", remote_service_url=r2.url)

    received = seen["received"]
    # The two messages kept in r1 (DisableReplication, ReplicationClusters [r1]) never reach r2.
    assert [m["value"] for m in received] == [f"m-{i}" for i in range(10)], received
    assert not seen["more"], seen["more"]
    for index, message in enumerate(received):
        assert (message["replicated"], message["replicatedFrom"]) == (True, "r1"), message
        assert message["producerName"] == "go-geo", message
        assert message["key"] == f"k-{index % 3}", message
        assert message["properties"]["index"] == str(index), message
        assert message["eventTime"] == 1_000 + index, message
