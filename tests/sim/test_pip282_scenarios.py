"""PIP-282's two out-of-order flows, step by step as the document writes them.

[issue-1] and [issue-2] reorder a key in `classic` (Pulsar 3.x); `pip282` and `pip379` keep the order.
A classic test that shows the reordering passes: it proves the scenario reaches the bug.
"""

from __future__ import annotations

from scripted import Script, keys_routed

from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.events import Entry
from magnetar.core.settings import DispatcherSettings
from magnetar.positions import Position

P = Position
# key-a: c1 while {c1, c2}, then c3 once c3 joins; key-b: c2 throughout (the document's selector).
KEY_A = keys_routed([(["c1", "c2"], "c1"), (["c1", "c2", "c3"], "c3")])[0]
KEY_B = keys_routed([(["c1", "c2"], "c2"), (["c1", "c2", "c3"], "c2")])[0]


def issue_1(mode: str) -> Script:
    """Entries 1:6-1:8 of key-a and 1:9-1:11 of key-b; c1 has 1 permit, c2 has 1000."""
    s = Script(mode, mark_delete=P(1, 5))
    s.add("c1")
    s.add("c2")
    s.flow("c2", 1000)  # the read is sized by everyone's permits
    s.flow("c1", 1)
    s.read_completes(
        (P(1, 6), KEY_A), (P(1, 7), KEY_A), (P(1, 8), KEY_A), (P(1, 9), KEY_B), (P(1, 10), KEY_B), (P(1, 11), KEY_B)
    )
    s.dispatch()
    # Step 2: 1:6 to c1, 1:9-1:11 to c2; c1 never acknowledges 1:6.
    assert s.received["c1"] == [P(1, 6)]
    assert s.received["c2"] == [P(1, 9), P(1, 10), P(1, 11)]
    # Step 3: c3 joins and key-a moves to it.
    s.add("c3", 1000)
    return s


def test_issue_1_classic_reorders_key_a() -> None:
    s = issue_1("classic")
    # Step 4: 1:7 and 1:8 are below the read position recorded at join (1:12), so c3 gets them.
    assert s.key_order("c3", KEY_A) == [P(1, 7), P(1, 8)]
    assert str(s.dispatcher.stats().consumers[2].read_position_when_joining) == "1:12"
    # Step 5-6: c1 disconnects; 1:6 goes to c3 after 1:7 and 1:8.
    s.remove("c1")
    assert s.key_order("c3", KEY_A) == [P(1, 7), P(1, 8), P(1, 6)]


def test_issue_1_pip282_keeps_order() -> None:
    s = issue_1("pip282")
    # Step 3: the last sent position is 1:6 and individually sent (1:8, 1:11].
    stats = s.dispatcher.stats()
    assert str(stats.last_sent_position) == "1:6"
    assert stats.individually_sent_positions is not None
    assert stats.individually_sent_positions.to_string(", ", ", ") == "[(1:8, 1:11]]"
    assert str(stats.consumers[2].last_sent_position_when_joining) == "1:6"
    # Step 4: 1:7 and 1:8 are above 1:6: not sent to c3.
    assert s.key_order("c3", KEY_A) == []
    # Steps 5-6: c1 disconnects; c3 gets 1:6 and, once it is acked, 1:7 and 1:8.
    s.remove("c1")
    assert s.key_order("c3", KEY_A) == [P(1, 6)]
    s.ack("c2", P(1, 9), P(1, 10), P(1, 11))
    s.ack("c3", P(1, 6))
    assert s.key_order("c3", KEY_A) == [P(1, 6), P(1, 7), P(1, 8)]


def test_issue_1_pip379_keeps_order() -> None:
    s = issue_1("pip379")
    # key-a drains from c1, which holds 1:6: c3 gets nothing of it.
    assert s.key_order("c3", KEY_A) == []
    drained = s.dispatcher.stats().consumers[0].draining
    assert drained is not None
    assert drained.count == 1
    assert drained.unacked_messages == 1
    assert drained.hashes[0].blocked_attempts >= 1
    s.remove("c1")
    assert s.key_order("c3", KEY_A) == [P(1, 6), P(1, 7), P(1, 8)]
    totals = s.dispatcher.stats().summary.draining
    assert totals is not None and totals.count == 0


