"""What the SQLite store has of its own (its session is the process's: ephemeral nodes go at close and
at the next open, the tree stays in the file, its listeners hear its writes) and the URLs that name a
store (urls.py)."""

from __future__ import annotations

import pytest
from test_store_contract import scenario, settle

from magnetar.metadata.memory import MemoryMetadataStore
from magnetar.metadata.sqlite import SqliteMetadataStore
from magnetar.metadata.store import Notification, NotificationType, SessionExpiredError
from magnetar.metadata.urls import open_metadata_store
from magnetar.metadata.zookeeper import parse_zookeeper_url


@scenario
async def test_sqlite_keeps_the_tree_and_drops_ephemerals_at_close(tmp_path):
    store = await SqliteMetadataStore.open(tmp_path / "metadata.db", time_ms=lambda: 1_000)
    await store.put("/admin/clusters/standalone", b"{}")
    owned = await store.put("/namespace/public/default/0x00000000_0xffffffff", b"me", -1, ephemeral=True)
    assert owned.ephemeral and owned.created_by_self and owned.creation_ms == 1_000
    await store.put("/ledgers/idgen/ID-", b"", sequential=True)
    await store.close()
    with pytest.raises(SessionExpiredError):
        await store.get("/admin/clusters/standalone")
    reopened = await SqliteMetadataStore.open(tmp_path / "metadata.db", time_ms=lambda: 2_000)
    try:
        assert (await reopened.get("/admin/clusters/standalone")).value == b"{}"
        assert await reopened.exists("/namespace/public/default/0x00000000_0xffffffff") is None
        # The sequence goes on from the file's counter.
        assert (await reopened.put("/ledgers/idgen/ID-", b"", sequential=True)).path == "/ledgers/idgen/ID-0000000001"
    finally:
        await reopened.close()


@scenario
async def test_sqlite_ephemerals_a_crash_left_go_at_open(tmp_path):
    crashed = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    await crashed.put("/loadbalance/brokers/127.0.0.1:8080", b"{}", ephemeral=True)
    # No close: the process died. The next one opens the file.
    reopened = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    try:
        assert await reopened.exists("/loadbalance/brokers/127.0.0.1:8080") is None
        assert await reopened.get_children("/loadbalance/brokers") == []
    finally:
        await reopened.close()
        await crashed.close()


@scenario
async def test_sqlite_notifies_its_own_listeners(tmp_path):
    store = await SqliteMetadataStore.open(tmp_path / "metadata.db")
    seen: list[Notification] = []
    store.register_listener(seen.append)
    try:
        await store.put("/r/s/t", b"")
        await store.put("/r/s/t", b"1")
        await store.delete_recursive("/r")
        await settle()
    finally:
        await store.close()
    assert seen[:2] == [
        Notification(NotificationType.CREATED, "/r"),
        Notification(NotificationType.CHILDREN_CHANGED, "/"),
    ]
    assert Notification(NotificationType.MODIFIED, "/r/s/t") in seen
    assert seen[-2:] == [
        Notification(NotificationType.DELETED, "/r"),
        Notification(NotificationType.CHILDREN_CHANGED, "/"),
    ]


def test_zookeeper_urls():
    assert parse_zookeeper_url("zk:h1:2181,h2:2181/pulsar") == ("h1:2181,h2:2181", "/pulsar")
    assert parse_zookeeper_url("zk:h1:2181") == ("h1:2181", "")
    assert parse_zookeeper_url("h1:2181/") == ("h1:2181", "")
    with pytest.raises(ValueError, match="names no host"):
        parse_zookeeper_url("zk:/pulsar")


@scenario
async def test_open_names_sqlite_and_memory_stores(tmp_path):
    sqlite = await open_metadata_store("sqlite:metadata/cluster.db", data_dir=tmp_path)
    await sqlite.close()
    assert (tmp_path / "metadata" / "cluster.db").exists()
    first = await open_metadata_store("memory:two-brokers")
    second = await open_metadata_store("memory:two-brokers")
    other = await open_metadata_store("memory:elsewhere")
    assert isinstance(first, MemoryMetadataStore)
    await first.put("/shared", b"1")
    assert await second.exists("/shared") is not None
    assert await other.exists("/shared") is None


@scenario
async def test_an_unknown_url_names_the_accepted_forms():
    for url in ("etcd:http://127.0.0.1:2379", "sqlite:", "memory:", "nothing"):
        with pytest.raises(ValueError, match=r"zk:host1:2181,host2:2181/chroot.*sqlite:<path>.*memory:<name>"):
            await open_metadata_store(url)
