"""DrainingHashesTracker, one test per bullet of Pulsar's DrainingHashesTrackerTest, then the
dense representation, the statistics, and a state machine checked against a dict model."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from magnetar.core.draining_hashes import (
    DENSE_MIN,
    DICT_MAX,
    HASH_SLOTS,
    ConsumerDrainingStats,
    DrainingHash,
    DrainingHashEntry,
    DrainingHashesTracker,
    DrainingStateError,
)


class Consumer:
    """Identity is what the tracker compares, as Pulsar compares Consumer references."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Consumer({self.name})"


def new_tracker() -> tuple[DrainingHashesTracker, list[int]]:
    unblocked: list[int] = []
    return DrainingHashesTracker(unblocked.append), unblocked


# --- DrainingHashesTrackerTest ----------------------------------------------------------------------


def test_add_entry_adds_new_entry() -> None:
    tracker, _ = new_tracker()
    consumer = Consumer("c1")
    tracker.add_entry(consumer, 1)
    entry = tracker.get_entry(1)
    assert entry == DrainingHashEntry(consumer, 1, 0)
    assert entry.consumer is consumer and not entry.is_blocking
    assert tracker.draining_consumer(1) is consumer
    assert len(tracker) == 1 and tracker
    tracker.check_invariants()


def test_add_entry_twice_for_same_consumer_increments_ref_count() -> None:
    tracker, _ = new_tracker()
    consumer = Consumer("c1")
    tracker.add_entry(consumer, 1)
    tracker.add_entry(consumer, 1)
    assert tracker.get_entry(1).ref_count == 2 and len(tracker) == 1


def test_add_entry_for_another_consumer_of_a_draining_hash_raises() -> None:
    tracker, _ = new_tracker()
    tracker.add_entry(Consumer("c1"), 1)
    with pytest.raises(DrainingStateError):
        tracker.add_entry(Consumer("c2"), 1)


def test_add_entry_throws_exception_for_zero_sticky_hash() -> None:
    tracker, _ = new_tracker()
    with pytest.raises(ValueError):
        tracker.add_entry(Consumer("c1"), 0)
    assert not tracker and tracker.get_entry(0) is None
    tracker.check_invariants()


def test_add_entry_rejects_hash_outside_the_hash_space() -> None:
    tracker, _ = new_tracker()
    for bad in (-1, HASH_SLOTS):
        with pytest.raises(ValueError):
            tracker.add_entry(Consumer("c1"), bad)
    tracker.add_entry(Consumer("c1"), HASH_SLOTS - 1)


def test_reduce_ref_count_reduces_reference_count() -> None:
    tracker, _ = new_tracker()
    consumer = Consumer("c1")
    tracker.add_entry(consumer, 1)
    tracker.add_entry(consumer, 1)
    tracker.reduce_ref_count(consumer, 1)
    assert tracker.get_entry(1).ref_count == 1
    tracker.reduce_ref_count(consumer, 1)  # 1 → 0 removes the entry
    assert tracker.get_entry(1) is None and not tracker
    tracker.check_invariants()


def test_reduce_ref_count_of_unknown_hash_is_ignored() -> None:
    tracker, unblocked = new_tracker()
    tracker.reduce_ref_count(Consumer("c1"), 5)
    assert not tracker and unblocked == []


def test_reduce_ref_count_does_not_reduce_for_different_consumer() -> None:
    tracker, _ = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    with pytest.raises(DrainingStateError):
        tracker.reduce_ref_count(consumer2, 1)
    assert tracker.get_entry(1) == DrainingHashEntry(consumer1, 1, 0)


def test_should_block_sticky_key_hash_does_not_block_for_existing_entry_when_same_consumer() -> None:
    tracker, _ = new_tracker()
    consumer = Consumer("c1")
    tracker.add_entry(consumer, 1)
    tracker.add_entry(consumer, 1)
    assert not tracker.should_block(consumer, 1)
    # PIP-379 point 6: the hash came back to its draining consumer, so the entry is dropped lazily.
    assert tracker.get_entry(1) is None and not tracker
    assert tracker.cleared_total(consumer) == 1
    tracker.check_invariants()


