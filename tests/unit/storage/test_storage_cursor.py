from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.positions import Position, PositionRangeSet
from magnetar.storage import ManagedLedgerFactory
from magnetar.storage.cursor import decode_ranges, encode_ranges

TOPIC = "persistent://public/default/c"


async def append_n(ledger, n, start_time=0):
    return list(await asyncio.gather(*(ledger.append(b"%d" % i, 0, 3, start_time + i, "p", i) for i in range(n))))


@settings(max_examples=40, deadline=None)
@given(
    count=st.integers(1, 30),
    max_entries=st.integers(1, 6),
    acks=st.lists(st.tuples(st.sampled_from(["one", "cumulative"]), st.integers(0, 29)), max_size=40),
)
def test_cursor_matches_a_set_model_and_survives_restart(tmp_path_factory, small_config, count, max_entries, acks):
    """Property: mark-delete is the longest acknowledged prefix, individually deleted the rest, across
    ledger boundaries, and a flush + restart gives back exactly the same cursor."""
    data_dir = str(tmp_path_factory.mktemp("cursor"))
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=max_entries)

    async def main():
        factory = await ManagedLedgerFactory.open(data_dir, config)
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_n(ledger, count)
        acked: set[Position] = set()
        for kind, index in acks:
            index %= count
            if kind == "one":
                cursor.delete(positions[index])
                acked.add(positions[index])
            else:
                cursor.mark_delete(positions[index])
                acked.update(positions[: index + 1])
            prefix = 0
            while prefix < count and positions[prefix] in acked:
                prefix += 1
            expected_md = positions[prefix - 1] if prefix else ledger.previous_position(positions[0])
            assert cursor.mark_delete_position == expected_md
            assert all(cursor.is_deleted(p) == (p in acked) for p in positions)
            assert cursor.number_of_entries_in_backlog() == count - len(acked)
            cursor.check_invariants()
        before = (cursor.mark_delete_position, list(cursor.individually_deleted.ranges()))
        await factory.close()
        factory = await ManagedLedgerFactory.open(data_dir, config)
        ledger = await factory.open_ledger(TOPIC)
        restored = ledger.cursors["sub"]
        assert (restored.mark_delete_position, list(restored.individually_deleted.ranges())) == before
        assert restored.messages_consumed_counter == len(acked)
        await factory.close()

    asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(
    positions=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 20)), max_size=60),
    limit=st.integers(0, 30),
)
def test_range_encoding_keeps_the_first_ranges(positions, limit):
    ranges = PositionRangeSet()
    for position in positions:
        ranges.add(position)
    decoded = decode_ranges(encode_ranges(ranges, limit))
    decoded.check_invariants()
    assert list(decoded.ranges()) == list(ranges.ranges())[:limit]


def test_ack_holes_beyond_max_unacked_ranges_are_redelivered_after_restart(tmp_path, small_config):
    config = small_config.with_changes(managedLedgerMaxEntriesPerLedger=1000, managedLedgerMaxUnackedRangesToPersist=3)

    async def main():
        factory = await ManagedLedgerFactory.open(str(tmp_path), config)
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_n(ledger, 20)
        # every odd entry acknowledged: 10 ranges, the first entry a hole
        cursor.delete(positions[1::2])
        assert cursor.individually_deleted.range_count() == 10
        await factory.close()
        factory = await ManagedLedgerFactory.open(str(tmp_path), config)
        ledger = await factory.open_ledger(TOPIC)
        cursor = ledger.cursors["sub"]
        # the first three ranges survived; the acks of the other seven are forgotten, so those
        # entries are delivered again: duplicates, never a loss
        assert [p for p in positions if cursor.is_deleted(p)] == positions[1:7:2]
        assert cursor.number_of_entries_in_backlog() == 17
        await factory.close()

    asyncio.run(main())


def test_batch_index_acks_persist_and_complete_the_entry(run_storage, tmp_path):
    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_n(ledger, 3)
        cursor.delete_batch_indexes(positions[1], 3, [0, 2])
        assert cursor.acked_batch_indexes(positions[1]) == (3, 0b101)
        assert not cursor.is_deleted(positions[1])
        with pytest.raises(ValueError):
            cursor.delete_batch_indexes(positions[1], 3, [3])
        return positions

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = ledger.cursors["sub"]
        assert cursor.acked_batch_indexes(positions[1]) == (3, 0b101)
        cursor.delete_batch_indexes(positions[1], 3, [1])
        assert cursor.is_deleted(positions[1]) and cursor.acked_batch_indexes(positions[1]) is None
        cursor.delete(positions[0])
        assert cursor.mark_delete_position == positions[1]

    positions = run_storage(first)
    run_storage(second)


