"""The Shared dispatcher, driven only through `handle(event, now_ms)` and judged by its decisions.

Scenarios follow Pulsar's Shared-subscription tests (round robin, priority levels, unacked limits,
redelivery counts); every test ends with the dispatcher's own `check_invariants`.
"""

from __future__ import annotations

from magnetar.core.dispatchers.shared import SharedDispatcher
from magnetar.core.events import (
    Acked,
    BatchIndexAcked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    CumulativeAcked,
    Dispatch,
    DispatchDue,
    Entry,
    Flow,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    RedeliverRequested,
    ReplayEntries,
    Tick,
    WakeUp,
)
from magnetar.core.settings import DispatcherSettings
from magnetar.positions import Position


def entries(count: int, ledger: int = 1, first: int = 0, message_count: int = 1) -> tuple[Entry, ...]:
    return tuple(
        Entry(Position(ledger, first + i), key_hash=first + i, message_count=message_count) for i in range(count)
    )


def positions(*items: Entry) -> tuple[Position, ...]:
    return tuple(e.position for e in items)


class Harness:
    """A dispatcher and a clock; every call returns the decisions and checks the invariants."""

    def __init__(self, **settings: object) -> None:
        self.d = SharedDispatcher(DispatcherSettings(**settings))
        self.now_ms = 0

    def __call__(self, event: object) -> list:
        out = self.d.handle(event, self.now_ms)
        self.d.check_invariants()
        return out

    def deliver(self, batch: tuple[Entry, ...]) -> list:
        """Complete the read in flight with `batch`, then let the dispatcher send it."""
        assert self(ReadCompleted(batch)) == []
        return self(DispatchDue())


def dispatches(out: list) -> list[Dispatch]:
    return [d for d in out if isinstance(d, Dispatch)]


# --- assignment -------------------------------------------------------------------------------------


def test_first_flow_asks_for_a_read_bounded_by_permits_and_batch_size() -> None:
    h = Harness(max_read_batch_size=10)
    assert h(ConsumerAdded(1, "c1")) == []  # no permits yet
    assert h(Flow(1, 4)) == [ReadEntries(4)]
    assert h(Flow(1, 100)) == []  # one read at a time
    h = Harness(max_read_batch_size=10)
    h(ConsumerAdded(1, "c1"))
    assert h(Flow(1, 100)) == [ReadEntries(10)]


def test_round_robin_across_consumers_with_permits() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 100))
    h(Flow(2, 100))
    first, second = entries(3), entries(3, first=3)
    out = h.deliver(first)
    assert dispatches(out) == [Dispatch(1, list(first))]
    assert out[-1] == ReadEntries(100)
    # The next read continues with the next consumer in the ring.
    assert dispatches(h.deliver(second)) == [Dispatch(2, list(second))]


def test_round_robin_skips_consumers_without_permits() -> None:
    h = Harness(max_round_robin_batch_size=1)
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(ConsumerAdded(3, "c3"))
    h(Flow(1, 10))
    h(Flow(3, 10))
    batch = entries(4)
    assert dispatches(h.deliver(batch)) == [Dispatch(1, [batch[0], batch[2]]), Dispatch(3, [batch[1], batch[3]])]


def test_max_round_robin_batch_size_bounds_each_turn() -> None:
    h = Harness(max_round_robin_batch_size=2)
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 100))
    h(Flow(2, 100))
    batch = entries(7)
    # Turns of 2: c1 e0 e1, c2 e2 e3, c1 e4 e5, c2 e6; one Dispatch per consumer, in position order.
    assert dispatches(h.deliver(batch)) == [
        Dispatch(1, [batch[0], batch[1], batch[4], batch[5]]),
        Dispatch(2, [batch[2], batch[3], batch[6]]),
    ]


def test_lower_priority_level_is_served_first() -> None:
    h = Harness(max_round_robin_batch_size=2)
    h(ConsumerAdded(1, "low", priority_level=1))
    h(ConsumerAdded(2, "high", priority_level=0))
    h(Flow(1, 100))
    h(Flow(2, 100))
    batch = entries(5)
    # Only level 0 has consumers with permits: it gets everything, whatever the round-robin turn.
    assert dispatches(h.deliver(batch)) == [Dispatch(2, list(batch))]


