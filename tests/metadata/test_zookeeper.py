"""The ZooKeeper store against a real ZooKeeper 3.9 (one JVM for the module, from `make bookkeeper`'s
classpath): the whole MetadataStore contract of tests/unit/metadata, then what only ZooKeeper has: an
expired session, a transaction refused whole, another client's writes notified, the chroot, and the tree
as ZooKeeper's own command-line client reads it. Here, not in tests/unit, because it needs a JVM."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from kazoo.client import KazooClient

from bookkeeper_fixture import ZooKeeperServer, start_zookeeper
from magnetar.metadata.store import BadVersionError, Check, Notification, NotificationType, Put, SessionEvent
from magnetar.metadata.urls import open_metadata_store
from magnetar.metadata.zookeeper import ZKMetadataStore
from unit.metadata.test_store_contract import (
    scenario,
    test_a_lost_ownership_stops_the_write,
    test_create_only_with_minus_one,
    test_delete_checks_version_and_children,
    test_ephemeral_nodes_go_with_their_session,
    test_multi_is_all_or_nothing,
    test_notifications_reach_every_client,
    test_parents_are_created_and_listed,
    test_put_get_versions,
    test_sequential_nodes_are_unique_and_ordered,
)

CONTRACT = [
    test_a_lost_ownership_stops_the_write,
    test_create_only_with_minus_one,
    test_delete_checks_version_and_children,
    test_ephemeral_nodes_go_with_their_session,
    test_multi_is_all_or_nothing,
    test_notifications_reach_every_client,
    test_parents_are_created_and_listed,
    test_put_get_versions,
    test_sequential_nodes_are_unique_and_ordered,
]
# The ZooKeeper tests' session timeout: the server's tickTime is 500 ms, its minimum session 1 s.
SESSION_TIMEOUT_MS = 4000
_chroots = itertools.count()


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    server = start_zookeeper(tmp_path_factory)
    yield server
    server.stop()


class ZooKeeperStores:
    """Clients of one ZooKeeper, each with its session, under a chroot of the test's own."""

    sessions = True

    def __init__(self, server: ZooKeeperServer) -> None:
        self.server = server
        self.chroot = f"/contract-{next(_chroots)}"
        self.opened: list[ZKMetadataStore] = []

    async def connect(self) -> ZKMetadataStore:
        store = await ZKMetadataStore.connect(self.server.address, self.chroot, SESSION_TIMEOUT_MS)
        self.opened.append(store)
        return store

    async def settle(self, store: ZKMetadataStore) -> None:
        """ZooKeeper sends a client a change's watch event before the reply to any read the client sends
        after the change: one read, and the events are on the loop."""
        await store.exists("/")
        for _ in range(3):
            await asyncio.sleep(0)

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


@pytest.fixture
def stores(zookeeper):
    return ZooKeeperStores(zookeeper)


@pytest.fixture
def shared_stores(zookeeper):
    return ZooKeeperStores(zookeeper)


for _test in CONTRACT:
    globals()[_test.__name__] = _test


async def wait_for(condition, what: str) -> None:
    """Until `condition()` holds, for at most a minute: a bound on a hang, not a timing assertion."""
    for _ in range(1200):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"still waiting for {what}")


def expire(server: ZooKeeperServer, store: ZKMetadataStore) -> None:
    """Expire `store`'s session as ZooKeeper does for a client gone quiet, at once: a second client joins the
    same session (its id and password) and closes it."""
    session_id, password = store._client.client_id
    twin = KazooClient(hosts=server.address, client_id=(session_id, password))
    twin.start(timeout=30)
    twin.stop()
    twin.close()


@scenario
async def test_an_expired_session_loses_its_ephemerals_and_gets_a_new_one(stores):
    owner, other = await stores.connect(), await stores.connect()
    events: list[SessionEvent] = []
    owner.register_session_listener(events.append)
    await owner.put("/loadbalance/brokers/127.0.0.1:8080", b"{}", -1, ephemeral=True)
    first_session = owner.session_id
    expire(stores.server, owner)
    await wait_for(lambda: SessionEvent.SESSION_REESTABLISHED in events, "a new session")
    assert events[-2:] == [SessionEvent.SESSION_LOST, SessionEvent.SESSION_REESTABLISHED]
    assert owner.session_id not in (None, first_session)
    assert await other.exists("/loadbalance/brokers/127.0.0.1:8080") is None
    again = await owner.put("/loadbalance/brokers/127.0.0.1:8080", b"{}", -1, ephemeral=True)
    assert again.created_by_self
    seen = await other.exists("/loadbalance/brokers/127.0.0.1:8080")
    assert seen is not None and seen.ephemeral and not seen.created_by_self


