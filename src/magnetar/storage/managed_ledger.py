"""Managed ledgers: one append-only log of entries per topic, split into ledgers; and their factory.

Owns: appending (one entry, or a batch as parallel lists; positions, completion only once
durable), reading (ranges, lists of positions, the entry cache in front of the engine), position
arithmetic across ledgers, the cursors of each ledger, and the factory's periodic cursor flush,
rollover and retention checks. When a ledger rolls over and which ledgers retention deletes is
`ledger_policy`'s; time comes from the factory's `Clock`; every statement is the engine's (named
operations: `delete_ledger`, `upsert_cursor`, ...). Everything here runs on the event loop thread;
blocking work goes to the engine's threads. Must not touch: consumers, dispatch or the wire; SQL.

Positions follow Pulsar: `(ledger_id, entry_id)`, entry ids from 0 in each ledger, ledger ids unique
across all topics. A ledger is closed when it is full (`managedLedgerMaxEntriesPerLedger`,
`managedLedgerMaxSizePerLedgerMbytes`, once `managedLedgerMinLedgerRolloverTimeMinutes` passed; or
`managedLedgerMaxLedgerRolloverTimeMinutes`), when a commit of it fails (Pulsar fences a ledger
after a write error, so entry ids never have holes), and at every restart.
"""

from __future__ import annotations

import asyncio
import json
import os
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from typing import Any, cast, overload

from magnetar.positions import EARLIEST, LATEST, Position
from magnetar.storage.clock import Clock, LoopClock
from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import CursorRecord, ManagedCursor, decode_ranges
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import StorageBusyError, StorageClosedError, StorageError
from magnetar.storage.ledger_policy import RolloverPolicy, ledgers_to_trim
from magnetar.storage.metadata import MetadataStore
from magnetar.storage.sqlite_engine import (
    CommitReport,
    Entry,
    Run,
    SqliteEngine,
    new_position,
    runs_of_records,
)
from magnetar.storage.write_latency import LatencyBuckets

__all__ = ["BatchPositions", "ManagedLedger", "ManagedLedgerFactory", "LedgerInfo", "Entry"]

MB = 1024 * 1024
# One read returns at most this many entries: it bounds the memory of a read and the time a reader
# thread is busy with one request (Pulsar's dispatcherMaxReadBatchSize is 100; replays ask for more).
READ_ENTRIES_MAX = 10_000

# A single append's entry before it becomes part of a Run: (ledger_id, entry_id, data,
# sticky_key_hash, message_count, publish_time, producer_name, sequence_id).
Record = tuple[int, int, bytes, int, int, int, str, int]
# A pending append, oldest first in `ManagedLedger._pending`: (last position, future, payload,
# result, payload bytes). The payload is the Record of an `append`, or the Run of entries one
# `append_many` put into one ledger (a batch is split where a ledger rolls over). `result` says what
# the future resolves to once this item is durable: the position for `append`; on a batch's last
# item, the batch's `(ledger_id, first_entry_id, count)` spans, which the future resolves to as
# `BatchPositions`; None on a batch's earlier items (the future waits for the last one).
PendingAppend = tuple[Position, "asyncio.Future[Any]", Record | Run, Any, int]


class BatchPositions(Sequence[Position]):
    """The positions of one `append_many` batch, held as spans: `(ledger_id, first_entry_id, count)`
    per ledger the batch went into (one, unless it spans a rollover). A sequence of `Position`s made
    on demand: indexing makes one, iterating makes them in C loops. Making them all when the batch
    became durable was half the event loop's time per 100 B entry (docs/storage.md); the broker
    needs one position per SEND receipt, and a 100 B SEND costs the loop little more than that."""

    __slots__ = ("spans", "_length")

    def __init__(self, spans: list[tuple[int, int, int]]) -> None:
        self.spans = spans
        self._length = sum(span[2] for span in spans)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> Position: ...

    @overload
    def __getitem__(self, index: slice) -> list[Position]: ...

    def __getitem__(self, index: int | slice) -> Position | list[Position]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._length
        if 0 <= index < self._length:
            for ledger_id, first, count in self.spans:
                if index < count:
                    return new_position((ledger_id, first + index))
                index -= count
        raise IndexError("batch position index out of range")

    def __iter__(self) -> Iterator[Position]:
        return chain.from_iterable(
            map(new_position, zip(repeat(ledger_id), range(first, first + count)))
            for ledger_id, first, count in self.spans
        )

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BatchPositions):
            return self.spans == other.spans
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __repr__(self) -> str:
        return f"BatchPositions({self.spans!r})"


@dataclass(slots=True)
class LedgerInfo:
    ledger_id: int
    entries: int
    size: int
    timestamp_ms: int


# Runs of one commit are joined for the cache when they hold fewer entries than this on average.
JOIN_RUN_ENTRIES_MAX = 32