def test_next_priority_level_only_when_the_first_has_no_permits() -> None:
    h = Harness()
    h(ConsumerAdded(1, "low", priority_level=1))
    h(ConsumerAdded(2, "high", priority_level=0))
    h(Flow(1, 100))
    h(Flow(2, 2))
    batch = entries(5)
    assert dispatches(h.deliver(batch)) == [Dispatch(2, list(batch[:2])), Dispatch(1, list(batch[2:]))]
    assert h.d.stats().consumers[1].permits == 0


def test_entries_no_consumer_can_take_go_to_the_replay_queue() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 2))
    batch = entries(3)  # the read returned more than the permits (e.g. permits were spent meanwhile)
    out = h.deliver(batch)
    assert dispatches(out) == [Dispatch(1, list(batch[:2]))]
    assert h.d.stats().summary.msg_in_replay == 1
    assert h(Flow(1, 5)) == [ReplayEntries(positions(batch[2]))]


def test_permits_are_counted_in_messages() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    assert h(Flow(1, 5)) == [ReadEntries(5)]
    batch = entries(3, message_count=3)
    out = h.deliver(batch)
    # 3 messages leave 2 permits, so a second batch entry goes out and the permits go below zero,
    # as in Pulsar; the third entry waits for permits.
    assert dispatches(out) == [Dispatch(1, list(batch[:2]))]
    stats = h.d.stats().consumers[0]
    assert stats.permits == -1 and stats.unacked_messages == 6 and stats.msg_out_counter == 6
    assert stats.avg_messages_per_entry == 3.0
    assert h(Flow(1, 1)) == []  # still at 0 permits
    assert h(Flow(1, 1)) == [ReplayEntries(positions(batch[2]))]


def test_precise_flow_control_reads_the_permits_over_the_messages_per_entry() -> None:
    """preciseDispatcherFlowControl: a read takes ceil(permits / average messages per entry) entries, the
    average Pulsar's (the first dispatch's, then a tenth to each newer one, rounded half up). Off
    (Pulsar's default), the permits count as entries."""
    for precise, reads in ((True, [ReadEntries(23), ReadEntries(24)]), (False, [ReadEntries(100), ReadEntries(100)])):
        h = Harness(precise_dispatcher_flow_control=precise)
        h(ConsumerAdded(1, "c1"))
        assert h(Flow(1, 500)) == [ReadEntries(100)]  # nothing sent yet: one message per entry
        # 40 messages in 2 entries: 460 permits left, the average 20, 460 / 20 = 23 entries.
        first = h.deliver(entries(2, message_count=20))
        assert h.d.consumers[1].avg_messages_per_entry == 20
        # 10 more in 1 entry: 450 left, the average 20 * 0.9 + 0.1 * 10 = 19, 450 / 19 -> 24 entries.
        second = h.deliver(entries(1, first=2, message_count=10))
        assert round(h.d.consumers[1].avg_messages_per_entry, 9) == 19
        assert [d for d in first + second if isinstance(d, ReadEntries)] == reads


# --- unacked limits ---------------------------------------------------------------------------------


def test_max_unacked_messages_per_consumer_blocks_at_limit_and_unblocks_at_half() -> None:
    h = Harness(max_unacked_messages_per_consumer=4)
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 100))
    batch = entries(4)
    out = h.deliver(batch)
    assert dispatches(out) == [Dispatch(1, list(batch))]
    assert not any(isinstance(d, ReadEntries) for d in out)  # blocked: no further read
    assert h.d.stats().consumers[0].blocked_on_unacked
    assert h(Acked(1, positions(batch[0]))) == []  # 3 unacked: still blocked
    assert h(Flow(1, 10)) == []
    # 2 = half: unblocked; the read asks only for what the limit leaves room for (4 - 2).
    assert h(Acked(1, positions(batch[1]))) == [ReadEntries(2)]
    assert not h.d.stats().consumers[0].blocked_on_unacked


