"""`ManagedLedger.append_many`: one call and one future per batch of entries (the SENDs of one
socket read), and the column runs it moves through the commit thread and the entry cache."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.positions import EARLIEST, Position
from magnetar.storage import ManagedLedgerFactory, StorageBusyError, StorageClosedError, StorageConfig, sqlite_engine
from magnetar.storage.errors import StorageWriteError
from magnetar.storage.managed_ledger import JOIN_RUN_ENTRIES_MAX

TOPIC = "persistent://public/default/batch"


def columns(payloads: list[bytes], first_seq: int = 0) -> tuple[list, ...]:
    seqs = list(range(first_seq, first_seq + len(payloads)))
    return (
        payloads,
        [seq % 7 for seq in seqs],
        [seq % 3 + 1 for seq in seqs],
        [1000 + seq for seq in seqs],
        [f"p{seq % 2}" for seq in seqs],
        seqs,
    )


def test_a_batch_gets_consecutive_positions_across_rollover_and_keeps_every_field(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        payloads = [b"m%d" % i for i in range(12)]
        positions = await ledger.append_many(*columns(payloads))
        first = positions[0][0]
        assert positions == [Position(first + i // 5, i % 5) for i in range(12)]
        assert all(type(position) is Position for position in positions)
        # Held as one span per ledger; each index finds its position in them.
        assert positions.spans == [(first, 0, 5), (first + 1, 0, 5), (first + 2, 0, 2)]
        assert [positions[i] for i in range(-12, 12)] == [*positions, *positions]
        assert positions[3:8] == list(positions)[3:8]
        for outside in (12, -13):
            with pytest.raises(IndexError):
                positions[outside]
        assert [info.entries for info in ledger.ledgers] == [5, 5, 2]
        assert ledger.last_confirmed_entry == positions[-1]
        assert ledger.entries_added_counter == 12 and ledger.total_size == sum(map(len, payloads))
        for fresh in (False, True):
            if fresh:
                factory.cache.__init__(factory.cache.capacity_bytes)  # from disk this time
            entries = await ledger.read_entries(positions[0], 100)
            assert [e.position for e in entries] == positions
            assert [tuple(e[1:]) for e in entries] == list(zip(*columns(payloads)))
        factory.cache.check_invariants()
        ledger.check_invariants()

    run_storage(scenario)


def test_batches_and_single_appends_interleave_in_call_order(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        single_a = ledger.append(b"a")
        batch = ledger.append_many(*columns([b"b", b"c", b"d"]))
        single_e = ledger.append(b"e")
        positions = [await single_a, *await batch, await single_e]
        assert positions == sorted(positions) and len(set(positions)) == 5
        entries = await ledger.read_entries(positions[0], 10)
        assert [e.data for e in entries] == [b"a", b"b", b"c", b"d", b"e"]

    run_storage(scenario)


def test_an_empty_batch_resolves_at_once_to_no_positions(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        assert await ledger.append_many([], [], [], [], [], []) == []
        assert ledger.number_of_entries == 0

    run_storage(scenario)


def test_a_bad_batch_is_refused_whole(run_storage, small_config):
    config = small_config.with_changes(managedLedgerMaxPendingAdds=10)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        with pytest.raises(ValueError, match="same length"):
            ledger.append_many([b"x", b"y"], [0], [1], [0], ["p"], [0])
        with pytest.raises(ValueError, match="NUL"):
            ledger.append_many(*columns([b"x"])[:4], ["bad\0name"], [0])
        with pytest.raises(StorageBusyError):
            ledger.append_many(*columns([b"x"] * 11))
        assert ledger.pending_add_entries_count == 0 and ledger.number_of_entries == 0
        assert len(await ledger.append_many(*columns([b"x"] * 10))) == 10

    run_storage(scenario, config)


def test_a_closed_ledger_refuses_batches(tmp_path: Path, small_config):
    async def main():
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), small_config)
        ledger = await factory.open_ledger(TOPIC)
        await factory.close()
        with pytest.raises(StorageClosedError):
            ledger.append_many(*columns([b"x"]))

    asyncio.run(main())


def _hold_commits(ledger):
    """Keep hand-offs from reaching the commit thread, so that the test decides what is durable."""
    held = []
    ledger._engine.submit = held.append
    return held


def test_a_batch_resolves_only_when_every_part_of_it_is_durable(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        held = _hold_commits(ledger)
        future = ledger.append_many(*columns([b"m%d" % i for i in range(7)]))  # 5 + 2, two ledgers
        await asyncio.sleep(0)
        ((_owner, runs, _size, entries),) = held
        assert entries == 7
        assert [(run.first_entry_id, len(run.datas)) for run in runs] == [(0, 5), (0, 2)]
        ledger.on_durable(runs[0].ledger_id, 4)
        await asyncio.sleep(0)
        assert not future.done(), "resolved while its entries in the second ledger were not durable"
        ledger.on_durable(runs[1].ledger_id, 1)
        assert await future == [(runs[0].ledger_id, i) for i in range(5)] + [(runs[1].ledger_id, i) for i in range(2)]
        del ledger._engine.submit

    run_storage(scenario)


def test_tuples_become_the_runs_columns_without_a_copy(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        held = _hold_commits(ledger)
        given = tuple(map(tuple, columns([b"a", b"b", b"c"])))
        future = ledger.append_many(*given)
        await asyncio.sleep(0)
        ((_owner, (run,), _size, _entries),) = held
        assert all(column is original for column, original in zip(run[2:], given))
        ledger.on_durable(run.ledger_id, 2)
        assert [position[1] for position in await future] == [0, 1, 2]
        del ledger._engine.submit

    run_storage(scenario)


def test_a_batch_fails_when_any_part_of_it_fails(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        held = _hold_commits(ledger)
        future = ledger.append_many(*columns([b"m%d" % i for i in range(7)]))
        await asyncio.sleep(0)
        ((_owner, runs, _size, _entries),) = held
        ledger.on_failed(runs[0].ledger_id, StorageWriteError("disk full"))
        # The part in the second ledger was in the same hand-off; whatever its fate, the batch failed.
        ledger.on_durable(runs[1].ledger_id, 1)
        with pytest.raises(StorageWriteError):
            await future
        assert factory.pending_adds == 0 and ledger.pending_add_entries_count == 0
        del ledger._engine.submit

    run_storage(scenario)


def test_a_commit_waits_for_company_only_while_it_carries_few_entries(run_storage, small_config):
    """journalMaxGroupWaitMSec holds a commit of a few appends back for more; one that carries
    GROUP_WAIT_ENTRIES_MIN entries goes at once (here the wait is a minute: only that rule ends it)."""
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=1000)
    enough = sqlite_engine.GROUP_WAIT_ENTRIES_MIN

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        factory.engine.group_wait_s = 60  # journalMaxGroupWaitMSec, set once the topic exists
        few = ledger.append_many(*columns([b"x"] * 3))
        await asyncio.sleep(0.2)
        assert not few.done(), "a commit of 3 entries went without waiting for company"
        company = ledger.append_many(*columns([b"y"] * (enough - 3), 3))
        await asyncio.wait_for(asyncio.gather(few, company), timeout=30)
        alone = ledger.append_many(*columns([b"z"] * enough, enough))
        assert len(await asyncio.wait_for(alone, timeout=30)) == enough

    run_storage(scenario, config)


def _shape(positions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Positions with each ledger id replaced by its rank, to compare topics (ledger ids are global)."""
    ranks = {ledger_id: rank for rank, ledger_id in enumerate(sorted({p[0] for p in positions}))}
    return [(ranks[ledger_id], entry_id) for ledger_id, entry_id in positions]


