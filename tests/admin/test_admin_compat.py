"""What the official admin clients and HTTP lookup need from `/admin/v2` and `/lookup/v2`, over plain HTTP.

Regressions found with the official Java and Go clients (each also shown with the Go client in
tests/compat/test_go_admin.py): the non-persistent listings, the PartitionedTopicMetadata body of a
partitioned topic's creation, the brokers endpoints, a null list in a tenant's body, a path that does not
exist told apart from a missing resource, and the lookup an `http://` service URL makes (with the partition
metadata it reads first).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pulsar
import pytest

if TYPE_CHECKING:
    from conftest import BrokerProcess

PARTITIONED_METADATA = "application/vnd.partitioned-topic-metadata+json"


@pytest.fixture(scope="module")
def broker(module_broker_factory) -> BrokerProcess:
    return module_broker_factory()


@pytest.fixture(scope="module")
def http(broker: BrokerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.http_url, timeout=10) as client:
        yield client


@pytest.fixture
def name() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def test_non_persistent_listings_answer_empty_lists(http: httpx.Client) -> None:
    http.put("/admin/v2/namespaces/public/empty-np")
    for path in ("/admin/v2/non-persistent/public/empty-np", "/admin/v2/non-persistent/public/empty-np/partitioned"):
        response = http.get(path)
        assert (response.status_code, response.json()) == (200, [])


def test_non_persistent_topics_are_listed_apart_from_persistent_ones(
    http: httpx.Client, broker: BrokerProcess, client_factory, name: str
) -> None:
    client = client_factory(broker.url)
    volatile = f"non-persistent://public/default/{name}"
    durable = f"persistent://public/default/{name}"
    producers = [client.create_producer(volatile), client.create_producer(durable)]
    assert volatile in http.get("/admin/v2/non-persistent/public/default").json()
    assert volatile not in http.get("/admin/v2/persistent/public/default").json()
    assert durable not in http.get("/admin/v2/non-persistent/public/default").json()
    by_mode = {
        mode: http.get("/admin/v2/namespaces/public/default/topics", params={"mode": mode} if mode else None).json()
        for mode in (None, "PERSISTENT", "NON_PERSISTENT", "ALL")
    }
    assert durable in by_mode[None] and volatile not in by_mode[None]
    assert by_mode[None] == by_mode["PERSISTENT"]
    assert volatile in by_mode["NON_PERSISTENT"] and durable not in by_mode["NON_PERSISTENT"]
    assert {volatile, durable} <= set(by_mode["ALL"])
    # The non-persistent topic is served at its own paths.
    stats = http.get(f"/admin/v2/non-persistent/public/default/{name}/stats")
    assert stats.status_code == 200 and len(stats.json()["publishers"]) == 1
    for producer in producers:
        producer.close()
    assert http.delete(f"/admin/v2/non-persistent/public/default/{name}").status_code == 204
    assert volatile not in http.get("/admin/v2/non-persistent/public/default").json()


def test_non_persistent_partitioned_topic_listed_in_its_domain_only(http: httpx.Client, name: str) -> None:
    created = http.put(f"/admin/v2/non-persistent/public/default/{name}/partitions", json=2)
    assert created.status_code == 204
    assert (
        f"non-persistent://public/default/{name}"
        in http.get("/admin/v2/non-persistent/public/default/partitioned").json()
    )
    assert (
        f"non-persistent://public/default/{name}"
        not in http.get("/admin/v2/persistent/public/default/partitioned").json()
    )
    assert http.get(f"/admin/v2/non-persistent/public/default/{name}/partitions").json()["partitions"] == 2
    assert http.get(f"/admin/v2/persistent/public/default/{name}/partitions").status_code == 404


def test_partitioned_topic_created_from_partitioned_topic_metadata(http: httpx.Client, name: str) -> None:
    # The body the Go and Java admin clients send.
    created = http.put(
        f"/admin/v2/persistent/public/default/{name}/partitions",
        content=b'{"properties":null,"partitions":3}',
        headers={"Content-Type": PARTITIONED_METADATA},
    )
    assert created.status_code == 204, created.text
    assert http.get(f"/admin/v2/persistent/public/default/{name}/partitions").json()["partitions"] == 3
    # Properties would be lost: magnetar keeps none, and says so rather than dropping them.
    refused = http.put(
        f"/admin/v2/persistent/public/default/{name}-props/partitions",
        content=b'{"properties":{"owner":"team"},"partitions":3}',
        headers={"Content-Type": PARTITIONED_METADATA},
    )
    assert refused.status_code == 412
    assert http.get(f"/admin/v2/persistent/public/default/{name}-props/partitions").status_code == 404


def test_tenant_with_null_lists_is_created(http: httpx.Client, name: str) -> None:
    created = http.put(f"/admin/v2/tenants/{name}", json={"adminRoles": None, "allowedClusters": ["standalone"]})
    assert created.status_code == 204, created.text
    assert http.get(f"/admin/v2/tenants/{name}").json() == {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert http.put(f"/admin/v2/tenants/{name}-x", json={"allowedClusters": None}).status_code == 412


def test_brokers_endpoints(http: httpx.Client, broker: BrokerProcess) -> None:
    broker_id = broker.http_url.removeprefix("http://")
    assert http.get("/admin/v2/brokers/health").text == "ok"
    assert http.get("/admin/v2/brokers/health", params={"topicVersion": "V2"}).text == "ok"
    assert http.get("/admin/v2/brokers/ready").text == "ok"
    assert http.get("/admin/v2/brokers").json() == [broker_id]
    assert http.get("/admin/v2/brokers/standalone").json() == [broker_id]
    assert http.get("/admin/v2/brokers/leaderBroker").json() == {"serviceUrl": broker.http_url, "brokerId": broker_id}
    owned = http.get(f"/admin/v2/brokers/standalone/{broker_id}/ownedNamespaces").json()
    assert owned["public/default/0x00000000_0xffffffff"]["is_active"] is True
    assert http.get("/admin/v2/brokers/standalone/10.0.0.1:8080/ownedNamespaces").status_code == 404
    names = http.get("/admin/v2/brokers/configuration").json()
    assert "ttlDurationDefaultInSeconds" in names and "bindAddress" not in names
    assert http.get("/admin/v2/brokers/configuration/values").json() == {}
    runtime = http.get("/admin/v2/brokers/configuration/runtime").json()
    assert runtime["clusterName"] == "standalone"
    assert runtime["brokerDeduplicationEnabled"] == "false"


def test_a_path_that_does_not_exist_is_not_a_missing_resource(http: httpx.Client, name: str) -> None:
    missing_topic = http.get(f"/admin/v2/persistent/public/default/{name}/stats")
    assert missing_topic.status_code == 404
    assert missing_topic.headers["content-type"].startswith("application/json")
    assert missing_topic.json() == {"reason": f"Topic persistent://public/default/{name} not found"}

    no_endpoint = http.get(f"/admin/v2/persistent/public/default/{name}/no-such-endpoint")
    assert no_endpoint.status_code == 404
    assert no_endpoint.headers["content-type"].startswith("text/html")
    assert "HTTP ERROR 404 Not Found" in no_endpoint.text
    assert f"/admin/v2/persistent/public/default/{name}/no-such-endpoint" in no_endpoint.text

    wrong_method = http.patch("/admin/v2/tenants")
    assert wrong_method.status_code == 405
    assert wrong_method.headers["content-type"].startswith("text/html")
    assert "GET" in wrong_method.headers["allow"]


def test_lookup_answers_this_broker(http: httpx.Client, broker: BrokerProcess, name: str) -> None:
    found = http.get(f"/lookup/v2/topic/persistent/public/default/{name}")
    assert found.status_code == 200
    assert found.json() == {
        "brokerUrl": broker.url,
        "brokerUrlTls": None,
        "httpUrl": broker.http_url,
        "httpUrlTls": None,
        "nativeUrl": broker.url,
    }
    assert http.get(f"/lookup/v2/topic/persistent/public/no-such-namespace/{name}").status_code == 404
    assert http.get("/lookup/v2/topic/durable/public/default/t").status_code == 412


def test_lookup_without_auto_creation_finds_only_topics_that_exist(module_broker_factory, name: str) -> None:
    broker = module_broker_factory(allowAutoTopicCreation="false")
    with httpx.Client(base_url=broker.http_url, timeout=10) as http:
        missing = http.get(f"/lookup/v2/topic/persistent/public/default/{name}")
        assert (missing.status_code, missing.json()) == (404, {"reason": "Topic not found."})
        # Pulsar has no metadata to check a non-persistent, non-partitioned topic against.
        assert http.get(f"/lookup/v2/topic/non-persistent/public/default/{name}").status_code == 200
        assert http.put(f"/admin/v2/persistent/public/default/{name}/partitions", json=2).status_code == 204
        assert http.get(f"/lookup/v2/topic/persistent/public/default/{name}-partition-1").status_code == 200
        assert http.get(f"/lookup/v2/topic/persistent/public/default/{name}-partition-2").status_code == 404
        # The partition metadata an HTTP lookup reads first: a topic that does not exist stays missing.
        metadata = http.get(
            f"/admin/v2/persistent/public/default/{name}-other/partitions", params={"checkAllowAutoCreation": "true"}
        )
        assert metadata.status_code == 404


def test_partition_metadata_for_http_lookup_follows_auto_creation(module_broker_factory, name: str) -> None:
    broker = module_broker_factory(allowAutoTopicCreationType="partitioned", defaultNumPartitions="2")
    with httpx.Client(base_url=broker.http_url, timeout=10) as http:
        path = f"/admin/v2/persistent/public/default/{name}/partitions"
        assert http.get(path).status_code == 404
        assert http.get(path, params={"checkAllowAutoCreation": "true"}).json()["partitions"] == 2
        assert (
            f"persistent://public/default/{name}" in http.get("/admin/v2/persistent/public/default/partitioned").json()
        )


def test_python_client_over_an_http_service_url(broker: BrokerProcess, client_factory, name: str) -> None:
    client = client_factory(broker.http_url)
    consumer = client.subscribe(
        f"persistent://public/default/{name}", "sub", initial_position=pulsar.InitialPosition.Earliest
    )
    client.create_producer(f"persistent://public/default/{name}").send(b"over http lookup")
    assert consumer.receive(timeout_millis=10000).data() == b"over http lookup"
