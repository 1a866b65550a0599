"""Exclusive and Failover dispatchers, driven only through `handle(event, now_ms)`."""

from __future__ import annotations

import pytest

from magnetar.core.dispatchers.single_active import SingleActiveConsumerDispatcher
from magnetar.core.errors import ConsumerAssignError, ConsumerBusyError
from magnetar.core.events import (
    Acked,
    AckFiltered,
    ActiveConsumerChanged,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    CumulativeAcked,
    Dispatch,
    DispatchDue,
    Entry,
    Flow,
    KeySharedMeta,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    RedeliverRequested,
    RewindCursor,
    Tick,
)
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import key_hash, range_slot
from magnetar.positions import Position


def entries(count: int, first: int = 0, message_count: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(Position(1, first + i), message_count=message_count) for i in range(count))


class Harness:
    def __init__(self, subscription_type: str, partition_index: int = -1, topic_name: str = "t") -> None:
        self.d = SingleActiveConsumerDispatcher(
            subscription_type, topic_name=topic_name, partition_index=partition_index
        )

    def __call__(self, event: object) -> list:
        out = self.d.handle(event, 0)
        self.d.check_invariants()
        return out

    def active_name(self) -> str | None:
        return self.d.stats().active_consumer_name


# --- Exclusive --------------------------------------------------------------------------------------


def test_exclusive_first_consumer_becomes_active() -> None:
    h = Harness("Exclusive")
    assert h(ConsumerAdded(1, "c1")) == [RewindCursor(), ActiveConsumerChanged(1)]
    assert h(Flow(1, 5)) == [ReadEntries(5)]
    batch = entries(3)
    assert h(ReadCompleted(batch)) == []
    assert h(DispatchDue()) == [Dispatch(1, list(batch)), ReadEntries(2)]


def test_precise_flow_control_reads_the_permits_over_the_messages_per_entry() -> None:
    """preciseDispatcherFlowControl: 500 permits, 200 of them spent on 2 entries of 100 messages: the next
    read takes 300 / 100 = 3 entries, not 100 (dispatcherMaxReadBatchSize)."""
    d = SingleActiveConsumerDispatcher("Exclusive", DispatcherSettings(precise_dispatcher_flow_control=True))
    d.handle(ConsumerAdded(1, "c1"), 0)
    assert d.handle(Flow(1, 500), 0) == [ReadEntries(100)]
    batch = entries(2, message_count=100)
    d.handle(ReadCompleted(batch), 0)
    assert d.handle(DispatchDue(), 0) == [Dispatch(1, list(batch)), ReadEntries(3)]
    d.check_invariants()


def test_exclusive_second_consumer_is_refused_with_consumer_busy() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "c1"))
    with pytest.raises(ConsumerBusyError) as refused:
        h(ConsumerAdded(2, "c2"))
    assert refused.value.server_error == "ConsumerBusy"
    assert h.active_name() == "c1" and len(h.d.consumers) == 1
    h.d.check_invariants()
    # Once the first leaves, another may subscribe.
    assert h(ConsumerRemoved(1)) == [RewindCursor(), ActiveConsumerChanged(None)]
    assert h(ConsumerAdded(2, "c2")) == [RewindCursor(), ActiveConsumerChanged(2)]


# --- Failover: choice of the active consumer ---------------------------------------------------------


def test_failover_active_consumer_is_first_by_priority_then_name() -> None:
    h = Harness("Failover", partition_index=0)
    h(ConsumerAdded(1, "b"))
    assert h(ConsumerAdded(2, "a")) == [RewindCursor(), ActiveConsumerChanged(2)]
    # A higher priority (lower level) wins over the name order.
    assert h(ConsumerAdded(3, "z", priority_level=-1)) == [RewindCursor(), ActiveConsumerChanged(3)]
    # An unchanged choice is announced again for the newcomer's sake, without a rewind.
    assert h(ConsumerAdded(4, "y", priority_level=5)) == [ActiveConsumerChanged(3)]


def test_failover_partition_index_modulo_top_priority_consumers() -> None:
    for partition_index, expected in ((0, "b"), (1, "c"), (2, "d"), (3, "b"), (7, "c")):
        h = Harness("Failover", partition_index=partition_index)
        h(ConsumerAdded(1, "a", priority_level=1))  # not top priority: never counted
        h(ConsumerAdded(2, "d"))
        h(ConsumerAdded(3, "c"))
        h(ConsumerAdded(4, "b"))
        assert h.active_name() == expected, partition_index


