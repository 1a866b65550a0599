"""The ledgers of one topic, in id order, and position arithmetic across them.

Owns: each ledger's `LedgerInfo` (its durable entry count, bytes and last write time) and their order;
answers which stored entry comes after or before a position and how many lie between two. Must not
touch: the engine, the cache, appends or cursors; the managed ledger adds and forgets ledgers and
tells the index, through `pending_after`, which appends are not durable yet.

Invariants: ids are increasing; the last one is the managed ledger's current ledger (the one appends
go to); a ledger's `entries` counts its durable entries only.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.positions import Position

__all__ = ["LedgerIndex", "LedgerInfo"]


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int


class LedgerIndex:
    """Ledgers by id, in order, and the positions they hold.

    `pending_after(ledger_id, entry_id)` says an append to that ledger beyond that entry is not
    durable yet: a ledger that rolled over while its last entries were in the commit has more entries
    than `entries` counts, and they come before the next ledger's.
    """

    __slots__ = ("_infos", "_ids", "_pending_after")

    def __init__(self, ledgers: list[LedgerInfo], pending_after: Callable[[int, int], bool]) -> None:
        self._infos: dict[int, LedgerInfo] = {info.ledger_id: info for info in ledgers}
        self._ids: list[int] = [info.ledger_id for info in ledgers]
        self._pending_after = pending_after

    def add(self, info: LedgerInfo) -> None:
        """A new current ledger, after every other."""
        assert not self._ids or info.ledger_id > self._ids[-1], "ledger ids out of order"
        self._infos[info.ledger_id] = info
        self._ids.append(info.ledger_id)

    def forget(self, ledger_id: int) -> None:
        del self._infos[ledger_id]
        self._ids.remove(ledger_id)

    def get(self, ledger_id: int) -> LedgerInfo | None:
        return self._infos.get(ledger_id)

    def __getitem__(self, ledger_id: int) -> LedgerInfo:
        return self._infos[ledger_id]

    def __contains__(self, ledger_id: int) -> bool:
        return ledger_id in self._infos

    def __len__(self) -> int:
        return len(self._ids)

    @property
    def first_id(self) -> int:
        return self._ids[0]

    @property
    def infos(self) -> list[LedgerInfo]:
        """Every ledger, oldest first; the last is the current one."""
        infos = self._infos
        return [infos[ledger_id] for ledger_id in self._ids]

    @property
    def number_of_entries(self) -> int:
        return sum(info.entries for info in self._infos.values())

    @property
    def total_size(self) -> int:
        return sum(info.size for info in self._infos.values())

    def first_position(self) -> Position:
        """The first entry still stored, or where the next one will go."""
        return self.next_valid_position(Position(self._ids[0], -1))

    def next_valid_position(self, position: tuple[int, int]) -> Position:
        """The entry after `position`, skipping deleted and empty ledgers; past the end, where the
        next append will land."""
        ledger_id, entry_id = position
        infos = self._infos
        ids = self._ids
        info = infos.get(ledger_id)
        if info is not None and entry_id + 1 < info.entries:
            return Position(ledger_id, entry_id + 1)
        if info is not None and ledger_id != ids[-1] and self._pending_after(ledger_id, entry_id):
            return Position(ledger_id, entry_id + 1)
        for index in range(bisect_right(ids, ledger_id), len(ids)):
            if infos[ids[index]].entries:
                return Position(ids[index], 0)
        current = infos[ids[-1]]
        if current.ledger_id > ledger_id or (current.ledger_id == ledger_id and current.entries > entry_id):
            return Position(current.ledger_id, current.entries)
        return Position(ledger_id, entry_id + 1)

    def previous_position(self, position: tuple[int, int]) -> Position:
        """The entry before `position`, or `(first ledger, -1)` before the first."""
        ledger_id, entry_id = position
        infos = self._infos
        if entry_id > 0 and ledger_id in infos:
            return Position(ledger_id, min(entry_id, infos[ledger_id].entries) - 1)
        ids = self._ids
        for index in range(bisect_left(ids, ledger_id) - 1, -1, -1):
            info = infos[ids[index]]
            if info.entries:
                return Position(info.ledger_id, info.entries - 1)
        return Position(ids[0] if ids else ledger_id, -1)

    def count_entries(self, lower: tuple[int, int], upper: tuple[int, int]) -> int:
        """Number of stored entries in the open-closed range `(lower, upper]`."""
        if upper <= lower:
            return 0
        lower_ledger, lower_entry = lower
        upper_ledger, upper_entry = upper
        infos = self._infos
        if lower_ledger == upper_ledger:
            info = infos.get(lower_ledger)
            if info is None:
                return 0
            return max(0, min(upper_entry, info.entries - 1) - max(lower_entry, -1))
        ids = self._ids
        total = 0
        for index in range(bisect_left(ids, lower_ledger), bisect_right(ids, upper_ledger)):
            info = infos[ids[index]]
            first = lower_entry + 1 if info.ledger_id == lower_ledger else 0
            last = min(upper_entry, info.entries - 1) if info.ledger_id == upper_ledger else info.entries - 1
            if last >= first:
                total += last - first + 1
        return total

    def spans(self, start: Position, count: int, last_confirmed: Position) -> list[tuple[int, int, int]]:
        """The stored entries from `start` (inclusive), at most `count`, as `(ledger_id,
        first_entry_id, last_entry_id)` per ledger; the walk ends at `last_confirmed`, the last durable
        entry (a span never passes it, since `entries` counts durable entries only)."""
        spans = []
        infos = self._infos
        position = start if start[1] >= 0 else self.next_valid_position(start)
        if position[0] not in infos or position[1] >= infos[position[0]].entries:
            position = self.next_valid_position(self.previous_position(position))
        while count > 0 and position <= last_confirmed:
            info = infos.get(position[0])
            if info is None or position[1] >= info.entries:
                position = self.next_valid_position(position)
                continue
            last = min(info.entries - 1, position[1] + count - 1)
            spans.append((position[0], position[1], last))
            count -= last - position[1] + 1
            position = self.next_valid_position(Position(position[0], last))
        return spans

    def check_invariants(self) -> None:
        assert self._ids == sorted(self._ids), "ledger ids out of order"
        assert set(self._ids) == set(self._infos)
