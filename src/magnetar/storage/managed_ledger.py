"""Managed ledgers: one append-only log of entries per topic, split into ledgers.

Owns: the write path (appending one entry, or a batch as parallel lists; positions given in call
order, completion only once durable, the rollover of the current ledger), the cursors of the topic
and its retention. Position arithmetic across ledgers is the `LedgerIndex`'s (`ledger_index`), reads
are the `EntryReader`'s (`entry_reader`, the entry cache in front of the engine); `ManagedLedger` is
the one face of all three that the broker sees. When a ledger rolls over and which ledgers retention
deletes is `ledger_policy`'s; time comes from the factory's `Clock` (`factory`); every statement is
the engine's (named operations: `delete_ledger`, `upsert_cursor`, ...). Everything here runs on the
event loop thread; blocking work goes to the engine's threads. Must not touch: consumers, dispatch or
the wire; SQL.

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
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import accumulate, chain, repeat
from typing import TYPE_CHECKING, Any, cast, overload

from magnetar.positions import EARLIEST, LATEST, Position
from magnetar.storage.cursor import CursorRecord, ManagedCursor
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.entry_reader import EntryReader
from magnetar.storage.errors import StorageBusyError, StorageClosedError, StorageError
from magnetar.storage.ledger_index import LedgerIndex, LedgerInfo
from magnetar.storage.ledger_policy import RolloverPolicy, ledgers_to_trim
from magnetar.storage.sqlite_engine import Entry, Run, new_position, runs_of_records
from magnetar.storage.write_latency import LatencyBuckets

if TYPE_CHECKING:
    from magnetar.storage.access import LedgerStorage

__all__ = ["BatchPositions", "ManagedLedger"]

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
    the commit thread once per loop iteration (`_submit`); `on_durable` / `on_failed` complete them
    from the commit reports, in position order. Retention picks ledgers with
    `ledger_policy.ledgers_to_trim`; the engine's named writes delete them and persist cursors.

    Invariants: ledger ids are in increasing order and the last is the current ledger; `_pending` is
    in position order; an append's future resolves only once the commit holding it is durable;
    `last_confirmed_entry` is the last durable entry.
    """

    def __init__(
        self,
        factory: LedgerStorage,
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
        self._index = LedgerIndex(ledgers, self._pending_after)
        self._reader = EntryReader(self._index, factory.cache, factory.engine)
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
            self.last_confirmed_entry = Position(self._index.first_id, -1)

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
        # C constructors, and the roll-over check is inlined (see docs/performance-history.md, Storage).
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
        ledger_id = self.factory.allocate_ledger_id(self.topic_id)
        now_ms = self._clock.time_ms()
        previous = self._current
        if previous is not None and previous.entries == 0 and not self._has_pending(previous.ledger_id):
            self._index.forget(previous.ledger_id)
        info = LedgerInfo(ledger_id, 0, 0, now_ms)
        self._index.add(info)
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

    def on_durable(self, ledger_id: int, last_entry_id: int) -> None:  # noqa: C901 - every commit's appends complete here: left whole until a split is measured
        pending = self._pending
        cache = self._cache
        info = self._index.get(ledger_id)
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

    def on_failed(self, ledger_id: int, error: StorageError) -> None:
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
        info = self._index.get(ledger_id)
        if info is not None and info.entries == 0 and info is not self._current:
            self._index.forget(ledger_id)

    async def wait_for_new_entries(self, after: tuple[int, int]) -> None:
        """Return once the last confirmed entry is beyond `after` (a tailing read waits here)."""
        while self.last_confirmed_entry <= after:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._waiters.append(waiter)
            await waiter

    def pending_appends(self) -> set[asyncio.Future[Any]]:
        """The futures of the appends not durable yet (one per `append`, one per `append_many`)."""
        return {item[1] for item in self._pending}

    # ------------------------------------------------------------------ figures and positions (`LedgerIndex`)

    @property
    def pending_add_entries_count(self) -> int:
        return sum(len(item[2].datas) if type(item[2]) is Run else 1 for item in self._pending)

    @property
    def waiting_cursors_count(self) -> int:
        return sum(1 for waiter in self._waiters if not waiter.done())

    @property
    def ledgers(self) -> list[LedgerInfo]:
        return self._index.infos

    @property
    def current_ledger(self) -> LedgerInfo:
        assert self._current is not None
        return self._current

    def first_position(self) -> Position:
        """The first entry still stored, or where the next one will go."""
        return self._index.first_position()

    def next_valid_position(self, position: tuple[int, int]) -> Position:
        """The entry after `position`, skipping deleted and empty ledgers; past the end, where the
        next append will land."""
        return self._index.next_valid_position(position)

    def previous_position(self, position: tuple[int, int]) -> Position:
        """The entry before `position`, or `(first ledger, -1)` before the first."""
        return self._index.previous_position(position)

    def count_entries(self, lower: tuple[int, int], upper: tuple[int, int]) -> int:
        """Number of stored entries in the open-closed range `(lower, upper]`."""
        return self._index.count_entries(lower, upper)

    @property
    def number_of_entries(self) -> int:
        return self._index.number_of_entries

    @property
    def total_size(self) -> int:
        return self._index.total_size

    # ------------------------------------------------------------------ reads (`EntryReader`)

    async def read_entries(self, start: tuple[int, int], count: int, max_bytes: int | None = None) -> list[Entry]:
        """Up to `count` durable entries from `start` (inclusive), across ledgers, and with `max_bytes` no
        more than the first ones whose data reaches it (EntryReader.read_entries)."""
        return await self._reader.read_entries(start, count, self.last_confirmed_entry, max_bytes)

    async def read_positions(self, positions: list[tuple[int, int]]) -> list[Entry]:
        """The entries at the given positions (replays), in the order given; missing ones are skipped."""
        return await self._reader.read_positions(positions)

    async def find_first_published_at_or_after(self, publish_time_ms: int) -> Position:
        """The first entry whose publish time is at or after `publish_time_ms`; past the end if none."""
        return await self._reader.find_first_published_at_or_after(publish_time_ms, self.last_confirmed_entry)

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
        index = self._index
        if cursor.durable and len(index) > 1 and cursor.mark_delete_position[0] > index.first_id:
            self.factory.schedule_trim(self)

    def restore_cursors(self, records: list[tuple[Any, ...]]) -> None:
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
        return [self._delete_ledger(self._index[ledger_id]) for ledger_id in trimmed]

    def _delete_ledger(self, info: LedgerInfo) -> asyncio.Future[None]:
        self._index.forget(info.ledger_id)
        self._cache.invalidate_ledger(info.ledger_id, info.entries)
        self.factory.check_open()
        return self._engine.delete_ledger(self.topic_id, info.ledger_id, info.entries)

    def check_invariants(self) -> None:
        self._index.check_invariants()
        assert self._current is not None and self._index.infos[-1] is self._current
        for cursor in self.cursors.values():
            cursor.check_invariants()
