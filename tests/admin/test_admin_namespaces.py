"""Clusters, tenants, namespaces and namespace policies over `/admin/v2`, black-box against a broker process.

Shapes, status codes and reasons are Pulsar's (ClustersBase, TenantsBase, NamespacesBase). Policies are
checked for their effect with the official client: subscription types refused at SUBSCRIBE,
deduplication dropping a resent sequence id, retention keeping consumed ledgers, message TTL expiring.
One broker serves the module; each test works in its own tenant or namespace.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pulsar
import pytest

from admin.admin_helpers import not_set

if TYPE_CHECKING:
    from conftest import BrokerProcess


# Small ledgers (and no minimum age before a roll) so that a few messages span several ledgers and
# retention has closed ledgers to keep or delete; message TTL checked every 0.6 s.
SETTINGS = {
    "managedLedgerMaxEntriesPerLedger": "2",
    "managedLedgerMinLedgerRolloverTimeMinutes": "0",
    "messageExpiryCheckIntervalInMinutes": "0.01",
}
WAIT_S = 10


@pytest.fixture(scope="module")
def admin_broker(module_broker_factory) -> BrokerProcess:
    return module_broker_factory(**SETTINGS)


@pytest.fixture(scope="module")
def http(admin_broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=f"{admin_broker.http_url}/admin/v2", timeout=10) as client:
        yield client


@pytest.fixture
def pulsar_client(admin_broker: BrokerProcess, client_factory) -> pulsar.Client:
    return client_factory(admin_broker.url)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def tenant(http: httpx.Client) -> str:
    name = unique("tenant")
    assert http.put(f"/tenants/{name}", json={"adminRoles": [], "allowedClusters": ["standalone"]}).status_code == 204
    return name


@pytest.fixture
def namespace(http: httpx.Client, tenant: str) -> str:
    name = f"{tenant}/ns"
    assert http.put(f"/namespaces/{name}").status_code == 204
    return name


def reason(response: httpx.Response) -> str:
    return response.json()["reason"]


def until(condition, what: str):
    """Poll `condition` until it returns something truthy; fail with `what` after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f"not within {WAIT_S} s: {what}")


# ------------------------------------------------------------------------------------ clusters


def test_clusters_list_get_create_update(http: httpx.Client) -> None:
    assert http.get("/clusters").json() == ["standalone"]
    standalone = http.get("/clusters/standalone")
    assert standalone.status_code == 200
    # The standalone's own cluster names this broker's URLs, as Pulsar standalone does.
    assert standalone.json()["serviceUrl"] == str(http.base_url).split("/admin/v2")[0]
    assert standalone.json()["brokerServiceUrl"].startswith("pulsar://127.0.0.1:")
    name = unique("cluster")
    data = {"serviceUrl": "http://east.example:8080", "brokerServiceUrl": "pulsar://east.example:6650"}
    # Pulsar 4.0.7 answers a cluster's creation and update 200 with an empty body (not 204).
    created = http.put(f"/clusters/{name}", json=data)
    assert (created.status_code, created.content) == (200, b"")
    assert http.get(f"/clusters/{name}").json() == data
    assert name in http.get("/clusters").json()
    conflict = http.put(f"/clusters/{name}", json=data)
    assert (conflict.status_code, reason(conflict)) == (409, "Cluster already exists")
    updated = {"serviceUrl": "http://west.example:8080"}
    changed = http.post(f"/clusters/{name}", json=updated)
    assert (changed.status_code, changed.content) == (200, b"")
    assert http.get(f"/clusters/{name}").json() == updated