@scenario
async def test_a_failing_check_leaves_nothing_of_the_transaction(stores):
    store = await stores.connect()
    held = await store.put("/namespace/public/default/0x00000000_0xffffffff", b"me", -1, ephemeral=True)
    await store.put("/managed-ledgers/public/default/persistent/t", b"v0")
    with pytest.raises(BadVersionError):
        await store.multi(
            [
                Put("/managed-ledgers/public/default/persistent/t", b"v1", 0),
                Put("/managed-ledgers/public/other/persistent/u/cursor", b"c", -1),
                Check("/namespace/public/default/0x00000000_0xffffffff", held.version + 1),
            ]
        )
    assert (await store.get("/managed-ledgers/public/default/persistent/t")).value == b"v0"
    # Nor the parents its create would have made.
    assert await store.exists("/managed-ledgers/public/other") is None


@scenario
async def test_another_clients_writes_are_notified(stores):
    writer, watcher = await stores.connect(), await stores.connect()
    seen: list[Notification] = []
    watcher.register_listener(seen.append)
    await writer.multi([Put("/admin/policies/public/default", b"{}", -1)])
    await writer.put("/admin/policies/public/default", b'{"retention": 1}', 0)
    await stores.settle(watcher)
    assert Notification(NotificationType.CREATED, "/admin/policies/public/default") in seen
    assert Notification(NotificationType.CHILDREN_CHANGED, "/admin/policies/public") in seen
    assert Notification(NotificationType.MODIFIED, "/admin/policies/public/default") in seen


@scenario
async def test_the_session_timeout_is_the_one_the_server_granted(zookeeper):
    # The fixture's server grants at most 20 s (maxSessionTimeout): a broker asking for Pulsar's 30 s
    # default must count its lease on 20.
    asked = await ZKMetadataStore.connect(zookeeper.address, "", 30_000)
    granted = await ZKMetadataStore.connect(zookeeper.address, "", SESSION_TIMEOUT_MS)
    try:
        assert asked.session_timeout_ms == 20_000
        assert granted.session_timeout_ms == SESSION_TIMEOUT_MS
    finally:
        await asked.close()
        await granted.close()


@scenario
async def test_the_chroot_holds_the_tree(zookeeper):
    store = await open_metadata_store(
        f"zk:{zookeeper.address}/pulsar/chroot-test", session_timeout_ms=SESSION_TIMEOUT_MS
    )
    bare = await open_metadata_store(zookeeper.address, session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        stat = await store.put("/admin/clusters/standalone", b"{}")
        assert stat.path == "/admin/clusters/standalone"
        assert await store.get_children("/") == ["admin"]
        outside = await bare.get("/pulsar/chroot-test/admin/clusters/standalone")
        assert outside is not None and outside.value == b"{}"
        assert await bare.exists("/admin/clusters/standalone") is None
    finally:
        await store.close()
        await bare.close()


@scenario
async def test_zookeepers_own_cli_reads_pulsars_paths(zookeeper):
    store = await open_metadata_store(f"zk:{zookeeper.address}", session_timeout_ms=SESSION_TIMEOUT_MS)
    try:
        await store.put("/admin/partitioned-topics/public/default/persistent/orders", b'{"partitions":4}')
        await store.put("/loadbalance/brokers/127.0.0.1:8080", b'{"pulsarServiceUrl":"x"}', -1, ephemeral=True)
        got = await asyncio.to_thread(
            zookeeper.cli, "get", "/admin/partitioned-topics/public/default/persistent/orders"
        )
        assert got.returncode == 0, got.stderr
        assert '{"partitions":4}' in got.stdout
        listed = await asyncio.to_thread(zookeeper.cli, "ls", "/loadbalance/brokers")
        assert "127.0.0.1:8080" in listed.stdout, listed.stdout + listed.stderr
    finally:
        await store.close()