def test_issue_1_pip379_unblocks_on_ack() -> None:
    """The other way out of draining: c1 acknowledges 1:6 and key-a moves to c3 with 1:7, 1:8."""
    s = issue_1("pip379")
    s.ack("c1", P(1, 6))
    assert s.key_order("c3", KEY_A) == [P(1, 7), P(1, 8)]
    draining = s.dispatcher.stats().consumers[0].draining
    assert draining is not None and draining.cleared_total == 1


def issue_2(mode: str) -> Script:
    """readPosition 2:1; c1 has 1 permit, c2 1000 (so reads go on); key-a served by c1."""
    s = Script(mode, mark_delete=P(2, 0))
    s.add("c1")
    s.add("c2")
    s.flow("c2", 1000)
    s.flow("c1", 1)
    # Step 2: dispatch 2:1 (key-a, Normal) to c1.
    s.read_completes((P(2, 1), KEY_A))
    s.dispatch()
    assert s.received["c1"] == [P(2, 1)]
    # Step 3: 2:2 (key-a, Normal) cannot go to c1 (no permits): into the replay queue.
    s.read_completes((P(2, 2), KEY_A))
    s.dispatch()
    assert s.dispatcher.stats().summary.msg_in_replay == 1
    # Step 4: c3 joins; key-a now maps to c3.
    s.add("c3", 1000)
    return s


def test_issue_2_classic_reorders_key_a() -> None:
    s = issue_2("classic")
    # Step 5: 2:2 is replayed to c3 (below its join position); step 6: c1 disconnects, 2:1 follows.
    assert s.key_order("c3", KEY_A) == [P(2, 2)]
    s.remove("c1")
    assert s.key_order("c3", KEY_A) == [P(2, 2), P(2, 1)]


def test_issue_2_pip282_keeps_order() -> None:
    s = issue_2("pip282")
    assert s.key_order("c3", KEY_A) == []
    s.remove("c1")
    # c3 joined at last sent position 2:1: 2:2 waits until 2:1 is acknowledged.
    assert s.key_order("c3", KEY_A) == [P(2, 1)]
    s.ack("c3", P(2, 1))
    assert s.key_order("c3", KEY_A) == [P(2, 1), P(2, 2)]


def test_issue_2_pip379_keeps_order() -> None:
    s = issue_2("pip379")
    assert s.key_order("c3", KEY_A) == []
    # Once c1 is gone nothing of key-a is unacked elsewhere: both go to c3, in order.
    s.remove("c1")
    assert s.key_order("c3", KEY_A) == [P(2, 1), P(2, 2)]


def test_pip282_last_sent_position_example() -> None:
    """PIP-282 "Design & Implementation Details": the last sent position and individually sent ranges."""
    d = KeySharedDispatcher(DispatcherSettings(key_shared_ordering_mode="pip282"), P(3, 0))
    entries = {i: Entry(P(3, i)) for i in range(1, 11)}
    # 1. Read 3:1 - 3:10.
    d._entries_read(tuple(entries.values()), P(3, 0))
    d.last_read_position = P(3, 10)

    def send(*ids: int) -> tuple[str, str]:
        d._sent([entries[i] for i in ids])
        return str(d.last_sent_position()), d.individually_sent_positions().to_string(", ", ", ")

    assert send(1, 2, 3, 5, 8, 9, 10) == ("3:3", "[(3:4, 3:5], (3:7, 3:10]]")  # 2.
    assert send(7) == ("3:3", "[(3:4, 3:5], (3:6, 3:10]]")  # 3.
    assert send(6) == ("3:3", "[(3:4, 3:10]]")  # 4.
    assert send(4) == ("3:10", "[]")  # 5.