@settings(max_examples=25, deadline=None)
@given(
    calls=st.lists(
        st.lists(st.sampled_from([0, 10, 300 * 1024]), min_size=0, max_size=9),
        min_size=1,
        max_size=8,
    ),
    singles=st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_a_batch_lands_where_the_same_single_appends_would(tmp_path_factory, calls, singles):
    """Roll-over by entry count (5) and by size (1 MB) decides per entry, for batches as for appends."""
    config = StorageConfig(
        managedLedgerMaxEntriesPerLedger=5,
        managedLedgerMaxSizePerLedgerMbytes=1,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        defaultRetentionTimeInMinutes=-1,
        defaultRetentionSizeInMB=-1,
    )

    async def main():
        factory = await ManagedLedgerFactory.open(str(tmp_path_factory.mktemp("data")), config)
        try:
            batched = await factory.open_ledger("persistent://public/default/batched")
            single = await factory.open_ledger("persistent://public/default/single")
            batched_positions, single_positions = [], []
            for call, as_singles in zip(calls, singles):
                payloads = [os.urandom(size) for size in call]
                if as_singles:
                    batched_positions += await asyncio.gather(*(batched.append(p) for p in payloads))
                else:
                    batched_positions += await batched.append_many(*columns(payloads))
                single_positions += await asyncio.gather(*(single.append(p) for p in payloads))
            assert _shape(batched_positions) == _shape(single_positions)
            assert [(i.entries, i.size) for i in batched.ledgers] == [(i.entries, i.size) for i in single.ledgers]
            factory.cache.__init__(factory.cache.capacity_bytes)
            stored = await batched.read_entries(EARLIEST, 1000)
            assert [e.position for e in stored] == batched_positions
            batched.check_invariants()
        finally:
            await factory.close()

    asyncio.run(main())


def test_the_cache_keeps_runs_apart_when_disk_reads_overlap_cached_appends(run_storage, small_config):
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=1000)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        payloads = [b"m%d" % i for i in range(60)]
        positions = await ledger.append_many(*columns(payloads))
        factory.cache.__init__(factory.cache.capacity_bytes)
        # cache a few scattered entries, then a run of appends, then read across all of them
        assert [e.data for e in await ledger.read_positions([positions[7], positions[30]])] == [b"m7", b"m30"]
        more = await ledger.append_many(*columns([b"n%d" % i for i in range(5)], 60))
        factory.cache.check_invariants()
        entries = await ledger.read_entries(positions[0], 100)
        assert [e.data for e in entries] == payloads + [b"n%d" % i for i in range(5)]
        assert [e.position for e in entries] == [*positions, *more]
        factory.cache.check_invariants()
        hits = factory.cache.hits
        again = await ledger.read_entries(positions[0], 100)
        assert again == entries and factory.cache.hits - hits == 65

    run_storage(scenario, config)


