"""Key_Shared consumer selectors: which consumer serves which sticky key hash.

Owns: the three selectors Pulsar 4.x has for Key_Shared and the one interface the dispatcher calls.
- `ConsistentHashingSelector`: AUTO_SPLIT with `subscriptionKeySharedUseConsistentHashing=true` (the
  default; PIP-119 ring, PIP-379 hash range [1, 65535]);
- `HashRangeAutoSplitSelector`: AUTO_SPLIT with consistent hashing disabled (PIP-34's original split);
- `HashRangeExclusiveSelector`: STICKY, consumers declare their own ranges.
Every add and remove reports, per consumer, the exact hash ranges it lost and gained: PIP-379's
draining hashes block only the pending hashes that fall in a range that changed owner.
Must not touch: pending acks, draining hashes, dispatch decisions, asyncio, files or the wall clock.

Consumers are opaque objects owned by the dispatcher and told apart by identity (two may share a
name): internal maps key on `id(consumer)` and hold the object, so its `__eq__` is never consulted.
The returned dicts are keyed by the consumer objects themselves, which assumes default identity hashing.

All ranges are inclusive `(start, end)` tuples, as in Pulsar's `Range` and `keyHashRangeArrays`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import count
from typing import Generic, Protocol, TypeVar

from magnetar.core.errors import ConsumerAssignError
from magnetar.core.sticky_key import HASH_RANGE_SIZE, consistent_hashing_slot, key_hash, range_slot

__all__ = [
    "ConsistentHashingSelector",
    "HashRangeAutoSplitSelector",
    "HashRangeChanges",
    "HashRangeExclusiveSelector",
    "ImpactedConsumers",
    "Range",
    "StickyKeyConsumerSelector",
]

Range = tuple[int, int]  # inclusive [start, end]

# The dispatcher's consumer type; a selector only holds consumers and tells them apart by identity.
C = TypeVar("C")

# Slot spaces. The ring leaves out 0 because Pulsar reserves it for "hash not set" (PIP-379 shrank the
# ring from [1, 2^31-2] to [1, 65535] to bound draining-hash memory); the range selectors cover every
# slot clients may name in a STICKY range.
_RING_SLOT_MIN = 1
_RING_SLOT_MAX = HASH_RANGE_SIZE - 1
_RANGE_SLOT_MIN = 0
_RANGE_SLOT_MAX = HASH_RANGE_SIZE - 1


@dataclass(slots=True)
class HashRangeChanges:
    """What one consumer lost and gained in one add or remove (Pulsar's `UpdatedHashRanges`)."""

    removed: list[Range]  # sorted, adjacent ranges merged
    added: list[Range]


ImpactedConsumers = dict[C, HashRangeChanges]  # only consumers that changed, plus the one added/removed


class StickyKeyConsumerSelector(Protocol[C]):
    """The interface the Key_Shared dispatcher drives, whatever the mode."""

    def slot(self, key_hash: int) -> int:
        """Map an entry's 31-bit `key_hash` into this selector's slot space."""
        ...

    def add_consumer(self, consumer: C, name: str, ranges: Sequence[Range] | None = None) -> ImpactedConsumers[C]: ...

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C]:
        """Unknown consumer: empty result, no error, so removing twice is safe."""
        ...

    def select(self, sticky_hash: int) -> C | None:
        """The consumer serving `sticky_hash`; None when nobody does (STICKY gaps, no consumers)."""
        ...

    def ranges_by_consumer(self) -> dict[C, list[Range]]:
        """Inclusive, sorted, adjacent merged: the stats' `keyHashRangeArrays`."""
        ...

    def check_invariants(self) -> None: ...


