from __future__ import annotations

import pytest

from magnetar.storage import AlreadyExistsError, BadVersionError, NotFoundError, StorageError


def test_the_standalone_defaults_are_created_where_missing(run_storage):
    urls = {"serviceUrl": "http://127.0.0.1:8080", "brokerServiceUrl": "pulsar://127.0.0.1:6650"}

    async def scenario(factory):
        meta = factory.metadata
        assert meta.clusters() == []
        await meta.ensure_defaults("standalone", urls, ["admin"])
        assert meta.clusters() == ["standalone"]
        assert meta.get("/admin/clusters/standalone")[0] == urls
        assert meta.tenants() == ["public"]
        assert meta.tenant_info("public") == {"adminRoles": ["admin"], "allowedClusters": ["standalone"]}
        assert meta.namespaces("public") == ["public/default"]
        # What exists stays as it is; a registration without URLs (older magnetar) gets them.
        await meta.put("/admin/clusters/standalone", {})
        await meta.put("/admin/policies/public", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        await meta.ensure_defaults("standalone", urls, ["admin"])
        assert meta.get("/admin/clusters/standalone")[0] == urls
        assert meta.tenant_info("public")["adminRoles"] == ["ops"]

    run_storage(scenario)


def test_records_survive_restart_and_versions_guard_updates(run_storage):
    async def first(factory):
        meta = factory.metadata
        await meta.ensure_defaults("standalone", {}, [])
        await meta.create_tenant("acme", {"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
        await meta.create_namespace("acme/orders", {"retention_policies": {"retentionTimeInMinutes": 5}})
        await meta.create_partitioned_topic("persistent://acme/orders/in", 4)
        with pytest.raises(AlreadyExistsError):
            await meta.create_tenant("acme", {})
        with pytest.raises(NotFoundError):
            await meta.create_namespace("nobody/x")
        _, version = meta.get("/admin/policies/acme/orders")
        await meta.put("/admin/policies/acme/orders", {"a": 1}, expected_version=version)
        with pytest.raises(BadVersionError):
            await meta.put("/admin/policies/acme/orders", {"a": 2}, expected_version=version)

    async def second(factory):
        meta = factory.metadata
        assert meta.tenants() == ["acme", "public"]
        assert meta.namespace_policies("acme/orders") == {"a": 1}
        assert meta.partitioned_topic_metadata("persistent://acme/orders/in") == 4
        assert meta.partitioned_topic_metadata("persistent://acme/orders/plain") == 0
        assert meta.partitioned_topics("acme/orders") == ["persistent://acme/orders/in"]
        await meta.update_partitioned_topic("persistent://acme/orders/in", 6)
        with pytest.raises(StorageError):
            await meta.update_partitioned_topic("persistent://acme/orders/in", 2)
        with pytest.raises(StorageError):
            await meta.delete_namespace("acme/orders")
        await meta.delete_partitioned_topic("persistent://acme/orders/in")
        await meta.delete_namespace("acme/orders")
        await meta.delete_tenant("acme")
        assert meta.tenants() == ["public"]

    run_storage(first)
    run_storage(second)