def test_should_block_sticky_key_hash_blocks_for_existing_entry_when_different_consumer() -> None:
    tracker, _ = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    assert tracker.should_block(consumer2, 1)
    assert tracker.should_block(consumer2, 1)
    entry = tracker.get_entry(1)
    assert entry.consumer is consumer1 and entry.blocked_count == 2 and entry.is_blocking


def test_should_block_sticky_key_hash_does_not_block_for_new_entry() -> None:
    tracker, _ = new_tracker()
    assert not tracker.should_block(Consumer("c1"), 1)
    assert not tracker


def test_blocks_answers_like_should_block_without_side_effects() -> None:
    tracker, _ = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    assert tracker.blocks(consumer2, 1) and not tracker.blocks(consumer1, 1) and not tracker.blocks(consumer2, 2)
    assert tracker.get_entry(1) == DrainingHashEntry(consumer1, 1, 0)


def test_start_batch_increments_batch_level() -> None:
    tracker, unblocked = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    tracker.should_block(consumer2, 1)
    tracker.start_batch()
    tracker.start_batch()  # nested
    tracker.reduce_ref_count(consumer1, 1)
    tracker.end_batch()
    assert unblocked == []  # still inside the outer batch


def test_end_batch_decrements_batch_level() -> None:
    tracker, unblocked = new_tracker()
    tracker.start_batch()
    tracker.start_batch()
    tracker.end_batch()
    tracker.end_batch()
    # Back at level 0: an unblock is announced at once, with its hash.
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    tracker.should_block(consumer2, 1)
    tracker.reduce_ref_count(consumer1, 1)
    assert unblocked == [1]


def test_end_batch_invokes_unblocking_handler_when_unblocked_while_batching() -> None:
    tracker, unblocked = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    for sticky_hash in (1, 2, 3):
        tracker.add_entry(consumer1, sticky_hash)
        tracker.should_block(consumer2, sticky_hash)
    tracker.start_batch()
    for sticky_hash in (1, 2, 3):
        tracker.reduce_ref_count(consumer1, sticky_hash)
    assert unblocked == []
    tracker.end_batch()
    assert unblocked == [-1]  # one callback for the whole batch
    tracker.start_batch()
    tracker.end_batch()
    assert unblocked == [-1]  # nothing unblocked in that batch: no callback


def test_clear_removes_all_entries() -> None:
    tracker, unblocked = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    tracker.add_entry(consumer2, 2)
    tracker.should_block(consumer2, 1)
    tracker.clear()
    assert not tracker and tracker.get_entry(1) is None and tracker.get_entry(2) is None
    assert unblocked == []
    tracker.check_invariants()
    tracker.add_entry(consumer2, 1)  # a fresh start: any consumer may drain hash 1 now
    tracker.check_invariants()


def test_unblocking_handler_invokes_sticky_key_hash_unblocked_only_for_hashes_that_blocked() -> None:
    tracker, unblocked = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    tracker.add_entry(consumer1, 2)
    tracker.should_block(consumer2, 2)
    tracker.reduce_ref_count(consumer1, 1)  # never blocked anyone
    assert unblocked == []
    tracker.reduce_ref_count(consumer1, 2)
    assert unblocked == [2]


def test_closing_never_announces_an_unblock() -> None:
    tracker, unblocked = new_tracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    tracker.should_block(consumer2, 1)
    tracker.reduce_ref_count(consumer1, 1, closing=True)
    assert unblocked == [] and not tracker
    tracker.add_entry(consumer1, 2)
    tracker.should_block(consumer2, 2)
    tracker.start_batch()
    tracker.reduce_ref_count(consumer1, 2, closing=True)
    tracker.end_batch()
    assert unblocked == []