def _cache_joined(cache: EntryCache, runs: list[Run], sizes: list[int]) -> None:
    """Cache the runs one commit made durable, consecutive ones joined into one. At moderate rates
    each socket read of SENDs is a run of one or two entries; kept apart, every run is an object for
    the cyclic collector and a key and a run start in the cache, and young collections that found
    thousands of them (with their columns) took 25-40 ms of the event loop. Runs that are long
    already (a busy producer's socket reads, hundreds of SENDs each) are cached as they are: joining
    them copies every column entry by entry for nothing, which was a fifth of the event loop's time
    in the 16-topic append benchmark. `sizes`: each run's payload bytes."""
    first = runs[0]
    if len(runs) == 1:
        cache.put(first, sizes[0])
        return
    if sum(len(run.datas) for run in runs) >= JOIN_RUN_ENTRIES_MAX * len(runs):
        for run, size in zip(runs, sizes):
            cache.put(run, size)
        return
    starts = accumulate((len(run.datas) for run in runs), initial=first.first_entry_id)
    if all(run.ledger_id == first.ledger_id and run.first_entry_id == start for run, start in zip(runs, starts)):
        columns = list(zip(*runs))[2:]
        joined = Run(first.ledger_id, first.first_entry_id, *map(tuple, map(chain.from_iterable, columns)))
        cache.put(joined, sum(sizes))
    else:
        for run, size in zip(runs, sizes):
            cache.put(run, size)


