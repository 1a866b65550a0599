"""The dispatchers' read-only queries behind the admin explainers: pending messages with the time they
were sent, `explain_hash` in every ordering mode, the metrics summary and the tracker's totals.

Each scenario drives a dispatcher only through `handle(event, now_ms)`, serving its reads like the
broker does, and checks that asking changes nothing (the invariants hold and a second answer is equal).
"""

from __future__ import annotations

import pytest

from magnetar.core.dispatchers import KeySharedDispatcher, SharedDispatcher
from magnetar.core.draining_hashes import DENSE_MIN, DrainingHashesTracker
from magnetar.core.events import (
    Acked,
    BatchIndexAcked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
    Dispatch,
    DispatchDue,
    Entry,
    Flow,
    KeySharedMeta,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    RedeliverRequested,
    ReplayEntries,
    Tick,
    WakeUp,
)
from magnetar.core.explain import (
    DELAYED,
    DRAINING,
    IN_REPLAY_QUEUE,
    LOOK_AHEAD_LIMIT,
    NO_CONSUMER_FOR_HASH,
    NO_CONSUMERS,
    NO_PERMITS,
    RECENTLY_JOINED,
    PendingMessage,
)
from magnetar.core.selectors import ConsistentHashingSelector
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import consistent_hashing_slot, key_hash
from magnetar.positions import Position

P = Position


def key_moving_to(newcomer: str, names: list[str], skip: int = 0) -> str:
    """A key every consumer of `names` leaves to names[0], that moves to `newcomer` when it joins."""
    before, after = ConsistentHashingSelector(), ConsistentHashingSelector()
    for name in names:
        before.add_consumer(name, name)
        after.add_consumer(name, name)
    after.add_consumer(newcomer, newcomer)
    found = 0
    for n in range(100_000):
        slot = consistent_hashing_slot(key_hash(f"key-{n}".encode()))
        if before.select(slot) == names[0] and after.select(slot) == newcomer:
            if found == skip:
                return f"key-{n}"
            found += 1
    raise AssertionError("no such key")


class Driver:
    """A dispatcher, a clock and a log: reads are served from `log`, dispatches recorded per consumer."""

    def __init__(self, dispatcher: SharedDispatcher) -> None:
        self.d = dispatcher
        self.now_ms = 1_000
        self.log: list[Entry] = []
        self.served = 0
        self.read: ReadEntries | ReplayEntries | None = None
        self.cancel = False
        self.wakeup: int | None = None
        self.received: dict[int, list[Position]] = {}

    def __call__(self, event: object) -> None:
        for decision in self.d.handle(event, self.now_ms):
            if isinstance(decision, Dispatch):
                self.received.setdefault(decision.consumer_id, []).extend(e.position for e in decision.entries)
            elif isinstance(decision, (ReadEntries, ReplayEntries)):
                self.read, self.cancel = decision, False
            elif isinstance(decision, CancelRead):
                self.cancel = True
            elif isinstance(decision, WakeUp):
                self.wakeup = decision.at_ms
        self.d.check_invariants()

    def publish(self, *keys: str, deliver_at_ms: int = 0) -> list[Position]:
        start = len(self.log)
        for i, key in enumerate(keys):
            self.log.append(Entry(P(1, start + i), key_hash(key.encode()), 1, None, deliver_at_ms))
        self.settle()
        return [e.position for e in self.log[start:]]

    def settle(self) -> None:
        for _ in range(200):
            if isinstance(self.read, ReplayEntries):
                read, self.read = self.read, None
                by_position = {e.position: e for e in self.log}
                self(ReadCompleted(tuple(by_position[p] for p in read.positions)))
                self(DispatchDue())
            elif isinstance(self.read, ReadEntries) and self.cancel:
                self.read = None
                self(ReadCancelled())
            elif isinstance(self.read, ReadEntries) and self.served < len(self.log):
                batch = self.log[self.served : self.served + self.read.max_entries]
                self.served += len(batch)
                self.read = None
                self(ReadCompleted(tuple(batch)))
                self(DispatchDue())
            elif self.wakeup is not None and self.wakeup <= self.now_ms:
                self.wakeup = None
                self(Tick())
            else:
                return
        raise AssertionError("did not settle")

    def at(self, now_ms: int) -> Driver:
        self.now_ms = now_ms
        return self


def key_shared(mode: str = "pip379", **settings: object) -> Driver:
    settings.setdefault("key_shared_unblocking_interval_ms", 0)
    return Driver(KeySharedDispatcher(DispatcherSettings(key_shared_ordering_mode=mode, **settings), P(1, -1)))


