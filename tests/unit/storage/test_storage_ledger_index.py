"""LedgerIndex: position arithmetic across a topic's ledgers, without an engine or an event loop."""

from __future__ import annotations

from magnetar.positions import Position
from magnetar.storage.ledger_index import LedgerIndex, LedgerInfo


def index_of(*entries: int, pending: set[tuple[int, int]] | None = None) -> LedgerIndex:
    """Ledgers 1, 2, ... holding `entries[i]` durable entries each; `pending` the (ledger, entry)
    appends not durable yet."""
    waiting = pending or set()

    def pending_after(ledger_id: int, entry_id: int) -> bool:
        return any(ledger == ledger_id and entry > entry_id for ledger, entry in waiting)

    return LedgerIndex([LedgerInfo(i + 1, n, n * 10, 0) for i, n in enumerate(entries)], pending_after)


def test_next_valid_position_skips_empty_ledgers_and_ends_where_the_next_append_lands() -> None:
    index = index_of(3, 0, 2, 0)
    assert index.next_valid_position((1, 1)) == Position(1, 2)
    assert index.next_valid_position((1, 2)) == Position(3, 0)
    assert index.next_valid_position((3, 1)) == Position(4, 0)
    assert index.first_position() == Position(1, 0)


def test_next_valid_position_stays_in_a_rolled_over_ledger_whose_last_appends_are_pending() -> None:
    index = index_of(3, 1, pending={(1, 4)})
    assert index.next_valid_position((1, 2)) == Position(1, 3)
    assert index_of(3, 1).next_valid_position((1, 2)) == Position(2, 0)


def test_a_forgotten_ledger_is_skipped_both_ways() -> None:
    index = index_of(2, 2, 2)
    index.forget(2)
    assert index.next_valid_position((1, 1)) == Position(3, 0)
    assert index.previous_position((3, 0)) == Position(1, 1)
    assert index.count_entries((1, -1), (3, 1)) == 4
    index.check_invariants()


def test_previous_position_before_the_first_entry_is_the_first_ledger_minus_one() -> None:
    index = index_of(0, 2)
    assert index.previous_position((2, 0)) == Position(1, -1)
    assert index.previous_position((2, 5)) == Position(2, 1)


def test_count_entries_is_open_closed_and_clipped_to_stored_entries() -> None:
    index = index_of(5, 3, 4)
    assert index.count_entries((1, 2), (1, 4)) == 2
    assert index.count_entries((1, 2), (3, 0)) == 2 + 3 + 1
    assert index.count_entries((1, 2), (1, 99)) == 2
    assert index.count_entries((3, 0), (1, 2)) == 0
    assert (index.number_of_entries, index.total_size) == (12, 120)


def test_spans_are_bounded_by_count_and_end_after_the_last_confirmed_entry() -> None:
    index = index_of(3, 0, 4)
    assert index.spans(Position(1, 1), 10, Position(3, 3)) == [(1, 1, 2), (3, 0, 3)]
    assert index.spans(Position(1, 1), 3, Position(3, 3)) == [(1, 1, 2), (3, 0, 0)]
    assert index.spans(Position(3, 4), 10, Position(3, 3)) == []
    assert index.spans(Position(2, 0), 10, Position(3, 3)) == [(3, 0, 3)]
    assert index.spans(Position(1, -1), 2, Position(3, 3)) == [(1, 0, 1)]


def test_added_ledgers_keep_their_order() -> None:
    index = index_of(1)
    index.add(LedgerInfo(7, 0, 0, 0))
    assert [info.ledger_id for info in index.infos] == [1, 7]
    assert len(index) == 2 and 7 in index and index[7].entries == 0
