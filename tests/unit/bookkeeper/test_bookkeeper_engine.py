"""The BookKeeper engine under the managed ledger, on in-process fake bookies and the memory metadata store:
appends and reads across rollovers, the ledger list and cursors as Pulsar's records at Pulsar's paths, a
reload that recovers what an unclosed engine left, fencing of the first owner when a second loads the
topic, the owner's Checks, a racing load refused, retention deleting BookKeeper ledgers."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from magnetar.bookkeeper import BookKeeper, MemoryLedgerManager
from magnetar.bookkeeper.errors import NoSuchLedgerError
from magnetar.clock import LoopClock
from magnetar.metadata.memory import MemoryMetadataServer, MemoryMetadataStore
from magnetar.metadata.store import Check
from magnetar.positions import Position
from magnetar.sim.bookkeeper.bookie import FakeBookies
from magnetar.storage import BadVersionError, LedgerFencedError, ManagedLedgerFactory, StorageConfig, StorageError
from magnetar.storage import ml_data_formats_pb2 as pb
from magnetar.storage.bookkeeper_engine import BookKeeperEngine, managed_ledger_path

TOPIC = "persistent://public/default/bk-engine"
PATH = "/managed-ledgers/public/default/persistent/bk-engine"
CONFIG = StorageConfig(
    managedLedgerMaxEntriesPerLedger=5,
    managedLedgerMinLedgerRolloverTimeMinutes=0,
    defaultRetentionTimeInMinutes=-1,
    defaultRetentionSizeInMB=-1,
    managedLedgerDefaultEnsembleSize=3,
    managedLedgerDefaultWriteQuorum=3,
    managedLedgerDefaultAckQuorum=2,
)


class Cluster:
    """Bookies, their ledger metadata and a metadata store, shared by the engines (brokers) of a test."""

    def __init__(self) -> None:
        self.bookies = FakeBookies(reverse_answers=True)
        self.ledgers = MemoryLedgerManager(("b0:3181", "b1:3181", "b2:3181"), first_ledger_id=1)
        self.metadata = MemoryMetadataServer()

    async def factory(
        self,
        config: StorageConfig = CONFIG,
        checks: Callable[[str], list[Check]] | None = None,
        store: MemoryMetadataStore | None = None,
    ) -> ManagedLedgerFactory:
        clock = LoopClock(asyncio.get_running_loop(), lambda: 1_000)
        bookkeeper = BookKeeper(self.ledgers, self.bookies, clock=clock, rng=random.Random(3))
        engine = BookKeeperEngine(bookkeeper, store or self.metadata.connect(), config, checks=checks)
        return await ManagedLedgerFactory.open("unused", config, engine=engine, clock=clock)


def run(scenario: Callable[[Cluster], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario(Cluster()))


async def append_all(factory: ManagedLedgerFactory, count: int, prefix: str = "m") -> list[Position]:
    ledger = await factory.open_ledger(TOPIC)
    futures = [ledger.append(f"{prefix}{i}".encode(), i, 1, 100 + i, "p", i) for i in range(count)]
    return list(await asyncio.gather(*futures))


def test_path_is_pulsars_persistence_naming() -> None:
    assert managed_ledger_path(TOPIC) == PATH
    assert managed_ledger_path("persistent://t/n/a b/c") == "/managed-ledgers/t/n/persistent/a%20b%2Fc"


def test_entries_cursors_and_records_survive_a_clean_reload() -> None:
    async def scenario(cluster: Cluster) -> None:
        factory = await cluster.factory()
        positions = await append_all(factory, 12)
        ledger = await factory.open_ledger(TOPIC)
        many = await ledger.append_many([b"x", b"y", b"z"], [1, 2, 3], [1, 1, 2], [7, 8, 9], ["q", "q", "q"], [1, 2, 3])
        cursor = await ledger.open_cursor("sub", "earliest")
        cursor.delete([positions[0], positions[1], positions[4], positions[6]])
        cursor.delete_batch_indexes(positions[8], 3, [0, 2])
        cursor.properties["replicated"] = 1
        await cursor.flush()
        assert len({p.ledger_id for p in positions}) == 3
        await factory.close()

        stored = await cluster.metadata.connect().get(PATH)
        assert stored is not None
        info = pb.ManagedLedgerInfo.FromString(stored.value)
        listed = [(item.ledgerId, item.entries) for item in info.ledgerInfo]
        assert [entries for _, entries in listed] == [5, 5, 5]
        cursor_node = await cluster.metadata.connect().get(PATH + "/sub")
        assert cursor_node is not None
        cursor_info = pb.ManagedCursorInfo.FromString(cursor_node.value)
        assert cursor_info.cursorsLedgerId == -1
        assert (cursor_info.markDeleteLedgerId, cursor_info.markDeleteEntryId) == tuple(positions[1])
        metadata = (await cluster.ledgers.read_ledger_metadata(listed[0][0])).metadata
        assert metadata.is_closed and metadata.custom_metadata == {
            "application": b"pulsar",
            "component": b"managed-ledger",
            "pulsar/managed-ledger": b"public/default/persistent/bk-engine",
        }

        again = await cluster.factory()
        reloaded = await again.open_ledger(TOPIC)
        entries = await reloaded.read_entries(positions[0], 20)
        assert [entry.data for entry in entries] == [f"m{i}".encode() for i in range(12)] + [b"x", b"y", b"z"]
        assert [entry.position for entry in entries] == positions + list(many)
        assert [(e.sticky_key_hash, e.publish_time, e.producer_name, e.sequence_id) for e in entries[:2]] == [
            (0, 100, "p", 0),
            (1, 101, "p", 1),
        ]
        restored = reloaded.cursors["sub"]
        assert restored.mark_delete_position == positions[1]
        assert positions[4] in restored.individually_deleted and positions[6] in restored.individually_deleted
        assert restored.acked_batch_indexes(positions[8]) == (3, 0b101)
        assert restored.properties == {"replicated": 1}
        assert len(await append_all(again, 3, "after")) == 3
        await again.close()

    run(scenario)


def test_every_kind_of_metadata_record_is_there_after_a_reload() -> None:
    """The layers above keep records under four roots (engine_records.RECORD_ROOTS); a broker started again,
    or the next owner, must find each: a topic's delayed-delivery flag read back as unset let its delayed
    messages out early after a restart."""
    paths = [
        "/admin/policies/public/default",
        "/schemas/public/default/bk-engine",
        "/topic-policies/public/default/persistent/bk-engine",
        "/delayed-delivery/public/default/persistent/bk-engine",
    ]

    async def scenario(cluster: Cluster) -> None:
        factory = await cluster.factory()
        for index, path in enumerate(paths):
            await factory.metadata.put(path, {"record": index})
        await factory.close()
        again = await cluster.factory()
        found = [again.metadata.get(path) for path in paths]
        assert [record[0] if record else None for record in found] == [{"record": i} for i in range(len(paths))]
        await again.close()

    run(scenario)


async def settle() -> None:
    """Let the notifications and the reads they start run (the memory store answers within a turn)."""
    for _ in range(20):
        await asyncio.sleep(0)


def test_a_record_another_broker_writes_reaches_this_brokers_records_and_listeners() -> None:
    """Brokers of a cluster share their policies: a namespace policy set through one broker applies to the
    topics another owns, so each broker's records follow the others' writes, creates and deletes."""
    path = "/admin/policies/public/ns"

    async def scenario(cluster: Cluster) -> None:
        first, second = await cluster.factory(), await cluster.factory()
        heard: list[str] = []
        second.metadata.add_listener(heard.append)
        version = await first.metadata.put(path, {"deduplicationEnabled": True}, expected_version=-1)
        await settle()
        assert second.metadata.get(path) == ({"deduplicationEnabled": True}, version)
        assert heard == [path]
        newer = await second.metadata.put(path, {"deduplicationEnabled": False}, expected_version=version)
        await settle()
        assert first.metadata.get(path) == ({"deduplicationEnabled": False}, newer)
        assert heard == [path], "a broker's own write is not news to it"
        await first.metadata.delete(path)
        await settle()
        assert second.metadata.get(path) is None
        assert heard == [path, path]
        await first.close()
        await second.close()

    run(scenario)


def test_a_write_on_a_stale_record_is_refused_and_the_records_are_read_again_after_a_reconnection() -> None:
    """ZooKeeper notifies nothing of what changed while a broker was disconnected: that broker's next write
    of the record is refused by compare-and-set (it would undo the other's change), and once reconnected it
    reads the records again, the deleted ones included."""
    changed, deleted = "/admin/policies/public/ns", "/topic-policies/public/ns/persistent/t"

    async def scenario(cluster: Cluster) -> None:
        store = cluster.metadata.connect()
        first, second = await cluster.factory(), await cluster.factory(store=store)
        await first.metadata.put(changed, {"message_ttl_in_seconds": 60})
        await first.metadata.put(deleted, {"compactionThreshold": 1})
        await settle()
        assert second.metadata.get(deleted) is not None
        store.lose_connection()
        await first.metadata.put(changed, {"message_ttl_in_seconds": 120})
        await first.metadata.delete(deleted)
        await settle()
        assert second.metadata.get(changed) == ({"message_ttl_in_seconds": 60}, 0)
        store.reconnect()
        with pytest.raises(BadVersionError):
            await second.metadata.put(changed, {"message_ttl_in_seconds": 30})
        await settle()
        assert second.metadata.get(changed) == ({"message_ttl_in_seconds": 120}, 1)
        assert second.metadata.get(deleted) is None
        await second.metadata.put(changed, {"message_ttl_in_seconds": 30}, expected_version=1)
        await settle()
        assert first.metadata.get(changed) == ({"message_ttl_in_seconds": 30}, 2)
        await first.close()
        await second.close()

    run(scenario)


def test_a_record_deleted_while_records_remain_below_it_can_be_created_again() -> None:
    """A tenant's node keeps its namespaces below it: deleting the tenant's record empties the node, and a
    broker creating the tenant again writes into it at the version the store has."""

    async def scenario(cluster: Cluster) -> None:
        factory = await cluster.factory()
        await factory.metadata.put("/admin/policies/t", {"adminRoles": []}, expected_version=-1)
        await factory.metadata.put("/admin/policies/t/ns", {}, expected_version=-1)
        await factory.metadata.delete("/admin/policies/t")
        assert factory.metadata.get("/admin/policies/t") is None
        version = await factory.metadata.put("/admin/policies/t", {"adminRoles": ["a"]}, expected_version=-1)
        assert factory.metadata.get("/admin/policies/t") == ({"adminRoles": ["a"]}, version)
        assert version == 2
        await factory.close()

    run(scenario)


def test_a_second_owner_fences_the_first_and_reads_everything_it_receipted() -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.factory()
        receipted = await append_all(first, 7)
        ledger = await first.open_ledger(TOPIC)
        in_flight = [ledger.append(f"late{i}".encode()) for i in range(3)]

        second = await cluster.factory()
        taken = await second.open_ledger(TOPIC)
        outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
        receipted += [outcome for outcome in outcomes if isinstance(outcome, Position)]
        with pytest.raises(LedgerFencedError):
            await ledger.append(b"after the fence")
        entries = await taken.read_entries(receipted[0], 100)
        by_position = {entry.position: entry.data for entry in entries}
        assert all(position in by_position for position in receipted)
        assert await append_all(second, 2, "new")
        await second.close()
        await first.close()

    run(scenario)


def test_a_write_whose_check_fails_is_refused_and_fences_the_topic() -> None:
    async def scenario(cluster: Cluster) -> None:
        owner = cluster.metadata.connect()
        stat = await owner.put("/namespace/public/default/0x00000000_0xffffffff", b"broker-1", -1, ephemeral=True)
        factory = await cluster.factory(checks=lambda topic: [Check(stat.path, stat.version)])
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub")
        await append_all(factory, 3)
        await owner.put(stat.path, b"broker-2", stat.version)
        with pytest.raises(StorageError):
            cursor.mark_delete(ledger.last_confirmed_entry)
            await cursor.flush()
        refused = await asyncio.gather(*[ledger.append(b"x") for _ in range(3)], return_exceptions=True)
        assert all(isinstance(outcome, LedgerFencedError) for outcome in refused)
        await factory.close()

    run(scenario)


def test_a_load_refused_when_another_broker_wrote_the_list_after_it_read_it() -> None:
    async def scenario(cluster: Cluster) -> None:
        first = await cluster.factory()
        await append_all(first, 3)
        second = await cluster.factory()
        engine = second.engine
        assert isinstance(engine, BookKeeperEngine)
        create = engine._create
        created: list[int] = []

        async def create_while_another_loads(topic: Any, ledger_id: int) -> Any:
            other = await cluster.factory()
            await other.open_ledger(TOPIC)
            created.append(ledger_id)
            return await create(topic, ledger_id)

        engine._create = create_while_another_loads  # type: ignore[method-assign]
        with pytest.raises(LedgerFencedError):
            await second.open_ledger(TOPIC)
        with pytest.raises(NoSuchLedgerError):
            await cluster.ledgers.read_ledger_metadata(created[0])
        await second.close()
        await first.close()

    run(scenario)


def test_retention_deletes_consumed_ledgers_from_the_list_and_the_bookies() -> None:
    async def scenario(cluster: Cluster) -> None:
        config = CONFIG.with_changes(defaultRetentionTimeInMinutes=0, defaultRetentionSizeInMB=0)
        factory = await cluster.factory(config)
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(factory, 11)
        first_ledger = positions[0].ledger_id
        cursor.mark_delete(positions[9])
        await cursor.flush()
        await factory.trims_settled()
        stored = await cluster.metadata.connect().get(PATH)
        assert stored is not None
        listed = [item.ledgerId for item in pb.ManagedLedgerInfo.FromString(stored.value).ledgerInfo]
        assert first_ledger not in listed and positions[10].ledger_id in listed
        with pytest.raises(NoSuchLedgerError):
            await cluster.ledgers.read_ledger_metadata(first_ledger)
        await factory.close()
        again = await cluster.factory(config)
        reloaded = await again.open_ledger(TOPIC)
        assert reloaded.entries_added_counter == 11
        assert [entry.data for entry in await reloaded.read_entries(positions[10], 5)] == [b"m10"]
        await again.close()

    run(scenario)


def test_a_field_that_does_not_fit_fails_its_ledger_and_the_next_ledger_takes_appends() -> None:
    async def scenario(cluster: Cluster) -> None:
        factory = await cluster.factory()
        ledger = await factory.open_ledger(TOPIC)
        good = ledger.append(b"ok")
        too_big = ledger.append(b"bad", sticky_key_hash=2**40)
        for refused in (too_big, good):
            with pytest.raises(StorageError, match="does not fit"):
                await refused
        after = await ledger.append(b"after")
        assert after.entry_id == 0 and after.ledger_id != refused_in_ledger(too_big)
        assert [entry.data for entry in await ledger.read_entries(after, 5)] == [b"after"]
        assert factory.pending_adds == 0
        await factory.close()

    run(scenario)


def refused_in_ledger(refused: asyncio.Future[Position]) -> int:
    """The ledger an append was refused in, from its error's message."""
    error = refused.exception()
    assert error is not None
    return int(str(error).split("ledger ")[1].split(":")[0])


def test_a_topic_moved_from_a_broker_with_newer_ledger_ids_keeps_its_ledgers_in_id_order() -> None:
    """The broker the topic moves to generated its ledger ids ahead before the first owner created the
    topic's ledgers: its load, and its rollovers after, use none of those older ids (a managed ledger's
    ledgers go in increasing id order), as after a kill -9 of the owner in a cluster of processes."""

    async def scenario(cluster: Cluster) -> None:
        new_owner = await cluster.factory()
        old_owner = await cluster.factory()
        receipted = await append_all(old_owner, 12)
        ledger = await new_owner.open_ledger(TOPIC)
        entries = await ledger.read_entries(receipted[0], 100)
        assert [entry.position for entry in entries] == receipted
        after = await append_all(new_owner, 12, "after")
        assert after[0] > receipted[-1]
        assert [position.ledger_id for position in after] == sorted(position.ledger_id for position in after)
        await new_owner.close()
        await old_owner.close()

    run(scenario)


def test_appends_submitted_while_adds_are_out_share_bookkeeper_entries() -> None:
    """Sixty SENDs, one a loop turn, as a quiet producer's arrive: each turn's submission waits while two
    adds are out and goes out with the others that waited, so the ledger holds far fewer BookKeeper entries
    than SENDs; every SEND keeps its own position, and a reload reads them all back from the bookies."""
    config = CONFIG.with_changes(managedLedgerMaxEntriesPerLedger=1_000)

    async def scenario(cluster: Cluster) -> None:
        factory = await cluster.factory(config)
        ledger = await factory.open_ledger(TOPIC)
        futures = []
        for i in range(60):
            futures.append(ledger.append(f"m{i}".encode(), i, 1, 100 + i, "p", i))
            await asyncio.sleep(0)
        positions = await asyncio.gather(*futures)
        ledger_id = positions[0].ledger_id
        assert positions == [Position(ledger_id, i) for i in range(60)]
        bk_entries = {entry for (stored, entry) in cluster.bookies.entries["b0:3181"] if stored == ledger_id}
        assert 1 < len(bk_entries) <= 30, bk_entries
        await factory.close()
        again = await cluster.factory(config)
        reloaded = await again.open_ledger(TOPIC)
        read = await reloaded.read_entries(Position(ledger_id, 0), 100)
        assert [(entry.data, entry.sticky_key_hash) for entry in read] == [(f"m{i}".encode(), i) for i in range(60)]
        await again.close()

    run(scenario)
