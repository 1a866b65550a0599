"""The official Go admin client (pulsaradmin, in github.com/apache/pulsar-client-go v0.19.0) against a
broker process, and the Go client looking topics up over HTTP.

Regressions it found: topic listing failed because `/admin/v2/non-persistent/...` answered 404; the
create-partitioned-topic body pulsaradmin sends was refused with 400; the `brokers` endpoints answered
404; a tenant without admin roles (pulsaradmin sends `"adminRoles": null`) was refused with 400; an
`http://` service URL could not be used for lack of `/lookup/v2/topic/...`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from go_compat import scenarios_against


@pytest.fixture(scope="module")
def go(module_broker) -> Callable[[str], dict[str, Any]]:
    return scenarios_against(module_broker)


@pytest.fixture(scope="module")
def resources(go) -> dict[str, Any]:
    return go("admin-resources")


@pytest.fixture(scope="module")
def topics(go) -> dict[str, Any]:
    return go("admin-topics")


@pytest.fixture(scope="module")
def brokers(go) -> dict[str, Any]:
    return go("admin-brokers")


def test_clusters_are_listed_with_this_brokers_urls(resources: dict[str, Any], module_broker) -> None:
    assert resources["clusters"] == ["standalone"]
    assert resources["cluster_service_url"] == module_broker.http_url
    assert resources["cluster_broker_service_url"] == module_broker.url


def test_tenant_created_read_and_deleted(resources: dict[str, Any]) -> None:
    assert resources["tenant_listed"] is True
    assert resources["tenant_allowed_clusters"] == ["standalone"]
    assert resources["tenant_create_again_status"] == 409
    assert resources["deleted_tenant_get_status"] == 404


def test_namespace_created_with_policies_and_deleted(resources: dict[str, Any]) -> None:
    tenant = resources["namespaces"][0].split("/")[0]
    assert resources["namespaces"] == [f"{tenant}/ns"]
    assert resources["namespace_replication_clusters"] == ["standalone"]
    assert resources["namespace_message_ttl"] == 120
    assert resources["namespaces_after_delete"] == []


def test_topic_listing_covers_both_domains(topics: dict[str, Any]) -> None:
    # pulsaradmin's List asks the persistent and the non-persistent listings, plain and partitioned.
    assert topics["empty_namespace_list"] == {"partitioned": None, "non_partitioned": None}
    plain = topics["list"]["non_partitioned"]
    namespace = plain[-1].removeprefix("persistent://").rsplit("/", 1)[0]
    assert topics["list"] == {
        "partitioned": [f"persistent://{namespace}/parted"],
        "non_partitioned": [
            f"non-persistent://{namespace}/volatile",
            f"persistent://{namespace}/parted-partition-0",
            f"persistent://{namespace}/parted-partition-1",
            f"persistent://{namespace}/plain",
        ],
    }
    # The namespace's own listing answers persistent topics unless asked for another mode, as Pulsar's.
    assert topics["namespace_topics"] == [
        f"persistent://{namespace}/parted-partition-0",
        f"persistent://{namespace}/parted-partition-1",
        f"persistent://{namespace}/plain",
    ]
    assert topics["list_after_delete"] == {"partitioned": None, "non_partitioned": None}


def test_topics_created_and_partitions_grown(topics: dict[str, Any]) -> None:
    assert topics["create_existing_status"] == 409
    assert topics["partitions"] == 2
    assert topics["partitions_after_update"] == 3
    assert topics["shrink_status"] == 422  # Pulsar 4.0.7: fewer partitions are unprocessable


def test_topic_stats_and_subscriptions(topics: dict[str, Any]) -> None:
    assert topics["stats_msg_in_counter"] == 5
    assert topics["stats_sub_backlog"] == 5
    assert topics["stats_sub_consumers"] == 1
    assert topics["subscriptions"] == ["created", "sub"]
    assert topics["created_subscription_backlog"] == 5
    assert topics["subscriptions_after_delete"] == ["sub"]
    assert topics["missing_subscription_delete_status"] == 404
    assert topics["deleted_topic_stats_status"] == 404


def test_brokers_endpoints(brokers: dict[str, Any], module_broker) -> None:
    broker_id = module_broker.http_url.removeprefix("http://")
    assert brokers["health_check_error"] == ""
    assert brokers["leader"] == {"serviceUrl": module_broker.http_url, "brokerId": broker_id}
    assert brokers["active_brokers"] == [broker_id]
    assert brokers["list_active_brokers"] == [broker_id]
    # Pulsar without authorization accepts any cluster name here.
    assert brokers["unknown_cluster_status"] == 0
    assert brokers["owned_namespaces"]["public/default/0x00000000_0xffffffff"] == {
        "broker_assignment": "shared",
        "is_controlled": False,
        "is_active": True,
    }


def test_broker_configuration_listings(brokers: dict[str, Any]) -> None:
    names = brokers["dynamic_configuration_names"]
    assert "allowAutoTopicCreation" in names and "keySharedUnblockingIntervalMs" in names
    assert "clusterName" not in names  # not dynamic in Pulsar either
    assert brokers["dynamic_configuration_values"] == {}
    runtime = brokers["runtime_configuration"]
    assert runtime["clusterName"] == "standalone"
    assert runtime["allowAutoTopicCreation"] == "true"


def test_http_service_url_looks_topics_up_over_http(go) -> None:
    report = go("http-lookup")
    plain, partitioned = sorted(report, key=lambda topic: "partitioned" in topic)
    assert report[plain] == {"received_sorted": ["m-0", "m-1", "m-2", "m-3"], "partitions": [plain]}
    assert report[partitioned]["received_sorted"] == ["m-0", "m-1", "m-2", "m-3"]
    assert report[partitioned]["partitions"] == [f"{partitioned}-partition-0", f"{partitioned}-partition-1"]


def test_subscription_cursor_skip_reset_peek_and_last_message_id(go) -> None:
    report = go("admin-subscriptions")
    assert report["created"] == {"backlog": 10, "next": "m-0"}
    assert report["peek_3"] == ["m-0", "m-1", "m-2"]
    assert report["skip_2"] == {"backlog": 8, "next": "m-2"}
    assert report["reset_to_m5_id"] == {"backlog": 5, "next": "m-5"}
    assert report["reset_to_time_before_m3"] == {"backlog": 7, "next": "m-3"}
    assert report["backlog_after_clear"] == 0
    assert report["last_message_id"] == report["m9_id"]
