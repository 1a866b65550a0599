"""The draining hashes tracker of PIP-379.

Owns: sticky hash -> (draining consumer, reference count, blocked attempts) for one Key_Shared
subscription, the unblock notifications, and the draining statistics per consumer.
Must not touch: pending acks, the replay queue, the selector. The dispatcher wires them together.

When a consumer loses a hash range, each of its pending messages whose hash fell in the lost range
adds one reference to that hash (PIP-379 point 1). While a hash has references, delivering it to any
other consumer is blocked (point 2). Acks and disconnects remove references (point 4); the last one
removes the hash and, if a delivery had been blocked on it, announces the unblock so the dispatcher
re-reads (point 5). A hash that comes back to its draining consumer is dropped lazily on the next
delivery attempt (point 6).

Memory. With nothing draining the tracker holds an empty dict and nothing else. A few thousand
hashes live in that dict, each value one packed int, about 100 bytes a hash (PIP-379 plans 80).
Past `DENSE_MIN` hashes it switches to three flat arrays indexed by hash: 12 bytes per slot of the
65,536-slot space whatever the count, so 12 bytes a hash when all of them drain (PIP-379 estimates
52 for Java). It returns to the dict when the count falls below `DICT_MAX`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import compress
from typing import Generic, NamedTuple, TypeVar

__all__ = ["DrainingHashesTracker", "DrainingHash", "DrainingHashEntry", "DrainingStateError", "ConsumerDrainingStats"]

HASH_SLOTS = 65536
# The dict costs ~100 B a hash; the arrays cost 12 B for each of the 65,536 slots (786 KiB). They cost
# the same near 8,000 hashes, so switch there, and back well below it so that a count hovering around
# the threshold does not convert back and forth.
DENSE_MIN = 8192
DICT_MAX = 2048

_REF_MASK = 0xFFFFFFFF
_BLOCKED_SHIFT = 32
_OWNER_SHIFT = 64
# Blocked attempts only matter as "was it ever blocked" and as a statistic; saturate rather than grow.
_BLOCKED_MAX = 0xFFFFFFFF

# Called with the unblocked hash, or with -1 once at the end of a batch in which hashes were unblocked.
UnblockedCallback = Callable[[int], None]

# The dispatcher's consumer type: the tracker only holds consumers and tells them apart by identity.
C = TypeVar("C")


class DrainingStateError(RuntimeError):
    """A consumer touched a hash that another consumer is draining: the ordering state is inconsistent."""


@dataclass(frozen=True, slots=True)
class DrainingHashEntry(Generic[C]):
    consumer: C
    ref_count: int
    blocked_count: int

    @property
    def is_blocking(self) -> bool:
        return self.blocked_count > 0


class DrainingHash(NamedTuple):
    """One draining hash of a consumer: its messages still unacked, and how often it blocked a dispatch."""

    hash: int
    unacked_messages: int
    blocked_attempts: int


@dataclass(slots=True)
class ConsumerDrainingStats:
    """Pulsar's per-consumer draining fields (`drainingHashesCount`, `…UnackedMessages`, `…ClearedTotal`)."""

    count: int = 0
    unacked_messages: int = 0
    cleared_total: int = 0
    hashes: list[DrainingHash] = field(default_factory=list)  # sorted by hash


