"""The Key_Shared replay filter's cost: a pass over the replay queue computes each key hash's slot once.

A soak (bench/soak_key_shared.py) found the broker's event loop spending more than half its CPU in the
filter, which computed the slot of every queued position on every dispatch, though a blocked hash stays
blocked for the rest of the pass and the queue holds many positions of few keys.
"""

from __future__ import annotations

from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.events import ConsumerAdded, Flow
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position


def test_a_pass_over_the_replay_queue_computes_each_key_hashs_slot_once() -> None:
    dispatcher = KeySharedDispatcher()
    dispatcher.handle(ConsumerAdded(1, "c1"), 1_000)  # no permits: every hash is blocked
    hashes = [key_hash(f"key-{n}".encode()) for n in range(3)]
    for entry in range(300):
        dispatcher.replay.add(Position(1, entry), hashes[entry % 3])
    slot = dispatcher._slot
    computed: list[int] = []
    dispatcher._slot = lambda h: computed.append(h) or slot(h)
    assert dispatcher._replayable(100) == []
    assert sorted(computed) == sorted(hashes)


def test_the_pass_still_admits_what_a_consumer_has_permits_for() -> None:
    dispatcher = KeySharedDispatcher()
    dispatcher.handle(ConsumerAdded(1, "c1"), 1_000)
    dispatcher.handle(Flow(1, 5), 1_000)
    for entry in range(20):
        dispatcher.replay.add(Position(1, entry), key_hash(f"key-{entry % 4}".encode()))
    assert dispatcher._replayable(100) == [Position(1, entry) for entry in range(5)]
