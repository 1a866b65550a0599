"""PendingAcks, one test per bullet of Pulsar's PendingAcksMapTest."""

from __future__ import annotations

from magnetar.core.pending_acks import PendingAcks
from magnetar.positions import Position


class Recorder:
    """Add and remove handlers that record every call, and an add handler that can veto."""

    def __init__(self, allow: bool = True) -> None:
        self.allow = allow
        self.added: list[tuple[object, Position, int]] = []
        self.removed: list[tuple[object, Position, int, bool]] = []

    def on_add(self, consumer: object, position: Position, key_hash: int) -> bool:
        self.added.append((consumer, position, key_hash))
        return self.allow

    def on_remove(self, consumer: object, position: Position, key_hash: int, closing: bool) -> None:
        self.removed.append((consumer, position, key_hash, closing))


CONSUMER = object()


def new_map(allow: bool = True) -> tuple[PendingAcks, Recorder]:
    acks = PendingAcks(CONSUMER)
    recorder = Recorder(allow)
    acks.add_handler, acks.remove_handler = recorder.on_add, recorder.on_remove
    return acks, recorder


def collect(acks: PendingAcks) -> list[tuple[Position, int, int]]:
    seen: list[tuple[Position, int, int]] = []
    acks.for_each(lambda p, size, h: seen.append((p, size, h)))
    return seen


def test_add_pending_ack_if_allowed_adds_ack_when_allowed() -> None:
    acks, _ = new_map(allow=True)
    assert acks.add_if_allowed(Position(1, 1), 1, 123)
    assert Position(1, 1) in acks
    assert acks.get(Position(1, 1)) == (1, 123, 0)
    acks.check_invariants()


def test_add_pending_ack_if_allowed_does_not_add_ack_when_not_allowed() -> None:
    acks, recorder = new_map(allow=False)
    assert not acks.add_if_allowed(Position(1, 1), 1, 123)
    assert Position(1, 1) not in acks and len(acks) == 0
    assert recorder.added == [(CONSUMER, (1, 1), 123)]


def test_add_pending_ack_if_allowed_does_not_add_after_closed() -> None:
    acks, recorder = new_map()
    acks.for_each_and_close(lambda *_: None)
    assert not acks.add_if_allowed(Position(1, 1), 1, 123)
    assert len(acks) == 0
    assert recorder.added == []  # the handler is not even asked
    acks.check_invariants()


def test_add_pending_ack_if_allowed_without_handler_adds() -> None:
    acks = PendingAcks(CONSUMER)
    assert acks.add_if_allowed(Position(1, 1), 2, 5)
    assert acks.unacked_messages() == 2


def test_for_each_processes_all_pending_acks_in_ledger_entry_order() -> None:
    acks, _ = new_map()
    for position in (Position(2, 1), Position(1, 3), Position(1, 1), Position(10, 0), Position(1, 2)):
        acks.add_if_allowed(position, 1, position.entry_id + 100)
    assert collect(acks) == [
        ((1, 1), 1, 101),
        ((1, 2), 1, 102),
        ((1, 3), 1, 103),
        ((2, 1), 1, 101),
        ((10, 0), 1, 100),
    ]
    assert [p for p, _v in acks.items()] == [(1, 1), (1, 2), (1, 3), (2, 1), (10, 0)]
    assert len(acks) == 5  # for_each leaves the map alone


def test_for_each_and_close_processes_and_clears_all_pending_acks() -> None:
    acks, recorder = new_map()
    acks.add_if_allowed(Position(1, 2), 3, 7)
    acks.add_if_allowed(Position(1, 1), 1, 8)
    processed: list[tuple[Position, int, int]] = []
    acks.for_each_and_close(lambda p, size, h: processed.append((p, size, h)))
    assert processed == [((1, 1), 1, 8), ((1, 2), 3, 7)]
    assert len(acks) == 0 and acks.closed
    assert recorder.removed == [(CONSUMER, (1, 1), 8, True), (CONSUMER, (1, 2), 7, True)]
    assert not acks.add_if_allowed(Position(1, 3), 1, 9)
    acks.check_invariants()