def test_failover_active_changes_when_consumers_join_and_leave() -> None:
    h = Harness("Failover", partition_index=3)
    h(ConsumerAdded(1, "b"))
    h(ConsumerAdded(2, "c"))
    h(ConsumerAdded(3, "d"))
    assert h.active_name() == "b"  # 3 % 3 = 0
    assert h(ConsumerAdded(4, "e")) == [RewindCursor(), ActiveConsumerChanged(4)]  # 3 % 4 = 3
    assert h(ConsumerRemoved(2)) == [RewindCursor(), ActiveConsumerChanged(1)]  # [b, d, e]: 3 % 3 = 0
    assert h(ConsumerRemoved(3)) == [RewindCursor(), ActiveConsumerChanged(4)]  # [b, e]: 3 % 2 = 1
    assert h(ConsumerRemoved(1)) == []  # e stays active
    assert h(ConsumerRemoved(4)) == [RewindCursor(), ActiveConsumerChanged(None)]
    assert h.d.active is None


def test_failover_non_partitioned_choice_does_not_depend_on_join_order() -> None:
    names = ["c1", "c2", "c3", "c4"]
    chosen = set()
    for order in (names, names[::-1], names[1:] + names[:1]):
        h = Harness("Failover", topic_name="persistent://public/default/t")
        for consumer_id, name in enumerate(order):
            h(ConsumerAdded(consumer_id, name))
        chosen.add(h.active_name())
    assert len(chosen) == 1


def test_failover_change_of_active_consumer_rewinds_and_sends_to_the_new_one() -> None:
    h = Harness("Failover", partition_index=0)
    h(ConsumerAdded(1, "b"))
    h(Flow(1, 10))
    batch = entries(2)
    h(ReadCompleted(batch))
    assert h(DispatchDue()) == [Dispatch(1, list(batch)), ReadEntries(8)]
    h(Flow(2, 10))  # unknown consumer: ignored
    h(ConsumerAdded(2, "a"))  # a < b: active changes while a read waits
    assert h.active_name() == "a"
    # The waiting read was cancelled; once that is confirmed, nothing is read for "a" without permits.
    assert h(ReadCancelled()) == []
    assert h(Flow(2, 4)) == [ReadEntries(4)]
    assert h(ReadCompleted(batch)) == []
    assert h(DispatchDue()) == [Dispatch(2, list(batch)), ReadEntries(2)]


def test_flow_of_an_inactive_consumer_reads_nothing() -> None:
    h = Harness("Failover", partition_index=0)
    h(ConsumerAdded(1, "a"))
    h(ConsumerAdded(2, "b"))
    assert h(Flow(2, 10)) == []
    assert h(Flow(1, 10)) == [ReadEntries(10)]


# --- rewinds ----------------------------------------------------------------------------------------


def test_redeliver_rewinds_the_cursor() -> None:
    h = Harness("Failover", partition_index=0)
    h(ConsumerAdded(1, "a"))
    h(ConsumerAdded(2, "b"))
    h(Flow(1, 2))
    h(ReadCompleted(entries(2)))
    h(DispatchDue())  # no permits left: no read in flight
    assert h(RedeliverRequested(1, None)) == [RewindCursor()]
    assert h(RedeliverRequested(2, None)) == []  # not the active consumer
    assert h(Flow(1, 2)) == [ReadEntries(2)]


def test_stale_read_after_a_rewind_rewinds_again() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "c1"))
    assert h(Flow(1, 10)) == [ReadEntries(10)]
    # Redelivery while the read is in flight: cancel it and rewind.
    assert h(RedeliverRequested(1, None)) == [CancelRead(), RewindCursor()]
    # The read completed before the cancel took effect: its entries are stale, the cursor moved past
    # the rewind, so rewind again and read anew.
    assert h(ReadCompleted(entries(3))) == [RewindCursor(), ReadEntries(10)]
    assert h(DispatchDue()) == []  # nothing awaits dispatch
    batch = entries(3)
    h(ReadCompleted(batch))
    assert h(DispatchDue()) == [Dispatch(1, list(batch)), ReadEntries(7)]


def test_entries_awaiting_dispatch_are_dropped_by_a_rewind() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 10))
    h(ReadCompleted(entries(3)))
    # No read in flight: no CancelRead; the awaiting entries are dropped and read again from the rewind.
    assert h(RedeliverRequested(1, None)) == [RewindCursor(), ReadEntries(10)]
    assert h(DispatchDue()) == []