def test_unblock_without_handler_is_silent() -> None:
    tracker = DrainingHashesTracker()
    consumer1, consumer2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(consumer1, 1)
    tracker.should_block(consumer2, 1)
    tracker.reduce_ref_count(consumer1, 1)
    tracker.start_batch()
    tracker.add_entry(consumer1, 1)
    tracker.should_block(consumer2, 1)
    tracker.reduce_ref_count(consumer1, 1)
    tracker.end_batch()
    assert not tracker


# --- dense representation ---------------------------------------------------------------------------


def snapshot(tracker: DrainingHashesTracker) -> list[tuple[int, DrainingHashEntry]]:
    return list(tracker.items())


def test_switch_to_dense_and_back_keeps_every_entry() -> None:
    tracker, unblocked = new_tracker()
    consumers = [Consumer(f"c{i}") for i in range(3)]
    other = Consumer("other")
    # Hashes 1..DENSE_MIN-1 with varied owners, reference counts and blocked counts.
    for sticky_hash in range(1, DENSE_MIN):
        owner = consumers[sticky_hash % 3]
        for _ in range(1 + sticky_hash % 4):
            tracker.add_entry(owner, sticky_hash)
        for _ in range(sticky_hash % 5):
            assert tracker.should_block(other, sticky_hash)
    assert not tracker.is_dense
    before = snapshot(tracker)
    stats_before = tracker.stats_by_consumer()
    tracker.add_entry(consumers[0], 65535)  # the DENSE_MIN-th hash
    assert tracker.is_dense and len(tracker) == DENSE_MIN
    tracker.check_invariants()
    assert snapshot(tracker) == before + [(65535, DrainingHashEntry(consumers[0], 1, 0))]
    # In dense mode every operation still agrees: refs, blocked counts and owners.
    tracker.add_entry(consumers[0], 65535)
    assert tracker.get_entry(65535) == DrainingHashEntry(consumers[0], 2, 0)
    assert tracker.should_block(other, 65535)
    assert tracker.get_entry(65535) == DrainingHashEntry(consumers[0], 2, 1)
    with pytest.raises(DrainingStateError):
        tracker.reduce_ref_count(consumers[1], 65535)
    tracker.reduce_ref_count(consumers[0], 65535)
    tracker.reduce_ref_count(consumers[0], 65535)
    assert unblocked == [65535]
    assert snapshot(tracker) == before
    stats_dense = tracker.stats_by_consumer()
    assert {c: (s.count, s.unacked_messages, s.hashes) for c, s in stats_dense.items()} == {
        c: (s.count, s.unacked_messages, s.hashes) for c, s in stats_before.items()
    }
    # Drain from the top down until fewer than DICT_MAX hashes remain: back to the dict.
    sticky_hash = DENSE_MIN - 1
    while len(tracker) >= DICT_MAX:
        assert tracker.is_dense
        owner = consumers[sticky_hash % 3]
        for _ in range(1 + sticky_hash % 4):
            tracker.reduce_ref_count(owner, sticky_hash, closing=True)
        sticky_hash -= 1
    assert not tracker.is_dense
    tracker.check_invariants()
    assert snapshot(tracker) == [(h, e) for h, e in before if h < DICT_MAX]
    assert unblocked == [65535]  # closing=True announced nothing


def test_hysteresis_between_the_thresholds() -> None:
    tracker, _ = new_tracker()
    consumer = Consumer("c")
    for sticky_hash in range(1, DENSE_MIN + 1):
        tracker.add_entry(consumer, sticky_hash)
    assert tracker.is_dense
    # Between DICT_MAX and DENSE_MIN it stays dense...
    for sticky_hash in range(DENSE_MIN, DICT_MAX, -1):
        tracker.reduce_ref_count(consumer, sticky_hash)
    assert len(tracker) == DICT_MAX and tracker.is_dense
    # ...and comes back as soon as the count drops below DICT_MAX, also through the lazy drop.
    assert not tracker.should_block(consumer, DICT_MAX)
    assert not tracker.is_dense and len(tracker) == DICT_MAX - 1
    tracker.check_invariants()