def test_for_each_and_close_hands_each_entry_over_before_its_remove_handler_runs() -> None:
    # Pulsar's removing processor: the entry goes to the replay queue, then the draining ref is dropped.
    acks = PendingAcks(CONSUMER)
    events: list[str] = []
    acks.remove_handler = lambda _c, p, _h, _closing: events.append(f"removed {p}")
    acks.add_if_allowed(Position(1, 1), 1, 8)
    acks.add_if_allowed(Position(1, 2), 1, 8)
    acks.for_each_and_close(lambda p, _s, _h: events.append(f"processed {p}"))
    assert events == ["processed 1:1", "removed 1:1", "processed 1:2", "removed 1:2"]


def test_remove_removes_pending_ack() -> None:
    acks, _ = new_map()
    acks.add_if_allowed(Position(1, 1), 2, 123)
    assert acks.remove(Position(1, 1)) == (2, 123, 0)
    assert Position(1, 1) not in acks and len(acks) == 0
    assert acks.remove(Position(1, 1)) is None  # already removed


def test_remove_invokes_remove_handler_with_closing_false() -> None:
    acks, recorder = new_map()
    acks.add_if_allowed(Position(1, 1), 1, 123)
    acks.remove(Position(1, 1))
    assert recorder.removed == [(CONSUMER, (1, 1), 123, False)]
    acks.remove(Position(1, 1))
    assert len(recorder.removed) == 1  # nothing removed, no call


def test_remove_all_up_to_removes_all_pending_acks_up_to_specified_entry_inclusive() -> None:
    acks, _ = new_map()
    for entry in (1, 2, 3):
        acks.add_if_allowed(Position(1, entry), 1, entry)
    removed = acks.remove_all_up_to(Position(1, 2))
    assert removed == [((1, 1), 1, 1), ((1, 2), 1, 2)]
    assert [p for p, _v in acks.items()] == [(1, 3)]


def test_remove_all_up_to_removes_all_pending_acks_across_multiple_ledgers() -> None:
    acks, _ = new_map()
    for position in (Position(1, 1), Position(1, 2), Position(2, 1), Position(2, 2), Position(3, 1)):
        acks.add_if_allowed(position, 1, 5)
    acks.remove_all_up_to(Position(2, 1))
    assert [p for p, _v in acks.items()] == [(2, 2), (3, 1)]
    acks.remove_all_up_to(Position(2, 10**9))  # an entry id beyond ledger 2's last
    assert [p for p, _v in acks.items()] == [(3, 1)]


def test_remove_all_up_to_invokes_remove_handler_for_each_entry() -> None:
    acks, recorder = new_map()
    for position, key_hash in ((Position(2, 1), 21), (Position(1, 2), 12), (Position(1, 1), 11), (Position(3, 1), 31)):
        acks.add_if_allowed(position, 1, key_hash)
    acks.remove_all_up_to(Position(2, 1))
    assert recorder.removed == [
        (CONSUMER, (1, 1), 11, False),
        (CONSUMER, (1, 2), 12, False),
        (CONSUMER, (2, 1), 21, False),
    ]


def test_add_pending_ack_if_allowed_invokes_add_handler() -> None:
    acks, recorder = new_map()
    acks.add_if_allowed(Position(1, 1), 1, 123)
    assert recorder.added == [(CONSUMER, (1, 1), 123)]


def test_size_returns_correct_size() -> None:
    acks, _ = new_map()
    assert len(acks) == 0
    acks.add_if_allowed(Position(1, 1), 1, 1)
    acks.add_if_allowed(Position(1, 2), 4, 1)
    acks.add_if_allowed(Position(2, 1), 1, 1)
    assert len(acks) == 3
    assert acks.unacked_messages() == 6  # messages, counting batch sizes
    acks.remove(Position(1, 2))
    assert len(acks) == 2 and acks.unacked_messages() == 2


def test_check_invariants_rejects_zero_batch_size() -> None:
    acks = PendingAcks(CONSUMER)
    acks.add_if_allowed(Position(1, 1), 0, 1)
    try:
        acks.check_invariants()
    except AssertionError:
        return
    raise AssertionError("a pending entry with batch size 0 passed check_invariants")
