from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.positions import EARLIEST, LATEST, Position
from magnetar.storage import (
    ManagedLedgerFactory,
    StorageBusyError,
    StorageConfig,
    managed_ledger_internal_stats,
)
from magnetar.storage.entry_cache import ENTRY_OVERHEAD_BYTES, EntryCache
from magnetar.storage.entry_reader import READ_ENTRIES_MAX, REPLAY_READ_GAP_MAX, _nearby_runs
from magnetar.storage.sqlite_engine import Run

TOPIC = "persistent://public/default/t"


async def append_all(ledger, payloads):
    return await asyncio.gather(*(ledger.append(p, i, 1, 1000 + i, "p", i) for i, p in enumerate(payloads)))


def test_append_assigns_positions_in_order_and_rolls_over_by_entry_count(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        positions = await append_all(ledger, [b"m%d" % i for i in range(12)])
        first = positions[0][0]
        assert positions == [Position(first + i // 5, i % 5) for i in range(12)]
        assert ledger.last_confirmed_entry == positions[-1]
        assert [info.entries for info in ledger.ledgers] == [5, 5, 2]
        entries = await ledger.read_entries(positions[0], 100)
        assert [e.data for e in entries] == [b"m%d" % i for i in range(12)]
        assert entries[3].sticky_key_hash == 3 and entries[3].publish_time == 1003 and entries[3].sequence_id == 3

    run_storage(scenario)


def test_rollover_by_size(run_storage, small_config):
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=50_000, managedLedgerMaxSizePerLedgerMbytes=1)
    payload = b"x" * (400 * 1024)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        positions = await append_all(ledger, [payload] * 4)
        # the third entry crosses 1 MB, so the fourth opens a new ledger
        assert [p[1] for p in positions] == [0, 1, 2, 0]

    run_storage(scenario, config)


def test_no_rollover_before_min_rollover_time(run_storage, small_config):
    config = small_config.with_changes(managedLedgerMinLedgerRolloverTimeMinutes=10)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        positions = await append_all(ledger, [b"x"] * 12)
        assert {p[0] for p in positions} == {positions[0][0]}

    run_storage(scenario, config)


def test_restart_opens_a_new_ledger_and_keeps_everything(run_storage, tmp_path: Path):
    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        return await append_all(ledger, [b"a", b"b", b"c"])

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        assert ledger.last_confirmed_entry == written[-1]
        assert ledger.entries_added_counter == 3
        new = await ledger.append(b"d")
        assert new[0] > written[-1][0] and new[1] == 0
        factory.cache.__init__(factory.cache.capacity_bytes)  # force reads from disk
        entries = await ledger.read_entries(EARLIEST, 10)
        assert [e.data for e in entries] == [b"a", b"b", b"c", b"d"]

    written = run_storage(first)
    run_storage(second)


def test_read_positions_and_range_reads_come_from_disk_when_not_cached(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        positions = await append_all(ledger, [b"e%d" % i for i in range(20)])
        factory.cache.__init__(factory.cache.capacity_bytes)
        wanted = [positions[17], positions[2], positions[9], (999, 0)]
        entries = await ledger.read_positions(wanted)
        assert [e.data for e in entries] == [b"e17", b"e2", b"e9"]
        middle = await ledger.read_entries(positions[4], 7)
        assert [e.data for e in middle] == [b"e%d" % i for i in range(4, 11)]

    run_storage(scenario)


def test_a_read_stops_at_the_entry_that_reaches_its_byte_bound_across_ledgers(run_storage):
    """dispatcherMaxReadSizeBytes: a cursor read takes entries until their data reaches the bound (the one
    that reaches it included, so an entry larger than the bound is still read), and the next read goes
    on from there; entries span two ledgers (five per ledger here)."""

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        payloads = [bytes([65 + i]) * (100 * (i + 1)) for i in range(8)]
        await append_all(ledger, payloads)
        cursor = await ledger.open_cursor("bounded", "earliest")
        taken = []
        while batch := await cursor.read_entries(100, 450):
            taken.append([e.data for e in batch])
        # 100+200+300 reaches 450 at the third; 400+500 at the fifth, the first ledger's last, so the
        # read stops before the second ledger; 600, 700 and 800 are each past the bound alone.
        assert taken == [payloads[0:3], payloads[3:5], [payloads[5]], [payloads[6]], [payloads[7]]]
        everything = await ledger.open_cursor("unbounded", "earliest")
        assert [e.data for e in await everything.read_entries(100)] == payloads

    run_storage(scenario)


def test_tailing_reads_are_served_from_the_cache(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("tail")
        for _round in range(5):
            await append_all(ledger, [b"x"] * 10)
            assert len(await cursor.read_entries(100)) == 10
        assert factory.cache.misses == 0 and factory.cache.hits == 50

    run_storage(scenario)


def test_cache_stays_within_its_budget(run_storage, small_config):
    config = small_config.with_changes(managedLedgerCacheSizeMB=1)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        await append_all(ledger, [b"y" * 10_000] * 300)
        factory.cache.check_invariants()
        assert factory.cache.evictions > 0

    run_storage(scenario, config)


def test_wait_for_new_entries_wakes_a_tailing_reader(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        waiting = asyncio.ensure_future(ledger.wait_for_new_entries(ledger.last_confirmed_entry))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        await ledger.append(b"z")
        await asyncio.wait_for(waiting, 5)

    run_storage(scenario)


def test_appends_beyond_max_pending_adds_are_refused(run_storage, small_config):
    config = small_config.with_changes(managedLedgerMaxPendingAdds=10)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        futures = [ledger.append(b"q") for _ in range(10)]
        with pytest.raises(StorageBusyError):
            ledger.append(b"q")
        await asyncio.gather(*futures)
        await ledger.append(b"q")

    run_storage(scenario, config)


def test_consumed_ledgers_are_deleted_without_retention_and_ids_never_reused(run_storage, small_config):
    config = small_config.with_changes(defaultRetentionTimeInMinutes=0, defaultRetentionSizeInMB=0)

    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(ledger, [b"r"] * 12)
        cursor.mark_delete(positions[7])
        await factory.trims_settled()
        # the first ledger is consumed; the second still holds unacknowledged entries
        assert ledger.ledgers[0].ledger_id == positions[5][0]
        cursor.mark_delete(positions[-1])
        await factory.trims_settled()
        # every closed ledger is consumed; the current one is never deleted
        assert [info.ledger_id for info in ledger.ledgers] == [positions[-1][0]]
        return positions

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        new = await ledger.append(b"s")
        assert new[0] > positions[-1][0]
        cursor = ledger.cursors["sub"]
        assert cursor.mark_delete_position == positions[-1]
        assert cursor.number_of_entries_in_backlog() == 1

    positions = run_storage(first, config)
    run_storage(second, config)


def test_entries_added_counter_counts_trimmed_entries_across_restarts(run_storage, small_config):
    """The index of the first stored entry (entriesAddedCounter - numberOfEntries) survives retention
    and restarts: a reader holding an old position learns how many entries it lost."""
    config = small_config.with_changes(defaultRetentionTimeInMinutes=0, defaultRetentionSizeInMB=0)

    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(ledger, [b"t"] * 12)
        cursor.mark_delete(positions[9])
        await factory.trims_settled()
        assert ledger.first_position() == positions[10]
        assert ledger.entries_added_counter - ledger.number_of_entries == 10

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        assert ledger.entries_added_counter == 12
        assert ledger.entries_added_counter - ledger.number_of_entries == 10
        await factory.delete_ledger(TOPIC)
        again = await factory.open_ledger(TOPIC)
        assert again.entries_added_counter == 0

    run_storage(first, config)
    run_storage(second, config)


def test_retention_size_keeps_consumed_ledgers_up_to_the_quota(run_storage, small_config):
    config = small_config.with_changes(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=1)
    payload = b"k" * 100_000

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(ledger, [payload] * 30)
        cursor.mark_delete(positions[-1])
        await factory.trims_settled()
        assert ledger.total_size <= 1024 * 1024 + 5 * len(payload)
        assert ledger.total_size > 1024 * 1024 - 5 * len(payload)

    run_storage(scenario, config)


def test_consumed_ledgers_are_kept_for_the_retention_time(run_storage, small_config, manual_clock):
    """defaultRetentionTimeInMinutes counts from a ledger's last entry; the retention check runs every
    retentionCheckIntervalInSeconds (120) on the storage's clock."""
    config = small_config.with_changes(defaultRetentionTimeInMinutes=60, defaultRetentionSizeInMB=-1)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(ledger, [b"o"] * 12)
        cursor.mark_delete(positions[-1])
        await cursor.flush()  # nothing for the periodic flush to wait for: the timers run back to back
        await factory.trims_settled()
        assert ledger.number_of_entries == 12
        await manual_clock.advance(59 * 60)
        await factory.trims_settled()
        assert ledger.number_of_entries == 12, "consumed, but younger than the retention time"
        await manual_clock.advance(60)
        await factory.trims_settled()
        assert [info.ledger_id for info in ledger.ledgers] == [positions[-1][0]]

    run_storage(scenario, config, manual_clock)


def test_infinite_retention_keeps_everything(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(ledger, [b"i"] * 12)
        cursor.mark_delete(positions[-1])
        await factory.trims_settled()
        assert ledger.number_of_entries == 12

    run_storage(scenario)


def test_delete_ledger_removes_topic_data(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        await ledger.open_cursor("sub")
        await append_all(ledger, [b"d"] * 7)
        await factory.delete_ledger(TOPIC)
        assert TOPIC not in factory.topics()
        again = await factory.open_ledger(TOPIC)
        assert again.number_of_entries == 0 and not again.cursors

    run_storage(scenario)


def test_internal_stats_have_pulsar_fields(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_all(ledger, [b"abc"] * 7)
        await cursor.read_entries(4)
        cursor.delete([positions[2], positions[3]])
        stats = managed_ledger_internal_stats(ledger)
        assert stats["entriesAddedCounter"] == 7 and stats["numberOfEntries"] == 7 and stats["totalSize"] == 21
        assert stats["currentLedgerEntries"] == 2 and stats["currentLedgerSize"] == 6
        assert stats["lastConfirmedEntry"] == str(positions[-1])
        assert [(info["ledgerId"], info["entries"]) for info in stats["ledgers"]] == [
            (positions[0][0], 5),
            (positions[5][0], 2),
        ]
        sub = stats["cursors"]["sub"]
        first = positions[0][0]
        assert sub["markDeletePosition"] == f"{first}:-1"
        assert sub["readPosition"] == f"{first}:4"
        assert sub["individuallyDeletedMessages"] == f"[({first}:1..{first}:3]]"
        assert sub["messagesConsumedCounter"] == 2
        assert sub["numberOfEntriesSinceFirstNotAckedMessage"] == 4
        assert sub["totalNonContiguousDeletedMessagesRange"] == 1
        assert {"waitingReadOp", "pendingReadOps", "cursorLedger", "state", "active", "properties"} <= set(sub)

    run_storage(scenario)


@settings(max_examples=40, deadline=None)
@given(
    max_entries=st.integers(1, 7),
    batches=st.lists(st.integers(1, 9), min_size=1, max_size=6),
    restart_after=st.integers(0, 6),
)
def test_rollover_positions_and_counting_agree_with_a_flat_model(
    tmp_path_factory, small_config, max_entries, batches, restart_after
):
    """Property: however entries are batched, rolled and restarted, positions are dense per ledger,
    reads return the appends in order, and count/next/previous agree with a flat list."""
    data_dir = str(tmp_path_factory.mktemp("roll"))
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=max_entries)

    async def main():
        factory = await ManagedLedgerFactory.open(data_dir, config)
        positions: list[Position] = []
        payloads: list[bytes] = []
        for index, size in enumerate(batches):
            if index == restart_after:
                await factory.close()
                factory = await ManagedLedgerFactory.open(data_dir, config)
            ledger = await factory.open_ledger(TOPIC)
            batch = [b"%d-%d" % (index, n) for n in range(size)]
            positions += await append_all(ledger, batch)
            payloads += batch
        ledger = await factory.open_ledger(TOPIC)
        factory.cache.__init__(factory.cache.capacity_bytes)
        entries = await ledger.read_entries(EARLIEST, 1000)
        assert [e.data for e in entries] == payloads
        assert [e.position for e in entries] == positions
        for ledger_id in {p[0] for p in positions}:
            ids = sorted(p[1] for p in positions if p[0] == ledger_id)
            assert ids == list(range(len(ids))) and len(ids) <= max_entries
        before_first = ledger.previous_position(positions[0])
        for i, position in enumerate(positions):
            assert ledger.next_valid_position(before_first if i == 0 else positions[i - 1]) == position
            if i:
                assert ledger.previous_position(position) == positions[i - 1]
            for j in range(i, len(positions), 3):
                assert ledger.count_entries(position, positions[j]) == j - i
        assert ledger.count_entries(before_first, positions[-1]) == len(positions)
        ledger.check_invariants()
        await factory.close()

    asyncio.run(main())


def test_non_durable_cursor_is_not_persisted(run_storage, tmp_path: Path):
    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        positions = await append_all(ledger, [b"n"] * 3)
        reader = ledger.new_non_durable_cursor(EARLIEST)
        assert [e.position for e in await reader.read_entries(10)] == positions
        latest = ledger.new_non_durable_cursor(LATEST)
        assert await latest.read_entries(10) == []
        reader.delete(positions[0])
        with pytest.raises(ValueError):
            reader.flush()

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        assert ledger.cursors == {}

    run_storage(first)
    run_storage(second)


def test_journal_sync_data_false_still_persists_on_clean_close(run_storage, small_config):
    config = small_config.with_changes(journalSyncData=False)

    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        await append_all(ledger, [b"u"] * 3)

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        assert ledger.number_of_entries == 3

    run_storage(first, config)
    run_storage(second, config)


def test_config_from_broker_conf_keys():
    config = StorageConfig.from_mapping({"managedLedgerMaxEntriesPerLedger": 7, "brokerServicePort": 6650})
    assert config.managedLedgerMaxEntriesPerLedger == 7


def test_a_backlog_scan_larger_than_the_cache_keeps_the_appended_tail_cached(run_storage):
    """A scan of more than the cache holds may fill only COLD_SHARE of it with what it reads from
    disk: the appended tail stays for the next scan, and readers scanning together share reads."""
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1, managedLedgerCacheSizeMB=1)
    entry = b"z" * 10_000

    async def scenario(factory):
        cache = factory.cache
        ledger = await factory.open_ledger(TOPIC)
        positions = [p for _ in range(10) for p in await ledger.append_many(*_columns([entry] * 30))]
        cache.check_invariants()
        tail = positions[-60:]
        assert all(cache.get(p) is not None for p in tail), "the newest appends are cached"
        for _scan in range(2):
            start = EARLIEST
            while True:
                entries = await ledger.read_entries(start, 10)
                if not entries:
                    break
                # A second reader right behind the first finds what the first read from disk.
                misses = cache.misses
                assert [e.data for e in await ledger.read_entries(start, 10)] == [e.data for e in entries]
                assert cache.misses == misses
                start = entries[-1].position
                start = (start[0], start[1] + 1)
                cache.check_invariants()
            assert cache.cold_bytes <= cache.cold_capacity_bytes < cache.size_bytes
            assert all(cache.get(p) is not None for p in tail), "a scan does not evict the appended tail"

    run_storage(scenario, config)


def _columns(datas: list[bytes]) -> tuple[list, ...]:
    count = len(datas)
    return datas, [7] * count, [1] * count, [1000] * count, ["p"] * count, list(range(count))


def test_read_positions_mixes_cached_runs_and_disk_in_the_order_asked(run_storage):
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1, managedLedgerCacheSizeMB=1)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        datas = [b"%06d" % i + b"." * 5000 for i in range(400)]
        positions = [
            p for start in range(0, 400, 50) for p in await ledger.append_many(*_columns(datas[start : start + 50]))
        ]
        assert factory.cache.get(positions[0]) is None and factory.cache.get(positions[-1]) is not None
        wanted = [positions[i] for i in (399, 398, 5, 6, 7, 200, 3, 399, 100)] + [(positions[0][0], 400), (999, 1)]
        entries = await ledger.read_positions(wanted)
        assert [e.data[:6] for e in entries] == [b"%06d" % i for i in (399, 398, 5, 6, 7, 200, 3, 399, 100)]
        assert [e.position for e in entries] == wanted[:9]

    run_storage(scenario, config)


def test_a_replay_of_scattered_positions_reads_only_near_them(run_storage):
    """Two positions 300 entries apart are two small reads, not one of the 300 between (a Key_Shared replay
    at saturation read whole backlogs that way)."""
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1, managedLedgerCacheSizeMB=1)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        datas = [b"%06d" % i for i in range(400)]
        positions = [
            p for start in range(0, 400, 20) for p in await ledger.append_many(*_columns(datas[start : start + 20]))
        ]
        factory.cache.__init__(factory.cache.capacity_bytes)
        engine = factory.engine
        asked: list[tuple[int, int]] = []
        read_entries = engine.read_entries

        async def counting(ledger_id, first, last):
            asked.append((first, last))
            return await read_entries(ledger_id, first, last)

        engine.read_entries = counting
        wanted = [positions[i] for i in (350, 10, 12, 40)]
        entries = await ledger.read_positions(wanted)
        assert [e.data for e in entries] == [b"%06d" % i for i in (350, 10, 12, 40)]
        assert asked == [(positions[10][1], positions[40][1]), (positions[350][1], positions[350][1])]

    run_storage(scenario, config)


def test_nearby_runs_split_at_gaps_ledgers_and_the_read_bound():
    gap = REPLAY_READ_GAP_MAX
    assert _nearby_runs([]) == []
    assert _nearby_runs([(1, 0), (1, gap), (1, 2 * gap + 1), (2, 2 * gap + 2)]) == [
        (1, 0, gap),
        (1, 2 * gap + 1, 2 * gap + 1),
        (2, 2 * gap + 2, 2 * gap + 2),
    ]
    steps = [(1, i * gap) for i in range(READ_ENTRIES_MAX // gap + 2)]
    ranges = _nearby_runs(steps)
    assert len(ranges) == 2 and all(last - first < READ_ENTRIES_MAX for _, first, last in ranges)


def test_evicting_runs_that_are_not_a_ledgers_first_keeps_the_index_right():
    """Eviction takes the oldest insertions; when those are not the ledger's first runs (entries read
    back from disk before older ones), the run starts are filtered, not cut at the front."""
    cost = 1000 + ENTRY_OVERHEAD_BYTES
    cache = EntryCache(cost * 20)
    data = b"d" * 1000
    order = [*range(10, 20), *range(0, 10), *range(20, 30)]
    for entry_id in order:
        cache.put(Run(1, entry_id, (data,), (1,), (1,), (0,), ("p",), (entry_id,)))
        cache.check_invariants()
    held = [entry_id for entry_id in order if cache.get((1, entry_id)) is not None]
    assert held == order[-len(held) :] and 18 <= len(held) <= 20 and cache.evictions == 30 - len(held)
    assert 5 in held and 15 not in held


@pytest.mark.parametrize(("first", "last"), [(100, 199), (0, 9), (990, 999), (500, 500), (998, 1005)])
def test_a_cached_read_inside_a_run_returns_what_was_asked(first: int, last: int) -> None:
    """A read that starts inside a cached run takes entries first..last of it, never more (it took as
    many entries past `last` as `first` lay past the run's start; found by the replication benchmark,
    whose replicator then sent more than its queue held)."""
    count = 1000
    cache = EntryCache(64 * 1024 * 1024)
    cache.put(
        Run(
            7,
            0,
            tuple(b"%06d" % i for i in range(count)),
            (1,) * count,
            (1,) * count,
            (0,) * count,
            ("p",) * count,
            tuple(range(count)),
        )
    )
    entries = cache.get_run(7, first, last)
    assert [e.position for e in entries] == [Position(7, i) for i in range(first, min(last, count - 1) + 1)]


def _segment(ledger_id: int, first: int, count: int, size: int = 10) -> Run:
    datas = tuple(b"%06d" % (first + i) + b"." * (size - 6) for i in range(count))
    return Run(ledger_id, first, datas, (1,) * count, (1,) * count, (0,) * count, ("p",) * count, (0,) * count)


def test_a_segment_read_for_part_of_it_is_cached_from_there_to_its_end() -> None:
    """A small read of a large segment leaves the rest of the segment cached: the next read going on
    from there finds it instead of decoding the segment again."""
    cache = EntryCache(64 * 1024 * 1024)
    cache.put_read(_segment(3, 0, 2000), 250, 499)
    cache.check_invariants()
    assert cache.get((3, 249)) is None
    assert [e.position for e in cache.get_run(3, 250, 1999)] == [Position(3, i) for i in range(250, 2000)]


def test_a_segment_read_stops_before_the_next_cached_run_and_leaves_it_as_it_is() -> None:
    cache = EntryCache(64 * 1024 * 1024)
    appended = _segment(3, 1500, 100, size=12)
    cache.put(appended)
    cache.put_read(_segment(3, 1000, 1000), 1000, 1099)
    cache.check_invariants()
    assert [e.position for e in cache.get_run(3, 1000, 1499)] == [Position(3, i) for i in range(1000, 1500)]
    # The run appended before is the one held (its entries are 12 bytes, the segment's 10).
    assert {len(e.data) for e in cache.get_run(3, 1500, 1599)} == {12}
    assert cache.get((3, 1600)) is None


def test_a_segment_larger_than_the_share_for_reads_is_cached_as_far_as_was_read() -> None:
    """A segment whose rest would not fit the quarter of the cache kept for entries read from disk is
    cut to what was asked, as before segments were cached whole."""
    cost = 1000 + ENTRY_OVERHEAD_BYTES
    cache = EntryCache(cost * 400)  # 100 entries for reads
    cache.put_read(_segment(3, 0, 2000, size=1000), 0, 49)
    cache.check_invariants()
    assert len(cache.get_run(3, 0, 1999)) == 50


def test_a_backlog_read_in_small_reads_decodes_each_segment_once(run_storage):
    """Reads of a quarter of a replicator's queue through a cold backlog: the first read of a segment
    decodes it, the reads after it take the rest from the cache."""
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        datas = [b"%06d" % i for i in range(2000)]
        await ledger.append_many(*_columns(datas))
        factory.cache.__init__(factory.cache.capacity_bytes)
        engine_reads = []
        read = factory.engine.read_entries

        async def counted(ledger_id, first, last):
            engine_reads.append((first, last))
            return await read(ledger_id, first, last)

        factory.engine.read_entries = counted
        got = []
        start = EARLIEST
        while entries := await ledger.read_entries(start, 250):
            got += [e.data for e in entries]
            start = ledger.next_valid_position(entries[-1].position)
        assert got == datas
        assert engine_reads == [(0, 249)]

    run_storage(scenario, config)


def test_the_entry_after_a_full_ledgers_durable_end_is_its_next_pending_entry(run_storage):
    """A ledger rolled over while its last entries are still being committed: the entry after its
    last durable one is the next entry of that ledger, not the next ledger's first. A tailing
    cursor that read up to the durable end moves its read position there, and would otherwise skip
    the entries still in the commit (found by the shell simulator, seed 11)."""

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        first = await append_all(ledger, [b"m0", b"m1", b"m2", b"m3"])
        full = first[0][0]
        pending = [ledger.append(b"m4", 4, 1, 1004, "p", 4), ledger.append(b"m5", 5, 1, 1005, "p", 5)]
        assert ledger.last_confirmed_entry == Position(full, 3)
        assert ledger.current_ledger.ledger_id == full + 1
        assert ledger.next_valid_position(Position(full, 3)) == Position(full, 4)
        assert await asyncio.gather(*pending) == [Position(full, 4), Position(full + 1, 0)]
        assert ledger.next_valid_position(Position(full, 3)) == Position(full, 4)
        assert ledger.next_valid_position(Position(full, 4)) == Position(full + 1, 0)

    run_storage(scenario)
