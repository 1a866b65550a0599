"""Reads of one topic's entries: the entry cache first, the engine's reader threads for the rest.

Owns: turning a range or a list of positions into the cache lookups and engine reads that serve it,
bounded per read, and putting what the engine read into the cache. Must not touch: appends,
cursors or retention; which entries exist is the `LedgerIndex`'s, which are durable the caller's
(`last_confirmed`).
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate
from operator import attrgetter

from magnetar.positions import Position
from magnetar.storage.engine import StorageEngine
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.ledger_index import LedgerIndex
from magnetar.storage.sqlite_engine import Entry

__all__ = ["EntryReader", "READ_ENTRIES_MAX"]

# One read returns at most this many entries: it bounds the memory of a read and the time a reader
# thread is busy with one request (Pulsar's dispatcherMaxReadBatchSize is 100; replays ask for more).
READ_ENTRIES_MAX = 10_000


# Missing positions of a replay this close together (in entries) are read in one range: a read from disk
# decodes whole segments anyway, and one read costs a reader thread's round trip. Farther apart, each
# group is read on its own. One range over every missing position of a ledger, as before, read up to
# READ_ENTRIES_MAX entries for a replay of two: at saturation, with pulsar-perf's ~110 KB batches, a
# Key_Shared replay of a few scattered positions read and decoded hundreds of megabytes, and the
# catch-up after the producer stopped ran at 95% of a core delivering 80,000 msg/s.
REPLAY_READ_GAP_MAX = 64


def _nearby_runs(positions: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """(ledger id, first, last) ranges covering sorted `positions`, a new range wherever the ledger
    changes, the gap to the next position exceeds REPLAY_READ_GAP_MAX or the range would pass
    READ_ENTRIES_MAX entries."""
    ranges: list[tuple[int, int, int]] = []
    for ledger_id, entry_id in positions:
        if ranges:
            last_ledger, first, last = ranges[-1]
            if (
                last_ledger == ledger_id
                and entry_id - last <= REPLAY_READ_GAP_MAX
                and entry_id - first < READ_ENTRIES_MAX
            ):
                ranges[-1] = (ledger_id, first, entry_id)
                continue
        ranges.append((ledger_id, entry_id, entry_id))
    return ranges


_DATA = attrgetter("data")


def _cut_at_bytes(entries: list[Entry], max_bytes: int) -> bool:
    """Drop the entries after the one whose data brings the total to `max_bytes`; whether it was reached.
    Every read of a subscription passes here: the running totals are summed and searched in C."""
    totals = list(accumulate(map(len, map(_DATA, entries))))
    if not totals or totals[-1] < max_bytes:
        return False
    del entries[bisect_left(totals, max_bytes) + 1 :]
    return True


class EntryReader:
    """The read side of a managed ledger."""

    __slots__ = ("_index", "_cache", "_engine")

    def __init__(self, index: LedgerIndex, cache: EntryCache, engine: StorageEngine) -> None:
        self._index = index
        self._cache = cache
        self._engine = engine

    async def read_entries(
        self, start: tuple[int, int], count: int, last_confirmed: Position, max_bytes: int | None = None
    ) -> list[Entry]:
        """Up to `count` entries from `start` (inclusive), across ledgers, none after `last_confirmed`; with
        `max_bytes`, none after the one that brings their data to `max_bytes` (Pulsar's
        dispatcherMaxReadSizeBytes: at least one entry)."""
        spans = self._index.spans(Position(*start), min(count, READ_ENTRIES_MAX), last_confirmed)
        cache = self._cache
        result: list[Entry] = []
        for ledger_id, first, last in spans:
            cached = cache.get_run(ledger_id, first, last)
            result.extend(cached)
            if len(cached) < last - first + 1:
                runs, entries = await self._engine.read_entries(ledger_id, first + len(cached), last)
                for run in runs:
                    cache.put_read(run, first + len(cached), last)
                result.extend(entries)
            if max_bytes is not None and _cut_at_bytes(result, max_bytes):
                break
        return result

    async def read_positions(self, positions: list[tuple[int, int]]) -> list[Entry]:
        """The entries at the given positions (replays), in the order given; missing ones are skipped."""
        found: dict[tuple[int, int], Entry] = {}
        missing: list[tuple[int, int]] = []
        cache = self._cache
        # Replays are mostly runs of consecutive entries: one cache lookup per run.
        wanted = sorted(positions)
        count = len(wanted)
        index = 0
        while index < count:
            ledger_id, first = wanted[index]
            end = index
            while end + 1 < count and wanted[end + 1][0] == ledger_id and wanted[end + 1][1] == wanted[end][1] + 1:
                end += 1
            cached = cache.get_run(ledger_id, first, wanted[end][1])
            for entry in cached:
                found[entry.position] = entry
            info = self._index.get(ledger_id)
            if info is not None:
                missing += [p for p in wanted[index + len(cached) : end + 1] if 0 <= p[1] < info.entries]
            index = end + 1
        for ledger_id, first, last in _nearby_runs(missing):
            runs, entries = await self._engine.read_entries(ledger_id, first, last)
            for run in runs:
                cache.put_read(run, first, last)
            for entry in entries:
                found.setdefault(entry.position, entry)
        return [found[p] for p in positions if p in found]

    async def find_first_published_at_or_after(self, publish_time_ms: int, last_confirmed: Position) -> Position:
        """The first entry whose publish time is at or after `publish_time_ms`; past the end if none."""
        for info in self._index.infos:
            if not info.entries:
                continue
            entry_id = await self._engine.first_published_at_or_after(info.ledger_id, publish_time_ms)
            if entry_id is not None:
                return Position(info.ledger_id, entry_id)
        return self._index.next_valid_position(last_confirmed)
