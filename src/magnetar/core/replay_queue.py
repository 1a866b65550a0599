"""The replay queue ("messages to redeliver") of a multi-consumer dispatcher.

Owns: the positions that must be read again and dispatched before anything newer of the same key,
in position order, each with its key hash (`Entry.key_hash`), and a count of queued positions per key
hash so that a normal read can ask "is an older message of this key waiting?" in O(1).

Key hashes, not the selector's key hashes, are stored: they do not depend on the selector, so the
queue stays right when a subscription's Key_Shared policy changes after all its consumers left.
Must not touch: consumers, pending acks, storage.
"""

from __future__ import annotations

from collections.abc import Iterator, KeysView
from itertools import repeat

from sortedcontainers import SortedDict

from magnetar.positions import Position

__all__ = ["ReplayQueue"]


class ReplayQueue:
    """Invariants:
    - `_hash_counts[h]` is the number of queued positions with key hash h, and is never 0;
    - the sum of `_hash_counts` equals the number of queued positions.
    """

    __slots__ = ("_positions", "_hash_counts")

    def __init__(self) -> None:
        self._positions: SortedDict = SortedDict()  # Position -> key hash
        self._hash_counts: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._positions)

    def __bool__(self) -> bool:
        return bool(self._positions)

    def __contains__(self, position: object) -> bool:
        return position in self._positions

    def add(self, position: Position, key_hash: int) -> bool:
        """Queue `position`; returns False if it was already queued."""
        if position in self._positions:
            return False
        self._positions[position] = key_hash
        self._hash_counts[key_hash] = self._hash_counts.get(key_hash, 0) + 1
        return True

    def remove(self, position: Position) -> bool:
        key_hash = self._positions.pop(position, None)
        if key_hash is None:
            return False
        count = self._hash_counts[key_hash] - 1
        if count:
            self._hash_counts[key_hash] = count
        else:
            del self._hash_counts[key_hash]
        return True

    def remove_up_to(self, position: Position) -> int:
        """Drop every queued position at or below `position` (already acknowledged); returns how many."""
        positions = self._positions
        end: int = positions.bisect_right(position)
        if not end:
            return 0
        for queued in list(positions.islice(0, end)):
            self.remove(queued)
        return end

    def contains_hash(self, key_hash: int) -> bool:
        return key_hash in self._hash_counts

    def queued_hashes(self) -> KeysView[int]:
        """The key hashes with queued positions: a live view, `in` is O(1)."""
        return self._hash_counts.keys()

    def hash_of(self, position: Position) -> int | None:
        key_hash: int | None = self._positions.get(position)
        return key_hash

    def positions(self) -> Iterator[Position]:
        """Queued positions in order."""
        return iter(self._positions)

    def items(self) -> Iterator[tuple[Position, int]]:
        """(position, key hash) in position order. Built from C iterators: SortedDict's own items view is a
        generator with a lookup per position, and the Key_Shared replay filter walks the whole queue."""
        positions = self._positions
        return zip(positions, map(dict.__getitem__, repeat(positions), positions))

    def first(self) -> Position | None:
        return self._positions.peekitem(0)[0] if self._positions else None

    def clear(self) -> None:
        self._positions.clear()
        self._hash_counts.clear()

    def check_invariants(self) -> None:
        counts: dict[int, int] = {}
        for key_hash in self._positions.values():
            counts[key_hash] = counts.get(key_hash, 0) + 1
        assert counts == self._hash_counts, "per-hash counts out of step with the queued positions"