def test_clear_in_dense_mode_returns_to_the_dict() -> None:
    tracker, _ = new_tracker()
    consumer = Consumer("c")
    for sticky_hash in range(1, DENSE_MIN + 1):
        tracker.add_entry(consumer, sticky_hash)
    tracker.clear()
    assert not tracker.is_dense and not tracker
    tracker.check_invariants()


# --- statistics and forgetting consumers ------------------------------------------------------------


def test_stats_by_consumer_fields() -> None:
    tracker, _ = new_tracker()
    c1, c2, c3 = Consumer("c1"), Consumer("c2"), Consumer("c3")
    tracker.add_entry(c1, 7)
    tracker.add_entry(c1, 7)
    tracker.add_entry(c1, 3)
    tracker.add_entry(c2, 9)
    tracker.add_entry(c2, 11)
    tracker.should_block(c3, 7)
    tracker.should_block(c3, 7)
    tracker.should_block(c1, 9)
    tracker.reduce_ref_count(c2, 11)  # cleared by ack
    assert not tracker.should_block(c2, 9)  # c2 gets 9 back: cleared lazily
    stats = tracker.stats_by_consumer()
    assert stats[c1] == ConsumerDrainingStats(
        count=2,
        unacked_messages=3,
        cleared_total=0,
        hashes=[
            DrainingHash(hash=3, unacked_messages=1, blocked_attempts=0),
            DrainingHash(hash=7, unacked_messages=2, blocked_attempts=2),
        ],
    )
    assert stats[c2] == ConsumerDrainingStats(count=0, unacked_messages=0, cleared_total=2, hashes=[])
    assert c3 not in stats
    assert tracker.cleared_total(c2) == 2 and tracker.cleared_total(c3) == 0
    without = tracker.stats_by_consumer(with_hashes=False)
    assert without[c1].hashes == [] and without[c1].count == 2 and without[c1].unacked_messages == 3


def test_forget_consumer_refuses_a_consumer_that_still_drains() -> None:
    tracker, _ = new_tracker()
    c1, c2 = Consumer("c1"), Consumer("c2")
    tracker.add_entry(c1, 5)
    with pytest.raises(DrainingStateError):
        tracker.forget_consumer(c1)
    assert tracker.get_entry(5) == DrainingHashEntry(c1, 1, 0)
    tracker.check_invariants()
    tracker.forget_consumer(c2)  # unknown: nothing to do
    tracker.reduce_ref_count(c1, 5)
    tracker.forget_consumer(c1)
    assert c1 not in tracker.stats_by_consumer() and tracker.cleared_total(c1) == 0
    tracker.check_invariants()
    # The freed owner slot is reused by the next consumer.
    tracker.add_entry(c2, 5)
    assert tracker.draining_consumer(5) is c2
    tracker.check_invariants()


# --- state machine against a dict model -------------------------------------------------------------

CONSUMERS = [Consumer(f"m{i}") for i in range(3)]
consumers_st = st.sampled_from(CONSUMERS)
hashes_st = st.integers(min_value=1, max_value=HASH_SLOTS - 1)