def test_acks_beyond_the_last_confirmed_entry_are_refused(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub")
        positions = await append_n(ledger, 2)
        with pytest.raises(ValueError):
            cursor.delete((positions[-1][0], positions[-1][1] + 1))

    run_storage(scenario)


def test_reset_to_position_and_publish_time(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_n(ledger, 12, start_time=5000)
        cursor.mark_delete(positions[9])
        await cursor.reset(positions[3])
        assert cursor.mark_delete_position == positions[2] and cursor.read_position == positions[3]
        assert cursor.persisted_mark_delete_position == positions[2]
        found = await cursor.reset_to_publish_time(5007)
        assert found == positions[7] and cursor.read_position == positions[7]
        past_end = await cursor.reset_to_publish_time(99_999)
        assert past_end == ledger.next_valid_position(positions[-1])
        assert await cursor.read_entries(5) == []

    run_storage(scenario)


def test_persist_every_ack_when_flush_seconds_is_zero(run_storage, small_config):
    config = small_config.with_changes(managedLedgerCursorPositionFlushSeconds=0)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_n(ledger, 3)
        persisted = cursor.delete(positions[0])
        assert persisted is not None
        await persisted
        assert cursor.persisted_mark_delete_position == positions[0]

    run_storage(scenario, config)


def test_periodic_flush_persists_dirty_cursors(run_storage, small_config, manual_clock):
    config = small_config.with_changes(managedLedgerCursorPositionFlushSeconds=60)

    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        cursor = await ledger.open_cursor("sub", "earliest")
        positions = await append_n(ledger, 3)
        assert cursor.delete(positions[0]) is None
        await manual_clock.advance(59)
        assert cursor.dirty and cursor.persisted_mark_delete_position != positions[0]
        await manual_clock.advance(1)
        assert not cursor.dirty, "the flush timer took the snapshot"
        # Group commit is in queue order: once a write queued after the snapshot is durable, so is it.
        await factory.metadata.put("/test/after-the-flush", {})
        assert cursor.persisted_mark_delete_position == positions[0]

    run_storage(scenario, config, manual_clock)


def test_delete_cursor_is_durable(run_storage):
    async def first(factory):
        ledger = await factory.open_ledger(TOPIC)
        await ledger.open_cursor("gone")
        await ledger.open_cursor("kept")
        await ledger.delete_cursor("gone")

    async def second(factory):
        ledger = await factory.open_ledger(TOPIC)
        assert sorted(ledger.cursors) == ["kept"]

    run_storage(first)
    run_storage(second)


def test_delete_positions_returns_what_was_not_deleted_before(run_storage):
    async def scenario(factory):
        ledger = await factory.open_ledger("persistent://public/default/undeleted")
        positions = [await ledger.append(b"u%d" % i) for i in range(10)]
        cursor = await ledger.open_cursor("c", "earliest")
        cursor.delete([positions[0], positions[1], positions[5]])
        assert cursor.mark_delete_position == positions[1]
        wanted = [positions[i] for i in (9, 0, 5, 6, 2, 9)]
        assert cursor.delete_positions(wanted) == [positions[i] for i in (9, 6, 2)]
        assert cursor.mark_delete_position == positions[2]
        assert cursor.delete_positions(wanted) == []
        assert [cursor.is_deleted(p) for p in positions] == [i in (0, 1, 2, 5, 6, 9) for i in range(10)]
        entries = await ledger.read_entries(positions[0], 10)
        assert [e.data for e in cursor.undeleted_entries(entries)] == [b"u%d" % i for i in (3, 4, 7, 8)]
        cursor.check_invariants()
        beyond = Position(positions[-1][0], positions[-1][1] + 1)
        with pytest.raises(ValueError, match="beyond the last confirmed entry"):
            cursor.delete_positions([positions[3], beyond])
        assert not cursor.is_deleted(positions[3])

    run_storage(scenario)