def test_cluster_delete(http: httpx.Client, namespace: str) -> None:
    """As ClustersBase.deleteCluster: 204, then 404. Pulsar refuses (412) only for old-style namespaces and
    isolation policies in the cluster, which magnetar has not: a cluster that a tenant allows and a
    namespace replicates to is deleted, and they keep naming it (so it was in Pulsar 4.0.7)."""
    tenant = namespace.split("/")[0]
    name = unique("cluster")
    assert http.put(f"/clusters/{name}", json={"serviceUrl": "http://gone.example:8080"}).status_code == 200
    assert http.post(f"/tenants/{tenant}", json={"allowedClusters": ["standalone", name]}).status_code == 204
    assert http.post(f"/namespaces/{namespace}/replication", json=["standalone", name]).status_code == 200
    deleted = http.delete(f"/clusters/{name}")
    assert (deleted.status_code, deleted.content) == (204, b"")
    assert name not in http.get("/clusters").json()
    gone = http.get(f"/clusters/{name}")
    assert (gone.status_code, reason(gone)) == (404, "Cluster does not exist")
    again = http.delete(f"/clusters/{name}")
    assert (again.status_code, reason(again)) == (404, "Cluster does not exist")
    assert sorted(http.get(f"/namespaces/{namespace}/replication").json()) == sorted(["standalone", name])
    assert name in http.get(f"/tenants/{tenant}").json()["allowedClusters"]
    # Now unknown, it may not be chosen again.
    unknown = http.post(f"/namespaces/{namespace}/replication", json=[name])
    assert (unknown.status_code, reason(unknown)) == (403, f"Invalid cluster id: {name}")
    # The name is not checked: an invalid one is just not found, as in Pulsar.
    invalid = http.delete("/clusters/bad%20name")
    assert (invalid.status_code, reason(invalid)) == (404, "Cluster does not exist")


def test_cluster_errors(http: httpx.Client) -> None:
    missing = http.get("/clusters/nowhere")
    assert (missing.status_code, reason(missing)) == (404, "Cluster does not exist")
    assert http.post("/clusters/nowhere", json={}).status_code == 404
    invalid = http.put("/clusters/bad%20name", json={})
    assert (invalid.status_code, reason(invalid)) == (412, "Cluster name is not valid")
    bad_url = http.put(f"/clusters/{unique('c')}", json={"serviceUrl": "pulsar://wrong.scheme:8080"})
    assert bad_url.status_code == 400
    assert reason(bad_url).startswith("Illegal service url")
    assert http.put(f"/clusters/{unique('c')}", json={"serviceUrl": 7}).status_code == 400


# ------------------------------------------------------------------------------------- tenants


def test_tenant_lifecycle(http: httpx.Client) -> None:
    assert http.get("/tenants/public").json() == {"adminRoles": [], "allowedClusters": ["standalone"]}
    name = unique("tenant")
    info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    assert http.put(f"/tenants/{name}", json=info).status_code == 204
    assert name in http.get("/tenants").json()
    assert http.get(f"/tenants/{name}").json() == info
    again = http.put(f"/tenants/{name}", json=info)
    assert (again.status_code, reason(again)) == (409, "Tenant already exists")
    assert http.post(f"/tenants/{name}", json={"adminRoles": [], "allowedClusters": ["standalone"]}).status_code == 204
    assert http.get(f"/tenants/{name}").json()["adminRoles"] == []
    assert http.delete(f"/tenants/{name}").status_code == 204
    assert name not in http.get("/tenants").json()
    gone = http.get(f"/tenants/{name}")
    assert (gone.status_code, reason(gone)) == (404, "Tenant does not exist")


def test_tenant_errors(http: httpx.Client, namespace: str) -> None:
    tenant = namespace.split("/")[0]
    unknown_cluster = http.put(f"/tenants/{unique('t')}", json={"allowedClusters": ["mars"]})
    assert (unknown_cluster.status_code, reason(unknown_cluster)) == (412, "Clusters do not exist")
    no_cluster = http.put(f"/tenants/{unique('t')}", json={"adminRoles": [], "allowedClusters": []})
    assert (no_cluster.status_code, reason(no_cluster)) == (412, "Clusters can not be empty")
    invalid = http.put("/tenants/no%20spaces", json={"allowedClusters": ["standalone"]})
    assert (invalid.status_code, reason(invalid)) == (412, "Tenant name is not valid")
    assert http.post(f"/tenants/{unique('t')}", json={"allowedClusters": ["standalone"]}).status_code == 404
    assert http.delete(f"/tenants/{unique('t')}").status_code == 404
    assert http.put(f"/tenants/{unique('t')}", json={"allowedClusters": "standalone"}).status_code == 400
    busy = http.delete(f"/tenants/{tenant}")
    assert (busy.status_code, reason(busy)) == (409, "The tenant still has active namespaces")
    # The namespace replicates to standalone: the tenant may not stop allowing it.
    other = unique("cluster")
    assert http.put(f"/clusters/{other}", json={}).status_code == 200
    in_use = http.post(f"/tenants/{tenant}", json={"allowedClusters": [other]})
    assert in_use.status_code == 409
    assert http.delete(f"/tenants/{tenant}", params={"force": "true"}).status_code == 204
    assert http.get(f"/namespaces/{tenant}").status_code == 404


