"""Key_Shared selectors, mirroring Pulsar's selector tests (ConsistentHashingStickyKeyConsumerSelectorTest and
the selector cases of KeySharedSubscriptionTest).

Every structural claim is checked against brute force: `select` evaluated on every slot of the space,
before and after each change.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Callable
from itertools import compress, pairwise
from operator import is_not

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.core.errors import ConsumerAssignError
from magnetar.core.selectors import (
    ConsistentHashingSelector,
    HashRangeAutoSplitSelector,
    HashRangeChanges,
    HashRangeExclusiveSelector,
    ImpactedConsumers,
    Range,
    StickyKeyConsumerSelector,
)
from magnetar.core.sticky_key import consistent_hashing_slot, key_hash, range_slot

RING_SLOTS = range(1, 65536)  # consistent hashing
RANGE_SLOTS = range(0, 65536)  # auto-split and STICKY


class Consumer:
    """Stands in for the dispatcher's consumer: identity equality, and a name that may be shared."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}@{id(self):x})"


def slots_of(selector: StickyKeyConsumerSelector) -> range:
    return RING_SLOTS if isinstance(selector, ConsistentHashingSelector) else RANGE_SLOTS


def owner_map(selector: StickyKeyConsumerSelector) -> list[object | None]:
    """Owner of every slot of the selector's space, in slot order."""
    return list(map(selector.select, slots_of(selector)))


def add(
    selector: StickyKeyConsumerSelector, consumer: Consumer, ranges: list[Range] | None = None
) -> ImpactedConsumers:
    impacted = selector.add_consumer(consumer, consumer.name, ranges)
    selector.check_invariants()
    return impacted


def remove(selector: StickyKeyConsumerSelector, consumer: Consumer) -> ImpactedConsumers:
    impacted = selector.remove_consumer(consumer)
    selector.check_invariants()
    return impacted


def merged(slots: list[int]) -> list[Range]:
    ranges: list[Range] = []
    for slot in sorted(slots):
        if ranges and ranges[-1][1] + 1 == slot:
            ranges[-1] = (ranges[-1][0], slot)
        else:
            ranges.append((slot, slot))
    return ranges


def changed_offsets(before: list[object | None], after: list[object | None]) -> list[int]:
    """Offsets of the slots whose owner differs (a C-speed scan: most slots keep their owner)."""
    return list(compress(range(len(before)), map(is_not, before, after)))


def brute_force_impacted(
    before: list[object | None], after: list[object | None], first_slot: int, subject: object
) -> dict[int, tuple[list[Range], list[Range]]]:
    """Per consumer id: the slots it lost and gained, from the owner of every slot before and after."""
    lost: dict[int, list[int]] = {id(subject): []}
    gained: dict[int, list[int]] = {id(subject): []}
    for offset in changed_offsets(before, after):
        old, new = before[offset], after[offset]
        if old is not None:
            lost.setdefault(id(old), []).append(first_slot + offset)
        if new is not None:
            gained.setdefault(id(new), []).append(first_slot + offset)
    return {
        consumer_id: (merged(lost.get(consumer_id, [])), merged(gained.get(consumer_id, [])))
        for consumer_id in lost.keys() | gained.keys()
    }


def as_comparable(impacted: ImpactedConsumers) -> dict[int, tuple[list[Range], list[Range]]]:
    return {id(consumer): (changes.removed, changes.added) for consumer, changes in impacted.items()}


def assert_partition_agrees_with_select(selector: StickyKeyConsumerSelector, owners: list[object | None]) -> None:
    """`ranges_by_consumer` is sorted, merged, disjoint, and names exactly the owner `select` gives."""
    first_slot = slots_of(selector)[0]
    ranges_by_consumer = selector.ranges_by_consumer()
    from_ranges: list[object | None] = [None] * len(owners)
    for consumer, ranges in ranges_by_consumer.items():
        assert ranges == sorted(ranges)
        for (_, previous_end), (start, _) in pairwise(ranges):
            assert previous_end + 1 < start, f"{consumer}: adjacent or overlapping ranges not merged: {ranges}"
        for start, end in ranges:
            assert first_slot <= start <= end < first_slot + len(owners), f"range {(start, end)} outside the space"
            from_ranges[start - first_slot : end - first_slot + 1] = [consumer] * (end - start + 1)
    all_ranges = sorted(r for ranges in ranges_by_consumer.values() for r in ranges)
    for (_, previous_end), (start, _) in pairwise(all_ranges):
        assert previous_end < start, "two consumers' ranges overlap"
    assert all(a is b for a, b in zip(from_ranges, owners, strict=True)), "ranges disagree with select"


