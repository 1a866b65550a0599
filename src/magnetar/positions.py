"""Positions in a managed ledger and sets of position ranges.

Owns: `Position` (ledger id, entry id) and `PositionRangeSet`, the structure Pulsar uses for a cursor's
individually deleted messages and for PIP-282's individually sent positions.
A leaf below every layer: the core, storage, protocol and the shell all speak in these positions, so
none of them has to import another's module for them. It imports nothing of magnetar.
Must not touch: asyncio, files, sockets or the wall clock.

A range set holds open-closed ranges `(lower, upper]`, exactly as Pulsar's `RangeSetWrapper` does.
Open-closed ranges need no knowledge of where one ledger ends and the next begins: acknowledging entry
`(7, 3)` adds `(7:2, 7:3]`, and two ranges merge only when one's upper bound is the next one's lower
bound. Contiguous runs collapse into one range, so millions of acknowledged entries with few holes cost
a few ranges; many holes cost two list slots each, kept sorted with `bisect`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import NamedTuple

__all__ = ["Position", "PositionRangeSet", "EARLIEST", "LATEST"]


class Position(NamedTuple):
    """A message's place in a topic: the ledger that holds it and its entry in that ledger.

    A plain tuple underneath, so comparisons and hashing run in C; a bare `(ledger, entry)` tuple
    compares equal to it.
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    def previous(self) -> Position:
        """The lower bound of the open-closed range that holds only this position."""
        return Position(self.ledger_id, self.entry_id - 1)


# Pulsar's sentinels: (-1, -1) sorts before every real position, (Long.MAX, Long.MAX) after.
EARLIEST = Position(-1, -1)
LATEST = Position(2**63 - 1, 2**63 - 1)


