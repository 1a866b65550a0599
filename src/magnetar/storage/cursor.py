"""Cursors: a subscription's place in a managed ledger.

Owns: the mark-delete position, the individually deleted (acknowledged) ranges above it, the batch
indexes acknowledged in partly acknowledged entries, the read position, and the snapshot of all that
which is persisted. Must not touch: consumers, dispatching or the wire; the engine directly (it
persists through its ledger, in the ledger's group commit).

Vocabulary and rules are Pulsar's `ManagedCursorImpl`:
- `mark_delete(position)` is a cumulative acknowledgement; `delete(positions)` acknowledges
  individual entries, and the mark-delete position slides forward over any run of deleted entries
  that starts right after it, across ledger boundaries;
- only the first `managedLedgerMaxUnackedRangesToPersist` ranges are persisted; after a restart the
  entries of later ranges are delivered again (never lost), which docs/storage.md explains;
- a non-durable cursor (a Reader) is never persisted and does not hold back ledger deletion.

Invariants:
- every position in `individually_deleted` is above `mark_delete_position` and at or below the
  ledger's last confirmed entry;
- the entry right after the mark-delete position is not in `individually_deleted`;
- `read_position` is after `mark_delete_position`;
- `batch_deleted` holds only positions above the mark-delete position and not individually deleted.
"""

from __future__ import annotations

import asyncio
import json
from array import array
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.positions import Position, PositionRangeSet

if TYPE_CHECKING:
    from magnetar.storage.config import StorageConfig
    from magnetar.storage.sqlite_engine import Entry

__all__ = ["ManagedCursor", "CursorRecord", "encode_ranges", "decode_ranges"]


class CursorRecord:
    """A persisted snapshot, as the engine stores it."""

    __slots__ = ("name", "mark_delete_position", "individually_deleted", "batch_deleted", "properties")

    def __init__(
        self,
        name: str,
        mark_delete_position: Position,
        individually_deleted: bytes,
        batch_deleted: str,
        properties: str,
    ) -> None:
        self.name = name
        self.mark_delete_position = mark_delete_position
        self.individually_deleted = individually_deleted
        self.batch_deleted = batch_deleted
        self.properties = properties


def encode_ranges(ranges: PositionRangeSet, max_ranges: int) -> bytes:
    """The first `max_ranges` ranges as packed int64 quadruples (lower ledger, entry, upper ledger, entry)."""
    flat = array("q")
    for index, (lower, upper) in enumerate(ranges.ranges()):
        if index == max_ranges:
            break
        flat.extend((lower[0], lower[1], upper[0], upper[1]))
    return flat.tobytes()


def decode_ranges(raw: bytes) -> PositionRangeSet:
    """The ranges `encode_ranges` wrote. They were written sorted, disjoint and merged, so they go
    in through the bulk constructor, which checks that instead of merging range by range: a
    restart loads a million of them (100 cursors x 10 000 holes). Raises ValueError on bounds that
    break the range set's invariants."""
    flat = array("q")
    flat.frombytes(raw)
    lowers = list(zip(flat[0::4], flat[1::4]))
    uppers = list(zip(flat[2::4], flat[3::4]))
    return PositionRangeSet.from_sorted_bounds(lowers, uppers)


class CursorLedger(Protocol):
    """What a cursor reaches of its managed ledger (managed_ledger.ManagedLedger, which names this
    module's class, not the other way round)."""

    @property
    def config(self) -> StorageConfig: ...

    @property
    def last_confirmed_entry(self) -> Position: ...

    @property
    def entries_added_counter(self) -> int: ...

    @property
    def last_ledger_created_timestamp_ms(self) -> int: ...

    def next_valid_position(self, position: tuple[int, int]) -> Position: ...

    def previous_position(self, position: tuple[int, int]) -> Position: ...

    def count_entries(self, lower: tuple[int, int], upper: tuple[int, int]) -> int: ...

    async def read_entries(self, start: tuple[int, int], count: int, max_bytes: int | None = None) -> list[Entry]: ...

    async def find_first_published_at_or_after(self, publish_time_ms: int) -> Position: ...

    def persist_cursor(self, cursor: ManagedCursor, record: CursorRecord) -> asyncio.Future[None]: ...

    def cursor_moved(self, cursor: ManagedCursor) -> None: ...