def test_entries_acked_while_awaiting_dispatch_are_not_sent() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 10))
    batch = entries(5)
    h(ReadCompleted(batch))
    h(Acked(1, (batch[1].position,)))
    h(CumulativeAcked(1, batch[2].position))  # also drops 1:0 .. 1:2
    assert h(DispatchDue()) == [Dispatch(1, [batch[3], batch[4]]), ReadEntries(8)]


def test_entries_with_nobody_to_send_to_rewind() -> None:
    h = Harness("Failover", partition_index=0)
    h(ConsumerAdded(1, "a"))
    h(Flow(1, 10))
    h(ReadCompleted(entries(2)))
    h(ConsumerRemoved(1))
    assert h(DispatchDue()) == []  # the removal already rewound and dropped them
    h(ConsumerAdded(2, "b"))
    assert h(Tick()) == []  # no permits


def test_read_completion_without_a_read_is_refused() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "c1"))
    with pytest.raises(Exception, match="did not ask for"):
        h(ReadCompleted(entries(1)))


def test_unknown_subscription_type_is_refused() -> None:
    with pytest.raises(ValueError):
        SingleActiveConsumerDispatcher("Shared")


# --- Exclusive readers with key hash ranges (ReaderBuilder.keyHashRange) ---------------------------


def keyed_entries(keys: list[str], message_count: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(Position(1, i), key_hash(key.encode()), message_count) for i, key in enumerate(keys))


LOW_HALF = KeySharedMeta("STICKY", False, ((0, 32767),))


def in_low_half(entry: Entry) -> bool:
    return range_slot(entry.key_hash) <= 32767


def test_reader_with_ranges_receives_only_its_hashes_and_acks_the_rest() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "reader", 0, LOW_HALF))
    h(Flow(1, 100))
    batch = keyed_entries([f"key-{i}" for i in range(40)], message_count=2)
    mine = [e for e in batch if in_low_half(e)]
    others = tuple(e.position for e in batch if not in_low_half(e))
    assert mine and others, "the keys must fall on both sides"
    assert h(ReadCompleted(batch)) == [AckFiltered(others)]
    # Permits pay only for what is sent: 100 - 2 per kept entry.
    assert h(DispatchDue()) == [Dispatch(1, mine), ReadEntries(min(100 - 2 * len(mine), 100))]


def test_reader_whose_read_holds_none_of_its_hashes_reads_on() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "reader", 0, LOW_HALF))
    h(Flow(1, 10))
    batch = tuple(e for e in keyed_entries([f"key-{i}" for i in range(40)]) if not in_low_half(e))[:3]
    assert h(ReadCompleted(batch)) == [AckFiltered(tuple(e.position for e in batch))]
    assert h(DispatchDue()) == [ReadEntries(10)]


@pytest.mark.parametrize(
    "ranges", [((0, 70000),), ((5, 4),), ((0, 10), (10, 20))], ids=["beyond-65535", "reversed", "overlapping"]
)
def test_reader_with_invalid_ranges_is_refused(ranges: tuple[tuple[int, int], ...]) -> None:
    h = Harness("Exclusive")
    with pytest.raises(ConsumerAssignError):
        h(ConsumerAdded(1, "reader", 0, KeySharedMeta("STICKY", False, ranges)))
    assert h.d.consumers == {} and h.d.key_hash_filter is None
    h(ConsumerAdded(2, "plain"))
    h(Flow(2, 10))
    batch = keyed_entries(["a", "b", "c"])
    h(ReadCompleted(batch))
    assert h(DispatchDue()) == [Dispatch(2, list(batch)), ReadEntries(7)]


def test_failover_ignores_declared_ranges_as_pulsar_does() -> None:
    h = Harness("Failover", partition_index=0)
    h(ConsumerAdded(1, "a", 0, LOW_HALF))
    h(Flow(1, 100))
    batch = keyed_entries([f"key-{i}" for i in range(10)])
    assert h(ReadCompleted(batch)) == []
    assert h(DispatchDue())[0] == Dispatch(1, list(batch))


def test_filter_goes_with_its_reader() -> None:
    h = Harness("Exclusive")
    h(ConsumerAdded(1, "reader", 0, LOW_HALF))
    h(ConsumerRemoved(1))
    h(ConsumerAdded(2, "plain"))
    h(Flow(2, 100))
    batch = keyed_entries([f"key-{i}" for i in range(10)])
    assert h(ReadCompleted(batch)) == []
    assert h(DispatchDue())[0] == Dispatch(2, list(batch))