def total_size(ranges_by_consumer: dict[object, list[Range]]) -> int:
    return sum(end - start + 1 for ranges in ranges_by_consumer.values() for start, end in ranges)


def uuid_keys(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [str(uuid.UUID(int=rng.getrandbits(128), version=4)).encode() for _ in range(count)]


def assert_fair_share(selector: StickyKeyConsumerSelector, consumers: list[Consumer], keys: list[bytes]) -> None:
    counts = Counter(id(selector.select(selector.slot(key_hash(key)))) for key in keys)
    fair_share = len(keys) / len(consumers)
    for consumer in consumers:
        assert abs(counts[id(consumer)] - fair_share) <= 0.2 * fair_share, (
            consumer,
            counts[id(consumer)],
            fair_share,
        )


# --- consistent hashing ------------------------------------------------------------------------------


class TestConsistentHashingSelector:
    def test_golden_vector(self) -> None:
        # testGetConsumerKeyHashRanges: 3 points, consumer1..3, name index 0.
        selector = ConsistentHashingSelector(replica_points=3)
        c1, c2, c3 = (Consumer(f"consumer{i}") for i in (1, 2, 3))
        for consumer in (c1, c2, c3):
            add(selector, consumer)
        assert selector.ranges_by_consumer() == {
            c1: [(14359, 18366), (29991, 39817), (52980, 60442)],
            c2: [(1, 6668), (39818, 52979), (60443, 63679), (65184, 65535)],
            c3: [(6669, 14358), (18367, 29990), (63680, 65183)],
        }
        # Each listed point is the end of a range and owned by its consumer.
        for consumer, points in (
            (c1, (60442, 18366, 39817)),
            (c2, (6668, 63679, 52979)),
            (c3, (29990, 65183, 14358)),
        ):
            for point in points:
                assert selector.select(point) is consumer
                assert selector.select(point + 1) is not consumer
        # Sample message hashes of testGetConsumerKeyHashRanges' keys.
        samples = {
            b"0": (4850, c2),
            b"1": (49322, c2),
            b"2": (58177, c1),
            b"key-1": (11858, c3),
            b"NONE_KEY": (56505, c1),
        }
        for key, (slot, owner) in samples.items():
            assert selector.slot(key_hash(key)) == slot
            assert selector.select(slot) is owner

    @pytest.mark.parametrize("consumer_count", [1, 2, 3, 7, 50])
    def test_ranges_contiguous_and_sum_to_65535(self, consumer_count: int) -> None:
        selector = ConsistentHashingSelector()
        for i in range(consumer_count):
            add(selector, Consumer(f"consumer-{i}"))
        ranges = sorted(r for rs in selector.ranges_by_consumer().values() for r in rs)
        assert ranges[0][0] == 1 and ranges[-1][1] == 65535
        for (_, end), (start, _) in pairwise(ranges):
            assert start == end + 1
        assert total_size(selector.ranges_by_consumer()) == 65535
        assert_partition_agrees_with_select(selector, owner_map(selector))

    def test_empty_selector_selects_nobody(self) -> None:
        selector = ConsistentHashingSelector()
        selector.check_invariants()
        assert selector.select(1) is None and selector.select(65535) is None
        assert selector.ranges_by_consumer() == {}

    def test_slot_is_consistent_hashing_slot(self) -> None:
        selector = ConsistentHashingSelector()
        for h in (0, 1, 65534, 65535, 2**31 - 1, key_hash(b"NONE_KEY")):
            assert selector.slot(h) == consistent_hashing_slot(h)

    def test_consumer_select_fair_share(self) -> None:
        # testConsumerSelect: 200 points, 2, 3, 4 consumers then removals, 1000 keys each within ±20%.
        selector = ConsistentHashingSelector(replica_points=200)
        consumers = [Consumer(f"consumer{i}") for i in range(1, 5)]
        keys = uuid_keys(1000, seed=1)
        add(selector, consumers[0])
        for count in (2, 3, 4):
            add(selector, consumers[count - 1])
            assert_fair_share(selector, consumers[:count], keys)
        for count in (3, 2, 1):
            remove(selector, consumers[count])
            assert_fair_share(selector, consumers[:count], keys)

    @pytest.mark.parametrize("same_name", [True, False])
    def test_twenty_consumers_sufficiently_evenly_mapped(self, same_name: bool) -> None:
        # testConsumersGetSufficientlyAccuratelyEvenlyMapped, with its keys "key 0".."key 9999": the
        # name index spreads same-named consumers as well as distinct names.
        selector = ConsistentHashingSelector(replica_points=200)
        consumers = [Consumer("consumer" if same_name else f"consumer{i}") for i in range(20)]
        for consumer in consumers:
            add(selector, consumer)
        assert_fair_share(selector, consumers, [f"key {i}".encode() for i in range(10_000)])

    def test_should_not_collide_with_consumer_name_ends_with_number(self) -> None:
        # #22050: Pulsar once hashed `name + point_index`, so point 11 of "consumer1" and point 1 of
        # "consumer11" were the same ring point.
        assert "consumer1" + "11" == "consumer11" + "1"
        selector = ConsistentHashingSelector(replica_points=12)
        c1, c11 = Consumer("consumer1"), Consumer("consumer11")
        add(selector, c1)
        before = owner_map(selector)
        impacted = add(selector, c11)
        assert as_comparable(impacted) == brute_force_impacted(before, owner_map(selector), 1, c11)
        points = {
            name: {consistent_hashing_slot(key_hash(f"{name}\0{0}\0{i}".encode())) for i in range(12)}
            for name in ("consumer1", "consumer11")
        }
        assert not points["consumer1"] & points["consumer11"]
        assert impacted[c11].added and not impacted[c11].removed

    def test_remove_consumers_from_consumer_key_hash_ranges_and_remove_twice(self) -> None:
        # shouldRemoveConsumersFromConsumerKeyHashRanges: 99 consumers, removing twice is safe.
        selector = ConsistentHashingSelector()
        consumers = [Consumer(f"consumer{i}") for i in range(99)]
        for consumer in consumers:
            add(selector, consumer)
        for consumer in consumers:
            removed = remove(selector, consumer)
            assert removed[consumer].added == []
            assert remove(selector, consumer) == {}
        assert selector.ranges_by_consumer() == {}
        assert selector.select(42) is None
        assert remove(selector, Consumer("never-added")) == {}

    def test_removal_only_reassigns_the_removed_consumers_slots(self) -> None:
        # testShouldNotChangeSelectedConsumerWhenConsumerIsRemoved (+ …CheckHashRanges): 100
        # same-named consumers; removing one changes no owner of a slot it did not own.
        selector = ConsistentHashingSelector()
        consumers = [Consumer("consumer") for _ in range(100)]
        for consumer in consumers:
            add(selector, consumer)
        rng = random.Random(3)
        for consumer in rng.sample(consumers, 10):
            before = owner_map(selector)
            impacted = remove(selector, consumer)
            after = owner_map(selector)
            assert all(before[offset] is consumer for offset in changed_offsets(before, after))
            assert consumer not in after and None not in after
            assert as_comparable(impacted) == brute_force_impacted(before, after, 1, consumer)
            for other, changes in impacted.items():
                if other is not consumer:
                    assert changes.removed == []

    def test_addition_only_moves_slots_to_the_added_consumer(self) -> None:
        # testShouldNotChangeSelectedConsumerUnnecessarilyWhenConsumerIsAdded (+ …CheckHashRanges).
        selector = ConsistentHashingSelector()
        for i in range(20):
            before = owner_map(selector)
            consumer = Consumer(f"consumer{i % 7}")  # names repeat: the name index keeps points apart
            impacted = add(selector, consumer)
            after = owner_map(selector)
            assert all(after[offset] is consumer for offset in changed_offsets(before, after))
            assert as_comparable(impacted) == brute_force_impacted(before, after, 1, consumer)
            for other, changes in impacted.items():
                if other is not consumer:
                    assert changes.added == []

    def test_minimal_mapping_changes_when_consumers_leave_and_rejoin(self) -> None:
        # testShouldContainMinimalMappingChangesWhenConsumerLeavesAndRejoins: 2 of 10 leave and come
        # back under the same names; < 1% of the space changes owner.
        selector = ConsistentHashingSelector()
        consumers = [Consumer(f"consumer{i}") for i in range(10)]
        for consumer in consumers:
            add(selector, consumer)
        before = [None if c is None else c.name for c in owner_map(selector)]
        remove(selector, consumers[2])
        remove(selector, consumers[7])
        add(selector, Consumer("consumer2"))
        add(selector, Consumer("consumer7"))
        after = [None if c is None else c.name for c in owner_map(selector)]
        changed = sum(old != new for old, new in zip(before, after))
        assert changed < 0.01 * len(RING_SLOTS)

    def test_should_not_swap_existing_consumers(self) -> None:
        # testShouldNotSwapExistingConsumers: 100 consumers × 200 points; removal only takes that
        # consumer's ranges away, re-adding only moves ranges from others to it.
        selector = ConsistentHashingSelector(replica_points=200)
        consumers = [Consumer(f"consumer{i}") for i in range(100)]
        for consumer in consumers:
            add(selector, consumer)
        rng = random.Random(4)
        for consumer in rng.sample(consumers, 10):
            ranges_before = selector.ranges_by_consumer()
            impacted = remove(selector, consumer)
            assert impacted[consumer].removed == ranges_before[consumer]
            assert all(changes.removed == [] for other, changes in impacted.items() if other is not consumer)
            impacted = add(selector, consumer)
            assert impacted[consumer].removed == []
            assert all(changes.added == [] for other, changes in impacted.items() if other is not consumer)

    def test_consumers_reconnect_restores_identical_mapping(self) -> None:
        # testConsumersReconnect: 50 consumers leave in random order and rejoin in the original order.
        selector = ConsistentHashingSelector()
        names = [f"consumer{i}" for i in range(50)]
        consumers = [Consumer(name) for name in names]
        for consumer in consumers:
            add(selector, consumer)
        original = [None if c is None else c.name for c in owner_map(selector)]
        original_ranges = {c.name: r for c, r in selector.ranges_by_consumer().items()}
        for consumer in random.Random(5).sample(consumers, len(consumers)):
            remove(selector, consumer)
        assert selector.ranges_by_consumer() == {}
        for name in names:
            add(selector, Consumer(name))
        assert [None if c is None else c.name for c in owner_map(selector)] == original
        assert {c.name: r for c, r in selector.ranges_by_consumer().items()} == original_ranges

    def test_same_name_reuses_smallest_free_name_index(self) -> None:
        # A restarted consumer with a shared name takes the freed index, hence the same points (#10750).
        selector = ConsistentHashingSelector()
        first, second, third = (Consumer("shared") for _ in range(3))
        for consumer in (first, second, third):
            add(selector, consumer)
        mapping = owner_map(selector)
        remove(selector, second)
        replacement = Consumer("shared")
        add(selector, replacement)
        assert all(
            (new is replacement) if old is second else (new is old) for old, new in zip(mapping, owner_map(selector))
        )

    def test_colliding_points_keep_first_consumer_and_hand_over_to_backups_in_order(self) -> None:
        # With one point each, these three names land on the same ring slot (found by search).
        names = ("c2", "c3402", "c18712")
        slots = {consistent_hashing_slot(key_hash(f"{name}\0{0}\0{0}".encode())) for name in names}
        assert len(slots) == 1
        selector = ConsistentHashingSelector(replica_points=1)
        selected, backup_1, backup_2 = (Consumer(name) for name in names)
        add(selector, selected)
        assert add(selector, backup_1) == {backup_1: HashRangeChanges(removed=[], added=[])}
        assert add(selector, backup_2) == {backup_2: HashRangeChanges(removed=[], added=[])}
        assert selector.ranges_by_consumer() == {selected: [(1, 65535)]}
        # A backup leaving changes nothing.
        assert remove(selector, backup_1) == {backup_1: HashRangeChanges(removed=[], added=[])}
        add(selector, backup_1)  # now queued behind backup_2
        assert remove(selector, selected) == {
            selected: HashRangeChanges(removed=[(1, 65535)], added=[]),
            backup_2: HashRangeChanges(removed=[], added=[(1, 65535)]),
        }
        assert selector.select(1) is backup_2
        assert remove(selector, backup_2) == {
            backup_2: HashRangeChanges(removed=[(1, 65535)], added=[]),
            backup_1: HashRangeChanges(removed=[], added=[(1, 65535)]),
        }
        assert selector.select(65535) is backup_1

    def test_collision_with_more_points_hands_over_only_the_shared_point(self) -> None:
        selector = ConsistentHashingSelector(replica_points=1)
        colliding_a, colliding_b, other = Consumer("c1"), Consumer("c24841"), Consumer("c4")
        for consumer in (other, colliding_a, colliding_b):
            add(selector, consumer)
        before = owner_map(selector)
        impacted = remove(selector, colliding_a)
        after = owner_map(selector)
        assert all((new is colliding_b) if old is colliding_a else (new is old) for old, new in zip(before, after))
        assert as_comparable(impacted) == brute_force_impacted(before, after, 1, colliding_a)

    def test_adding_the_same_consumer_twice_is_a_bug(self) -> None:
        selector = ConsistentHashingSelector()
        consumer = Consumer("c")
        add(selector, consumer)
        with pytest.raises(ValueError):
            selector.add_consumer(consumer, "c")

    def test_replica_points_must_be_positive(self) -> None:
        with pytest.raises(ValueError):
            ConsistentHashingSelector(replica_points=0)


# --- auto-split --------------------------------------------------------------------------------------


class TestHashRangeAutoSplitSelector:
    def test_pip_34_picture(self) -> None:
        # PIP-34's picture, as Pulsar's code draws it: a new consumer takes the LOWER half (Pulsar's
        # splitRange puts it at the middle key, so it serves (lower, middle]); the picture shows the
        # upper half. At T2 both halves are equal (32768 keys each), so the lower one (C2's) is split
        # where the picture picks by dispatch rate.
        selector = HashRangeAutoSplitSelector()
        c1, c2, c3 = Consumer("C1"), Consumer("C2"), Consumer("C3")
        assert add(selector, c1) == {c1: HashRangeChanges(removed=[], added=[(0, 65535)])}
        # Pulsar: 0 -> 32768(C2) -> 65536(C1)
        assert add(selector, c2) == {
            c2: HashRangeChanges(removed=[], added=[(0, 32768)]),
            c1: HashRangeChanges(removed=[(0, 32768)], added=[]),
        }
        # Pulsar: 0 -> 16384(C3) -> 32768(C2) -> 65536(C1)
        assert add(selector, c3) == {
            c3: HashRangeChanges(removed=[], added=[(0, 16384)]),
            c2: HashRangeChanges(removed=[(0, 16384)], added=[]),
        }
        assert selector.ranges_by_consumer() == {c3: [(0, 16384)], c2: [(16385, 32768)], c1: [(32769, 65535)]}
        # T3: C1 (the last range) leaves; the one before it (C2) takes over.
        assert remove(selector, c1) == {
            c1: HashRangeChanges(removed=[(32769, 65535)], added=[]),
            c2: HashRangeChanges(removed=[], added=[(32769, 65535)]),
        }
        # T4: C2 (the last range again) leaves; the one before it takes over: C3 serves everything.
        assert remove(selector, c2) == {
            c2: HashRangeChanges(removed=[(16385, 65535)], added=[]),
            c3: HashRangeChanges(removed=[], added=[(16385, 65535)]),
        }
        assert selector.ranges_by_consumer() == {c3: [(0, 65535)]}
        assert remove(selector, c3) == {c3: HashRangeChanges(removed=[(0, 65535)], added=[])}
        assert selector.select(5) is None and selector.ranges_by_consumer() == {}

    def test_largest_range_is_split_lowest_first_among_equals(self) -> None:
        selector = HashRangeAutoSplitSelector(range_size=64)
        consumers = [Consumer(f"c{i}") for i in range(5)]
        for consumer in consumers:
            add(selector, consumer)
        # Pulsar keys: 64(c0) → 32(c1) 64(c0) → c2 splits c1's (0,32] (lowest of equal sizes) at 16
        # → c3 splits c0's (32,64] at 48 → c4 splits c2's (0,16] at 8. New consumers take the lower half.
        assert selector.ranges_by_consumer() == {
            consumers[4]: [(0, 8)],
            consumers[2]: [(9, 16)],
            consumers[1]: [(17, 32)],
            consumers[3]: [(33, 48)],
            consumers[0]: [(49, 63)],
        }

    def test_ranges_contiguous_and_sum_to_65536(self) -> None:
        selector = HashRangeAutoSplitSelector()
        for i in range(37):
            add(selector, Consumer(f"c{i}"))
            assert total_size(selector.ranges_by_consumer()) == 65536
        assert_partition_agrees_with_select(selector, owner_map(selector))

    def test_range_of_one_slot_cannot_be_split(self) -> None:
        selector = HashRangeAutoSplitSelector(range_size=4)
        consumers = [Consumer(f"c{i}") for i in range(3)]
        for consumer in consumers:
            add(selector, consumer)
        # Pulsar keys 1(c2) 2(c1) 4(c0): c2's (0,1] also holds slot 0 but is one key wide; Pulsar would
        # split c0's (2,4] at 3 and leave c0 only the never-selected slot 4, which we refuse.
        assert selector.ranges_by_consumer() == {consumers[2]: [(0, 1)], consumers[1]: [(2, 2)], consumers[0]: [(3, 3)]}
        ranges = selector.ranges_by_consumer()
        with pytest.raises(ConsumerAssignError, match="No more range can be assigned"):
            selector.add_consumer(Consumer("c3"), "c3")
        selector.check_invariants()
        assert selector.ranges_by_consumer() == ranges

    def test_odd_range_gives_new_consumer_the_larger_lower_part(self) -> None:
        selector = HashRangeAutoSplitSelector(range_size=8)
        c = [Consumer(f"c{i}") for i in range(6)]
        for consumer in c[:5]:
            add(selector, consumer)
        # Pulsar keys 1(c4) 2(c2) 4(c1) 6(c3) 8(c0)
        assert selector.ranges_by_consumer() == {
            c[4]: [(0, 1)],
            c[2]: [(2, 2)],
            c[1]: [(3, 4)],
            c[3]: [(5, 6)],
            c[0]: [(7, 7)],
        }
        # c4's range is not the last one, so it goes to the consumer whose range follows: c2 gets [0, 2].
        assert remove(selector, c[4]) == {
            c[4]: HashRangeChanges(removed=[(0, 1)], added=[]),
            c[2]: HashRangeChanges(removed=[], added=[(0, 1)]),
        }
        # c2's [0, 2] (three slots, Pulsar key 2) splits at key 1: the new consumer takes the larger lower part.
        assert add(selector, c[5]) == {
            c[5]: HashRangeChanges(removed=[], added=[(0, 1)]),
            c[2]: HashRangeChanges(removed=[(0, 1)], added=[]),
        }

    def test_slot_matches_range_slot(self) -> None:
        selector = HashRangeAutoSplitSelector()
        for h in (0, 1, 65535, 65536, 2**31 - 1, key_hash(b"key-1")):
            assert selector.slot(h) == range_slot(h)
        assert HashRangeAutoSplitSelector(range_size=64).slot(128) == 1

    def test_impacted_ranges_exact_and_remove_twice_safe(self) -> None:
        selector = HashRangeAutoSplitSelector()
        consumers = [Consumer(f"c{i}") for i in range(12)]
        rng = random.Random(6)
        for consumer in consumers:
            before = owner_map(selector)
            impacted = add(selector, consumer)
            assert as_comparable(impacted) == brute_force_impacted(before, owner_map(selector), 0, consumer)
        for consumer in rng.sample(consumers, len(consumers)):
            before = owner_map(selector)
            impacted = remove(selector, consumer)
            assert as_comparable(impacted) == brute_force_impacted(before, owner_map(selector), 0, consumer)
            assert remove(selector, consumer) == {}

    def test_range_size_must_be_a_power_of_two(self) -> None:
        for bad in (0, 1, 3, 100):
            with pytest.raises(ValueError):
                HashRangeAutoSplitSelector(range_size=bad)


# --- STICKY ------------------------------------------------------------------------------------------


class TestHashRangeExclusiveSelector:
    def test_hash_range_conflict(self) -> None:
        # KeySharedSubscriptionTest.testHashRangeConflict.
        selector = HashRangeExclusiveSelector()
        c1, c2 = Consumer("c1"), Consumer("c2")
        add(selector, c1, [(0, 99), (400, 65535)])
        add(selector, c2, [(100, 399)])
        held = selector.ranges_by_consumer()
        for rejected in ([(0, 65535)], [(1, 1)], [(50, 100)], [(399, 500)]):
            with pytest.raises(ConsumerAssignError, match="Range conflict"):
                selector.add_consumer(Consumer("c3"), "c3", rejected)
            selector.check_invariants()
            assert selector.ranges_by_consumer() == held  # a refused consumer is not left registered (#7444)
        remove(selector, c1)
        c3, c4 = Consumer("c3"), Consumer("c4")
        assert add(selector, c3, [(400, 600)]) == {c3: HashRangeChanges(removed=[], added=[(400, 600)])}
        add(selector, c4, [(50, 99)])
        assert selector.ranges_by_consumer() == {c2: [(100, 399)], c3: [(400, 600)], c4: [(50, 99)]}

    def test_conflict_message_names_both_ranges_and_the_holder(self) -> None:
        selector = HashRangeExclusiveSelector()
        add(selector, Consumer("c1"), [(0, 99), (400, 65535)])
        add(selector, Consumer("c2"), [(100, 399)])
        with pytest.raises(ConsumerAssignError) as refused:
            selector.add_consumer(Consumer("c3"), "c3", [(50, 100)])
        assert str(refused.value) == "Range conflict: [50, 100] of consumer 'c3' overlaps [0, 99] held by consumer 'c1'"
        assert refused.value.server_error == "ConsumerAssignError"

    @pytest.mark.parametrize(
        ("ranges", "message"),
        [
            (None, "must not be empty"),
            ([], "must not be empty"),
            ([(10, 5)], "Invalid range"),
            ([(-1, 5)], "Invalid range"),
            ([(0, 65536)], "Invalid range"),
            ([(0, 10), (10, 20)], "overlaps its own range"),
            ([(30, 40), (0, 35)], "overlaps its own range"),
        ],
    )
    def test_invalid_ranges_refused(self, ranges: list[Range] | None, message: str) -> None:
        selector = HashRangeExclusiveSelector()
        with pytest.raises(ConsumerAssignError, match=message):
            selector.add_consumer(Consumer("c"), "c", ranges)
        selector.check_invariants()
        assert selector.ranges_by_consumer() == {}

    def test_gaps_are_served_by_nobody(self) -> None:
        # #24730: a consumer with non-contiguous ranges must not receive the hashes between them.
        selector = HashRangeExclusiveSelector()
        consumer = Consumer("c")
        add(selector, consumer, [(200, 300), (0, 100)])
        owners = owner_map(selector)
        assert owners[0] is consumer and owners[100] is consumer and owners[300] is consumer
        assert owners[101] is None and owners[199] is None and owners[301] is None and owners[65535] is None
        assert_partition_agrees_with_select(selector, owners)

    def test_adjacent_ranges_reported_merged(self) -> None:
        selector = HashRangeExclusiveSelector()
        consumer = Consumer("c")
        impacted = add(selector, consumer, [(100, 199), (0, 99), (500, 65535)])
        assert impacted == {consumer: HashRangeChanges(removed=[], added=[(0, 199), (500, 65535)])}
        assert selector.ranges_by_consumer() == {consumer: [(0, 199), (500, 65535)]}

    def test_remove_twice_safe_and_impacted_exact(self) -> None:
        selector = HashRangeExclusiveSelector()
        c1, c2 = Consumer("c1"), Consumer("c2")
        before = owner_map(selector)
        impacted = add(selector, c1, [(0, 20000)])
        assert as_comparable(impacted) == brute_force_impacted(before, owner_map(selector), 0, c1)
        add(selector, c2, [(40001, 65535), (20001, 40000)])
        before = owner_map(selector)
        impacted = remove(selector, c2)
        assert impacted == {c2: HashRangeChanges(removed=[(20001, 65535)], added=[])}
        assert as_comparable(impacted) == brute_force_impacted(before, owner_map(selector), 0, c2)
        assert remove(selector, c2) == {}

    def test_slot_matches_range_slot(self) -> None:
        selector = HashRangeExclusiveSelector()
        for h in (0, 65536, 65537, 2**31 - 1):
            assert selector.slot(h) == range_slot(h)


# --- properties over any sequence of adds and removes ------------------------------------------------

_NAMES = (
    "a",
    "b",
    "c",
    "consumer1",
    "consumer11",
    "c2",
    "c3402",
    "c18712",
)  # c2/c3402/c18712 collide at 1 point


def _operations() -> st.SearchStrategy[list[tuple[str, int, int, int]]]:
    # (kind, consumer choice, two numbers for STICKY ranges); "remove again" removes a consumer already gone.
    return st.lists(
        st.tuples(
            st.sampled_from(["add", "add", "remove", "remove again"]),
            st.integers(0, 63),
            st.integers(0, 65535),
            st.integers(0, 65535),
        ),
        max_size=8,
    )


def _run_and_check(
    selector: StickyKeyConsumerSelector,
    operations: list,
    ranges_for: Callable[[int, int], list[Range]] | None,
) -> None:
    first_slot = slots_of(selector)[0]
    live: list[Consumer] = []
    gone: list[Consumer] = []
    owners = owner_map(selector)
    for kind, choice, a, b in operations:
        if kind == "add":
            consumer = Consumer(_NAMES[choice % len(_NAMES)])
            try:
                impacted = selector.add_consumer(consumer, consumer.name, ranges_for(a, b) if ranges_for else None)
            except ConsumerAssignError:
                selector.check_invariants()
                assert all(x is y for x, y in zip(owner_map(selector), owners))
                continue
            live.append(consumer)
        elif kind == "remove" and live:
            consumer = live.pop(choice % len(live))
            impacted = selector.remove_consumer(consumer)
            gone.append(consumer)
        else:
            if gone:
                assert selector.remove_consumer(gone[choice % len(gone)]) == {}
            continue
        selector.check_invariants()
        new_owners = owner_map(selector)
        assert as_comparable(impacted) == brute_force_impacted(owners, new_owners, first_slot, consumer)
        assert_partition_agrees_with_select(selector, new_owners)
        owners = new_owners
        if not isinstance(selector, HashRangeExclusiveSelector):
            # AUTO_SPLIT serves every slot as long as anyone is connected, and none when nobody is.
            assert (None in owners) == (not live)


@settings(max_examples=20, deadline=None)
@given(replica_points=st.sampled_from([1, 5, 20]), operations=_operations())
def test_consistent_hashing_properties(replica_points: int, operations: list) -> None:
    _run_and_check(ConsistentHashingSelector(replica_points), operations, None)


@settings(max_examples=20, deadline=None)
@given(operations=_operations())
def test_auto_split_properties(operations: list) -> None:
    _run_and_check(HashRangeAutoSplitSelector(), operations, None)


@settings(max_examples=20, deadline=None)
@given(operations=_operations())
def test_sticky_properties(operations: list) -> None:
    def two_ranges(a: int, b: int) -> list[Range]:
        low, high = sorted((a, b))
        middle = (low + high) // 2
        return [(low, middle), (middle + 1, high)] if middle < high else [(low, high)]

    _run_and_check(HashRangeExclusiveSelector(), operations, two_ranges)