def test_checkpoints_beside_commits_keep_the_wal_bounded(tmp_path: Path, small_config, monkeypatch):
    monkeypatch.setattr(sqlite_engine, "CHECKPOINT_EVERY_BYTES", 64 * 1024)
    monkeypatch.setattr(sqlite_engine, "WAL_BYTES_MAX", 1024 * 1024)
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=50_000)
    wal = tmp_path / "data" / "magnetar.db-wal"
    payload = os.urandom(2000)

    async def main():
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), config)
        ledger = await factory.open_ledger(TOPIC)
        largest = 0
        for batch in range(100):  # 100 commits of 100 KB: 10 MB through a WAL bounded to 1 MB
            await ledger.append_many(*columns([payload] * 50, batch * 50))
            largest = max(largest, wal.stat().st_size)
        await factory.close()
        # The bound, plus what arrives while the checkpoint that enforces it is under way.
        assert largest <= 4 * 1024 * 1024, largest
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), config)
        ledger = await factory.open_ledger(TOPIC)
        stored = await ledger.read_entries(EARLIEST, 10_000)
        assert len(stored) == 5000 and all(e.data == payload for e in stored)
        assert [e.sequence_id for e in stored] == list(range(5000))
        await factory.close()

    asyncio.run(main())


def test_a_full_young_ledger_rolls_once_it_reaches_the_minimum_rollover_time(run_storage, small_config, manual_clock):
    config = small_config.with_changes(managedLedgerMinLedgerRolloverTimeMinutes=10)
    clock = manual_clock

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        young = [await ledger.append(b"x") for _ in range(7)]
        young += await ledger.append_many(*columns([b"y"] * 3))
        assert {p[0] for p in young} == {young[0][0]} and [p[1] for p in young] == list(range(10))
        await clock.advance(599)
        assert (await ledger.append(b"u"))[0] == young[0][0], "a second short of the minimum age"
        await clock.advance(1)
        assert (await ledger.append(b"z"))[0] > young[0][0]
        batch = await ledger.append_many(*columns([b"w"] * 6))
        assert [p[1] for p in batch] == [1, 2, 3, 4, 5, 6], "the new ledger is young too"
        await clock.advance(600)
        assert (await ledger.append(b"v"))[1] == 0

    run_storage(scenario, config, clock)


def test_a_ledger_rolls_at_the_maximum_rollover_time_whatever_it_holds(run_storage, small_config, manual_clock):
    config = small_config.with_changes(
        managedLedgerMaxEntriesPerLedger=1000,
        managedLedgerMaxLedgerRolloverTimeMinutes=240,
        managedLedgerCursorPositionFlushSeconds=60,
    )
    clock = manual_clock

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        first = await ledger.append(b"a")
        await clock.advance(239 * 60)
        assert (await ledger.append(b"b"))[0] == first[0]
        await clock.advance(60)
        assert (await ledger.append(b"c")) == Position(ledger.current_ledger.ledger_id, 0) and first[
            0
        ] < ledger.current_ledger.ledger_id

    run_storage(scenario, config, clock)


