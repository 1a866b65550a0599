"""The Key_Shared admission rule has one home (`admission_block`): `explain_hash` and dispatch must agree.

Random states are built through `handle` only (consumers come and go, flow, acks, redeliveries, reads
served as the broker serves them), in every ordering mode. Then, for a key, the explanation is compared
with what dispatch does with a newly read message of that key: it flows exactly when the explanation
names no admission reason, and to the owner the explanation names.
"""

from __future__ import annotations

import copy

from hypothesis import event, given, settings
from hypothesis import strategies as st

from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.dispatchers.key_shared import admission_block
from magnetar.core.events import (
    Acked,
    CancelRead,
    ConsumerAdded,
    ConsumerRemoved,
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
from magnetar.core.explain import (
    CONSUMER_BLOCKED_ON_UNACKED,
    DRAINING,
    IN_REPLAY_QUEUE,
    NO_CONSUMER_FOR_HASH,
    NO_CONSUMERS,
    NO_PERMITS,
    RECENTLY_JOINED,
)
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import consistent_hashing_slot, key_hash
from magnetar.positions import Position

# The reasons that hold back one message's dispatch; the others (look-ahead, delayed, the subscription's
# unacked limit) are about reading.
ADMISSION = {
    NO_CONSUMERS,
    NO_CONSUMER_FOR_HASH,
    NO_PERMITS,
    CONSUMER_BLOCKED_ON_UNACKED,
    IN_REPLAY_QUEUE,
    DRAINING,
    RECENTLY_JOINED,
}

# Key hashes in pairs that share a consistent-hashing slot (`kh % 65535 + 1`): the replay queue is asked
# per key, the explainers are asked per slot, and the two must still agree.
_BASES = [key_hash(f"key-{n}".encode()) % 65535 for n in range(3)]
KEY_HASHES = [base + 65535 * k for base in _BASES for k in (0, 1)]


class World:
    """A dispatcher whose reads are served from a log, as the broker serves them."""

    def __init__(self, dispatcher: KeySharedDispatcher) -> None:
        self.d = dispatcher
        self.now_ms = 1_000
        self.log: list[Entry] = []
        self.served = 0
        self.read: ReadEntries | ReplayEntries | None = None
        self.cancel = False
        self.wakeup: int | None = None
        self.pending: dict[int, list[Position]] = {}

    def __call__(self, event: object) -> None:
        for decision in self.d.handle(event, self.now_ms):
            if isinstance(decision, Dispatch):
                self.pending.setdefault(decision.consumer_id, []).extend(e.position for e in decision.entries)
            elif isinstance(decision, (ReadEntries, ReplayEntries)):
                self.read, self.cancel = decision, False
            elif isinstance(decision, CancelRead):
                self.cancel = True
            elif isinstance(decision, WakeUp):
                self.wakeup = decision.at_ms
        self.d.check_invariants()

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
            elif self.wakeup is not None:
                self.now_ms = max(self.now_ms, self.wakeup)
                self.wakeup = None
                self(Tick())
            else:
                return
        raise AssertionError("did not settle")

    def take(self, consumer_id: int, count: int) -> tuple[Position, ...]:
        held = self.pending.get(consumer_id, [])
        taken, self.pending[consumer_id] = held[:count], held[count:]
        return tuple(taken)


operations = st.one_of(
    st.tuples(st.just("add"), st.integers(1, 3), st.integers(0, 8)),
    st.tuples(st.just("remove"), st.integers(1, 3)),
    st.tuples(st.just("flow"), st.integers(1, 3), st.integers(1, 8)),
    st.tuples(st.just("publish"), st.lists(st.sampled_from(KEY_HASHES), min_size=1, max_size=8)),
    st.tuples(st.just("ack"), st.integers(1, 3), st.integers(1, 4)),
    st.tuples(st.just("redeliver"), st.integers(1, 3), st.integers(1, 4)),
)


def run(world: World, ops: list[tuple]) -> None:
    connected: set[int] = set()
    for op in ops:
        name, consumer_id = op[0], op[1]
        if name == "add" and consumer_id not in connected:
            connected.add(consumer_id)
            world.pending[consumer_id] = []
            world(ConsumerAdded(consumer_id, f"c{consumer_id}"))
            if op[2]:
                world(Flow(consumer_id, op[2]))
        elif name == "remove" and consumer_id in connected:
            connected.discard(consumer_id)
            world.pending.pop(consumer_id, None)
            world(ConsumerRemoved(consumer_id))
        elif name == "flow" and consumer_id in connected:
            world(Flow(consumer_id, op[2]))
        elif name == "publish":
            start = len(world.log)
            world.log.extend(Entry(Position(1, start + i), h) for i, h in enumerate(op[1]))
        elif name == "ack" and consumer_id in connected and world.pending[consumer_id]:
            world(Acked(consumer_id, world.take(consumer_id, op[2])))
        elif name == "redeliver" and consumer_id in connected and world.pending[consumer_id]:
            world(RedeliverRequested(consumer_id, world.take(consumer_id, op[2])))
        world.settle()


@settings(max_examples=300, deadline=None)
@given(
    mode=st.sampled_from(["pip379", "classic", "pip282"]),
    limit=st.sampled_from([0, 3]),
    ops=st.lists(operations, min_size=10, max_size=40),
)
def test_explain_names_an_admission_reason_exactly_when_dispatch_holds_the_message(
    mode: str, limit: int, ops: list[tuple]
) -> None:
    dispatcher = KeySharedDispatcher(
        DispatcherSettings(
            key_shared_ordering_mode=mode,
            key_shared_unblocking_interval_ms=0,
            max_unacked_messages_per_consumer=limit,
        ),
        Position(1, -1),
    )
    world = World(dispatcher)
    run(world, [("add", 1, 8), *ops])

    last = dispatcher.last_read_position
    for probe in KEY_HASHES:
        sticky_hash = consistent_hashing_slot(probe)
        answer = dispatcher.explain_hash(sticky_hash, probe)
        holding = [reason for reason in answer.reasons if reason in ADMISSION]
        event(",".join(holding) or "flowing")
        probe_entry = Entry(Position(last[0], last[1] + 1), probe)
        groups, held = copy.deepcopy(dispatcher)._assign((probe_entry,), False)
        if holding:
            assert not groups and len(held) == 1, f"explained {holding}, dispatched anyway"
        else:
            assert [c.consumer_id for c in groups] == [answer.owner_id], f"explained flowing, held: {answer}"
        assert dispatcher.explain_hash(sticky_hash, probe) == answer  # asking changes nothing


def test_the_rule_answers_the_first_reason_and_lists_every_one_on_request() -> None:
    dispatcher = KeySharedDispatcher(DispatcherSettings(key_shared_unblocking_interval_ms=0), Position(1, -1))
    world = World(dispatcher)
    world(ConsumerAdded(1, "c1"))
    consumer = dispatcher.consumers[1]
    position = Position(1, 5)
    assert admission_block(None, 1, position, 7, 8, None, None, None, None, None) == NO_CONSUMER_FOR_HASH
    assert admission_block(consumer, 1, position, 7, 8, None, None, None, None, None) is None
    assert admission_block(consumer, 1, position, 7, 8, {7}, None, None, None, None) == IN_REPLAY_QUEUE
    assert admission_block(consumer, 1, position, 7, 8, {9}, None, None, None, None) is None
    assert admission_block(consumer, 1, position, 7, 8, None, {7: Position(1, 4)}, None, None, None) == IN_REPLAY_QUEUE
    assert admission_block(consumer, 1, position, 7, 8, None, {7: Position(1, 6)}, None, None, None) is None
    joined = {consumer: Position(1, 5)}
    assert admission_block(consumer, 1, position, 7, 8, None, None, None, joined, None) is None
    assert admission_block(consumer, 1, position, 7, 8, None, None, None, joined, Position(1, 4)) == RECENTLY_JOINED
    every: list[str] = []
    first = admission_block(consumer, 0, Position(1, 6), 7, 8, {7}, None, None, joined, None, every)
    assert (first, every) == (NO_PERMITS, [NO_PERMITS, IN_REPLAY_QUEUE, RECENTLY_JOINED])