# --- pending messages -------------------------------------------------------------------------------


def test_pending_messages_carry_the_time_of_the_event_that_sent_them() -> None:
    drive = Driver(SharedDispatcher(DispatcherSettings(), P(1, -1)))
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 10))
    drive.at(5_000).publish("a", "b")
    drive.at(7_000).publish("c")
    pending = drive.d.pending_messages()
    assert [(m.position, m.sent_at_ms) for m in pending] == [(P(1, 0), 5_000), (P(1, 1), 5_000), (P(1, 2), 7_000)]
    assert all(m.consumer_name == "c1" and m.sticky_hash is None and m.redelivery_count == 0 for m in pending)
    assert pending[0].key_hash == key_hash(b"a")
    assert drive.d.pending_messages() == pending  # asking changes nothing


def test_a_redelivered_message_is_pending_again_with_its_count_and_new_send_time() -> None:
    drive = Driver(SharedDispatcher(DispatcherSettings(), P(1, -1)))
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 10))
    (first,) = drive.at(2_000).publish("a")
    drive.at(3_000)(RedeliverRequested(1, (first,)))
    drive.settle()
    (message,) = drive.d.pending_messages()
    assert (message.position, message.redelivery_count, message.sent_at_ms) == (first, 1, 3_000)


def test_partly_acknowledged_batches_count_only_what_is_still_unacked() -> None:
    drive = Driver(SharedDispatcher(DispatcherSettings(), P(1, -1)))
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 100))
    drive.log.append(Entry(P(1, 0), key_hash(b"a"), 10))
    drive.settle()
    drive(BatchIndexAcked(1, P(1, 0), 4))
    (message,) = drive.d.pending_messages()
    assert (message.batch_size, message.unacked_messages) == (10, 6)


def test_pending_messages_of_key_shared_carry_the_selector_hash() -> None:
    drive = key_shared()
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 10))
    drive.publish("k")
    (message,) = drive.d.pending_messages()
    assert message.sticky_hash == consistent_hashing_slot(key_hash(b"k"))
    assert drive.d.sticky_hash_of_key(b"k") == (key_hash(b"k"), message.sticky_hash)


# --- explain_hash -----------------------------------------------------------------------------------


def test_a_draining_hash_names_its_holding_messages_and_returns_to_flowing_after_the_acks() -> None:
    moving = key_moving_to("c2", ["c1"])
    _, sticky = KeySharedDispatcher().sticky_hash_of_key(moving.encode())
    drive = key_shared()
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 100))
    held = drive.at(10_000).publish(moving, moving)
    drive.at(11_000)(ConsumerAdded(2, "c2"))
    drive(Flow(2, 100))
    drive.settle()

    answer = drive.d.explain_hash(sticky, key_hash(moving.encode()))
    assert (answer.owner_name, answer.draining.consumer_name) == ("c2", "c1")
    assert answer.draining.unacked_messages == 2 and answer.draining.blocked_attempts == 0
    assert [(m.consumer_name, m.position, m.sent_at_ms) for m in answer.pending] == [
        ("c1", held[0], 10_000),
        ("c1", held[1], 10_000),
    ]
    assert answer.reasons == (DRAINING,)

    waiting = drive.at(12_000).publish(moving)
    answer = drive.d.explain_hash(sticky)
    assert answer.draining.blocked_attempts >= 1
    assert answer.replay == ((waiting[0], key_hash(moving.encode())),)
    assert answer.reasons == (IN_REPLAY_QUEUE, DRAINING)  # in the order dispatch checks them
    assert drive.d.explain_hash(sticky) == answer  # asking is not a blocked attempt

    drive(Acked(1, tuple(held)))
    drive.settle()
    answer = drive.d.explain_hash(sticky)
    assert answer.draining is None and answer.reasons == ()
    assert [(m.consumer_name, m.position, m.sent_at_ms) for m in answer.pending] == [("c2", waiting[0], 12_000)]


def test_no_permits_and_no_consumers() -> None:
    drive = key_shared()
    sticky = drive.d.sticky_hash_of_key(b"k")[1]
    assert drive.d.explain_hash(sticky).reasons == (NO_CONSUMERS,)
    drive(ConsumerAdded(1, "c1"))
    answer = drive.d.explain_hash(sticky)
    assert (answer.owner_name, answer.owner_available_permits, answer.reasons) == ("c1", 0, (NO_PERMITS,))
    drive(ConsumerRemoved(1))
    assert drive.d.explain_hash(sticky).owner_name is None