class ManagedCursor:
    def __init__(
        self,
        ledger: CursorLedger,
        name: str,
        durable: bool,
        mark_delete_position: Position,
        individually_deleted: PositionRangeSet | None = None,
        batch_deleted: dict[Position, tuple[int, int]] | None = None,
        properties: dict[str, Any] | None = None,
    ) -> None:
        self.ledger = ledger
        self.name = name
        self.durable = durable
        self.mark_delete_position = Position(*mark_delete_position)
        self.individually_deleted = individually_deleted if individually_deleted is not None else PositionRangeSet()
        # position -> (batch size, bit mask of acknowledged batch indexes)
        self.batch_deleted: dict[Position, tuple[int, int]] = batch_deleted or {}
        self.properties: dict[str, Any] = properties or {}
        self.read_position = ledger.next_valid_position(self.mark_delete_position)
        self.persisted_mark_delete_position: Position | None = self.mark_delete_position if durable else None
        self.last_persist_error: BaseException | None = None
        # Pulsar starts this at "entries added minus backlog" when a cursor is recovered; computing the
        # backlog walks every deleted range, so it is done on first use, not for every cursor at open.
        self._messages_consumed_counter: int | None = None
        self.closed = False
        self._dirty = False
        self.pending_read_ops = 0

    # ------------------------------------------------------------------ acknowledgements

    def mark_delete(self, position: tuple[int, int]) -> asyncio.Future[None] | None:
        """Cumulative acknowledgement of everything up to and including `position`.

        Returns the persist future when every ack is persisted
        (`managedLedgerCursorPositionFlushSeconds=0`), else None.
        """
        position = Position(*position)
        self._check_acknowledgeable(position)
        if position <= self.mark_delete_position:
            return None
        if self._messages_consumed_counter is not None:
            self._messages_consumed_counter += self.ledger.count_entries(
                self.mark_delete_position, position
            ) - self._count_deleted_up_to(position)
        self.individually_deleted.remove_up_to(position)
        self._set_mark_delete(position)
        # Entries acknowledged individually right after the new position (maybe in the next ledger)
        # join the acknowledged prefix.
        self._slide_mark_delete()
        return self._changed()

    def delete(self, positions: list[tuple[int, int]] | tuple[int, int]) -> asyncio.Future[None] | None:
        """Individual acknowledgement of whole entries."""
        if positions and isinstance(positions[0], int):
            positions = [positions]
        if not self._delete([Position(*raw) for raw in positions]):
            return None
        return self._changed()

    def delete_positions(self, positions: list[Position]) -> list[Position]:
        """`delete` for a grouped ACK's hundreds of `Position`s: returns the ones not deleted before,
        in their order, in the same pass as deleting them."""
        deleted = self._delete(positions)
        if deleted:
            self._changed()
        return deleted

    def _delete(self, positions: list[Position]) -> list[Position]:
        if positions:
            self._check_acknowledgeable(max(positions))  # before anything changes
        mark_delete = self.mark_delete_position
        add = self.individually_deleted.add
        deleted = []
        for position in positions:
            if position > mark_delete and add(position):
                deleted.append(position)
        if deleted:
            if self.batch_deleted:
                pop = self.batch_deleted.pop
                for position in deleted:
                    pop(position, None)
            if self._messages_consumed_counter is not None:
                self._messages_consumed_counter += len(deleted)
            self._slide_mark_delete()
        return deleted

    def delete_batch_indexes(
        self, position: tuple[int, int], batch_size: int, indexes: list[int]
    ) -> asyncio.Future[None] | None:
        """Acknowledge some messages of a batch entry; the entry is deleted once all of them are."""
        position = Position(*position)
        self._check_acknowledgeable(position)
        if position <= self.mark_delete_position or position in self.individually_deleted:
            return None
        size, mask = self.batch_deleted.get(position, (batch_size, 0))
        for index in indexes:
            if not 0 <= index < size:
                raise ValueError(f"batch index {index} outside a batch of {size} at {position}")
            mask |= 1 << index
        if mask == (1 << size) - 1:
            return self.delete([position])
        self.batch_deleted[position] = (size, mask)
        return self._changed()

    def is_deleted(self, position: tuple[int, int]) -> bool:
        return position <= self.mark_delete_position or position in self.individually_deleted

    def undeleted_entries(self, entries: list[Entry]) -> list[Entry]:
        """The entries whose positions are not deleted, in their order (a read's, at once)."""
        mark_delete, deleted = self.mark_delete_position, self.individually_deleted
        return [entry for entry in entries if entry.position > mark_delete and entry.position not in deleted]

    def acked_batch_indexes(self, position: tuple[int, int]) -> tuple[int, int] | None:
        """(batch size, mask of acknowledged indexes) of a partly acknowledged entry, if any."""
        return self.batch_deleted.get(Position(*position))

    def _check_acknowledgeable(self, position: Position) -> None:
        if position > self.ledger.last_confirmed_entry:
            raise ValueError(
                f"cursor {self.name}: {position} is beyond the last confirmed entry {self.ledger.last_confirmed_entry}"
            )

    def _count_deleted_up_to(self, position: Position) -> int:
        count = 0
        for lower, upper in self.individually_deleted.ranges():
            if lower >= position:
                break
            count += self.ledger.count_entries(lower, min(upper, position))
        return count

    def _slide_mark_delete(self) -> None:
        ranges = self.individually_deleted
        while ranges:
            lower, upper = ranges.first_range()  # type: ignore[misc]
            following = self.ledger.next_valid_position(self.mark_delete_position)
            if not lower < following <= upper:
                return
            ranges.remove_up_to(upper)
            self._set_mark_delete(Position(*upper))

    def _set_mark_delete(self, position: Position) -> None:
        self.mark_delete_position = position
        if self.batch_deleted:
            for stale in [p for p in self.batch_deleted if p <= position]:
                del self.batch_deleted[stale]
        following = self.ledger.next_valid_position(position)
        if self.read_position < following:
            self.read_position = following
        self.ledger.cursor_moved(self)

    def _changed(self) -> asyncio.Future[None] | None:
        if not self.durable:
            return None
        self._dirty = True
        if self.ledger.config.managedLedgerCursorPositionFlushSeconds == 0:
            return self.flush()
        return None

    # ------------------------------------------------------------------ reading

    async def read_entries(self, count: int, max_bytes: int | None = None) -> list[Any]:
        """Read up to `count` entries from the read position (with `max_bytes`, no more than the first ones
        whose data reaches it) and move it past them."""
        self.pending_read_ops += 1
        try:
            entries = await self.ledger.read_entries(self.read_position, count, max_bytes)
        finally:
            self.pending_read_ops -= 1
        if entries:
            following = self.ledger.next_valid_position(entries[-1].position)
            if following > self.read_position:
                self.read_position = following
        return entries

    def has_more_entries(self) -> bool:
        return self.read_position <= self.ledger.last_confirmed_entry

    def seek(self, position: tuple[int, int]) -> None:
        """Move the read position (never to or before the mark-delete position)."""
        following = self.ledger.next_valid_position(self.mark_delete_position)
        self.read_position = max(Position(*position), following)

    def rewind(self) -> None:
        self.read_position = self.ledger.next_valid_position(self.mark_delete_position)

    async def reset(self, position: tuple[int, int]) -> None:
        """Pulsar's resetCursor: everything before `position` counts as acknowledged, nothing after."""
        position = Position(*position)
        previous = self.ledger.previous_position(position)
        self.individually_deleted.clear()
        self.batch_deleted.clear()
        self.mark_delete_position = previous
        self.read_position = self.ledger.next_valid_position(previous)
        self._messages_consumed_counter = None
        self.ledger.cursor_moved(self)
        if self.durable:
            self._dirty = True
            await self.flush()

    async def reset_to_publish_time(self, publish_time_ms: int) -> Position:
        """Reset to the first entry published at or after `publish_time_ms`; returns that position."""
        position = await self.ledger.find_first_published_at_or_after(publish_time_ms)
        await self.reset(position)
        return position

    # ------------------------------------------------------------------ counters

    @property
    def messages_consumed_counter(self) -> int:
        if self._messages_consumed_counter is None:
            self._messages_consumed_counter = self.ledger.entries_added_counter - self.number_of_entries_in_backlog()
        return self._messages_consumed_counter

    def number_of_entries_in_backlog(self) -> int:
        """Entries after the mark-delete position that are not individually deleted."""
        backlog = self.ledger.count_entries(self.mark_delete_position, self.ledger.last_confirmed_entry)
        for lower, upper in self.individually_deleted.ranges():
            backlog -= self.ledger.count_entries(lower, upper)
        return backlog

    def number_of_entries_since_first_not_acked(self) -> int:
        last_read = self.ledger.previous_position(self.read_position)
        return self.ledger.count_entries(self.mark_delete_position, last_read)

    # ------------------------------------------------------------------ persistence

    @property
    def dirty(self) -> bool:
        return self._dirty

    def snapshot(self) -> CursorRecord:
        config = self.ledger.config
        batch = sorted(self.batch_deleted.items())[: config.managedLedgerMaxBatchDeletedIndexToPersist]
        return CursorRecord(
            self.name,
            self.mark_delete_position,
            encode_ranges(self.individually_deleted, config.managedLedgerMaxUnackedRangesToPersist),
            json.dumps([[p[0], p[1], size, mask] for p, (size, mask) in batch]),
            json.dumps(self.properties, sort_keys=True),
        )

    def flush(self) -> asyncio.Future[None]:
        """Persist the current state in the next group commit; the future completes when durable."""
        if not self.durable:
            raise ValueError(f"cursor {self.name} is non-durable")
        self._dirty = False
        return self.ledger.persist_cursor(self, self.snapshot())

    def _persisted(self, record: CursorRecord, error: BaseException | None) -> None:
        if error is None:
            self.persisted_mark_delete_position = record.mark_delete_position
            self.last_persist_error = None
        else:
            self._dirty = True
            self.last_persist_error = error

    def check_invariants(self) -> None:
        md = self.mark_delete_position
        first = self.individually_deleted.first_range()
        if first is not None:
            assert first[0] >= md, f"{self.name}: deleted range {first} starts below mark-delete {md}"
            assert self.ledger.next_valid_position(md) not in self.individually_deleted, (
                f"{self.name}: the entry after mark-delete {md} is deleted but mark-delete did not slide"
            )
        assert self.read_position > md, f"{self.name}: read position {self.read_position} <= mark-delete {md}"
        for position in self.batch_deleted:
            assert position > md and position not in self.individually_deleted
