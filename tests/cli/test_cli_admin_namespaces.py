"""`magnetar admin clusters|tenants|namespaces …` as subprocesses against one broker process.

Each test works on its own tenant; exit codes, JSON answers and the effect of policies on clients are
checked, and every failure must be the broker's reason on stderr, not a traceback.
"""

from __future__ import annotations

import json
import uuid

import pytest
from cli_runner import fails, magnetar, ok, ok_json


@pytest.fixture
def admin(module_broker):
    """`admin(*args)` → the argument list of `magnetar admin --admin-url <broker> *args`."""
    return lambda *args: ["admin", "--admin-url", module_broker.http_url, *args]


@pytest.fixture
def tenant() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_clusters_list_and_get(admin) -> None:
    clusters = ok_json(*admin("clusters", "list"))
    assert clusters == ["standalone"]
    assert isinstance(ok_json(*admin("clusters", "get", "standalone")), dict)
    assert "Cluster does not exist" in fails(*admin("clusters", "get", "no-such-cluster"))


def test_clusters_delete(admin) -> None:
    cluster = f"gone-{uuid.uuid4().hex[:8]}"
    ok(*admin("clusters", "create", cluster, "-u", "http://127.0.0.1:1", "-b", "pulsar://127.0.0.1:1"))
    assert cluster in ok_json(*admin("clusters", "list"))
    result = ok(*admin("clusters", "delete", cluster))
    assert result.stdout == ""  # silent for scripts, as pulsar-admin is
    assert cluster not in ok_json(*admin("clusters", "list"))
    assert "Cluster does not exist" in fails(*admin("clusters", "get", cluster))
    assert "Cluster does not exist" in fails(*admin("clusters", "delete", cluster))