def test_sticky_hash_outside_every_declared_range_has_no_consumer() -> None:
    drive = key_shared()
    drive(ConsumerAdded(1, "low", 0, KeySharedMeta("STICKY", sticky_ranges=((0, 100),))))
    drive(Flow(1, 10))
    assert drive.d.explain_hash(50).owner_name == "low"
    assert drive.d.explain_hash(5000).reasons == (NO_CONSUMER_FOR_HASH,)


@pytest.mark.parametrize("mode", ["classic", "pip282"])
def test_a_recently_joined_owner_names_the_position_it_waits_for(mode: str) -> None:
    moving = key_moving_to("c2", ["c1"])
    drive = key_shared(mode)
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 100))
    held = drive.publish(moving)
    drive(ConsumerAdded(2, "c2"))
    drive(Flow(2, 100))
    drive.settle()
    answer = drive.d.explain_hash(drive.d.sticky_hash_of_key(moving.encode())[1])
    assert answer.owner_name == "c2" and answer.draining is None
    assert answer.owner_join_position == held[0] and RECENTLY_JOINED in answer.reasons
    assert answer.ordering_mode == mode


def test_delayed_messages_and_a_full_replay_queue_are_named() -> None:
    moving = key_moving_to("c2", ["c1"])
    other = key_moving_to("c2", ["c1"], skip=1)
    drive = key_shared(look_ahead_msg_in_replay_threshold_per_subscription=1)
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 100))
    drive.publish(moving, other)
    drive(ConsumerAdded(2, "c2"))
    drive(Flow(2, 100))
    drive.publish(moving)  # drains behind c1's message: the replay queue reaches its limit of 1
    sticky = drive.d.sticky_hash_of_key(other.encode())[1]
    assert LOOK_AHEAD_LIMIT in drive.d.explain_hash(sticky).reasons

    drive = key_shared()
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 100))
    (later,) = drive.publish("k", deliver_at_ms=drive.now_ms + 60_000)
    answer = drive.d.explain_hash(drive.d.sticky_hash_of_key(b"k")[1])
    assert answer.delayed == ((later, key_hash(b"k"), drive.now_ms + 60_000),) and answer.reasons == (DELAYED,)


# --- summary, totals, stats names -------------------------------------------------------------------


def test_summary_agrees_with_stats_while_hashes_drain() -> None:
    moving = key_moving_to("c2", ["c1"])
    drive = key_shared()
    drive(ConsumerAdded(1, "c1"))
    drive(Flow(1, 100))
    drive.publish(moving, moving, "x", "y")
    drive(ConsumerAdded(2, "c2"))
    drive(Flow(2, 100))
    drive.publish(moving)
    summary = drive.d.summary()
    assert summary == drive.d.stats().summary
    assert summary.draining is not None
    assert summary.draining.count >= 1 and summary.draining.unacked_messages >= 2


def test_tracker_totals_in_dict_and_dense_form() -> None:
    class C:
        pass

    c1, c2 = C(), C()
    tracker = DrainingHashesTracker()
    for sticky_hash in range(1, 11):
        tracker.add_entry(c1, sticky_hash)
        tracker.add_entry(c1, sticky_hash)
    tracker.add_entry(c2, 20)
    tracker.reduce_ref_count(c2, 20)
    assert tracker.totals() == (10, 20, 1)
    for sticky_hash in range(100, 100 + DENSE_MIN):
        tracker.add_entry(c2, sticky_hash)
    assert tracker.is_dense and tracker.totals() == (10 + DENSE_MIN, 20 + DENSE_MIN, 1)


def test_every_mode_reports_its_ranges_and_itself() -> None:
    """The ranges are figures in every mode; the admin API renders classic's as Pulsar's strings."""
    for mode in ("classic", "pip379", "pip282"):
        drive = key_shared(mode)
        drive(ConsumerAdded(1, "c1"))
        stats = drive.d.stats()
        (consumer,) = stats.consumers
        assert stats.ordering_mode == mode and consumer.hash_ranges == [(1, 65535)]


def test_pending_message_is_a_plain_value() -> None:
    message = PendingMessage(1, "c1", P(1, 2), 1, 1, 7, None, 0, 5)
    assert message == PendingMessage(1, "c1", P(1, 2), 1, 1, 7, None, 0, 5)
    with pytest.raises(AttributeError):
        message.sent_at_ms = 6  # type: ignore[misc]