class DrainingHashesTracker(Generic[C]):
    """Invariants:
    - hash 0 ("not set") is never stored;
    - every stored hash has a reference count >= 1 and an owner that is a known consumer;
    - `_count` equals the number of stored hashes and `_owner_counts[i]` the number owned by owner i;
    - exactly one representation is live: the dict, or the three arrays (dense mode).
    """

    __slots__ = (
        "_entries",
        "_refs",
        "_blocked",
        "_owner_of",
        "_count",
        "_owners",
        "_owner_index",
        "_owner_counts",
        "_cleared",
        "on_unblocked",
        "_batch_level",
        "_unblocked_in_batch",
    )

    def __init__(self, on_unblocked: UnblockedCallback | None = None) -> None:
        # dict mode: hash -> owner << 64 | blocked << 32 | ref_count (empty in dense mode)
        self._entries: dict[int, int] = {}
        # dense mode: flat arrays indexed by hash, a zero reference count meaning "not draining"; `_refs`
        # is None in dict mode, and the other two are empty then
        self._refs: array[int] | None = None
        self._blocked: array[int] = array("I")
        self._owner_of: array[int] = array("I")
        self._count = 0
        self._owners: list[C | None] = []
        self._owner_index: dict[C, int] = {}
        self._owner_counts: list[int] = []
        self._cleared: dict[C, int] = {}
        self.on_unblocked = on_unblocked
        self._batch_level = 0
        self._unblocked_in_batch = False

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    @property
    def is_dense(self) -> bool:
        return self._refs is not None

    def get_entry(self, sticky_hash: int) -> DrainingHashEntry[C] | None:
        found = self._lookup(sticky_hash)
        if found is None:
            return None
        owner, blocked, ref = found
        return DrainingHashEntry(self._owner(owner), ref, blocked)

    def draining_consumer(self, sticky_hash: int) -> C | None:
        found = self._lookup(sticky_hash)
        return None if found is None else self._owners[found[0]]

    def count_of(self, consumer: C) -> int:
        """How many hashes are draining from `consumer`."""
        owner = self._owner_index.get(consumer)
        return 0 if owner is None else self._owner_counts[owner]

    def items(self) -> Iterator[tuple[int, DrainingHashEntry[C]]]:
        """Every draining hash with its entry, in hash order."""
        for sticky_hash, owner, blocked, ref in self._iter_raw():
            yield sticky_hash, DrainingHashEntry(self._owner(owner), ref, blocked)

    # ------------------------------------------------------------------ updates

    def add_entry(self, consumer: C, sticky_hash: int) -> None:
        """Add one reference: `consumer` holds one more pending message with `sticky_hash`."""
        if sticky_hash <= 0 or sticky_hash >= HASH_SLOTS:
            raise ValueError(f"sticky hash {sticky_hash} is not a valid hash (1..65535)")
        owner = self._index_of(consumer)
        refs = self._refs
        if refs is not None:
            ref = refs[sticky_hash]
            if ref:
                self._check_owner(self._owner_of[sticky_hash], consumer, sticky_hash)
                refs[sticky_hash] = ref + 1
                return
            refs[sticky_hash] = 1
            self._blocked[sticky_hash] = 0
            self._owner_of[sticky_hash] = owner
        else:
            entries = self._entries
            value = entries.get(sticky_hash)
            if value is not None:
                self._check_owner(value >> _OWNER_SHIFT, consumer, sticky_hash)
                entries[sticky_hash] = value + 1
                return
            entries[sticky_hash] = (owner << _OWNER_SHIFT) | 1
        self._count += 1
        self._owner_counts[owner] += 1
        if self._refs is None and self._count >= DENSE_MIN:
            self._to_dense()

    def reduce_ref_count(self, consumer: C, sticky_hash: int, closing: bool = False) -> None:
        """Remove one reference; at zero the hash stops draining.

        `closing` is set when the consumer disconnects: its pending messages go back to the replay queue
        and are dispatched anew, so no unblock is announced.
        """
        found = self._lookup(sticky_hash)
        if found is None:
            return
        owner, blocked, ref = found
        self._check_owner(owner, consumer, sticky_hash)
        if ref > 1:
            if self._refs is not None:
                self._refs[sticky_hash] = ref - 1
            else:
                self._entries[sticky_hash] -= 1
            return
        self._remove(sticky_hash, owner)
        if blocked and not closing:
            self._announce_unblocked(sticky_hash)

    def should_block(self, consumer: C, sticky_hash: int) -> bool:
        """Whether delivering `sticky_hash` to `consumer` must wait for another consumer to drain it.

        Counts the blocked attempt, which later decides whether the unblock is announced; drops the
        hash when it has come back to its draining consumer (PIP-379 point 6).
        """
        found = self._lookup(sticky_hash)
        if found is None:
            return False
        owner, blocked, _ref = found
        if self._owners[owner] is consumer:
            self._remove(sticky_hash, owner)
            return False
        if blocked < _BLOCKED_MAX:
            if self._refs is not None:
                self._blocked[sticky_hash] = blocked + 1
            else:
                self._entries[sticky_hash] += 1 << _BLOCKED_SHIFT
        return True

    def blocks(self, consumer: C, sticky_hash: int) -> bool:
        """`should_block` without side effects, for checks that must not change state."""
        found = self._lookup(sticky_hash)
        return found is not None and self._owners[found[0]] is not consumer

    def start_batch(self) -> None:
        """Collect unblock announcements until the matching `end_batch`, then make one."""
        self._batch_level += 1

    def end_batch(self) -> None:
        self._batch_level -= 1
        if self._batch_level == 0 and self._unblocked_in_batch:
            self._unblocked_in_batch = False
            if self.on_unblocked is not None:
                self.on_unblocked(-1)

    def forget_consumer(self, consumer: C) -> None:
        """Drop a departed consumer's statistics and owner slot; it must own no hash any more.

        A refusal changes nothing: the consumer keeps its hashes, its owner slot and its statistics.
        """
        owner = self._owner_index.get(consumer)
        if owner is not None and self._owner_counts[owner]:
            raise DrainingStateError(
                f"consumer {consumer!r} left while still draining {self._owner_counts[owner]} hashes"
            )
        self._cleared.pop(consumer, None)
        if owner is None:
            return
        del self._owner_index[consumer]
        self._owners[owner] = None

    def clear(self) -> None:
        self._entries = {}
        self._refs = None
        self._blocked, self._owner_of = array("I"), array("I")
        self._count = 0
        self._owner_counts = [0] * len(self._owner_counts)

    # ------------------------------------------------------------------ statistics

    def cleared_total(self, consumer: C) -> int:
        return self._cleared.get(consumer, 0)

    def totals(self) -> tuple[int, int, int]:
        """(draining hashes, their unacked messages, hashes cleared for the consumers still known),
        summed without grouping by consumer: the subscription-wide figures a metrics scrape needs."""
        refs = self._refs
        if refs is not None:
            unacked = sum(refs)
        else:
            unacked = sum(value & _REF_MASK for value in self._entries.values())
        return self._count, unacked, sum(self._cleared.values())

    def stats_by_consumer(self, with_hashes: bool = True) -> dict[C, ConsumerDrainingStats]:
        """The draining hashes grouped by draining consumer, each group in hash order.

        Stats are read while dispatch waits (one event loop), so this groups hash numbers first and
        builds each consumer's list in one comprehension: about 1 µs a hash, where a generator of
        tuples with a dict per step cost three times that (10,000 hashes drain in PIP-379's example).
        """
        stats: dict[C, ConsumerDrainingStats] = {}
        for consumer, cleared in self._cleared.items():
            stats[consumer] = ConsumerDrainingStats(cleared_total=cleared)
        refs: array[int] | dict[int, int]
        blocked: array[int] | dict[int, int]
        owner_of: array[int] | dict[int, int]
        draining: Iterable[int]
        if self._refs is not None:
            refs, blocked, owner_of = self._refs, self._blocked, self._owner_of
            draining = compress(range(HASH_SLOTS), refs)
        else:
            entries = self._entries
            refs, blocked, owner_of = {}, {}, {}
            for sticky_hash, value in entries.items():
                refs[sticky_hash] = value & _REF_MASK
                blocked[sticky_hash] = (value >> _BLOCKED_SHIFT) & _BLOCKED_MAX
                owner_of[sticky_hash] = value >> _OWNER_SHIFT
            draining = sorted(entries)
        by_owner: dict[int, list[int]] = {}
        for sticky_hash in draining:
            group = by_owner.get(owner_of[sticky_hash])
            if group is None:
                by_owner[owner_of[sticky_hash]] = [sticky_hash]
            else:
                group.append(sticky_hash)
        for owner, hashes in by_owner.items():
            consumer = self._owner(owner)
            s = stats.get(consumer)
            if s is None:
                s = stats[consumer] = ConsumerDrainingStats()
            s.count = len(hashes)
            s.unacked_messages = sum([refs[h] for h in hashes])
            if with_hashes:
                s.hashes = [DrainingHash(h, refs[h], blocked[h]) for h in hashes]
        return stats

    # ------------------------------------------------------------------ internals

    def _index_of(self, consumer: C) -> int:
        owner = self._owner_index.get(consumer)
        if owner is None:
            owners = self._owners
            try:
                owner = owners.index(None)
                owners[owner] = consumer
                self._owner_counts[owner] = 0
            except ValueError:
                owner = len(owners)
                owners.append(consumer)
                self._owner_counts.append(0)
            self._owner_index[consumer] = owner
        return owner

    def _owner(self, owner: int) -> C:
        """The consumer in owner slot `owner`, which a stored hash refers to (so it is not forgotten)."""
        consumer = self._owners[owner]
        assert consumer is not None, f"owner slot {owner} is empty"
        return consumer

    def _check_owner(self, owner: int, consumer: C, sticky_hash: int) -> None:
        if self._owners[owner] is not consumer:
            raise DrainingStateError(
                f"hash {sticky_hash} is draining on consumer {self._owners[owner]!r}, not {consumer!r}"
            )

    def _lookup(self, sticky_hash: int) -> tuple[int, int, int] | None:
        """(owner index, blocked attempts, reference count) of a draining hash, or None."""
        refs = self._refs
        if refs is not None:
            if not 0 < sticky_hash < HASH_SLOTS:
                return None
            ref = refs[sticky_hash]
            if not ref:
                return None
            return self._owner_of[sticky_hash], self._blocked[sticky_hash], ref
        value = self._entries.get(sticky_hash)
        if value is None:
            return None
        return value >> _OWNER_SHIFT, (value >> _BLOCKED_SHIFT) & _BLOCKED_MAX, value & _REF_MASK

    def _remove(self, sticky_hash: int, owner: int) -> None:
        if self._refs is not None:
            self._refs[sticky_hash] = 0
        else:
            del self._entries[sticky_hash]
        self._count -= 1
        self._owner_counts[owner] -= 1
        consumer = self._owner(owner)
        self._cleared[consumer] = self._cleared.get(consumer, 0) + 1
        if self._refs is not None and self._count < DICT_MAX:
            self._to_dict()

    def _announce_unblocked(self, sticky_hash: int) -> None:
        if self._batch_level:
            self._unblocked_in_batch = True
        elif self.on_unblocked is not None:
            self.on_unblocked(sticky_hash)

    def _iter_raw(self) -> Iterator[tuple[int, int, int, int]]:
        refs = self._refs
        if refs is not None:
            blocked, owner_of = self._blocked, self._owner_of
            for sticky_hash in compress(range(HASH_SLOTS), refs):
                yield sticky_hash, owner_of[sticky_hash], blocked[sticky_hash], refs[sticky_hash]
            return
        for sticky_hash in sorted(self._entries):
            value = self._entries[sticky_hash]
            yield sticky_hash, value >> _OWNER_SHIFT, (value >> _BLOCKED_SHIFT) & _BLOCKED_MAX, value & _REF_MASK

    def _to_dense(self) -> None:
        zeros = bytes(4 * HASH_SLOTS)
        refs, blocked, owner_of = array("I", zeros), array("I", zeros), array("I", zeros)
        for sticky_hash, value in self._entries.items():
            refs[sticky_hash] = value & _REF_MASK
            blocked[sticky_hash] = (value >> _BLOCKED_SHIFT) & _BLOCKED_MAX
            owner_of[sticky_hash] = value >> _OWNER_SHIFT
        self._refs, self._blocked, self._owner_of = refs, blocked, owner_of
        self._entries = {}

    def _to_dict(self) -> None:
        entries: dict[int, int] = {}
        for sticky_hash, owner, blocked, ref in self._iter_raw():
            entries[sticky_hash] = (owner << _OWNER_SHIFT) | (blocked << _BLOCKED_SHIFT) | ref
        self._entries = entries
        self._refs = None
        self._blocked, self._owner_of = array("I"), array("I")

    def check_invariants(self) -> None:
        assert self._refs is None or not self._entries, "both representations live"
        assert self._refs is not None or not (self._blocked or self._owner_of), "dense arrays left in dict mode"
        counts = [0] * len(self._owners)
        total = 0
        for sticky_hash, owner, _blocked, ref in self._iter_raw():
            assert sticky_hash != 0, "hash 0 stored as draining"
            assert ref >= 1, f"hash {sticky_hash} stored with reference count {ref}"
            assert self._owners[owner] is not None, f"hash {sticky_hash} owned by a forgotten consumer"
            counts[owner] += 1
            total += 1
        assert total == self._count, f"count {self._count} but {total} hashes stored"
        assert counts == self._owner_counts, "per-owner counts out of step"
