"""The MetadataStore contract (metadata/store.py), checked on every store with the same tests: versions,
creates and compare-and-set, parents, children, sequential and ephemeral nodes, `multi` all or nothing,
notifications and sessions. A store joins by adding its clients' maker to `STORES`; the tests of two
clients with a session each run on the stores whose clients have their own (`sessions`): the SQLite
store's session is its process's. tests/metadata runs the same tests on ZooKeeper."""

from __future__ import annotations

import asyncio
import functools

import pytest

from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.metadata.sqlite import SqliteMetadataStore
from magnetar.metadata.store import (
    BadVersionError,
    Check,
    ConnectionLostError,
    Delete,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationType,
    Put,
    SessionEvent,
)


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


class MemoryStores:
    """Clients of one tree, each with its session."""

    sessions = True

    def __init__(self, request) -> None:
        self.server = MemoryMetadataServer(time_ms=lambda: 1_700_000_000_000)

    async def connect(self):
        return self.server.connect()

    async def settle(self, store) -> None:
        """Until the notifications of the writes done so far reached `store`'s listeners."""
        await settle()

    async def close(self) -> None:
        pass


class SqliteStores:
    """The store of one file in the test's directory."""

    sessions = False

    def __init__(self, request) -> None:
        self.path = request.getfixturevalue("tmp_path") / "metadata.db"
        self.opened: list[SqliteMetadataStore] = []

    async def connect(self):
        store = await SqliteMetadataStore.open(self.path, time_ms=lambda: 1_700_000_000_000)
        self.opened.append(store)
        return store

    async def settle(self, store) -> None:
        await settle()

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


STORES = {"memory": MemoryStores, "sqlite": SqliteStores}


@pytest.fixture(params=sorted(STORES))
def stores(request):
    return STORES[request.param](request)


@pytest.fixture(params=sorted(name for name, maker in STORES.items() if maker.sessions))
def shared_stores(request):
    return STORES[request.param](request)