class DrainingHashesMachine(RuleBasedStateMachine):
    """Model: hash -> [owner, ref_count, blocked]; cleared totals; the announcements expected."""

    @initialize()
    def setup(self) -> None:
        self.announced: list[int] = []
        self.tracker = DrainingHashesTracker(self.announced.append)
        self.model: dict[int, list] = {}
        self.cleared: dict[Consumer, int] = {}
        self.expected: list[int] = []
        self.batch_level = 0
        self.unblocked_in_batch = False
        self.dense = False
        self.crossed_dense = False

    # model helpers

    def _added(self) -> None:
        if len(self.model) >= DENSE_MIN:
            self.dense = self.crossed_dense = True

    def _removed(self, sticky_hash: int) -> None:
        owner = self.model.pop(sticky_hash)[0]
        self.cleared[owner] = self.cleared.get(owner, 0) + 1
        if len(self.model) < DICT_MAX:
            self.dense = False

    def _model_reduce(self, consumer: Consumer, sticky_hash: int, closing: bool) -> None:
        entry = self.model[sticky_hash]
        entry[1] -= 1
        if entry[1] == 0:
            blocked = entry[2]
            self._removed(sticky_hash)
            if blocked and not closing:
                if self.batch_level:
                    self.unblocked_in_batch = True
                else:
                    self.expected.append(sticky_hash)

    # rules

    @rule(consumer=consumers_st, sticky_hash=hashes_st)
    def add_entry(self, consumer: Consumer, sticky_hash: int) -> None:
        entry = self.model.get(sticky_hash)
        if entry is not None and entry[0] is not consumer:
            with pytest.raises(DrainingStateError):
                self.tracker.add_entry(consumer, sticky_hash)
            return
        self.tracker.add_entry(consumer, sticky_hash)
        if entry is None:
            self.model[sticky_hash] = [consumer, 1, 0]
            self._added()
        else:
            entry[1] += 1

    @rule(consumer=consumers_st, start=hashes_st, length=st.integers(min_value=1, max_value=6000))
    def add_block(self, consumer: Consumer, start: int, length: int) -> None:
        """A consumer lost a range: one reference per pending message in it (PIP-379 point 1)."""
        for sticky_hash in range(start, min(start + length, HASH_SLOTS)):
            entry = self.model.get(sticky_hash)
            if entry is not None and entry[0] is not consumer:
                continue
            self.tracker.add_entry(consumer, sticky_hash)
            if entry is None:
                self.model[sticky_hash] = [consumer, 1, 0]
                self._added()
            else:
                entry[1] += 1

    @precondition(lambda self: self.model)
    @rule(data=st.data(), closing=st.booleans())
    def reduce_existing(self, data: st.DataObject, closing: bool) -> None:
        sticky_hash = data.draw(st.sampled_from(sorted(self.model)))
        consumer = self.model[sticky_hash][0]
        self.tracker.reduce_ref_count(consumer, sticky_hash, closing)
        self._model_reduce(consumer, sticky_hash, closing)

    @rule(consumer=consumers_st, sticky_hash=hashes_st, closing=st.booleans())
    def reduce_any(self, consumer: Consumer, sticky_hash: int, closing: bool) -> None:
        entry = self.model.get(sticky_hash)
        if entry is None:
            self.tracker.reduce_ref_count(consumer, sticky_hash, closing)
        elif entry[0] is not consumer:
            with pytest.raises(DrainingStateError):
                self.tracker.reduce_ref_count(consumer, sticky_hash, closing)
        else:
            self.tracker.reduce_ref_count(consumer, sticky_hash, closing)
            self._model_reduce(consumer, sticky_hash, closing)

    @rule(consumer=consumers_st, closing=st.booleans(), batched=st.booleans())
    def release_consumer(self, consumer: Consumer, closing: bool, batched: bool) -> None:
        """Every pending message of a consumer acked (or the consumer closed)."""
        if batched:
            self.start_batch()
        for sticky_hash in sorted(h for h, e in self.model.items() if e[0] is consumer):
            for _ in range(self.model[sticky_hash][1]):
                self.tracker.reduce_ref_count(consumer, sticky_hash, closing)
                self._model_reduce(consumer, sticky_hash, closing)
        if batched:
            self.end_batch()

    @precondition(lambda self: self.model)
    @rule(data=st.data(), consumer=consumers_st)
    def should_block_existing(self, data: st.DataObject, consumer: Consumer) -> None:
        self.should_block(consumer, data.draw(st.sampled_from(sorted(self.model))))

    @rule(consumer=consumers_st, sticky_hash=hashes_st)
    def should_block(self, consumer: Consumer, sticky_hash: int) -> None:
        entry = self.model.get(sticky_hash)
        assert self.tracker.blocks(consumer, sticky_hash) == (entry is not None and entry[0] is not consumer)
        blocked = self.tracker.should_block(consumer, sticky_hash)
        if entry is None:
            assert not blocked
        elif entry[0] is consumer:
            assert not blocked
            self._removed(sticky_hash)
        else:
            assert blocked
            entry[2] += 1

    @rule()
    def start_batch(self) -> None:
        self.tracker.start_batch()
        self.batch_level += 1

    @precondition(lambda self: self.batch_level > 0)
    @rule()
    def end_batch(self) -> None:
        self.tracker.end_batch()
        self.batch_level -= 1
        if self.batch_level == 0 and self.unblocked_in_batch:
            self.unblocked_in_batch = False
            self.expected.append(-1)

    @rule()
    def clear(self) -> None:
        self.tracker.clear()
        self.model.clear()
        self.dense = False

    @rule(consumer=consumers_st)
    def forget_consumer(self, consumer: Consumer) -> None:
        if any(e[0] is consumer for e in self.model.values()):
            with pytest.raises(DrainingStateError):
                self.tracker.forget_consumer(consumer)
        else:
            self.tracker.forget_consumer(consumer)
            self.cleared.pop(consumer, None)

    # checks after every rule

    @invariant()
    def agrees_with_model(self) -> None:
        self.tracker.check_invariants()
        assert len(self.tracker) == len(self.model)
        assert self.tracker.is_dense == self.dense
        assert self.announced == self.expected
        assert [(h, (e.consumer, e.ref_count, e.blocked_count)) for h, e in self.tracker.items()] == [
            (h, tuple(e)) for h, e in sorted(self.model.items())
        ]
        stats = self.tracker.stats_by_consumer(with_hashes=False)
        for consumer in CONSUMERS:
            owned = [e for e in self.model.values() if e[0] is consumer]
            cleared = self.cleared.get(consumer, 0)
            if not owned and not cleared and consumer not in stats:
                continue
            s = stats[consumer]
            assert (s.count, s.unacked_messages, s.cleared_total) == (len(owned), sum(e[1] for e in owned), cleared)