# ---------------------------------------------------------------------------------- namespaces


def test_namespace_lifecycle_and_policies_shape(http: httpx.Client, tenant: str) -> None:
    name = f"{tenant}/orders"
    assert http.put(f"/namespaces/{name}").status_code == 204
    assert http.get(f"/namespaces/{tenant}").json() == [name]
    again = http.put(f"/namespaces/{name}")
    assert (again.status_code, reason(again)) == (409, "Namespace already exists")
    policies = http.get(f"/namespaces/{name}").json()
    assert policies["replication_clusters"] == ["standalone"]
    assert policies["bundles"] == {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
    assert policies["subscription_types_enabled"] == []
    assert policies["deleted"] is False
    assert "message_ttl_in_seconds" not in policies and "retention_policies" not in policies
    assert http.get(f"/namespaces/{name}/topics").json() == []
    assert http.delete(f"/namespaces/{name}").status_code == 204
    assert http.get(f"/namespaces/{tenant}").json() == []
    assert http.get(f"/namespaces/{name}").status_code == 404


def test_namespace_created_with_policies(http: httpx.Client, tenant: str) -> None:
    name = f"{tenant}/configured"
    body = {
        "message_ttl_in_seconds": 30,
        "retention_policies": {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1},
        "deduplicationEnabled": True,
        "subscription_types_enabled": ["Shared"],
        "bundles": {"numBundles": 4},
    }
    assert http.put(f"/namespaces/{name}", json=body).status_code == 204
    policies = http.get(f"/namespaces/{name}").json()
    assert policies["message_ttl_in_seconds"] == 30
    assert policies["retention_policies"] == {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}
    assert policies["deduplicationEnabled"] is True
    assert policies["subscription_types_enabled"] == ["Shared"]


def test_namespace_errors(http: httpx.Client, tenant: str) -> None:
    unknown_tenant = http.put(f"/namespaces/{unique('t')}/ns")
    assert (unknown_tenant.status_code, reason(unknown_tenant)) == (404, "Tenant does not exist")
    assert http.get(f"/namespaces/{unique('t')}").status_code == 404
    invalid = http.put(f"/namespaces/{tenant}/bad%20name")
    assert (invalid.status_code, reason(invalid)) == (412, "Namespace name is not valid")
    missing = http.get(f"/namespaces/{tenant}/missing")
    assert (missing.status_code, reason(missing)) == (404, "Namespace does not exist")
    assert http.delete(f"/namespaces/{tenant}/missing").status_code == 404
    unknown_cluster = http.put(f"/namespaces/{tenant}/x", json={"replication_clusters": ["mars"]})
    assert (unknown_cluster.status_code, reason(unknown_cluster)) == (403, "Invalid cluster id: mars")
    assert http.put(f"/namespaces/{tenant}/y", json={"message_ttl_in_seconds": "soon"}).status_code == 400
    retention = {"retentionTimeInMinutes": -2, "retentionSizeInMB": -1}
    bad_retention = http.put(f"/namespaces/{tenant}/z", json={"retention_policies": retention})
    assert (bad_retention.status_code, reason(bad_retention)) == (
        400,
        "Invalid retention policy: time limit must be >= -1",
    )


def test_delete_namespace_with_topics_needs_force(http: httpx.Client, namespace: str, pulsar_client) -> None:
    assert http.put(f"/persistent/{namespace}/plain").status_code == 204
    assert http.put(f"/persistent/{namespace}/parted/partitions", json=2).status_code == 204
    producer = pulsar_client.create_producer(f"persistent://{namespace}/plain")
    producer.send(b"kept until forced")
    refused = http.delete(f"/namespaces/{namespace}")
    assert (refused.status_code, reason(refused)) == (409, "Cannot delete non empty namespace")
    assert http.delete(f"/namespaces/{namespace}", params={"force": "true"}).status_code == 204
    assert http.get(f"/namespaces/{namespace}").status_code == 404
    # Re-created, the namespace is empty: the topics and the partitioned topic went with it.
    assert http.put(f"/namespaces/{namespace}").status_code == 204
    assert http.get(f"/persistent/{namespace}").json() == []
    assert http.get(f"/persistent/{namespace}/partitioned").json() == []


# ---------------------------------------------------------------------------- policy endpoints


RETENTION_ZERO = (
    "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the limits has a "
    "non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. To disable retention both "
    "limits must be set to 0."
)


def test_retention_endpoints(http: httpx.Client, namespace: str) -> None:
    path = f"/namespaces/{namespace}/retention"
    assert not_set(http.get(path))
    assert http.post(path, json={"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}).status_code == 204
    assert http.get(path).json() == {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
    assert http.post(path, json={"retentionTimeInMinutes": "long"}).status_code == 400
    assert http.delete(path).status_code == 204
    assert not_set(http.get(path))
    # No body is Pulsar's null: the policy goes, as with DELETE.
    assert http.post(path, json={"retentionTimeInMinutes": -1, "retentionSizeInMB": 5}).status_code == 204
    assert http.post(path).status_code == 204
    assert not_set(http.get(path))
    for minutes, size in ((0, 0), (-1, -1), (-1, 5), (5, -1)):
        assert http.post(path, json={"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}).status_code == 204
        assert http.get(path).json() == {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size}


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ((-2, -1), "Invalid retention policy: time limit must be >= -1"),
        ((-1, -2), "Invalid retention policy: size limit must be >= -1"),
        ((-2, -2), "Invalid retention policy: size limit must be >= -1"),  # the size is checked first
        ((0, 10), RETENTION_ZERO),
        ((10, 0), RETENTION_ZERO),
        ((0, -1), RETENTION_ZERO),
        ((-1, 0), RETENTION_ZERO),
        ((10, None), RETENTION_ZERO),  # a limit left out is 0
    ],
)
def test_retention_refused_as_pulsar_does(
    http: httpx.Client, namespace: str, limits: tuple[int, int | None], expected: str
) -> None:
    """validateRetentionPolicies' refusals answer 400 in Pulsar 4.0.7 (not 412), and come before the
    namespace is looked for; each pair was answered so by a Pulsar 4.0.7 standalone."""
    minutes, size = limits
    body = {"retentionTimeInMinutes": minutes} | ({} if size is None else {"retentionSizeInMB": size})
    tenant = namespace.split("/")[0]
    for path in (f"/namespaces/{namespace}/retention", f"/namespaces/{tenant}/missing/retention"):
        refused = http.post(path, json=body)
        assert (refused.status_code, reason(refused)) == (400, expected)
    assert not_set(http.get(f"/namespaces/{namespace}/retention"))


def test_retention_of_a_missing_namespace(http: httpx.Client, tenant: str) -> None:
    """internalSetRetention reads the namespace's policies without looking at the tenant; DELETE goes the
    same way (Pulsar removes the policy by setting null)."""
    body = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 100}
    for path in (f"/namespaces/{tenant}/missing/retention", f"/namespaces/{unique('t')}/missing/retention"):
        for response in (http.post(path, json=body), http.delete(path)):
            assert (response.status_code, reason(response)) == (404, "Namespace policies does not exist")
    invalid = http.post(f"/namespaces/{tenant}/bad%20name/retention", json=body)
    assert (invalid.status_code, reason(invalid)) == (412, "Namespace name is not valid")


def test_message_ttl_endpoints(http: httpx.Client, namespace: str) -> None:
    path = f"/namespaces/{namespace}/messageTTL"
    assert not_set(http.get(path))
    assert http.post(path, json=120).status_code == 204
    assert http.get(path).json() == 120
    negative = http.post(path, json=-1)
    assert (negative.status_code, reason(negative)) == (412, "Invalid value for message TTL, message TTL must >= 0")
    assert http.post(path, json="120").status_code == 400
    assert http.post(path, json=2**31).status_code == 400
    assert http.delete(path).status_code == 204
    assert not_set(http.get(path))


def test_deduplication_endpoints(http: httpx.Client, namespace: str) -> None:
    path = f"/namespaces/{namespace}/deduplication"
    assert not_set(http.get(path))
    assert http.post(path, json=True).status_code == 204
    assert http.get(path).json() is True
    assert http.post(path, json="yes").status_code == 400
    assert http.delete(path).status_code == 204
    assert not_set(http.get(path))


def test_replication_cluster_endpoints(http: httpx.Client, namespace: str) -> None:
    path = f"/namespaces/{namespace}/replication"
    assert http.get(path).json() == ["standalone"]
    tenant = namespace.split("/")[0]
    other = unique("cluster")
    assert http.put(f"/clusters/{other}", json={}).status_code == 200
    not_allowed = http.post(path, json=[other])
    assert (not_allowed.status_code, reason(not_allowed)) == (
        403,
        f"Cluster [{other}] is not in the list of allowed clusters list for tenant [{tenant}]",
    )
    mars = http.post(path, json=["mars"])
    assert (mars.status_code, reason(mars)) == (403, "Invalid cluster id: mars")
    for body in ([], None):
        empty = http.post(path, json=body)
        assert (empty.status_code, reason(empty)) == (412, "ClusterIds should not be null or empty")
    assert http.post(path).status_code == 412
    global_ = http.post(path, json=["mars", "global"])
    assert (global_.status_code, reason(global_)) == (412, "Cannot specify global in the list of replication clusters")
    assert http.post(f"/tenants/{tenant}", json={"allowedClusters": ["standalone", other]}).status_code == 204
    # Pulsar 4.0.7 answers 200 with an empty body here, where the other namespace policies answer 204.
    done = http.post(path, json=[other, "standalone", other])
    assert (done.status_code, done.content) == (200, b"")
    assert http.get(path).json() == sorted([other, "standalone"])


def test_replication_clusters_checked_in_pulsars_order(http: httpx.Client, namespace: str) -> None:
    """The order of internalSetNamespaceReplicationClusters, and of the Java HashSet it checks the clusters
    in; each answer here was Pulsar 4.0.7's to the same requests (clusters c7, c8, c9 and `r1` there)."""
    tenant = namespace.split("/")[0]
    path = f"/namespaces/{namespace}/replication"
    # An unknown cluster is refused before the namespace is looked for; of two, the first in the set's
    # order is named (`aaa` before `zzz` whichever comes first in the list).
    for clusters in (["zzz", "aaa"], ["aaa", "zzz"]):
        for where in (path, f"/namespaces/{tenant}/missing/replication"):
            unknown = http.post(where, json=clusters)
            assert (unknown.status_code, reason(unknown)) == (403, "Invalid cluster id: aaa")
    for cluster in ("c7", "c8"):
        assert http.put(f"/clusters/{cluster}", json={}).status_code in (200, 409)
    peered = {"serviceUrl": "http://127.0.0.1:1", "peerClusterNames": ["zz", "c7", "standalone"]}
    assert http.put("/clusters/c9", json=peered).status_code in (200, 409)
    assert http.post("/clusters/c9", json=peered).status_code == 200
    assert http.post(f"/tenants/{tenant}", json={"allowedClusters": ["standalone", "c9"]}).status_code == 204
    # Cluster by cluster in the set's order (c7, c8, c9, then standalone): peer conflict, namespace, tenant.
    for clusters in (["c8", "c7"], ["c9", "c7"], ["c9", "standalone", "c7"]):
        refused = http.post(path, json=clusters)
        assert (refused.status_code, reason(refused)) == (
            403,
            f"Cluster [c7] is not in the list of allowed clusters list for tenant [{tenant}]",
        )
    conflict = http.post(path, json=["standalone", "c9"])
    assert (conflict.status_code, reason(conflict)) == (
        409,
        "c9's peer-clusters [standalone] can't be part of replication-clusters [c9, standalone]",
    )
    for where in (f"/namespaces/{tenant}/missing/replication", f"/namespaces/{unique('t')}/missing/replication"):
        missing = http.post(where, json=["c9", "c8"])
        assert (missing.status_code, reason(missing)) == (404, "Namespace does not exist")
    assert http.post(path, json=["c9"]).status_code == 200
    assert http.get(path).json() == ["c9"]
    assert http.post(path, json=["standalone"]).status_code == 200
    for cluster in ("c7", "c8", "c9"):
        assert http.delete(f"/clusters/{cluster}").status_code == 204


def test_subscription_types_endpoints(http: httpx.Client, namespace: str) -> None:
    path = f"/namespaces/{namespace}/subscriptionTypesEnabled"
    assert http.get(path).json() == []
    assert http.post(path, json=["Shared", "Key_Shared"]).status_code == 204
    assert http.get(path).json() == ["Key_Shared", "Shared"]
    assert http.post(path, json=["Sharded"]).status_code == 400
    assert http.delete(path).status_code == 204
    assert http.get(path).json() == []


# ------------------------------------------------------------------------------ policy effects


def test_subscription_types_enabled_refuses_other_types(http: httpx.Client, namespace: str, pulsar_client) -> None:
    topic = f"persistent://{namespace}/typed"
    path = f"/namespaces/{namespace}/subscriptionTypesEnabled"
    assert http.post(path, json=["Exclusive"]).status_code == 204
    with pytest.raises(pulsar.NotAllowedError):
        pulsar_client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    pulsar_client.subscribe(topic, "exclusive", consumer_type=pulsar.ConsumerType.Exclusive).close()
    assert http.delete(path).status_code == 204
    pulsar_client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared).close()


def test_namespace_deduplication_drops_resent_sequence_ids(http: httpx.Client, namespace: str, pulsar_client) -> None:
    topic = f"persistent://{namespace}/dedup"
    consumer = pulsar_client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = pulsar_client.create_producer(topic, producer_name="p")
    producer.send(b"before", sequence_id=5)
    # Switched on while the topic is loaded: the sequence ids already stored count.
    assert http.post(f"/namespaces/{namespace}/deduplication", json=True).status_code == 204
    producer.close()
    producer = pulsar_client.create_producer(topic, producer_name="p")
    assert producer.last_sequence_id() == 5
    producer.send(b"resent", sequence_id=5)
    producer.send(b"after", sequence_id=6)
    received = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
    assert received == [b"before", b"after"]
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=300)


def test_retention_keeps_consumed_ledgers(http: httpx.Client, tenant: str, pulsar_client) -> None:
    """Ten messages of two per ledger, all acknowledged: without retention their closed ledgers go,
    with a namespace retention they stay (the earliest stored message is still the first one), until
    the policy is removed."""
    assert http.put(f"/namespaces/{tenant}/kept").status_code == 204
    assert http.put(f"/namespaces/{tenant}/dropped").status_code == 204
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert http.post(f"/namespaces/{tenant}/kept/retention", json=retention).status_code == 204

    def earliest(namespace: str) -> bytes:
        response = http.get(
            f"/persistent/{tenant}/{namespace}/t/examinemessage",
            params={"initialPosition": "earliest", "messagePosition": 1},
        )
        assert response.status_code == 200
        return response.content

    for namespace in ("kept", "dropped"):
        topic = f"persistent://{tenant}/{namespace}/t"
        consumer = pulsar_client.subscribe(topic, "sub")
        producer = pulsar_client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
        for _ in range(10):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        producer.send(b"m10")  # rolls the ledger that holds m8 and m9, so they may go too
    until(lambda: earliest("dropped") != b"m0", "consumed ledgers deleted without retention")
    assert earliest("kept") == b"m0"
    assert http.delete(f"/namespaces/{tenant}/kept/retention").status_code == 204
    until(lambda: earliest("kept") != b"m0", "consumed ledgers deleted once retention is removed")


def test_namespace_message_ttl_expires_backlog(http: httpx.Client, namespace: str, pulsar_client) -> None:
    topic = f"persistent://{namespace}/ttl"
    pulsar_client.subscribe(topic, "idle").close()
    producer = pulsar_client.create_producer(topic)
    for i in range(3):
        producer.send(f"old{i}".encode())
    peek = f"/persistent/{namespace}/ttl/subscription/idle/position/1"
    assert http.get(peek).status_code == 200
    assert http.post(f"/namespaces/{namespace}/messageTTL", json=1).status_code == 204
    until(lambda: http.get(peek).status_code == 404, "backlog expired by the namespace's message TTL")
