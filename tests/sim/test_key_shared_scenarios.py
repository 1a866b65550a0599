"""Pulsar's Key_Shared scenarios (KeySharedSubscriptionTest) at the level of the core.

Each runs against the ordering modes it applies to, as Pulsar's suite runs DEFAULT and CLASSIC. The
end-to-end versions with the official client come with the broker; these pin the dispatcher's part.
"""

from __future__ import annotations

import pytest
from scripted import Script, keys_routed

from magnetar.core.errors import ConsumerAssignError, NotAllowedError
from magnetar.core.events import (
    Acked,
    CancelRead,
    Dispatch,
    DispatchDue,
    Entry,
    KeySharedMeta,
    ReadCancelled,
    ReadCompleted,
    ReadEntries,
    ReplayEntries,
    Tick,
    WakeUp,
)
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position

P = Position
MODES = ["pip379", "pip282", "classic"]
# Keys served by c1 alone, that move to c2 when c2 joins (consistent hashing, default 100 points).
MOVING = keys_routed([(["c1"], "c1"), (["c1", "c2"], "c2")], count=3)
STAYING = keys_routed([(["c1", "c2"], "c1")], count=3)


@pytest.mark.parametrize("mode", MODES)
def test_ordering_when_adding_consumers(mode: str) -> None:
    """testOrderingWhenAddingConsumers: c1 holds 10 unacked; c2 joins; 10 more of the same keys go to
    nobody until c1 leaves, then c2 gets all 20 of its keys in order."""
    s = Script(mode)
    s.add("c1", 10)
    first = s.publish(*[MOVING[i % 3] for i in range(10)])
    s.read_available(*first)
    assert len(s.received["c1"]) == 10
    s.add("c2", 100)
    second = s.publish(*[MOVING[i % 3] for i in range(10)])
    s.read_available(*second)
    assert s.received["c2"] == []
    s.remove("c1")
    # c2 acks as it goes (classic and pip282 hold what lies past its join position until then).
    while unacked := [p for p in s.received["c2"] if p not in s.acked]:
        s.ack("c2", *unacked)
    assert s.received["c2"] == [p for p, _k in first + second]


@pytest.mark.parametrize("mode", MODES)
def test_keys_that_did_not_move_keep_flowing(mode: str) -> None:
    """PIP-379's point against blocking everything: with c1 stuck on unacked messages of keys that moved,
    keys that stayed with c1 still flow to it (pip379); the older modes block c2 entirely instead."""
    s = Script(mode)
    s.add("c1", 100)
    held = s.publish(*MOVING)
    s.read_available(*held)
    s.add("c2", 100)
    later = s.publish(*STAYING, *MOVING)
    s.read_available(*later)
    stayed = [p for p, k in later if k in STAYING]
    assert s.received["c1"][3:] == stayed
    assert s.received["c2"] == []


def test_pip379_blocks_only_hashes_with_pending_messages() -> None:
    """A key that moved to c2 but has nothing pending on c1 goes to c2 at once."""
    s = Script("pip379")
    s.add("c1", 100)
    held = s.publish(MOVING[0])
    s.read_available(*held)
    s.add("c2", 100)
    later = s.publish(MOVING[0], MOVING[1])
    s.read_available(*later)
    assert s.received["c2"] == [later[1][0]]
    stats = s.dispatcher.stats()
    draining = stats.consumers[0].draining
    assert stats.summary.draining is not None and stats.summary.draining.count == 1
    assert draining is not None and draining.hashes[0].unacked_messages == 1