class ManagedLedger:
    """A topic's log: its ledgers, the entry write path, reads and position arithmetic across ledgers,
    its cursors and its retention.

    The write path: `append` / `append_many` give positions in call order (after the one rollover
    check, `_roll_if_full`, which asks `RolloverPolicy`), queue the entries as pending and hand them to
    the commit thread once per loop iteration (`_submit`); `_on_durable` / `_on_failed` complete them
    from the commit reports, in position order. Retention picks ledgers with
    `ledger_policy.ledgers_to_trim`; the engine's named writes delete them and persist cursors.

    Invariants: ledger ids are in increasing order and the last is the current ledger; `_pending` is
    in position order; an append's future resolves only once the commit holding it is durable;
    `last_confirmed_entry` is the last durable entry.
    """

    def __init__(
        self,
        factory: ManagedLedgerFactory,
        name: str,
        topic_id: int,
        ledgers: list[LedgerInfo],
        entries_trimmed: int = 0,
    ) -> None:
        self.factory = factory
        self.config = factory.config
        self.name = name
        self.topic_id = topic_id
        self._engine = factory.engine
        self._cache = factory.cache
        self._loop = factory.loop
        self._ledgers: dict[int, LedgerInfo] = {info.ledger_id: info for info in ledgers}
        self._ledger_ids: list[int] = [info.ledger_id for info in ledgers]
        self.cursors: dict[str, ManagedCursor] = {}
        # A namespace's retention policy for this topic, (minutes, megabytes), set by the broker; None
        # keeps defaultRetentionTimeInMinutes / defaultRetentionSizeInMB.
        self.retention: tuple[int, int] | None = None
        self._pending: deque[PendingAppend] = deque()
        # Hand-offs to the commit thread that are not durable yet, as (last position, entries,
        # monotonic time): one per loop iteration, so timing writes costs nothing per entry.
        self._submitted: deque[tuple[tuple[int, int], int, float]] = deque()
        self.write_latency = LatencyBuckets()
        # Appended since the last hand-off to the commit thread: Records (`append`), Runs (`append_many`).
        self._unsubmitted: list[Record | Run] = []
        self._unsubmitted_runs = 0
        self._unsubmitted_size = 0
        self._waiters: list[asyncio.Future[None]] = []
        # Every entry the topic ever stored, those retention deleted included (persisted per topic), so
        # that `entries_added_counter - number_of_entries` is the index of the first stored entry: how a
        # reader that held a position learns how many entries it lost to retention.
        self.entries_added_counter = entries_trimmed + sum(info.entries for info in ledgers)
        self.state = "LedgerOpened"
        self.last_ledger_created_timestamp_ms = 0
        # The last durable entry; before any, (first ledger, -1) as Pulsar reports for an empty topic.
        self.last_confirmed_entry = EARLIEST
        for info in reversed(ledgers):
            if info.entries:
                self.last_confirmed_entry = Position(info.ledger_id, info.entries - 1)
                break
        self._current: LedgerInfo | None = None
        self._current_ledger_id = -1
        self._pending_adds_max = self.config.managedLedgerMaxPendingAdds
        self._clock = factory.clock
        self._rollover = RolloverPolicy(self.config, self._clock)
        self._next_entry_id = 0
        self._assigned_size = 0
        self._create_ledger()
        if self.last_confirmed_entry == EARLIEST:
            self.last_confirmed_entry = Position(self._ledger_ids[0], -1)

    # ------------------------------------------------------------------ appends

    def append(
        self,
        data: bytes,
        sticky_key_hash: int = 0,
        message_count: int = 1,
        publish_time: int = 0,
        producer_name: str = "",
        sequence_id: int = -1,
    ) -> asyncio.Future[Position]:
        """Queue an entry; the future resolves to its position once it is durable.

        Positions are assigned here, in call order, so entries of one producer keep their order.
        """
        # This is the hottest path of the broker: attributes are read once, tuples are built with
        # C constructors, and the roll-over check is inlined (see docs/performance.md).
        if self.state == "Closed":
            raise StorageClosedError(f"managed ledger {self.name} is closed")
        factory = self.factory
        if factory.pending_adds >= self._pending_adds_max:
            raise StorageBusyError(f"{factory.pending_adds} appends wait for a commit (managedLedgerMaxPendingAdds)")
        if "\0" in producer_name:
            raise ValueError("producer name contains NUL")
        self._roll_if_full()
        entry_id = self._next_entry_id
        self._next_entry_id = entry_id + 1
        self._assigned_size += len(data)
        ledger_id = self._current_ledger_id
        position = new_position((ledger_id, entry_id))
        record = (ledger_id, entry_id, data, sticky_key_hash, message_count, publish_time, producer_name, sequence_id)
        future: asyncio.Future[Position] = self._loop.create_future()
        self._pending.append((position, future, record, position, len(data)))
        factory.pending_adds += 1
        unsubmitted = self._unsubmitted
        unsubmitted.append(record)
        self._unsubmitted_size += len(data)
        if len(unsubmitted) == 1:
            # One hand-off to the commit thread per loop iteration, not per entry: a burst of appends
            # from one socket read crosses the thread boundary once.
            self._loop.call_soon(self._submit)
        return future

    def append_many(
        self,
        datas: Sequence[bytes],
        sticky_key_hashes: Sequence[int],
        message_counts: Sequence[int],
        publish_times: Sequence[int],
        producer_names: Sequence[str],
        sequence_ids: Sequence[int],
    ) -> asyncio.Future[BatchPositions]:
        """Queue a batch of entries given as parallel lists (entry i is `datas[i]`,
        `sticky_key_hashes[i]`, ...): the SENDs of one socket read. One future for the batch resolves
        to their positions, in order, once every entry of the batch is durable (`BatchPositions`:
        spans, not a Position per entry); if any part of the batch fails to commit, it fails
        (entries of the batch in another ledger may then be durable, as when single appends fail:
        the producer's retry may duplicate them).

        Positions are consecutive in call order, as for `append`; a batch that fills a ledger
        continues in the next one. The per-entry work is C loops only, so the event loop pays per
        batch, not per entry. Lists or tuples: a tuple becomes a column of the batch's run as it is
        (`tuple()` of a tuple is the tuple), a list is copied into one.
        """
        if self.state == "Closed":
            raise StorageClosedError(f"managed ledger {self.name} is closed")
        count = len(datas)
        if not (
            len(sticky_key_hashes)
            == len(message_counts)
            == len(publish_times)
            == len(producer_names)
            == len(sequence_ids)
            == count
        ):
            raise ValueError("append_many needs lists of the same length")
        future: asyncio.Future[BatchPositions] = self._loop.create_future()
        if not count:
            future.set_result(BatchPositions([]))
            return future
        factory = self.factory
        if factory.pending_adds + count > self._pending_adds_max:
            raise StorageBusyError(
                f"{factory.pending_adds} appends wait for a commit, {count} more would pass managedLedgerMaxPendingAdds"
            )
        # A batch has one producer's name in every slot (the same object: `count` compares by
        # identity first), so one name is checked instead of joining them all.
        first_name = producer_names[0]
        if "\0" in (first_name if producer_names.count(first_name) == count else "".join(producer_names)):
            raise ValueError("producer name contains NUL")
        batch_size = sum(map(len, datas))
        pending = self._pending
        unsubmitted = self._unsubmitted
        if not unsubmitted:
            self._loop.call_soon(self._submit)
        spans: list[tuple[int, int, int]] = []
        start = 0
        while start < count:
            self._roll_if_full()
            first = self._next_entry_id
            end = self._rollover.fitting_end(
                datas,
                start,
                batch_size if start == 0 else sum(map(len, datas[start:])),
                first,
                self._assigned_size,
            )
            ledger_id = self._current_ledger_id
            columns = (datas, sticky_key_hashes, message_counts, publish_times, producer_names, sequence_ids)
            if end - start == count:
                run = Run._make((ledger_id, first, *map(tuple, columns)))
            else:
                run = Run._make((ledger_id, first, *[tuple(column[start:end]) for column in columns]))
            size = batch_size if end - start == count else sum(map(len, datas[start:end]))
            spans.append((ledger_id, first, end - start))
            self._next_entry_id = first + end - start
            self._assigned_size += size
            unsubmitted.append(run)
            self._unsubmitted_runs += 1
            self._unsubmitted_size += size
            last = new_position((ledger_id, first + end - start - 1))
            pending.append((last, future, run, spans if end == count else None, size))
            start = end
        factory.pending_adds += count
        return future

    def _submit(self) -> None:
        pieces, runs_count, size = self._unsubmitted, self._unsubmitted_runs, self._unsubmitted_size
        self._unsubmitted, self._unsubmitted_runs, self._unsubmitted_size = [], 0, 0
        runs: list[Run]
        if runs_count == len(pieces):
            runs = cast(list[Run], pieces)
        elif runs_count == 0:
            runs = runs_of_records(pieces)
        else:
            runs = []
            records: list[Record] = []
            for piece in pieces:
                if isinstance(piece, Run):
                    if records:
                        runs.extend(runs_of_records(records))
                        records = []
                    runs.append(piece)
                else:
                    records.append(piece)
            if records:
                runs.extend(runs_of_records(records))
        entries = sum(len(run.datas) for run in runs)
        if runs:
            last = runs[-1]
            last_position = (last.ledger_id, last.first_entry_id + len(last.datas) - 1)
            self._submitted.append((last_position, entries, self._clock.monotonic()))
        self._engine.submit((self, runs, size, entries))

    def _roll_if_full(self) -> None:
        """The rollover check, before the next entry gets its position: two comparisons while the
        current ledger is below its limits (the append path is the broker's hottest), the policy's
        decision once one is reached."""
        rollover = self._rollover
        if (
            self._next_entry_id >= rollover.check_entries_at or self._assigned_size >= rollover.check_size_at
        ) and rollover.is_full(self._next_entry_id, self._assigned_size):
            self._create_ledger()

    def roll_if_too_old(self) -> None:
        """`managedLedgerMaxLedgerRolloverTimeMinutes`: checked by the factory's timer, as Pulsar does."""
        self._rollover.roll_if_too_old(self._next_entry_id)

    def _create_ledger(self) -> None:
        ledger_id = self.factory.allocate_ledger_id()
        now_ms = self._clock.time_ms()
        previous = self._current
        if previous is not None and previous.entries == 0 and not self._has_pending(previous.ledger_id):
            self._forget_ledger(previous.ledger_id)
        info = LedgerInfo(ledger_id, 0, 0, now_ms)
        self._ledgers[ledger_id] = info
        self._ledger_ids.append(ledger_id)
        self._current = info
        self._current_ledger_id = ledger_id
        self._rollover.started()
        self._next_entry_id = 0
        self._assigned_size = 0
        self.last_ledger_created_timestamp_ms = now_ms
        if previous is not None:
            self.factory.schedule_trim(self)

    def _has_pending(self, ledger_id: int) -> bool:
        return any(item[0][0] == ledger_id for item in self._pending)

    def _pending_after(self, ledger_id: int, entry_id: int) -> bool:
        """An append to `ledger_id` beyond `entry_id` is not durable yet (pending is in position order)."""
        for item in self._pending:
            last = item[0]
            if last[0] > ledger_id:
                return False
            if last[0] == ledger_id and last[1] > entry_id:
                return True
        return False

    def _on_durable(self, ledger_id: int, last_entry_id: int) -> None:
        pending = self._pending
        cache = self._cache
        info = self._ledgers.get(ledger_id)
        last = (ledger_id, last_entry_id)
        done = 0
        size = 0
        last_position = None
        singles: list[Record] = []
        runs: list[Run] = []
        run_sizes: list[int] = []
        while pending and pending[0][0] <= last:
            last_position, future, payload, result, payload_size = pending.popleft()
            if isinstance(payload, Run):
                if singles:
                    for run in runs_of_records(singles):
                        cache.put(run)
                    singles = []
                done += len(payload.datas)
                runs.append(payload)
                run_sizes.append(payload_size)
                if result is not None and not future.done():
                    future.set_result(BatchPositions(result))
            else:
                if runs:
                    _cache_joined(cache, runs, run_sizes)
                    runs, run_sizes = [], []
                done += 1
                singles.append(payload)
                if not future.done():
                    future.set_result(result)
            size += payload_size
        if runs:
            _cache_joined(cache, runs, run_sizes)
        if singles:
            for run in runs_of_records(singles):
                cache.put(run)
        if last_position is not None:
            self.last_confirmed_entry = last_position
        submitted = self._submitted
        if submitted and submitted[0][0] <= last:
            now = self._clock.monotonic()
            record = self.write_latency.record
            while submitted and submitted[0][0] <= last:
                _last, entries, submitted_at = submitted.popleft()
                record((now - submitted_at) * 1000, entries)
        if info is not None:
            info.entries += done
            info.size += size
        self.entries_added_counter += done
        self.factory.pending_adds -= done
        if info is not None:
            info.timestamp_ms = self._clock.time_ms()
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    def _on_failed(self, ledger_id: int, error: StorageError) -> None:
        kept: deque[PendingAppend] = deque()
        failed = 0
        for item in self._pending:
            if item[0][0] == ledger_id:
                payload = item[2]
                failed += len(payload.datas) if type(payload) is Run else 1
                future = item[1]
                if not future.done():
                    future.set_exception(error)
            else:
                kept.append(item)
        self._pending = kept
        self._submitted = deque(item for item in self._submitted if item[0][0] != ledger_id)
        self.factory.pending_adds -= failed
        if self._current is not None and self._current.ledger_id == ledger_id:
            # Fenced: the next append opens a new ledger, so entry ids never skip the failed ones.
            self._create_ledger()
        info = self._ledgers.get(ledger_id)
        if info is not None and info.entries == 0 and info is not self._current:
            self._forget_ledger(ledger_id)

    async def wait_for_new_entries(self, after: tuple[int, int]) -> None:
        """Return once the last confirmed entry is beyond `after` (a tailing read waits here)."""
        while self.last_confirmed_entry <= after:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(waiter)
            await waiter

    # ------------------------------------------------------------------ position arithmetic

    @property
    def pending_add_entries_count(self) -> int:
        return sum(len(item[2].datas) if type(item[2]) is Run else 1 for item in self._pending)

    @property
    def waiting_cursors_count(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def ledgers(self) -> list[LedgerInfo]:
        return [self._ledgers[ledger_id] for ledger_id in self._ledger_ids]

    @property
    def current_ledger(self) -> LedgerInfo:
        assert self._current is not None
        return self._current

    def first_position(self) -> Position:
        """The first entry still stored, or where the next one will go."""
        return self.next_valid_position(Position(self._ledger_ids[0], -1))

    def next_valid_position(self, position: tuple[int, int]) -> Position:
        """The entry after `position`, skipping deleted and empty ledgers; past the end, where the
        next append will land."""
        ledger_id, entry_id = position
        info = self._ledgers.get(ledger_id)
        if info is not None and entry_id + 1 < info.entries:
            return Position(ledger_id, entry_id + 1)
        if info is not None and ledger_id != self._current_ledger_id and self._pending_after(ledger_id, entry_id):
            # A ledger rolled over while its last entries are still in the commit: `entries` counts
            # the durable ones only, and the entries after them come before the next ledger's.
            return Position(ledger_id, entry_id + 1)
        ledgers = self._ledgers
        ids = self._ledger_ids
        for index in range(bisect_right(ids, ledger_id), len(ids)):
            if ledgers[ids[index]].entries:
                return Position(ids[index], 0)
        current = self.current_ledger
        if current.ledger_id > ledger_id or (current.ledger_id == ledger_id and current.entries > entry_id):
            return Position(current.ledger_id, current.entries)
        return Position(ledger_id, entry_id + 1)

    def previous_position(self, position: tuple[int, int]) -> Position:
        """The entry before `position`, or `(first ledger, -1)` before the first."""
        ledger_id, entry_id = position
        if entry_id > 0 and ledger_id in self._ledgers:
            return Position(ledger_id, min(entry_id, self._ledgers[ledger_id].entries) - 1)
        ids = self._ledger_ids
        for index in range(bisect_left(ids, ledger_id) - 1, -1, -1):
            info = self._ledgers[ids[index]]
            if info.entries:
                return Position(info.ledger_id, info.entries - 1)
        return Position(ids[0] if ids else ledger_id, -1)

    def count_entries(self, lower: tuple[int, int], upper: tuple[int, int]) -> int:
        """Number of stored entries in the open-closed range `(lower, upper]`."""
        if upper <= lower:
            return 0
        lower_ledger, lower_entry = lower
        upper_ledger, upper_entry = upper
        ledgers = self._ledgers
        if lower_ledger == upper_ledger:
            info = ledgers.get(lower_ledger)
            if info is None:
                return 0
            return max(0, min(upper_entry, info.entries - 1) - max(lower_entry, -1))
        ids = self._ledger_ids
        total = 0
        for index in range(bisect_left(ids, lower_ledger), bisect_right(ids, upper_ledger)):
            info = ledgers[ids[index]]
            first = lower_entry + 1 if info.ledger_id == lower_ledger else 0
            last = min(upper_entry, info.entries - 1) if info.ledger_id == upper_ledger else info.entries - 1
            if last >= first:
                total += last - first + 1
        return total

    @property
    def number_of_entries(self) -> int:
        return sum(info.entries for info in self._ledgers.values())

    @property
    def total_size(self) -> int:
        return sum(info.size for info in self._ledgers.values())

    # ------------------------------------------------------------------ reads

    async def read_entries(self, start: tuple[int, int], count: int) -> list[Entry]:
        """Up to `count` durable entries from `start` (inclusive), across ledgers."""
        count = min(count, READ_ENTRIES_MAX)
        spans = self._spans(Position(*start), count)
        result: list[Entry] = []
        for ledger_id, first, last in spans:
            cached = self._cache.get_run(ledger_id, first, last)
            result.extend(cached)
            if len(cached) < last - first + 1:
                runs, entries = await self._engine.read_entries(ledger_id, first + len(cached), last)
                for run in runs:
                    self._cache.put(run, from_disk=True)
                result.extend(entries)
        return result

    def _spans(self, start: Position, count: int) -> list[tuple[int, int, int]]:
        spans = []
        lac = self.last_confirmed_entry
        position = start if start[1] >= 0 else self.next_valid_position(start)
        if position[0] not in self._ledgers or position[1] >= self._ledgers[position[0]].entries:
            position = self.next_valid_position(self.previous_position(position))
        while count > 0 and position <= lac:
            info = self._ledgers.get(position[0])
            if info is None or position[1] >= info.entries:
                position = self.next_valid_position(position)
                continue
            last = min(info.entries - 1, position[1] + count - 1)
            spans.append((position[0], position[1], last))
            count -= last - position[1] + 1
            position = self.next_valid_position(Position(position[0], last))
        return spans

    async def read_positions(self, positions: list[tuple[int, int]]) -> list[Entry]:
        """The entries at the given positions (replays), in the order given; missing ones are skipped."""
        found: dict[tuple[int, int], Entry] = {}
        missing: list[tuple[int, int]] = []
        # Replays are mostly runs of consecutive entries: one cache lookup per run.
        wanted = sorted(positions)
        count = len(wanted)
        index = 0
        while index < count:
            ledger_id, first = wanted[index]
            end = index
            while end + 1 < count and wanted[end + 1][0] == ledger_id and wanted[end + 1][1] == wanted[end][1] + 1:
                end += 1
            cached = self._cache.get_run(ledger_id, first, wanted[end][1])
            for entry in cached:
                found[entry.position] = entry
            info = self._ledgers.get(ledger_id)
            if info is not None:
                missing += [p for p in wanted[index + len(cached) : end + 1] if 0 <= p[1] < info.entries]
            index = end + 1
        index = 0
        while index < len(missing):
            # One read per run of nearby positions in a ledger, bounded like any read.
            ledger_id, first = missing[index]
            end = index
            while (
                end + 1 < len(missing)
                and missing[end + 1][0] == ledger_id
                and missing[end + 1][1] - first < READ_ENTRIES_MAX
            ):
                end += 1
            last = missing[end][1]
            runs, entries = await self._engine.read_entries(ledger_id, first, last)
            for run in runs:
                self._cache.put(run, from_disk=True)
            wanted_here = set(missing[index : end + 1])
            for entry in entries:
                if entry.position in wanted_here:
                    found[entry.position] = entry
            index = end + 1
        return [found[p] for p in positions if p in found]

    async def find_first_published_at_or_after(self, publish_time_ms: int) -> Position:
        """The first entry whose publish time is at or after `publish_time_ms`; past the end if none."""
        for info in self.ledgers:
            if not info.entries:
                continue
            entry_id = await self._engine.first_published_at_or_after(info.ledger_id, publish_time_ms)
            if entry_id is not None:
                return Position(info.ledger_id, entry_id)
        return self.next_valid_position(self.last_confirmed_entry)

    # ------------------------------------------------------------------ cursors

    async def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """A durable cursor; created at the last confirmed entry ("latest") or before the first
        ("earliest") and persisted before it is returned."""
        cursor = self.cursors.get(name)
        if cursor is not None:
            return cursor
        if initial_position == "latest":
            mark_delete = self.last_confirmed_entry
        elif initial_position == "earliest":
            mark_delete = self.previous_position(self.first_position())
        else:
            raise ValueError(f"initial position must be 'latest' or 'earliest', not {initial_position!r}")
        cursor = ManagedCursor(self, name, True, mark_delete)
        self.cursors[name] = cursor
        await cursor.flush()
        return cursor

    def new_non_durable_cursor(self, start: tuple[int, int] = LATEST, name: str | None = None) -> ManagedCursor:
        """A Reader's cursor starting at `start` (EARLIEST/LATEST sentinels allowed); never persisted."""
        if start == LATEST:
            mark_delete = self.last_confirmed_entry
        elif start == EARLIEST:
            mark_delete = self.previous_position(self.first_position())
        else:
            mark_delete = self.previous_position(start)
        name = name or f"reader-{os.urandom(5).hex()}"
        cursor = ManagedCursor(self, name, False, mark_delete)
        self.cursors[name] = cursor
        return cursor

    async def delete_cursor(self, name: str) -> None:
        cursor = self.cursors.pop(name, None)
        if cursor is None:
            return
        cursor.closed = True
        if cursor.durable:
            self.factory.check_open()
            await self._engine.delete_cursor(self.topic_id, name)
        self.factory.schedule_trim(self)

    def persist_cursor(self, cursor: ManagedCursor, record: CursorRecord) -> asyncio.Future[None]:
        self.factory.check_open()
        future = self._engine.upsert_cursor(
            self.topic_id,
            record.name,
            record.mark_delete_position,
            record.individually_deleted,
            record.batch_deleted,
            record.properties,
        )
        result: asyncio.Future[None] = self._loop.create_future()

        def done(finished: asyncio.Future[Any]) -> None:
            error = finished.exception()
            if self.cursors.get(cursor.name) is cursor:
                cursor._persisted(record, error)
            if error is None:
                result.set_result(None)
            else:
                result.set_exception(error)

        future.add_done_callback(done)
        return result

    def cursor_moved(self, cursor: ManagedCursor) -> None:
        """A mark-delete position moved; ledgers in front of every durable cursor may go."""
        if cursor.durable and len(self._ledger_ids) > 1 and cursor.mark_delete_position[0] > self._ledger_ids[0]:
            self.factory.schedule_trim(self)

    def _restore_cursors(self, records: list[tuple[Any, ...]]) -> None:
        """Cursors as `_load_topic` read them (acknowledged ranges already decoded)."""
        for name, md_ledger, md_entry, ranges, batch, properties in records:
            batch_deleted = {
                Position(ledger_id, entry_id): (size, mask) for ledger_id, entry_id, size, mask in json.loads(batch)
            }
            cursor = ManagedCursor(
                self,
                name,
                True,
                Position(md_ledger, md_entry),
                ranges,
                batch_deleted,
                json.loads(properties),
            )
            self.cursors[name] = cursor

    # ------------------------------------------------------------------ retention

    def set_retention(self, retention: tuple[int, int] | None) -> None:
        """Retention of consumed ledgers as (minutes, megabytes), -1 meaning unlimited; None for the
        broker's defaults. A shorter retention takes effect at once."""
        self.retention = retention
        self.factory.schedule_trim(self)

    def trim(self) -> list[asyncio.Future[None]]:
        """Delete closed ledgers every durable cursor has passed, as far as retention allows
        (`ledger_policy.ledgers_to_trim`); returns the deletions' futures, resolved once durable."""
        config = self.config
        retention = self.retention or (config.defaultRetentionTimeInMinutes, config.defaultRetentionSizeInMB)
        if retention[0] < 0 and retention[1] < 0:
            return []
        durable = [c.mark_delete_position for c in self.cursors.values() if c.durable]
        slowest = min(durable) if durable else self.last_confirmed_entry
        current = self._current_ledger_id
        trimmed = ledgers_to_trim(
            [(info.ledger_id, info.entries, info.size, info.timestamp_ms) for info in self.ledgers],
            lambda ledger_id: ledger_id != current and not self._has_pending(ledger_id),
            slowest,
            retention,
            self._clock.time_ms(),
        )
        return [self._delete_ledger(self._ledgers[ledger_id]) for ledger_id in trimmed]

    def _delete_ledger(self, info: LedgerInfo) -> asyncio.Future[None]:
        self._forget_ledger(info.ledger_id)
        self._cache.invalidate_ledger(info.ledger_id, info.entries)
        self.factory.check_open()
        return self._engine.delete_ledger(self.topic_id, info.ledger_id, info.entries)

    def _forget_ledger(self, ledger_id: int) -> None:
        del self._ledgers[ledger_id]
        self._ledger_ids.remove(ledger_id)

    def check_invariants(self) -> None:
        assert self._ledger_ids == sorted(self._ledger_ids), "ledger ids out of order"
        assert set(self._ledger_ids) == set(self._ledgers)
        assert self._current is not None and self._ledger_ids[-1] == self._current.ledger_id
        for cursor in self.cursors.values():
            cursor.check_invariants()


class ManagedLedgerFactory:
    """The storage of one data directory: engine, cache, metadata, and a managed ledger per topic."""

    def __init__(
        self, data_dir: str, config: StorageConfig, engine: SqliteEngine | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.engine = engine or SqliteEngine(data_dir, config.journalSyncData, config.journalMaxGroupWaitMSec)
        self.cache = EntryCache(config.managedLedgerCacheSizeMB * MB)
        self.loop: asyncio.AbstractEventLoop = asyncio.get_running_loop()
        self.clock: Clock = clock or LoopClock(self.loop)
        self.ledgers: dict[str, ManagedLedger] = {}
        self.pending_adds = 0
        self._topic_ids: dict[str, int] = {}
        self._next_ledger_id = 1
        self._opening: dict[str, asyncio.Future[ManagedLedger]] = {}
        self._trim_scheduled: set[ManagedLedger] = set()
        self._trim_writes: set[asyncio.Future[None]] = set()
        self._background: asyncio.Task[None] | None = None
        self._closed = False
        self.metadata: MetadataStore

    @classmethod
    async def open(
        cls,
        data_dir: str,
        config: StorageConfig | None = None,
        engine: SqliteEngine | None = None,
        clock: Clock | None = None,
    ) -> ManagedLedgerFactory:
        """`engine` replaces the threaded SQLite engine (the shell simulator commits on its event loop);
        `clock` the event loop's clock and the wall clock (`LoopClock`) that rollovers, retention,
        ledger timestamps and the periodic cursor flush read."""
        factory = cls(data_dir, config or StorageConfig(), engine, clock)
        await asyncio.to_thread(factory._open_blocking)
        factory.engine.start(factory.loop, factory._on_commit, factory.clock.time_ms)
        await factory.metadata.ensure_defaults(factory.config.clusterName)
        factory._background = factory.loop.create_task(factory._run_background())
        return factory

    def _open_blocking(self) -> None:
        engine = self.engine
        engine.open()
        try:
            self._topic_ids, ledger_id_max, metadata_rows = engine.load_catalog()
            self._next_ledger_id = ledger_id_max + 1
            self.metadata = MetadataStore(self, metadata_rows)
        except BaseException:
            engine.close()
            raise

    def allocate_ledger_id(self) -> int:
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    async def open_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger of a topic, created on first use; its cursors are loaded with it."""
        self.check_open()
        ledger = self.ledgers.get(name)
        if ledger is not None:
            return ledger
        opening = self._opening.get(name)
        if opening is not None:
            return await asyncio.shield(opening)
        future: asyncio.Future[ManagedLedger] = self.loop.create_future()
        self._opening[name] = future
        try:
            ledger = await self._load_ledger(name)
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved here; waiters get it through shield
            raise
        finally:
            del self._opening[name]
        self.ledgers[name] = ledger
        future.set_result(ledger)
        return ledger

    async def _load_ledger(self, name: str) -> ManagedLedger:
        topic_id = self._topic_ids.get(name)
        if topic_id is None:
            self.check_open()
            topic_id = await self.engine.insert_topic(name)
            self._topic_ids[name] = topic_id
            ledgers: list[LedgerInfo] = []
            cursors: list[tuple[Any, ...]] = []
            trimmed = 0
        else:
            rows, cursors, trimmed = await self.engine.load_topic(topic_id, decode_ranges)
            ledgers = [LedgerInfo(*row) for row in rows]
        ledger = ManagedLedger(self, name, topic_id, ledgers, trimmed)
        ledger._restore_cursors(cursors)
        self.schedule_trim(ledger)
        return ledger

    def topics(self) -> list[str]:
        return sorted(self._topic_ids)

    async def delete_ledger(self, name: str) -> None:
        """Delete a topic's entries, ledgers and cursors."""
        ledger = await self.open_ledger(name)
        if ledger._pending:
            await asyncio.gather(*{item[1] for item in ledger._pending}, return_exceptions=True)
        ledger.state = "Closed"
        del self.ledgers[name]
        topic_id = self._topic_ids.pop(name)
        for info in ledger.ledgers:
            self.cache.invalidate_ledger(info.ledger_id, info.entries)
        self.check_open()
        await self.engine.delete_topic(topic_id)

    def _on_commit(self, report: CommitReport) -> None:
        for owner, ledger_id, last_entry_id in report.appended:
            owner._on_durable(ledger_id, last_entry_id)
        for owner, ledger_id, error in report.failed:
            owner._on_failed(ledger_id, error)
        for op in report.ops:
            if op.future.done():
                continue
            if report.error is None:
                op.future.set_result(op.result)
            else:
                op.future.set_exception(report.error)

    def schedule_trim(self, ledger: ManagedLedger) -> None:
        if not self._trim_scheduled:
            self.loop.call_soon(self._trim_now)
        self._trim_scheduled.add(ledger)

    def _trim_now(self) -> None:
        scheduled, self._trim_scheduled = self._trim_scheduled, set()
        for ledger in scheduled:
            if ledger.state != "Closed" and not self._closed:
                for write in ledger.trim():
                    self._trim_writes.add(write)
                    write.add_done_callback(self._trim_writes.discard)

    async def trims_settled(self) -> None:
        """Return once the trims scheduled so far ran and the ledger deletions they queued are durable
        (a trim runs on the loop iteration after what scheduled it: an ack, a rollover, a timer)."""
        while self._trim_scheduled or self._trim_writes:
            if self._trim_writes:
                await asyncio.wait(set(self._trim_writes))
            else:
                await asyncio.sleep(0)

    async def flush_cursors(self) -> None:
        """Persist every dirty durable cursor; returns when they are durable."""
        futures = [
            cursor.flush()
            for ledger in self.ledgers.values()
            for cursor in ledger.cursors.values()
            if cursor.durable and cursor.dirty
        ]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def _run_background(self) -> None:
        config = self.config
        flush_every = config.managedLedgerCursorPositionFlushSeconds or config.retentionCheckIntervalInSeconds
        interval = min(flush_every, config.retentionCheckIntervalInSeconds)
        clock = self.clock
        last_retention_check = clock.monotonic()
        while True:
            await clock.sleep(interval)
            await self.flush_cursors()
            for ledger in self.ledgers.values():
                ledger.roll_if_too_old()
            if clock.monotonic() - last_retention_check >= config.retentionCheckIntervalInSeconds:
                last_retention_check = clock.monotonic()
                for ledger in self.ledgers.values():
                    self.schedule_trim(ledger)

    def check_open(self) -> None:
        """Raise StorageClosedError once the factory is closed: every write checks before it queues."""
        if self._closed:
            raise StorageClosedError(f"{self.engine.data_dir}: storage is closed")

    async def close(self) -> None:
        """Staged: finish pending appends, persist dirty cursors, drain the commit thread, checkpoint."""
        if self._closed:
            return
        if self._background is not None:
            self._background.cancel()
            try:
                await self._background
            except asyncio.CancelledError:
                pass
        pending = list({item[1] for ledger in self.ledgers.values() for item in ledger._pending})
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.flush_cursors()
        self._closed = True
        for ledger in self.ledgers.values():
            ledger.state = "Closed"
        await asyncio.to_thread(self.engine.close)