def test_blocked_consumer_is_skipped_while_others_get_entries() -> None:
    h = Harness(max_unacked_messages_per_consumer=2, max_round_robin_batch_size=2)
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 100))
    h(Flow(2, 100))
    first = entries(2)
    assert dispatches(h.deliver(first)) == [Dispatch(1, list(first))]
    second = entries(2, first=2)
    out = h.deliver(second)
    assert dispatches(out) == [Dispatch(2, list(second))]
    # Both consumers are at the limit now: no further read.
    assert not any(isinstance(d, (ReadEntries, ReplayEntries)) for d in out)
    assert [c.blocked_on_unacked for c in h.d.stats().consumers] == [True, True]


def test_max_unacked_messages_per_subscription_blocks_at_limit_and_unblocks_at_half() -> None:
    h = Harness(max_unacked_messages_per_subscription=4, max_round_robin_batch_size=2)
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 100))
    h(Flow(2, 100))
    batch = entries(4)
    out = h.deliver(batch)
    assert dispatches(out) == [Dispatch(1, list(batch[:2])), Dispatch(2, list(batch[2:]))]
    assert not any(isinstance(d, ReadEntries) for d in out)
    assert h.d.stats().summary.blocked_on_unacked
    assert h(Acked(1, positions(batch[0]))) == []  # 3 unacked
    assert h(Flow(2, 1)) == []
    assert h(Acked(2, positions(batch[2]))) == [ReadEntries(100)]  # 2 = half: unblocked
    assert not h.d.stats().summary.blocked_on_unacked


def test_zero_limits_never_block() -> None:
    h = Harness(max_unacked_messages_per_consumer=0, max_unacked_messages_per_subscription=0)
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 1000))
    out = h.deliver(entries(100))
    assert len(dispatches(out)[0].entries) == 100 and out[-1] == ReadEntries(100)


def test_batch_index_acks_lower_unacked_messages() -> None:
    h = Harness(max_unacked_messages_per_consumer=4)
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 100))
    (batch,) = entries(1, message_count=5)
    h.deliver((batch,))
    assert h.d.stats().consumers[0].unacked_messages == 5
    assert h(BatchIndexAcked(1, batch.position, 2)) == []  # 3 unacked: still blocked
    assert h.d.stats().summary.unacked_messages == 3
    # A batch-index ack never completes the entry: at most batch size - 1 are counted here.
    assert h(BatchIndexAcked(1, batch.position, 10)) == [ReadEntries(3)]  # 1 unacked: unblocked, room for 3
    assert h.d.stats().consumers[0].unacked_messages == 1
    h(Acked(1, (batch.position,)))
    assert h.d.stats().summary.unacked_messages == 0


def test_cumulative_ack_releases_every_pending_entry_up_to_the_position() -> None:
    h = Harness(max_unacked_messages_per_consumer=3)
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 100))
    batch = entries(3)
    h.deliver(batch)
    assert h(CumulativeAcked(1, batch[1].position)) == [ReadEntries(2)]  # 1 unacked of 3: room for 2
    assert h.d.stats().consumers[0].unacked_messages == 1


# --- redelivery -------------------------------------------------------------------------------------


def test_redelivery_counts_rise_on_redeliver_requested() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 2))
    batch = entries(2)
    assert dispatches(h.deliver(batch)) == [Dispatch(1, list(batch), None)]
    assert h(RedeliverRequested(1, positions(batch[0]))) == []  # no permits to replay with
    assert h(Flow(1, 1)) == [ReplayEntries(positions(batch[0]))]
    assert dispatches(h.deliver(batch[:1])) == [Dispatch(1, [batch[0]], [1])]
    # All of the consumer's messages: both counts rise, and Dispatch reports them per entry.
    h(RedeliverRequested(1, None))
    assert h(Flow(1, 2)) == [ReplayEntries(positions(*batch))]
    assert dispatches(h.deliver(batch)) == [Dispatch(1, list(batch), [2, 1])]
    assert h.d.msg_redeliver_counter == 3


def test_redeliver_of_positions_not_pending_is_ignored() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 1))
    (e0,) = entries(1)
    h.deliver((e0,))
    h(RedeliverRequested(2, (e0.position, Position(9, 9))))  # c2 holds neither
    assert h.d.redelivery_counts == {}
    assert h.d.stats().consumers[0].unacked_messages == 1