def test_read_ahead_limit_bounds_the_replay_queue() -> None:
    """testReadAheadLimit: keySharedLookAheadMsgInReplayThresholdPerSubscription=20; c1 and c3 hold
    their keys, c2 has room; msgInReplay never exceeds 20 while the blocked keys wait."""
    s = Script("pip379", look_ahead_msg_in_replay_threshold_per_subscription=20)
    names = ["c1", "c2", "c3"]
    blocked_keys = keys_routed([(names, "c1")], count=2) + keys_routed([(names, "c3")], count=2)
    free_keys = keys_routed([(names, "c2")], count=4)
    for name in names:
        s.add(name, 10 if name != "c2" else 500)
    entries = s.publish(*blocked_keys * 30, *free_keys * 50)
    served = 0
    while isinstance(s.read, ReadEntries) and served < len(entries):
        count = s.read.max_entries
        s.read_completes(*entries[served : served + count])
        served += count
        s.dispatch()
        assert s.dispatcher.stats().summary.msg_in_replay <= 20
    assert served < len(entries), "reads went on past the look-ahead limit"


@pytest.mark.parametrize("mode", MODES)
def test_consumers_with_the_same_name(mode: str) -> None:
    """testCheckConsumersWithSameName (#10750): three consumers share a name; the first takes messages
    without acking and closes; the other two drain everything."""
    s = Script(mode)
    for handle in ("a", "b", "c"):
        s.add(handle, 0, consumer_name="same")
    s.flow("a", 5)
    entries = s.publish(*[f"key-{i}" for i in range(100)])
    s.flow("b", 1000)
    s.flow("c", 1000)
    s.read_available(*entries)
    s.remove("a")
    got = sorted(s.received["b"] + s.received["c"])
    assert got == sorted(p for p, _k in entries)


def test_message_ttl_unblocks_draining_hashes() -> None:
    """testContinueDispatchMessagesWhenMessageTTL: c1 never acks; after TTL moves the mark-delete
    position past its messages, c2 receives the hashes that were draining."""
    s = Script("pip379")
    s.add("c1", 100)
    held = s.publish(*MOVING)
    s.read_available(*held)
    s.add("c2", 100)
    later = s.publish(*MOVING)
    s.read_available(*later)
    assert s.received["c2"] == []
    s.expire(held[-1][0])
    assert s.received["c2"] == [p for p, _k in later]
    stats = s.dispatcher.stats()
    assert stats.summary.draining is not None and stats.summary.draining.count == 0
    assert stats.consumers[0].unacked_messages == 0


def test_unblocks_within_the_interval_are_batched_into_one_read() -> None:
    """keySharedUnblockingIntervalMs: several hashes unblocked within the interval cause one WakeUp."""
    s = Script("pip379", key_shared_unblocking_interval_ms=10)
    s.add("c1", 100)
    held = s.publish(*MOVING)
    s.read_available(*held)
    s.add("c2", 100)
    later = s.publish(*MOVING)
    s.read_available(*later)
    wakeups = []
    for position, _key in held:
        for decision in s.dispatcher.handle(Acked(s.ids["c1"], (position,)), 0):
            if isinstance(decision, WakeUp):
                wakeups.append(decision.at_ms)
    assert wakeups == [10]


def test_sticky_range_conflict_is_refused_and_changes_nothing() -> None:
    s = Script("pip379")
    s.add("c1", 10, KeySharedMeta("STICKY", sticky_ranges=((0, 99), (400, 65535))))
    s.add("c2", 10, KeySharedMeta("STICKY", sticky_ranges=((100, 399),)))
    for ranges in [((0, 65535),), ((1, 1),), ((50, 100),), ((399, 500),)]:
        with pytest.raises(ConsumerAssignError, match="conflict"):
            s.add("c3", 10, KeySharedMeta("STICKY", sticky_ranges=ranges))
    assert len(s.dispatcher.consumers) == 2
    assert [c.hash_ranges for c in s.dispatcher.stats().consumers] == [
        [(0, 99), (400, 65535)],
        [(100, 399)],
    ]