class PositionRangeSet:
    """A set of positions stored as sorted, disjoint, non-touching open-closed ranges.

    Invariants:
    - `_lowers` and `_uppers` have the same length and are strictly increasing;
    - `_lowers[i] < _uppers[i]` (no empty range);
    - `_uppers[i] < _lowers[i + 1]` (ranges neither overlap nor touch: touching ranges are merged).
    """

    __slots__ = ("_lowers", "_uppers")

    def __init__(self) -> None:
        self._lowers: list[tuple[int, int]] = []
        self._uppers: list[tuple[int, int]] = []

    @classmethod
    def from_sorted_bounds(cls, lowers: list[tuple[int, int]], uppers: list[tuple[int, int]]) -> PositionRangeSet:
        """Build from bounds already sorted, disjoint and merged (as `ranges()` yields them), in O(n)
        without re-merging: a restarting cursor reloads its persisted ack holes this way.

        Raises ValueError when the bounds break the invariants, so damaged input is never taken as is.
        """
        if len(lowers) != len(uppers):
            raise ValueError(f"{len(lowers)} lower bounds but {len(uppers)} upper bounds")
        previous_upper = None
        for lower, upper in zip(lowers, uppers):
            if not lower < upper or (previous_upper is not None and not previous_upper < lower):
                raise ValueError(f"range ({lower}, {upper}] is empty, unsorted, or touches the one before")
            previous_upper = upper
        ranges = cls()
        ranges._lowers = [(ledger_id, entry_id) for ledger_id, entry_id in lowers]
        ranges._uppers = [(ledger_id, entry_id) for ledger_id, entry_id in uppers]
        return ranges

    def add(self, position: tuple[int, int]) -> bool:
        """Add one position: the range `(ledger:entry-1, ledger:entry]`. Returns whether it is new, so
        that acks need one search, not `contains` and then `add`.

        Acks add positions one at a time, so this is `add_range` for a one-position range without its
        second search and slice assignments: no two-int pair lies strictly between `lower` and
        `position`, so the range found either holds the position, touches it, or lies past it.
        """
        lowers, uppers = self._lowers, self._uppers
        lower = (position[0], position[1] - 1)
        # Ranges before `index` end below `lower`: they neither hold nor touch the new one.
        index = bisect_left(uppers, lower)
        if index == len(uppers):
            lowers.append(lower)
            uppers.append(position)
            return True
        range_lower = lowers[index]
        if range_lower < position:
            if uppers[index] != lower:
                return False  # it ends at or after `position`: it holds it
            # Touches this range from above; it may now touch the next one too.
            if index + 1 < len(lowers) and lowers[index + 1] == position:
                uppers[index] = uppers[index + 1]
                del lowers[index + 1]
                del uppers[index + 1]
            else:
                uppers[index] = position
            return True
        if range_lower == position:
            lowers[index] = lower
        else:
            lowers.insert(index, lower)
            uppers.insert(index, position)
        return True

    def add_range(self, lower: tuple[int, int], upper: tuple[int, int]) -> None:
        """Add the open-closed range `(lower, upper]`, merging it with every range it overlaps or touches."""
        if not lower < upper:
            raise ValueError(f"empty range ({lower}, {upper}]")
        lowers, uppers = self._lowers, self._uppers
        # Ranges k with uppers[k] >= lower and lowers[k] <= upper overlap or touch the new one; since the
        # ranges are sorted and disjoint those k form one run [first, last).
        first = bisect_left(uppers, lower)
        last = bisect_right(lowers, upper, first)
        if first < last:
            if lowers[first] < lower:
                lower = lowers[first]
            if uppers[last - 1] > upper:
                upper = uppers[last - 1]
        lowers[first:last] = (lower,)
        uppers[first:last] = (upper,)

    def contains(self, position: tuple[int, int]) -> bool:
        index = bisect_left(self._uppers, position)
        return index < len(self._uppers) and self._lowers[index] < position

    __contains__ = contains

    def remove_up_to(self, position: tuple[int, int]) -> None:
        """Forget every position at or below `position` (the mark-delete position moved there)."""
        lowers, uppers = self._lowers, self._uppers
        # Ranges whose upper bound is <= position vanish entirely.
        cut = bisect_right(uppers, position)
        if cut:
            del lowers[:cut]
            del uppers[:cut]
        if lowers and lowers[0] < position:
            lowers[0] = position

    def clear(self) -> None:
        self._lowers.clear()
        self._uppers.clear()

    def first_range(self) -> tuple[tuple[int, int], tuple[int, int]] | None:
        if not self._lowers:
            return None
        return self._lowers[0], self._uppers[0]

    def pop_first_range(self) -> tuple[tuple[int, int], tuple[int, int]]:
        return self._lowers.pop(0), self._uppers.pop(0)

    def ranges(self) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
        return zip(self._lowers, self._uppers)

    def range_count(self) -> int:
        return len(self._lowers)

    def __len__(self) -> int:
        return len(self._lowers)

    def __bool__(self) -> bool:
        return bool(self._lowers)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PositionRangeSet):
            return NotImplemented
        return self._lowers == other._lowers and self._uppers == other._uppers

    def to_string(self, separator: str = "..", joiner: str = ",") -> str:
        """Pulsar's rendering: `[(3:4..3:5],(3:7..3:10]]` in internal stats; PIP-282's stats write
        `[(3:4, 3:5], (3:7, 3:10]]` (`separator=", ", joiner=", "`)."""
        parts = [f"({lo[0]}:{lo[1]}{separator}{hi[0]}:{hi[1]}]" for lo, hi in zip(self._lowers, self._uppers)]
        return "[" + joiner.join(parts) + "]"

    def __repr__(self) -> str:
        return f"PositionRangeSet({self.to_string()})"

    def check_invariants(self) -> None:
        lowers, uppers = self._lowers, self._uppers
        assert len(lowers) == len(uppers), "lower and upper bounds out of step"
        for index, (lower, upper) in enumerate(zip(lowers, uppers)):
            assert lower < upper, f"empty range at {index}: ({lower}, {upper}]"
            if index:
                assert uppers[index - 1] < lower, f"ranges {index - 1} and {index} overlap or touch"
