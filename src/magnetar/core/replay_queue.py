"""The replay queue ("messages to redeliver") of a multi-consumer dispatcher.

Owns: the positions that must be read again and dispatched before anything newer of the same key,
in position order, each with its key hash (`Entry.key_hash`), and the queued positions of each key hash
in order, so that a normal read can ask "is an older message of this key waiting?" in O(1) and the
Key_Shared filters walk the keys rather than every queued position (a soak's queue held ten thousand
positions of a few hundred keys, and walking it whole on every dispatch took most of the event loop).

Key hashes, not the selector's key hashes, are stored: they do not depend on the selector, so the
queue stays right when a subscription's Key_Shared policy changes after all its consumers left.
Must not touch: consumers, pending acks, storage.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import ItemsView, Iterator, KeysView, Sequence
from itertools import repeat

from sortedcontainers import SortedDict

from magnetar.positions import Position

__all__ = ["ReplayQueue"]


class ReplayQueue:
    """Invariants:
    - `_by_hash[h]` is the sorted list of the queued positions with key hash h, and is never empty;
    - together the lists hold exactly the queued positions.
    """

    __slots__ = ("_positions", "_by_hash")

    def __init__(self) -> None:
        self._positions: SortedDict = SortedDict()  # Position -> key hash
        self._by_hash: dict[int, list[Position]] = {}

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
        queued = self._by_hash.get(key_hash)
        if queued is None:
            self._by_hash[key_hash] = [position]
        elif queued[-1] < position:
            queued.append(position)
        else:
            insort(queued, position)
        return True

    def remove(self, position: Position) -> bool:
        key_hash = self._positions.pop(position, None)
        if key_hash is None:
            return False
        queued = self._by_hash[key_hash]
        if len(queued) == 1:
            del self._by_hash[key_hash]
        else:
            del queued[bisect_left(queued, position)]
        return True

    def remove_up_to(self, position: Position) -> int:
        """Drop every queued position at or below `position` (already acknowledged); returns how many."""
        positions = self._positions
        end: int = positions.bisect_right(position)
        if not end:
            return 0
        hashes = {positions[queued] for queued in positions.islice(0, end)}
        del positions.keys()[:end]
        by_hash = self._by_hash
        for key_hash in hashes:
            queued = by_hash[key_hash]
            cut = bisect_right(queued, position)
            if cut == len(queued):
                del by_hash[key_hash]
            else:
                del queued[:cut]
        return end

    def contains_hash(self, key_hash: int) -> bool:
        return key_hash in self._by_hash

    def queued_hashes(self) -> KeysView[int]:
        """The key hashes with queued positions: a live view, `in` is O(1)."""
        return self._by_hash.keys()

    def positions_of(self, key_hash: int) -> Sequence[Position]:
        """The queued positions of `key_hash`, in order (empty when it has none); not to be changed."""
        return self._by_hash.get(key_hash, ())

    def by_hash(self) -> ItemsView[int, list[Position]]:
        """(key hash, its queued positions in order) for every key hash queued; not to be changed."""
        return self._by_hash.items()

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
        self._by_hash.clear()

    def check_invariants(self) -> None:
        by_hash: dict[int, list[Position]] = {}
        for position, key_hash in self._positions.items():
            by_hash.setdefault(key_hash, []).append(position)
        assert by_hash == self._by_hash, "per-hash positions out of step with the queued positions"
