"""The Key_Shared replay filter's cost: a pass over the replay queue computes each key hash's slot once.

A soak (bench/soak_key_shared.py) found the broker's event loop spending more than half its CPU in the
filter, which computed the slot of every queued position on every dispatch, though a blocked hash stays
blocked for the rest of the pass and the queue holds many positions of few keys.
"""

from __future__ import annotations

import pytest

from magnetar.core.dispatchers import KeySharedDispatcher, key_shared
from magnetar.core.events import ConsumerAdded, Flow
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position


def test_a_pass_over_the_replay_queue_computes_each_key_hashs_slot_once() -> None:
    dispatcher = KeySharedDispatcher()
    dispatcher.handle(ConsumerAdded(1, "c1"), 1_000)
    dispatcher.handle(Flow(1, 2), 1_000)  # two permits: then every hash is blocked
    hashes = [key_hash(f"key-{n}".encode()) for n in range(3)]
    for entry in range(300):
        dispatcher.replay.add(Position(1, entry), hashes[entry % 3])
    slot = dispatcher._slot
    computed: list[int] = []
    dispatcher._slot = lambda h: computed.append(h) or slot(h)
    assert dispatcher._replayable(100) == [Position(1, 0), Position(1, 1)]
    assert sorted(computed) == sorted(hashes)


def test_without_permits_a_pass_visits_no_key() -> None:
    """The check on every event while a normal read is out (#23845) costs nothing while no consumer has
    permits, however many keys are queued."""
    dispatcher = KeySharedDispatcher()
    dispatcher.handle(ConsumerAdded(1, "c1"), 1_000)
    for entry in range(300):
        dispatcher.replay.add(Position(1, entry), key_hash(f"key-{entry}".encode()))
    dispatcher._slot = lambda h: pytest.fail("a slot was computed")
    assert dispatcher._replayable(1) == []


def test_keys_of_a_consumer_without_permits_are_never_asked_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the keys of consumers with permits reach the admission rule: a key whose owner has none is
    refused at its first position whatever the rule says, and so is every later position of it."""
    dispatcher = KeySharedDispatcher()
    dispatcher.handle(ConsumerAdded(1, "c1"), 1_000)
    dispatcher.handle(ConsumerAdded(2, "c2"), 1_000)
    dispatcher.handle(Flow(2, 1_000), 1_000)
    for entry in range(400):
        dispatcher.replay.add(Position(1, entry), key_hash(f"key-{entry % 40}".encode()))
    select, slot = dispatcher.selector.select, dispatcher._slot
    owned_by_c2 = [
        p for p in dispatcher.replay.positions() if select(slot(dispatcher.replay.hash_of(p))).consumer_id == 2
    ]
    asked: list[Position] = []
    rule = key_shared.admission_block

    def counting(consumer: object, available: int, position: Position, *rest: object) -> str | None:
        asked.append(position)
        return rule(consumer, available, position, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(key_shared, "admission_block", counting)
    assert dispatcher._replayable(1_000) == owned_by_c2
    assert 0 < len(owned_by_c2) < 400 and asked == owned_by_c2


def test_the_pass_still_admits_what_a_consumer_has_permits_for() -> None:
    dispatcher = KeySharedDispatcher()
    dispatcher.handle(ConsumerAdded(1, "c1"), 1_000)
    dispatcher.handle(Flow(1, 5), 1_000)
    for entry in range(20):
        dispatcher.replay.add(Position(1, entry), key_hash(f"key-{entry % 4}".encode()))
    assert dispatcher._replayable(100) == [Position(1, entry) for entry in range(5)]