def test_tenant_create_get_update_delete(admin, tenant) -> None:
    assert ok(*admin("tenants", "create", tenant)).stdout == ""  # silent for scripts, as pulsar-admin
    # Without --allowed-clusters the tenant may use every cluster, as pulsar-admin decides.
    assert ok_json(*admin("tenants", "get", tenant)) == {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert tenant in ok_json(*admin("tenants", "list"))
    assert "Tenant already exists" in fails(*admin("tenants", "create", tenant))
    ok(*admin("tenants", "update", tenant, "-r", "ops,audit"))
    # What update was not given stays as it was.
    assert ok_json(*admin("tenants", "get", tenant)) == {
        "adminRoles": ["ops", "audit"],
        "allowedClusters": ["standalone"],
    }
    ok(*admin("tenants", "delete", tenant))
    assert tenant not in ok_json(*admin("tenants", "list"))
    assert "Tenant does not exist" in fails(*admin("tenants", "get", tenant))


def test_tenant_with_namespaces_is_deleted_only_with_force(admin, tenant) -> None:
    ok(*admin("tenants", "create", tenant, "-c", "standalone"))
    ok(*admin("namespaces", "create", f"{tenant}/ns"))
    assert "active namespaces" in fails(*admin("tenants", "delete", tenant))
    ok(*admin("tenants", "delete", tenant, "--force"))
    assert tenant not in ok_json(*admin("tenants", "list"))


def test_namespace_create_list_delete(admin, tenant) -> None:
    ok(*admin("tenants", "create", tenant))
    ok(*admin("namespaces", "create", f"{tenant}/a", "-c", "standalone"))
    ok(*admin("namespaces", "create", f"{tenant}/b"))
    assert ok_json(*admin("namespaces", "list", tenant)) == [f"{tenant}/a", f"{tenant}/b"]
    assert "already exists" in fails(*admin("namespaces", "create", f"{tenant}/a"))
    ok(*admin("namespaces", "delete", f"{tenant}/a"))
    assert ok_json(*admin("namespaces", "list", tenant)) == [f"{tenant}/b"]
    assert "does not exist" in fails(*admin("namespaces", "list", "no-such-tenant"))


def test_namespace_policies_set_get_and_shown_together(admin, tenant) -> None:
    namespace = f"{tenant}/orders"
    ok(*admin("tenants", "create", tenant))
    ok(*admin("namespaces", "create", namespace))

    ok(*admin("namespaces", "set-retention", namespace, "--size", "10M", "--time", "3h"))
    assert ok_json(*admin("namespaces", "get-retention", namespace)) == {
        "retentionTimeInMinutes": 180,
        "retentionSizeInMB": 10,
    }
    ok(*admin("namespaces", "set-retention", namespace, "-s", "-1", "-t", "-1"))
    assert ok_json(*admin("namespaces", "get-retention", namespace)) == {
        "retentionTimeInMinutes": -1,
        "retentionSizeInMB": -1,
    }
    ok(*admin("namespaces", "set-message-ttl", namespace, "-ttl", "1h"))
    assert ok_json(*admin("namespaces", "get-message-ttl", namespace)) == 3600
    ok(*admin("namespaces", "set-deduplication", namespace, "--enable"))
    assert ok_json(*admin("namespaces", "get-deduplication", namespace)) is True
    ok(*admin("namespaces", "set-deduplication", namespace, "-d"))
    assert ok_json(*admin("namespaces", "get-deduplication", namespace)) is False
    ok(*admin("namespaces", "set-clusters", namespace, "-c", "standalone"))
    assert ok_json(*admin("namespaces", "get-clusters", namespace)) == ["standalone"]
    ok(*admin("namespaces", "set-subscription-types-enabled", namespace, "-t", "Shared,Key_Shared"))
    types = ok_json(*admin("namespaces", "get-subscription-types-enabled", namespace))
    assert sorted(types) == ["Key_Shared", "Shared"]

    policies = ok_json(*admin("namespaces", "policies", namespace))
    assert policies["retention_policies"] == {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1}
    assert policies["message_ttl_in_seconds"] == 3600
    assert policies["deduplicationEnabled"] is False
    assert policies["replication_clusters"] == ["standalone"]
    assert sorted(policies["subscription_types_enabled"]) == ["Key_Shared", "Shared"]


def test_subscription_types_policy_reaches_consume(admin, tenant, module_broker) -> None:
    namespace = f"{tenant}/typed"
    ok(*admin("tenants", "create", tenant))
    ok(*admin("namespaces", "create", namespace))
    ok(*admin("namespaces", "set-subscription-types-enabled", namespace, "-t", "Shared"))
    topic = f"persistent://{namespace}/t"
    url = ["--service-url", module_broker.url]
    ok("produce", topic, "-m", "hello", *url)
    refused = fails("consume", topic, "-s", "x", "-t", "Exclusive", *url)
    assert "NotAllowed" in refused
    received = ok("consume", topic, "-s", "y", "-t", "Shared", "-p", "Earliest", *url)
    assert json.loads(received.stdout)["content"] == "hello"


def test_bad_options_are_usage_errors(admin, tenant) -> None:
    ok(*admin("tenants", "create", tenant))
    ok(*admin("namespaces", "create", f"{tenant}/ns"))
    assert "exactly one of --enable or --disable" in fails(
        *admin("namespaces", "set-deduplication", f"{tenant}/ns"), code=2
    )
    bad_size = admin("namespaces", "set-retention", f"{tenant}/ns", "-s", "ten", "-t", "1h")
    assert "is not a size" in fails(*bad_size, code=2)
    assert "is not a time" in fails(*admin("namespaces", "set-message-ttl", f"{tenant}/ns", "-ttl", "soon"), code=2)
    # A namespace name without its tenant is refused before any request.
    assert "invalid namespace name" in fails(*admin("namespaces", "policies", "lonely"))


def test_unreachable_admin_url_is_one_line_on_stderr() -> None:
    stderr = fails("admin", "--admin-url", "http://127.0.0.1:9", "tenants", "list")
    assert stderr.startswith("magnetar: cannot reach the admin API at http://127.0.0.1:9")


def test_admin_url_from_the_environment(module_broker) -> None:
    result = magnetar("admin", "tenants", "list", env={"MAGNETAR_ADMIN_URL": module_broker.http_url})
    assert result.returncode == 0, result.stderr
    assert "public" in json.loads(result.stdout)


def test_table_output_for_people(module_broker, tenant) -> None:
    ok("admin", "--admin-url", module_broker.http_url, "tenants", "create", tenant, "-r", "ops")
    result = magnetar("admin", "--admin-url", module_broker.http_url, "--output", "table", "tenants", "get", tenant)
    assert result.returncode == 0
    lines = result.stdout.splitlines()
    assert lines[0].strip() == tenant
    assert any("adminRoles" in line and "ops" in line for line in lines)
    assert any("allowedClusters" in line and "standalone" in line for line in lines)
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


def test_clusters_create_update_and_topic_replication_clusters(broker, tenant) -> None:
    """Register a second cluster, replicate a namespace to it, then narrow one topic back to this cluster."""
    admin = ["admin", "--admin-url", broker.http_url]
    ok(*admin, "clusters", "create", "r2", "-u", "http://127.0.0.1:1", "-b", "pulsar://127.0.0.1:1")
    ok(*admin, "clusters", "update", "r2", "-b", "pulsar://127.0.0.1:2")
    assert ok_json(*admin, "clusters", "get", "r2")["brokerServiceUrl"] == "pulsar://127.0.0.1:2"
    ok(*admin, "tenants", "create", tenant, "-c", "standalone,r2")
    namespace = f"{tenant}/geo"
    ok(*admin, "namespaces", "create", namespace, "-c", "standalone,r2")
    topic = f"{namespace}/audit"
    ok(*admin, "topics", "create", topic)
    assert ok_json(*admin, "topics", "get-replication-clusters", topic) == ["r2", "standalone"]
    ok(*admin, "topics", "set-replication-clusters", topic, "-c", "standalone")
    assert ok_json(*admin, "topics", "get-replication-clusters", topic) == ["standalone"]
    assert "Invalid cluster id: nowhere" in fails(*admin, "topics", "set-replication-clusters", topic, "-c", "nowhere")
    ok(*admin, "topics", "remove-replication-clusters", topic)
    assert ok_json(*admin, "topics", "get-replication-clusters", topic) == ["r2", "standalone"]