def test_sticky_hashes_outside_every_range_are_held_not_dropped() -> None:
    s = Script("pip379")
    s.add("low", 100, KeySharedMeta("STICKY", sticky_ranges=((0, 32767),)))
    entries = s.publish(*[f"key-{i}" for i in range(40)])
    s.read_available(*entries)
    held = s.dispatcher.stats().summary.msg_in_replay
    assert held == len(entries) - len(s.received["low"]) > 0
    s.add("high", 100, KeySharedMeta("STICKY", sticky_ranges=((32768, 65535),)))
    assert sorted(s.received["low"] + s.received["high"]) == [p for p, _k in entries]


def test_policy_differs_while_connected_is_refused_then_allowed_after_all_left() -> None:
    """testSelectorChangedAfterAllConsumerDisconnected and the refusal while consumers remain."""
    s = Script("pip379")
    s.add("auto", 10)
    with pytest.raises(NotAllowedError):
        s.add("sticky", 10, KeySharedMeta("STICKY", sticky_ranges=((0, 65535),)))
    with pytest.raises(NotAllowedError):
        s.add("ooo", 10, KeySharedMeta(allow_out_of_order_delivery=True))
    s.remove("auto")
    s.add("sticky", 10, KeySharedMeta("STICKY", sticky_ranges=((0, 65535),)))
    stats = s.dispatcher.stats()
    assert (stats.key_shared_mode, stats.allow_out_of_order_delivery) == ("STICKY", False)


def test_allow_out_of_order_delivery_never_drains() -> None:
    s = Script("pip379")
    meta = KeySharedMeta(allow_out_of_order_delivery=True)
    s.add("c1", 100, meta)
    held = s.publish(*MOVING)
    s.read_available(*held)
    s.add("c2", 100, meta)
    later = s.publish(*MOVING)
    s.read_available(*later)
    assert s.received["c2"] == [p for p, _k in later]
    assert s.dispatcher.stats().summary.draining is None


def test_draining_stats_sum_and_return_to_zero() -> None:
    s = Script("pip379")
    s.add("c1", 100)
    held = s.publish(*MOVING, *MOVING)
    s.read_available(*held)
    s.add("c2", 100)
    stats = s.dispatcher.stats()
    c1, totals = stats.consumers[0].draining, stats.summary.draining
    assert c1 is not None and totals is not None
    assert c1.count == totals.count == len(set(MOVING))
    assert c1.unacked_messages == totals.unacked_messages == 6
    assert sum(h.unacked_messages for h in c1.hashes) == 6
    s.ack("c1", *[p for p, _k in held])
    stats = s.dispatcher.stats()
    c1, totals = stats.consumers[0].draining, stats.summary.draining
    assert c1 is not None and totals is not None
    assert totals.count == totals.unacked_messages == 0
    assert c1.cleared_total == len(set(MOVING))


def test_delayed_message_waits_for_its_time_without_holding_its_key() -> None:
    """deliver_at_time (Shared and Key_Shared): held until due, later messages of the key still flow."""
    s = Script("pip379")
    s.add("c1", 100)
    d = s.dispatcher
    assert isinstance(s.read, ReadEntries)
    s.read = None
    entries = (Entry(P(1, 6), key_hash(b"k"), 1, None, 1_000), Entry(P(1, 7), key_hash(b"k")))
    s.keys.update({P(1, 6): "k", P(1, 7): "k"})
    s.sequence += [P(1, 6), P(1, 7)]
    decisions = d.handle(ReadCompleted(entries), 0) + d.handle(DispatchDue(), 0)
    assert [e.position for x in decisions if isinstance(x, Dispatch) for e in x.entries] == [P(1, 7)]
    assert WakeUp(1_000) in decisions
    assert d.stats().summary.msg_delayed == 1
    # Due: it joins the replay queue; the normal read waiting for new entries is cancelled for it.
    assert d.handle(Tick(), 1_000) == [CancelRead()]
    assert d.handle(ReadCancelled(), 1_000) == [ReplayEntries((P(1, 6),))]
    d.check_invariants()