def _merge_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Sort disjoint ranges and join those that touch."""
    merged: list[Range] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _impacted_consumers(moves: Iterable[tuple[Range, C | None, C | None]], subject: C) -> ImpactedConsumers[C]:
    """Fold `(range, owner before, owner after)` moves into per-consumer changes.

    `subject`, the consumer being added or removed, is always reported, even when it gained or lost
    nothing (all of its ring points collided), so the dispatcher never has to special-case it.
    """
    by_id: dict[int, tuple[C, list[Range], list[Range]]] = {id(subject): (subject, [], [])}
    for hash_range, before, after in moves:
        if before is after:
            continue
        if before is not None:
            by_id.setdefault(id(before), (before, [], []))[1].append(hash_range)
        if after is not None:
            by_id.setdefault(id(after), (after, [], []))[2].append(hash_range)
    return {
        consumer: HashRangeChanges(_merge_ranges(removed), _merge_ranges(added))
        for consumer, removed, added in by_id.values()
    }


def _group_ranges(assignments: Iterable[tuple[Range, C | None]]) -> dict[C, list[Range]]:
    """Per consumer, its ranges merged; unowned ranges (None) are left out."""
    by_id: dict[int, tuple[C, list[Range]]] = {}
    for hash_range, consumer in assignments:
        if consumer is not None:
            by_id.setdefault(id(consumer), (consumer, []))[1].append(hash_range)
    return {consumer: _merge_ranges(ranges) for consumer, ranges in by_id.values()}


@dataclass(slots=True, eq=False)
class _RingMember(Generic[C]):
    consumer: C
    name: str
    name_index: int
    points: tuple[int, ...]  # ring slot of each point index, duplicates kept (a consumer may collide with itself)


class ConsistentHashingSelector(Generic[C]):
    """Pulsar's `ConsistentHashingStickyKeyConsumerSelector`: a hash ring over slots [1, 65535].

    Each consumer puts `replica_points` points on the ring
    (`subscriptionKeySharedConsistentHashingReplicaPoints`, default 100), at the slot of
    `name + "\\0" + name_index + "\\0" + point_index`. The NUL separators keep "consumer1" point 11
    apart from "consumer11" point 1 (#22050); the name index gives consumers that share a name
    disjoint points (#10750, #23327). A slot belongs to the first point at or after
    it, wrapping round to the first point, so adding or removing a consumer moves only the slots next
    to its own points.

    Invariants:
    - `_point_slots` is strictly increasing, within [1, 65535];
    - `_point_owners` has one more item than `_point_slots`: the selected consumer of each point, then
      the owner of the wrap-around (the first point's owner, or None when the ring is empty), so
      `select` is one bisect and one index with no branch;
    - `_backups[slot]` (only for slots where points collide) is non-empty and lists, in arrival order,
      the consumers that put a point there after the selected one; the first takes over when the
      selected consumer leaves, as Pulsar's `HashRingPointEntry.collidingConsumers` does;
    - every member's points are in the ring exactly as many times as it added them (selected or backup),
      and nothing else is;
    - `_name_indexes[name]` is exactly the set of name indexes held by live members with that name.
    """

    __slots__ = ("_replica_points", "_point_slots", "_point_owners", "_backups", "_members", "_name_indexes")

    def __init__(self, replica_points: int = 100) -> None:
        if replica_points < 1:
            raise ValueError(f"replica_points must be at least 1, got {replica_points}")
        self._replica_points = replica_points
        self._point_slots: list[int] = []
        self._point_owners: list[C | None] = [None]
        self._backups: dict[int, list[C]] = {}
        self._members: dict[int, _RingMember[C]] = {}
        self._name_indexes: dict[str, set[int]] = {}

    def slot(self, key_hash: int) -> int:
        return consistent_hashing_slot(key_hash)

    def select(self, sticky_hash: int) -> C | None:
        return self._point_owners[bisect_left(self._point_slots, sticky_hash)]

    def add_consumer(self, consumer: C, name: str, ranges: Sequence[Range] | None = None) -> ImpactedConsumers[C]:
        """Put the consumer's points on the ring. `ranges` is ignored, as Pulsar ignores it in AUTO_SPLIT."""
        if id(consumer) in self._members:
            raise ValueError(f"consumer {name!r} is already added")
        name_index = self._allocate_name_index(name)
        points = tuple(
            consistent_hashing_slot(key_hash(f"{name}\0{name_index}\0{point_index}".encode()))
            for point_index in range(self._replica_points)
        )
        self._members[id(consumer)] = _RingMember(consumer, name, name_index, points)

        fresh = sorted({point for point in points if not self._has_point(point)})
        # Before the ring changes: every slot that one fresh point will own belonged to the owner of
        # the next existing point, because no existing point lies between the fresh point and its
        # predecessor on the new ring.
        owners_before = [self.select(point) for point in fresh]
        created: set[int] = set()
        for point in points:
            if point in created or not _contains(fresh, point):
                self._backups.setdefault(point, []).append(consumer)
            else:
                created.add(point)
        self._insert_points(fresh, consumer)

        moves = [
            (hash_range, owner_before, consumer)
            for point, owner_before in zip(fresh, owners_before, strict=True)
            for hash_range in self._segment(bisect_left(self._point_slots, point))
        ]
        return _impacted_consumers(moves, consumer)

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C]:
        member = self._members.pop(id(consumer), None)
        if member is None:
            return {}
        self._name_indexes[member.name].discard(member.name_index)
        if not self._name_indexes[member.name]:
            del self._name_indexes[member.name]

        # Segments are taken on the ring as it was: a deleted point's slots fall to the next point
        # that remains, a point with backups keeps its segment and hands it to the first backup.
        segments: list[tuple[int, list[Range]]] = []
        deleted: list[int] = []
        for point in sorted(set(member.points)):
            index = bisect_left(self._point_slots, point)
            backups = self._backups.get(point)
            if backups is not None:
                backups[:] = [backup for backup in backups if backup is not consumer]
            if self._point_owners[index] is consumer:
                segments.append((point, self._segment(index)))
                if backups:
                    self._point_owners[index] = backups.pop(0)
                else:
                    deleted.append(point)
            # (`_delete_points` runs even when nothing is deleted: it refreshes the wrap-around owner,
            # which a hand-over at the first point changes.)
            if backups is not None and not backups:
                del self._backups[point]
        self._delete_points(deleted)

        moves = [
            (hash_range, consumer, self.select(point))
            for point, point_segment in segments
            for hash_range in point_segment
        ]
        return _impacted_consumers(moves, consumer)

    def ranges_by_consumer(self) -> dict[C, list[Range]]:
        return _group_ranges(
            (hash_range, self._point_owners[index])
            for index in range(len(self._point_slots))
            for hash_range in self._segment(index)
        )

    def check_invariants(self) -> None:
        slots, owners = self._point_slots, self._point_owners
        assert len(owners) == len(slots) + 1, "point owners out of step with point slots"
        assert owners[-1] is (owners[0] if slots else None), "wrap-around owner is not the first point's owner"
        for index, point in enumerate(slots):
            assert _RING_SLOT_MIN <= point <= _RING_SLOT_MAX, f"point {point} outside the ring"
            if index:
                assert slots[index - 1] < point, f"points {slots[index - 1]} and {point} out of order"
        expected: list[tuple[int, int]] = []
        for member in self._members.values():
            assert len(member.points) == self._replica_points, f"consumer {member.name!r} lost ring points"
            expected.extend((point, id(member.consumer)) for point in member.points)
        actual: list[tuple[int, int]] = []
        for point, owner in zip(slots, owners):
            assert owner is not None and id(owner) in self._members, f"point {point} held by a non-member"
            actual.append((point, id(owner)))
        for point, backups in self._backups.items():
            assert backups, f"empty backup list at {point}"
            assert _contains(slots, point), f"backups at {point} without a ring point"
            actual.extend((point, id(backup)) for backup in backups)
        expected.sort()
        actual.sort()
        assert actual == expected, "ring points do not match the members' points"
        names: dict[str, set[int]] = {}
        for member in self._members.values():
            indexes = names.setdefault(member.name, set())
            assert member.name_index not in indexes, f"name index {member.name_index} of {member.name!r} reused"
            indexes.add(member.name_index)
        assert names == self._name_indexes, "name index tracker out of step with members"

    def _allocate_name_index(self, name: str) -> int:
        """The smallest index no live consumer of that name holds (Pulsar's `ConsumerNameIndexTracker`)."""
        used = self._name_indexes.setdefault(name, set())
        index = next(i for i in count() if i not in used)
        used.add(index)
        return index

    def _has_point(self, point: int) -> bool:
        return _contains(self._point_slots, point)

    def _segment(self, index: int) -> list[Range]:
        """The slots point `index` owns: after its predecessor up to itself; the first point also owns
        the tail after the last point (the wrap-around)."""
        slots = self._point_slots
        point = slots[index]
        if index:
            return [(slots[index - 1] + 1, point)]
        last = slots[-1]
        if last < _RING_SLOT_MAX:
            return [(_RING_SLOT_MIN, point), (last + 1, _RING_SLOT_MAX)]
        return [(_RING_SLOT_MIN, point)]

    def _insert_points(self, fresh: list[int], consumer: C) -> None:
        """Splice sorted new points into the ring in one pass.

        One rebuild per consumer costs a C-level copy of the ring; inserting point by point would
        memmove the whole list once per point (100 times per consumer).
        """
        slots, owners = self._point_slots, self._point_owners[:-1]
        new_slots: list[int] = []
        new_owners: list[C | None] = []
        start = 0
        for point in fresh:
            index = bisect_left(slots, point, start)
            new_slots += slots[start:index]
            new_owners += owners[start:index]
            new_slots.append(point)
            new_owners.append(consumer)
            start = index
        new_slots += slots[start:]
        new_owners += owners[start:]
        new_owners.append(new_owners[0] if new_owners else None)
        self._point_slots, self._point_owners = new_slots, new_owners

    def _delete_points(self, deleted: list[int]) -> None:
        """Remove sorted points from the ring in one pass (same reason as `_insert_points`)."""
        slots, owners = self._point_slots, self._point_owners[:-1]
        new_slots: list[int] = []
        new_owners: list[C | None] = []
        start = 0
        for point in deleted:
            index = bisect_left(slots, point, start)
            new_slots += slots[start:index]
            new_owners += owners[start:index]
            start = index + 1
        new_slots += slots[start:]
        new_owners += owners[start:]
        new_owners.append(new_owners[0] if new_owners else None)
        self._point_slots, self._point_owners = new_slots, new_owners


def _contains(sorted_values: list[int], value: int) -> bool:
    index = bisect_left(sorted_values, value)
    return index < len(sorted_values) and sorted_values[index] == value


class HashRangeAutoSplitSelector(Generic[C]):
    """Pulsar's `HashRangeAutoSplitStickyKeyConsumerSelector` (PIP-34's original hash layer) over [0, 65535].

    The first consumer serves everything. A new consumer takes the LOWER half of the largest range,
    as Pulsar's code does: `splitRange` puts it at the middle key `end - ((end - lower) >> 1)` of the
    ceiling map, so it serves `(lower, middle]` and the range's owner keeps `(middle, end]`. PIP-34's
    picture shows the new consumer with the other (upper) half; Pulsar's code is followed here, since
    that is what `keyHashRangeArrays` and the draining hashes of a real broker show.
    Sizes and split points are computed on Pulsar's keys: the last range ends at key `range_size`
    (Pulsar's first key) although slot `range_size` is never selected, and the first range's lower
    key is 0 although it also holds slot 0. Among ranges of equal size the lowest one is split
    (`findBiggestRange`: strict `>` while walking up the map); PIP-34 suggests picking by dispatch
    rate, which would make the core depend on timing. A leaving consumer's range goes to the consumer
    whose range follows it (Pulsar's ceiling lookup), or, for the last range, to the one before it.
    A range of Pulsar size 1 cannot be split: `ConsumerAssignError`. One deliberate difference: where
    Pulsar would leave the last range's owner only the never-selected slot `range_size` (a tiny last
    range split at `range_size - 1`), the new consumer is refused with `ConsumerAssignError` instead,
    so that every consumer owns at least one selectable slot.

    `range_size` is Pulsar's constructor argument (a power of two, 65536 in the broker); a small one
    lets tests reach the point where nothing is left to split.

    Invariants:
    - `_range_ends` is strictly increasing and, when any consumer is present, ends at
      `range_size - 1`; range `i`
      covers `[_range_ends[i-1] + 1, _range_ends[i]]`, the first starting at 0;
    - `_range_owners` has one more item than `_range_ends`, the last being None, so `select` is one
      bisect and one index and answers None when there are no consumers;
    - every consumer owns exactly one range (`_members` maps its id to its name).
    """

    __slots__ = ("_range_size", "_range_ends", "_range_owners", "_members")

    def __init__(self, range_size: int = HASH_RANGE_SIZE) -> None:
        if range_size < 2 or range_size & (range_size - 1):
            raise ValueError(f"range_size must be a power of two of at least 2, got {range_size}")
        self._range_size = range_size
        self._range_ends: list[int] = []
        self._range_owners: list[C | None] = [None]
        self._members: dict[int, str] = {}

    def slot(self, key_hash: int) -> int:
        # `range_slot`'s rule in a space of `range_size` slots (the same thing at the default size):
        # 0 is "hash not set", so it becomes 1.
        return key_hash % self._range_size or 1

    def select(self, sticky_hash: int) -> C | None:
        return self._range_owners[bisect_left(self._range_ends, sticky_hash)]

    def add_consumer(self, consumer: C, name: str, ranges: Sequence[Range] | None = None) -> ImpactedConsumers[C]:
        """Split the largest range for the consumer. `ranges` is ignored, as Pulsar ignores it here."""
        if id(consumer) in self._members:
            raise ValueError(f"consumer {name!r} is already added")
        ends, owners = self._range_ends, self._range_owners
        if not ends:
            ends.append(self._range_size - 1)
            owners.insert(0, consumer)
            self._members[id(consumer)] = name
            return {consumer: HashRangeChanges(removed=[], added=[(_RANGE_SLOT_MIN, self._range_size - 1)])}
        # Pulsar's findBiggestRange over its keys: range i is (lower_key, key]; the last key is range_size.
        last = len(ends) - 1
        largest, largest_size = 0, 0
        for index in range(len(ends)):
            size = self._pulsar_key(index) - (ends[index - 1] if index else 0)
            if size > largest_size:
                largest, largest_size = index, size
        key = self._pulsar_key(largest)
        middle = key - (largest_size >> 1)  # Pulsar's splitRange: the new consumer's key
        if largest_size <= 1 or (largest == last and middle >= self._range_size - 1):
            raise ConsumerAssignError(
                f"No more range can be assigned to new consumer {name!r}, assigned consumers {len(ends)}"
            )
        start = self._range_start(largest)
        ends.insert(largest, middle)
        owners.insert(largest, consumer)
        self._members[id(consumer)] = name
        return _impacted_consumers([((start, middle), owners[largest + 1], consumer)], consumer)

    def _pulsar_key(self, index: int) -> int:
        """Pulsar's ceiling-map key of range `index`: its end, or `range_size` for the last range."""
        return self._range_size if index == len(self._range_ends) - 1 else self._range_ends[index]

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C]:
        if self._members.pop(id(consumer), None) is None:
            return {}
        ends, owners = self._range_ends, self._range_owners
        index = next(i for i, owner in enumerate(owners) if owner is consumer)
        removed = (self._range_start(index), ends[index])
        if len(ends) == 1:
            heir = None
        elif index == len(ends) - 1:
            heir = owners[index - 1]
            ends[index - 1] = self._range_size - 1
        else:
            heir = owners[index + 1]
        del ends[index]
        del owners[index]
        return _impacted_consumers([(removed, consumer, heir)], consumer)

    def ranges_by_consumer(self) -> dict[C, list[Range]]:
        return _group_ranges(
            ((self._range_start(index), end), self._range_owners[index]) for index, end in enumerate(self._range_ends)
        )

    def check_invariants(self) -> None:
        ends, owners = self._range_ends, self._range_owners
        assert len(owners) == len(ends) + 1 and owners[-1] is None, "range owners out of step with range ends"
        assert not ends or ends[-1] == self._range_size - 1, "ranges do not reach the top of the hash space"
        for index, end in enumerate(ends):
            assert self._range_start(index) <= end, f"empty or unordered range ending at {end}"
        owner_ids = [id(owner) for owner in owners[:-1]]
        assert len(set(owner_ids)) == len(owner_ids), "a consumer owns more than one range"
        assert set(owner_ids) == set(self._members), "range owners do not match the members"

    def _range_start(self, index: int) -> int:
        return self._range_ends[index - 1] + 1 if index else _RANGE_SLOT_MIN


@dataclass(slots=True, eq=False)
class _StickyMember(Generic[C]):
    consumer: C
    name: str
    ranges: list[Range]  # as declared, sorted by start


class HashRangeExclusiveSelector(Generic[C]):
    """Pulsar's `HashRangeExclusiveStickyKeyConsumerSelector` (STICKY): consumers declare their ranges.

    Ranges must be non-empty, inside [0, 65535], and overlap neither each other nor any other
    consumer's; a violation is refused with `ConsumerAssignError` (the client's fatal
    ConsumerAssignError) and leaves the selector unchanged, so a rejected consumer is never left
    registered (#7444). Slots nobody declared are served by nobody: `select` answers None and the
    dispatcher holds those entries rather than drop or misroute them (#24730 delivered such gap
    hashes to a consumer with non-contiguous ranges).

    Invariants:
    - `_segment_starts` begins at 0 and is strictly increasing; segment `i` covers
      `[_segment_starts[i], _segment_starts[i+1] - 1]` (the last one up to 65535), so the segments
      partition [0, 65535];
    - `_segment_owners[i]` is the consumer that declared exactly that range, or None for a gap; two
      gaps are never adjacent;
    - the non-gap segments are exactly the members' declared ranges.
    """

    __slots__ = ("_segment_starts", "_segment_owners", "_members")

    def __init__(self) -> None:
        self._segment_starts: list[int] = [_RANGE_SLOT_MIN]
        self._segment_owners: list[C | None] = [None]
        self._members: dict[int, _StickyMember[C]] = {}

    def slot(self, key_hash: int) -> int:
        return range_slot(key_hash)

    def select(self, sticky_hash: int) -> C | None:
        return self._segment_owners[bisect_right(self._segment_starts, sticky_hash) - 1]

    def add_consumer(self, consumer: C, name: str, ranges: Sequence[Range] | None = None) -> ImpactedConsumers[C]:
        if id(consumer) in self._members:
            raise ValueError(f"consumer {name!r} is already added")
        declared = self._validate(name, ranges)
        self._members[id(consumer)] = _StickyMember(consumer, name, declared)
        self._rebuild_segments()
        return {consumer: HashRangeChanges(removed=[], added=_merge_ranges(declared))}

    def remove_consumer(self, consumer: C) -> ImpactedConsumers[C]:
        member = self._members.pop(id(consumer), None)
        if member is None:
            return {}
        self._rebuild_segments()
        return {consumer: HashRangeChanges(removed=_merge_ranges(member.ranges), added=[])}

    def ranges_by_consumer(self) -> dict[C, list[Range]]:
        return _group_ranges(
            (self._segment(index), owner) for index, owner in enumerate(self._segment_owners) if owner is not None
        )

    def check_invariants(self) -> None:
        starts, owners = self._segment_starts, self._segment_owners
        assert len(starts) == len(owners), "segment owners out of step with segment starts"
        assert starts and starts[0] == _RANGE_SLOT_MIN, "segments do not start at 0"
        for index in range(1, len(starts)):
            assert starts[index - 1] < starts[index] <= _RANGE_SLOT_MAX, f"segment {index} out of order"
            assert owners[index - 1] is not None or owners[index] is not None, f"gaps {index - 1}, {index} adjacent"
        held = sorted((self._segment(index), id(owner)) for index, owner in enumerate(owners) if owner is not None)
        declared = sorted(
            (hash_range, member_id) for member_id, member in self._members.items() for hash_range in member.ranges
        )
        assert held == declared, "segments do not match the declared ranges"

    def _validate(self, name: str, ranges: Sequence[Range] | None) -> list[Range]:
        if not ranges:
            raise ConsumerAssignError(f"Ranges for KeyShared policy must not be empty: consumer {name!r}")
        declared = sorted((int(start), int(end)) for start, end in ranges)
        for start, end in declared:
            if not _RANGE_SLOT_MIN <= start <= end <= _RANGE_SLOT_MAX:
                raise ConsumerAssignError(
                    f"Invalid range [{start}, {end}] of consumer {name!r}: "
                    f"need {_RANGE_SLOT_MIN} <= start <= end <= {_RANGE_SLOT_MAX}"
                )
        for (start, end), (previous_start, previous_end) in zip(declared[1:], declared):
            if start <= previous_end:
                raise ConsumerAssignError(
                    f"Range conflict: [{start}, {end}] of consumer {name!r} overlaps its own range "
                    f"[{previous_start}, {previous_end}]"
                )
        for start, end in declared:
            conflict = self._first_held_overlap(start, end)
            if conflict is not None:
                (held_start, held_end), holder = conflict
                raise ConsumerAssignError(
                    f"Range conflict: [{start}, {end}] of consumer {name!r} overlaps "
                    f"[{held_start}, {held_end}] held by consumer {self._members[id(holder)].name!r}"
                )
        return declared

    def _first_held_overlap(self, start: int, end: int) -> tuple[Range, C] | None:
        """The lowest declared range that overlaps `[start, end]`, with its holder."""
        starts, owners = self._segment_starts, self._segment_owners
        index = bisect_right(starts, start) - 1
        # Gaps and held segments alternate at worst, so this walks at most two segments before it
        # finds a holder or leaves `[start, end]`.
        while index < len(starts) and starts[index] <= end:
            owner = owners[index]
            if owner is not None:
                return self._segment(index), owner
            index += 1
        return None

    def _segment(self, index: int) -> Range:
        starts = self._segment_starts
        end = starts[index + 1] - 1 if index + 1 < len(starts) else _RANGE_SLOT_MAX
        return starts[index], end

    def _rebuild_segments(self) -> None:
        """Lay the declared ranges and the gaps between them out over [0, 65535].

        STICKY consumers are few and join rarely, so a rebuild per change is cheaper to trust than
        an incremental edit.
        """
        held = sorted(
            ((start, end, member.consumer) for member in self._members.values() for start, end in member.ranges),
            key=lambda held_range: held_range[0],
        )
        starts: list[int] = []
        owners: list[C | None] = []
        next_free = _RANGE_SLOT_MIN
        for start, end, consumer in held:
            if start > next_free:
                starts.append(next_free)
                owners.append(None)
            starts.append(start)
            owners.append(consumer)
            next_free = end + 1
        if next_free <= _RANGE_SLOT_MAX:
            starts.append(next_free)
            owners.append(None)
        self._segment_starts, self._segment_owners = starts, owners
