"""The metadata store: clusters, tenants, namespaces and their policies, partitioned topics.

Owns: versioned JSON records under Pulsar's metadata paths (`/admin/clusters/{cluster}`,
`/admin/policies/{tenant}`, `/admin/policies/{tenant}/{namespace}`,
`/admin/partitioned-topics/{tenant}/{namespace}/{domain}/{topic}`), kept in memory and written
through the group commit. Subscriptions are the durable cursors of each managed ledger
(`ManagedLedger.cursors`); they are not duplicated here. Must not touch: SQL (the engine's
`put_metadata` and `delete_metadata` store the records), ledgers, cursors.

Writes are serialised by one asyncio lock (they are rare) and reach memory only once durable, so a
reader never sees a record that a crash could take back. The engine checks each write against the version
it stores (other brokers of a cluster write the same records: the one that comes second gets
BadVersionError) and tells of the records other writers change (`record_changed`); the listeners hear of
every record that changed that way.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.storage.errors import RecordVersionError, StorageError

if TYPE_CHECKING:
    from magnetar.storage.access import StorageAccess

__all__ = ["MetadataStore", "BadVersionError", "NotFoundError", "AlreadyExistsError"]


BadVersionError = RecordVersionError


class NotFoundError(StorageError):
    server_error = "TopicNotFound"


class AlreadyExistsError(StorageError):
    pass


class MetadataStore:
    def __init__(self, factory: StorageAccess, rows: list[tuple[str, str, int]]) -> None:
        self._factory = factory
        self._records: dict[str, tuple[Any, int]] = {
            path: (json.loads(value), version) for path, value, version in rows
        }
        self._lock = asyncio.Lock()
        self._listeners: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ generic, versioned records

    def get(self, path: str) -> tuple[Any, int] | None:
        """(value, version) or None."""
        return self._records.get(path)

    def children(self, path: str) -> list[str]:
        """Names of the records directly under `path`."""
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix) :].split("/", 1)[0] for p in self._records if p.startswith(prefix)}
        return sorted(names)

    async def put(self, path: str, value: Any, expected_version: int | None = None) -> int:
        """Store `value`; `expected_version` -1 means "must not exist", None means "any". Returns the version."""
        encoded = json.dumps(value, sort_keys=True)
        async with self._lock:
            current = self._records.get(path)
            current_version = -1 if current is None else current[1]
            if expected_version is not None and expected_version != current_version:
                raise BadVersionError(f"{path}: version {current_version}, expected {expected_version}")
            self._factory.check_open()
            version = await self._factory.engine.put_metadata(path, encoded, current_version + 1)
            self._keep(path, json.loads(encoded), version)
            return version

    async def delete(self, path: str, expected_version: int | None = None) -> None:
        async with self._lock:
            current = self._records.get(path)
            if current is None:
                raise NotFoundError(f"{path}: not found")
            if expected_version is not None and expected_version != current[1]:
                raise BadVersionError(f"{path}: version {current[1]}, expected {expected_version}")
            self._factory.check_open()
            await self._factory.engine.delete_metadata(path)
            self._records.pop(path, None)

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """`listener(path)` after another writer changed, created or deleted the record at `path`."""
        self._listeners.append(listener)

    def record_changed(self, path: str, value: str | None, version: int) -> None:
        """What the engine read after another writer changed `path` (None: the record is gone). A version
        older than the one kept is a read overtaken by this store's own write, and changes nothing."""
        current = self._records.get(path)
        if value is None:
            if current is None:
                return
            del self._records[path]
        elif not self._keep(path, json.loads(value), version):
            return
        for listener in self._listeners:
            listener(path)

    def _keep(self, path: str, value: Any, version: int) -> bool:
        current = self._records.get(path)
        if current is not None and current[1] >= version:
            return False
        self._records[path] = (value, version)
        return True

    # ------------------------------------------------------------------ Pulsar's records

    async def ensure_defaults(self, cluster: str, cluster_data: dict[str, Any], tenant_admins: list[str]) -> None:
        """What a Pulsar standalone creates when they are missing (PulsarStandalone.createNameSpace): its
        cluster with `cluster_data` (its URLs), tenant `public` with `tenant_admins` (the super users) as its
        admins, and `public/default`. A registration without URLs, as magnetar stored its own cluster before,
        gets them."""
        record = self.get(f"/admin/clusters/{cluster}")
        if record is None:
            await self.create_cluster(cluster, cluster_data)
        elif not record[0]:
            await self.put(f"/admin/clusters/{cluster}", cluster_data, expected_version=record[1])
        if self.get("/admin/policies/public") is None:
            await self.create_tenant("public", {"adminRoles": tenant_admins, "allowedClusters": [cluster]})
        if self.get("/admin/policies/public/default") is None:
            await self.create_namespace("public/default", {"replication_clusters": [cluster]})

    async def create_cluster(self, name: str, data: dict[str, Any]) -> None:
        await self._create(f"/admin/clusters/{name}", data)

    def clusters(self) -> list[str]:
        return self.children("/admin/clusters")

    async def delete_cluster(self, name: str) -> None:
        """NotFoundError when the cluster is not registered."""
        await self.delete(f"/admin/clusters/{name}")

    async def create_tenant(self, tenant: str, info: dict[str, Any]) -> None:
        await self._create(f"/admin/policies/{tenant}", info)

    def tenants(self) -> list[str]:
        return [name for name in self.children("/admin/policies") if self.get(f"/admin/policies/{name}")]

    def tenant_info(self, tenant: str) -> dict[str, Any]:
        return self._value(f"/admin/policies/{tenant}")

    async def delete_tenant(self, tenant: str) -> None:
        if self.namespaces(tenant):
            raise StorageError(f"tenant {tenant} still has namespaces")
        await self.delete(f"/admin/policies/{tenant}")

    async def create_namespace(self, namespace: str, policies: dict[str, Any] | None = None) -> None:
        tenant, _ = _split_namespace(namespace)
        if self.get(f"/admin/policies/{tenant}") is None:
            raise NotFoundError(f"tenant {tenant} does not exist")
        await self._create(f"/admin/policies/{namespace}", policies or {})

    def namespaces(self, tenant: str) -> list[str]:
        return [f"{tenant}/{name}" for name in self.children(f"/admin/policies/{tenant}")]

    def namespace_policies(self, namespace: str) -> dict[str, Any]:
        return self._value(f"/admin/policies/{namespace}")

    async def set_namespace_policies(self, namespace: str, policies: dict[str, Any]) -> None:
        record = self.get(f"/admin/policies/{namespace}")
        if record is None:
            raise NotFoundError(f"namespace {namespace} does not exist")
        await self.put(f"/admin/policies/{namespace}", policies, expected_version=record[1])

    async def delete_namespace(self, namespace: str) -> None:
        if self.partitioned_topics(namespace):
            raise StorageError(f"namespace {namespace} still has partitioned topics")
        await self.delete(f"/admin/policies/{namespace}")

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """`topic` is `persistent://tenant/namespace/name`."""
        if partitions < 1:
            raise ValueError("a partitioned topic needs at least one partition")
        await self._create(_partitioned_path(topic), {"partitions": partitions})

    def partitioned_topic_metadata(self, topic: str) -> int:
        """Number of partitions, 0 for a non-partitioned topic (Pulsar's answer to a lookup)."""
        record = self.get(_partitioned_path(topic))
        return 0 if record is None else int(record[0]["partitions"])

    async def update_partitioned_topic(self, topic: str, partitions: int) -> None:
        path = _partitioned_path(topic)
        record = self.get(path)
        if record is None:
            raise NotFoundError(f"{topic} is not a partitioned topic")
        if partitions <= record[0]["partitions"]:
            raise StorageError(f"{topic}: partitions can only grow ({record[0]['partitions']} -> {partitions})")
        await self.put(path, {"partitions": partitions}, expected_version=record[1])

    async def delete_partitioned_topic(self, topic: str) -> None:
        await self.delete(_partitioned_path(topic))

    def partitioned_topics(self, namespace: str) -> list[str]:
        tenant, name = _split_namespace(namespace)
        result = []
        for domain in self.children(f"/admin/partitioned-topics/{tenant}/{name}"):
            for topic in self.children(f"/admin/partitioned-topics/{tenant}/{name}/{domain}"):
                result.append(f"{domain}://{tenant}/{name}/{topic}")
        return result

    async def _create(self, path: str, value: Any) -> None:
        try:
            await self.put(path, value, expected_version=-1)
        except BadVersionError as error:
            raise AlreadyExistsError(f"{path} already exists") from error

    def _value(self, path: str) -> Any:
        record = self.get(path)
        if record is None:
            raise NotFoundError(f"{path}: not found")
        return record[0]


def _split_namespace(namespace: str) -> tuple[str, str]:
    parts = namespace.split("/")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"namespace must be tenant/namespace, not {namespace!r}")
    return parts[0], parts[1]


def _partitioned_path(topic: str) -> str:
    domain, separator, rest = topic.partition("://")
    parts = rest.split("/")
    if not separator or domain not in ("persistent", "non-persistent") or len(parts) != 3 or not all(parts):
        raise ValueError(f"topic must be persistent://tenant/namespace/name, not {topic!r}")
    return f"/admin/partitioned-topics/{parts[0]}/{parts[1]}/{domain}/{parts[2]}"