def test_removed_consumers_pending_messages_go_to_another_consumer_without_raising_redelivery_count() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 2))
    batch = entries(2)
    assert dispatches(h.deliver(batch)) == [Dispatch(1, list(batch))]
    assert h(ConsumerRemoved(1)) == []  # c2 has no permits yet
    assert h.d.stats().summary.msg_in_replay == 2 and h.d.stats().summary.unacked_messages == 0
    assert h(Flow(2, 10)) == [ReplayEntries(positions(*batch))]
    out = h.deliver(batch)
    assert dispatches(out) == [Dispatch(2, list(batch), None)]
    assert h.d.redelivery_counts == {}


def test_ack_of_a_position_redelivered_to_another_consumer_finds_its_owner() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(1, 1))
    (e0,) = entries(1)
    h.deliver((e0,))
    h(RedeliverRequested(1, None))
    assert h(Flow(2, 1)) == [ReplayEntries((e0.position,))]
    assert dispatches(h.deliver((e0,))) == [Dispatch(2, [e0], [1])]
    # c1's ack arrives late: the message is pending on c2 now, and that is where it is released.
    h(Acked(1, (e0.position,)))
    stats = h.d.stats()
    assert stats.summary.unacked_messages == 0 and [c.unacked_messages for c in stats.consumers] == [0, 0]
    assert h.d.redelivery_counts == {}


def test_ack_while_in_replay_queue_drops_the_position() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 1))
    (e0,) = entries(1)
    h.deliver((e0,))
    h(RedeliverRequested(1, None))
    h(Acked(1, (e0.position,)))
    assert h.d.stats().summary.msg_in_replay == 0
    assert h(Flow(1, 1)) == [ReadEntries(1)]  # nothing to replay: a normal read


# --- read loop --------------------------------------------------------------------------------------


def test_cancel_read_when_replay_work_appears_while_a_normal_read_waits() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 10))
    batch = entries(2)
    out = h.deliver(batch)
    assert out[-1] == ReadEntries(8)  # a normal read now waits for new entries
    assert h(RedeliverRequested(1, positions(batch[0]))) == [CancelRead()]
    assert h(RedeliverRequested(1, positions(batch[1]))) == []  # already asked
    assert h(ReadCancelled()) == [ReplayEntries(positions(*batch))]
    assert dispatches(h.deliver(batch)) == [Dispatch(1, list(batch), [1, 1])]


def test_cancel_read_when_a_removed_consumer_leaves_messages_to_replay() -> None:
    h = Harness()
    h(ConsumerAdded(1, "c1"))
    h(ConsumerAdded(2, "c2"))
    h(Flow(2, 1))
    (e0,) = entries(1)
    assert dispatches(h.deliver((e0,))) == [Dispatch(2, [e0])]
    assert h(Flow(1, 5)) == [ReadEntries(5)]
    assert h(ConsumerRemoved(2)) == [CancelRead()]
    assert h(ReadCancelled()) == [ReplayEntries((e0.position,))]
    assert dispatches(h.deliver((e0,))) == [Dispatch(1, [e0], None)]


def test_backoff_wakeup_after_a_replay_read_that_dispatched_nothing() -> None:
    h = Harness(retry_backoff_initial_ms=1, retry_backoff_max_ms=10)
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 2))
    batch = entries(2)
    h.deliver(batch)
    h(RedeliverRequested(1, None))
    assert h(Flow(1, 2)) == [ReplayEntries(positions(*batch))]
    h(Acked(1, positions(*batch)))  # acked while the replay read is in flight
    h.now_ms = 100
    assert h(ReadCompleted(batch)) == []
    assert h(DispatchDue()) == [WakeUp(101)]  # nothing sent: back off, no read yet
    assert h(Flow(1, 1)) == []  # still backing off
    h.now_ms = 101
    assert h(Tick()) == [ReadEntries(3)]


def test_max_unacked_messages_per_consumer_caps_a_single_read() -> None:
    """Pulsar caps a consumer's share of a read at maxUnackedMessagesPerConsumer - unackedMessages."""
    h = Harness(max_unacked_messages_per_consumer=2)
    h(ConsumerAdded(1, "c1"))
    h(Flow(1, 100))
    batch = entries(5)
    out = h.deliver(batch)
    assert dispatches(out) == [Dispatch(1, list(batch[:2]))]
    assert h.d.stats().consumers[0].unacked_messages == 2
    assert h.d.stats().summary.msg_in_replay == 3
