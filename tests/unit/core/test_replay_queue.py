"""The replay queue: positions to redeliver, in order, with per-hash counts."""

from __future__ import annotations

import pytest

from magnetar.core.replay_queue import ReplayQueue
from magnetar.positions import Position


def test_add_and_remove() -> None:
    q = ReplayQueue()
    assert not q and len(q) == 0 and q.first() is None
    assert q.add(Position(1, 2), 7)
    assert q and len(q) == 1 and Position(1, 2) in q
    assert q.hash_of(Position(1, 2)) == 7
    assert q.remove(Position(1, 2))
    assert not q and Position(1, 2) not in q and q.hash_of(Position(1, 2)) is None
    assert not q.remove(Position(1, 2))
    q.check_invariants()


def test_duplicate_add_is_refused_and_keeps_the_first_hash() -> None:
    q = ReplayQueue()
    assert q.add(Position(1, 2), 7)
    assert not q.add(Position(1, 2), 9)
    assert len(q) == 1 and q.hash_of(Position(1, 2)) == 7
    assert q.contains_hash(7) and not q.contains_hash(9)
    q.remove(Position(1, 2))
    assert not q.contains_hash(7)
    q.check_invariants()


def test_contains_hash_counts_every_queued_position_of_the_hash() -> None:
    q = ReplayQueue()
    q.add(Position(1, 1), 7)
    q.add(Position(1, 2), 7)
    q.add(Position(1, 3), 8)
    q.remove(Position(1, 1))
    assert q.contains_hash(7)  # (1, 2) still holds it
    q.remove(Position(1, 2))
    assert not q.contains_hash(7) and q.contains_hash(8)
    q.check_invariants()


def test_hash_zero_is_an_ordinary_hash() -> None:
    q = ReplayQueue()
    q.add(Position(1, 1), 0)
    assert q.contains_hash(0) and q.hash_of(Position(1, 1)) == 0
    assert q.remove(Position(1, 1)) and not q.contains_hash(0)
    q.check_invariants()


def test_items_are_in_position_order_across_ledgers() -> None:
    q = ReplayQueue()
    for position, key_hash in ((Position(2, 0), 1), (Position(1, 10), 2), (Position(1, 2), 3), (Position(3, 1), 4)):
        q.add(position, key_hash)
    assert list(q.items()) == [((1, 2), 3), ((1, 10), 2), ((2, 0), 1), ((3, 1), 4)]
    assert q.first() == (1, 2)


def test_remove_up_to_is_inclusive_and_counts() -> None:
    q = ReplayQueue()
    for position in (Position(1, 1), Position(1, 5), Position(2, 0), Position(2, 3)):
        q.add(position, position.entry_id + 10)
    assert q.remove_up_to(Position(1, 0)) == 0
    assert q.remove_up_to(Position(2, 0)) == 3
    assert list(q.items()) == [((2, 3), 13)]
    assert not q.contains_hash(11) and not q.contains_hash(10) and q.contains_hash(13)
    q.check_invariants()


def test_clear() -> None:
    q = ReplayQueue()
    q.add(Position(1, 1), 1)
    q.clear()
    assert not q and not q.contains_hash(1)
    q.check_invariants()


def test_check_invariants_catches_per_hash_positions_out_of_step() -> None:
    q = ReplayQueue()
    q.add(Position(1, 1), 1)
    q._by_hash[1].append(Position(1, 2))
    with pytest.raises(AssertionError):
        q.check_invariants()


def test_each_hash_keeps_its_positions_in_order_through_adds_and_removals() -> None:
    q = ReplayQueue()
    for entry, key_hash in [(5, 1), (2, 1), (9, 2), (7, 1), (3, 2), (1, 3)]:
        q.add(Position(1, entry), key_hash)
    assert list(q.positions_of(1)) == [Position(1, 2), Position(1, 5), Position(1, 7)]
    q.remove(Position(1, 5))
    assert q.remove_up_to(Position(1, 3)) == 3
    assert list(q.positions_of(1)) == [Position(1, 7)]
    assert list(q.positions_of(2)) == [Position(1, 9)]
    assert list(q.positions_of(3)) == []
    assert sorted(dict(q.by_hash())) == [1, 2]
    q.check_invariants()