def scenario(test):
    """Run the async test `test` on a fresh event loop, then close the stores it connected."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        async def body():
            try:
                await test(*args, **kwargs)
            finally:
                for maker in (kwargs.get("stores"), kwargs.get("shared_stores")):
                    if maker is not None:
                        await maker.close()

        asyncio.run(body())

    return run


@scenario
async def test_put_get_versions(stores):
    store = await stores.connect()
    assert await store.get("/a/b") is None
    first = await store.put("/a/b", b"one")
    assert first.version == 0 and not first.ephemeral
    second = await store.put("/a/b", b"two", 0)
    assert second.version == 1
    got = await store.get("/a/b")
    assert got is not None and got.value == b"two" and got.stat.version == 1
    with pytest.raises(BadVersionError):
        await store.put("/a/b", b"three", 0)
    assert (await store.get("/a/b")).value == b"two"


@scenario
async def test_create_only_with_minus_one(stores):
    store = await stores.connect()
    await store.put("/x", b"1", -1)
    with pytest.raises(BadVersionError):
        await store.put("/x", b"2", -1)
    with pytest.raises(NotFoundError):
        await store.put("/missing", b"v", 3)


@scenario
async def test_parents_are_created_and_listed(stores):
    store = await stores.connect()
    await store.put("/managed-ledgers/public/default/persistent/t", b"info")
    assert await store.get_children("/managed-ledgers/public/default") == ["persistent"]
    assert await store.get_children("/managed-ledgers/public/default/persistent") == ["t"]
    assert await store.get_children("/nothing/here") == []
    parent = await store.get("/managed-ledgers/public")
    assert parent is not None and parent.value == b""


@scenario
async def test_delete_checks_version_and_children(stores):
    store = await stores.connect()
    await store.put("/p/c", b"")
    with pytest.raises(NotEmptyError):
        await store.delete("/p")
    with pytest.raises(BadVersionError):
        await store.delete("/p/c", 5)
    await store.delete("/p/c", 0)
    assert await store.exists("/p/c") is None
    with pytest.raises(NotFoundError):
        await store.delete("/p/c")
    await store.put("/r/s/t", b"")
    await store.delete_recursive("/r")
    assert await store.exists("/r") is None


@scenario
async def test_sequential_nodes_are_unique_and_ordered(stores):
    store = await stores.connect()
    await store.put("/ledgers/idgen", b"")
    paths = [(await store.put("/ledgers/idgen/ID-", b"", sequential=True)).path for _ in range(3)]
    assert len(set(paths)) == 3 and paths == sorted(paths)
    assert all(p.startswith("/ledgers/idgen/ID-") and len(p.rpartition("-")[2]) == 10 for p in paths)


@scenario
async def test_ephemeral_nodes_go_with_their_session(shared_stores):
    owner, other = await shared_stores.connect(), await shared_stores.connect()
    stat = await owner.put("/namespace/public/default/0x00000000_0x40000000", b"owner", -1, ephemeral=True)
    assert stat.ephemeral and stat.created_by_self
    seen = await other.exists("/namespace/public/default/0x00000000_0x40000000")
    assert seen is not None and seen.ephemeral and not seen.created_by_self
    with pytest.raises(BadVersionError):
        await other.put("/namespace/public/default/0x00000000_0x40000000", b"thief", -1, ephemeral=True)
    await owner.close()
    assert await other.exists("/namespace/public/default/0x00000000_0x40000000") is None
    assert (
        await other.put("/namespace/public/default/0x00000000_0x40000000", b"next", -1, ephemeral=True)
    ).version == 0


@scenario
async def test_multi_is_all_or_nothing(stores):
    store = await stores.connect()
    owner = await store.put("/own", b"me", ephemeral=True)
    await store.put("/ml/t", b"v0")
    stats = await store.multi([Check("/own", owner.version), Put("/ml/t", b"v1", 0), Put("/ml/t/c", b"cursor", -1)])
    assert stats[0] is None and stats[1].version == 1 and stats[2].version == 0
    with pytest.raises(BadVersionError):
        await store.multi([Put("/ml/t", b"v2", 1), Check("/own", owner.version + 1)])
    assert (await store.get("/ml/t")).value == b"v1"
    with pytest.raises(NotFoundError):
        await store.multi([Put("/ml/u", b"new"), Delete("/gone")])
    assert await store.exists("/ml/u") is None


@scenario
async def test_a_lost_ownership_stops_the_write(shared_stores):
    owner, other = await shared_stores.connect(), await shared_stores.connect()
    held = await owner.put("/own", b"me", -1, ephemeral=True)
    await owner.put("/ml/t", b"v0")
    await owner.close()
    await other.put("/own", b"other", -1, ephemeral=True)
    with pytest.raises(BadVersionError):
        await other.multi([Check("/own", held.version + 1), Put("/ml/t", b"late", 0)])


@scenario
async def test_notifications_reach_every_client(shared_stores):
    writer, watcher = await shared_stores.connect(), await shared_stores.connect()
    seen: list[Notification] = []
    watcher.register_listener(seen.append)
    await writer.put("/w/n", b"1")
    await writer.put("/w/n", b"2")
    await writer.delete("/w/n")
    await shared_stores.settle(watcher)
    mine = [n for n in seen if n.path in ("/w", "/w/n")]
    assert Notification(NotificationType.CREATED, "/w/n") in mine
    assert Notification(NotificationType.MODIFIED, "/w/n") in mine
    assert Notification(NotificationType.DELETED, "/w/n") in mine
    assert Notification(NotificationType.CHILDREN_CHANGED, "/w") in mine


@scenario
async def test_memory_session_faults():
    server = MemoryMetadataServer()
    store, other = server.connect(), server.connect()
    events: list[SessionEvent] = []
    store.register_session_listener(events.append)
    await store.put("/lock", b"", ephemeral=True)
    store.lose_connection()
    with pytest.raises(ConnectionLostError):
        await store.get("/lock")
    store.reconnect()
    assert await store.exists("/lock") is not None
    store.expire_session()
    await settle()
    assert events == [
        SessionEvent.CONNECTION_LOST,
        SessionEvent.RECONNECTED,
        SessionEvent.CONNECTION_LOST,
        SessionEvent.SESSION_LOST,
        SessionEvent.SESSION_REESTABLISHED,
    ]
    assert await other.exists("/lock") is None
    assert (await store.put("/lock", b"", -1, ephemeral=True)).created_by_self