TestDrainingHashesMachine = DrainingHashesMachine.TestCase
TestDrainingHashesMachine.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)


def test_state_machine_reaches_dense_mode() -> None:
    """The machine's strategies can cross the threshold: a fixed run that does, through the same rules."""
    machine = DrainingHashesMachine()
    machine.setup()
    for index, start in enumerate((1, 6001, 12001)):
        machine.add_block(CONSUMERS[index], start, 6000)
        machine.agrees_with_model()
    assert machine.tracker.is_dense and len(machine.tracker) == 18000
    machine.should_block(CONSUMERS[2], 2)  # hash 2 drains on m0: blocked
    machine.agrees_with_model()
    machine.release_consumer(CONSUMERS[0], closing=False, batched=True)
    machine.agrees_with_model()
    assert machine.tracker.is_dense and machine.announced == [-1]
    machine.release_consumer(CONSUMERS[1], closing=False, batched=False)
    machine.agrees_with_model()
    assert machine.tracker.is_dense  # 6000 left: above DICT_MAX
    machine.release_consumer(CONSUMERS[2], closing=True, batched=False)
    machine.agrees_with_model()
    assert not machine.tracker.is_dense and not machine.tracker
    assert machine.announced == [-1]
    machine.teardown()


def test_refused_forget_consumer_changes_nothing() -> None:
    # Regression (found by the state machine): a refused forget_consumer used to drop the consumer's
    # owner slot and cleared count first, so a second call "succeeded" while the consumer still drained.
    tracker, _ = new_tracker()
    c1 = Consumer("c1")
    tracker.add_entry(c1, 1)
    tracker.add_entry(c1, 2)
    tracker.reduce_ref_count(c1, 2)
    for _ in range(2):
        with pytest.raises(DrainingStateError):
            tracker.forget_consumer(c1)
    assert tracker.cleared_total(c1) == 1
    tracker.add_entry(c1, 1)
    assert tracker.get_entry(1) == DrainingHashEntry(c1, 2, 0)
    tracker.check_invariants()