def test_a_field_that_does_not_fit_fails_its_ledger_and_nothing_else(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        other = await factory.open_ledger(TOPIC + "-other")
        good = ledger.append(b"ok")
        too_big = ledger.append(b"bad", sticky_key_hash=2**40)
        elsewhere = other.append_many(*columns([b"o1", b"o2"]))
        with pytest.raises(StorageWriteError, match="does not fit"):
            await too_big
        with pytest.raises(StorageWriteError):
            await good  # same ledger, same commit: fenced with it, so entry ids keep no holes
        assert len(await elsewhere) == 2
        after = await ledger.append(b"after")
        assert after[1] == 0, "a new ledger after the fenced one"
        assert [e.data for e in await ledger.read_entries(EARLIEST, 10)] == [b"after"]
        assert factory.pending_adds == 0

    run_storage(scenario)


def test_appends_made_durable_by_one_commit_are_cached_as_one_run(run_storage, small_config):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        # Twenty socket reads' worth queued at once share a commit.
        calls = [
            ledger.append_many(*columns([b"r%d-%d" % (call, i) for i in range(3)], call * 3)) for call in range(20)
        ]
        results = await asyncio.gather(*calls)
        positions = [position for result in results for position in result]
        assert len(factory.cache._runs) == 1 and len(factory.cache) == 60
        factory.cache.check_invariants()
        hits = factory.cache.hits
        entries = await ledger.read_entries(positions[0], 100)
        assert factory.cache.hits - hits == 60 and factory.cache.misses == 0
        assert [e.position for e in entries] == positions
        assert [e.data for e in entries] == [b"r%d-%d" % (call, i) for call in range(20) for i in range(3)]
        assert [e.sequence_id for e in entries] == list(range(60))
        assert [e.producer_name for e in entries] == [f"p{seq % 2}" for seq in range(60)]

    run_storage(scenario, small_config.with_changes(managedLedgerMaxEntriesPerLedger=1000))


def test_long_runs_made_durable_by_one_commit_stay_apart_in_the_cache(run_storage, small_config):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        # Busy producers' socket reads: runs long enough that joining them would only copy columns.
        size = JOIN_RUN_ENTRIES_MAX
        calls = [
            ledger.append_many(*columns([b"r%d-%d" % (call, i) for i in range(size)], call * size)) for call in range(4)
        ]
        results = await asyncio.gather(*calls)
        positions = [position for result in results for position in result]
        assert len(factory.cache._runs) == 4 and len(factory.cache) == 4 * size
        factory.cache.check_invariants()
        entries = await ledger.read_entries(positions[0], 4 * size)
        assert factory.cache.misses == 0
        assert [e.position for e in entries] == positions
        assert [e.data for e in entries] == [b"r%d-%d" % (call, i) for call in range(4) for i in range(size)]

    run_storage(scenario, small_config.with_changes(managedLedgerMaxEntriesPerLedger=1000))


def test_appends_of_many_topics_commit_their_segments_counters_and_commit_number_together(tmp_path: Path):
    """A commit of appends alone is one statement (the append_commit trigger), one with a cursor write
    in it several: either way the segments, the ledgers' counters and the commit number agree, and
    the files reopen."""
    config = StorageConfig(
        defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1, managedLedgerCursorPositionFlushSeconds=0
    )
    payloads = [os.urandom(size) for size in (10, 200, 3000)]

    async def main():
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), config)
        ledgers = [await factory.open_ledger(f"{TOPIC}-{index}") for index in range(3)]
        cursor = await ledgers[0].open_cursor("s", "earliest")
        last = None
        for round_ in range(4):
            if last is not None and round_ % 2:
                cursor.mark_delete(last)  # an ack persisted beside the appends that follow
            results = await asyncio.gather(*[ledger.append_many(*columns(payloads, round_ * 3)) for ledger in ledgers])
            last = results[0][-1]
        await factory.close()

        # Reopening checks that the database holds every commit the commit-seq file names.
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), config)
        for index in range(3):
            ledger = await factory.open_ledger(f"{TOPIC}-{index}")
            stored = await ledger.read_entries(EARLIEST, 100)
            assert [e.data for e in stored] == payloads * 4
        await factory.close()

    asyncio.run(main())
    (written,) = struct.unpack_from("<Q", (tmp_path / "data" / sqlite_engine.COMMIT_SEQ_FILE).read_bytes())
    with contextlib.closing(sqlite3.connect(tmp_path / "data" / sqlite_engine.DB_FILE)) as db:
        assert db.execute("SELECT value FROM meta WHERE key='commit_seq'").fetchall() == [(written,)]
        rows = db.execute("SELECT id, entries, size FROM ledgers ORDER BY id").fetchall()
        segments = db.execute(
            "SELECT id >> 32, sum(count), sum(length(data)) FROM segments GROUP BY id >> 32 ORDER BY 1"
        ).fetchall()
    assert rows == segments and [entries for _, entries, _ in rows] == [12] * 3
    assert all(size == 4 * sum(map(len, payloads)) for _, _, size in rows)
