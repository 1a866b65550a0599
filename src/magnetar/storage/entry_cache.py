"""The entry cache: recently appended and recently read entries, shared by all topics.

Owns: a byte budget (`managedLedgerCacheSizeMB`) and the entries inside it. Must not touch: the
engine or the files; it is only ever used on the event loop thread.

Entries are held as runs, not one by one: a `Run` is consecutive entries of one ledger as columns
(an `append_many` batch, the single appends of one commit, or a segment read from disk), and
becomes `Entry` objects only when read, in C loops. Two reasons, both measured. Per-entry objects
cost the event loop at least one allocation and one deallocation per entry on the way in and out.
And Python's cyclic garbage collector tracks an `Entry` and its `Position` (tuple subclasses) for
as long as they live: a cache of 200 000 of them made every full collection walk 400 000 objects,
which appends and reads trigger every few tens of thousands of entries. A run is a handful of
objects for hundreds of entries. Runs never overlap: a run read from disk replaces the cached runs
it overlaps (their bytes are the same).

Eviction is by age of insertion, not by last use: a tailing consumer reads what was just appended
and a catching-up consumer reads forward once, so the oldest insertion is the least likely to be read
again. Pulsar evicts the same way (by time and by entries behind the slowest reader).
"""

from __future__ import annotations

from bisect import bisect_right, insort

from magnetar.storage.sqlite_engine import ENTRY_KEY_SHIFT, Entry, Run, entries_of_run, gc_paused

__all__ = ["EntryCache", "ENTRY_OVERHEAD_BYTES"]

# What an entry costs beyond its payload: its slots in the run's columns, its small ints, and the
# Entry and Position a read makes of it while the reader holds them.
ENTRY_OVERHEAD_BYTES = 200


class EntryCache:
    """Invariants: `size_bytes` is the sum of `cost(run)` over the runs held and stays at or below
    `capacity_bytes` after every public call; the runs of a ledger do not overlap, and
    `_starts[ledger]` lists their first entry ids in order."""

    __slots__ = ("capacity_bytes", "size_bytes", "_runs", "_starts", "hits", "misses", "evictions")

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.size_bytes = 0
        # key (ledger_id << 32 | first entry id) -> (run, cost); insertion order is eviction order
        self._runs: dict[int, tuple[Run, int]] = {}
        self._starts: dict[int, list[int]] = {}
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def put(self, run: Run, payload_bytes: int = -1) -> None:
        """Cache a run (`payload_bytes`: the sum of its data lengths, if the caller knows it)."""
        count = len(run.datas)
        if not count:
            return
        if payload_bytes < 0:
            payload_bytes = sum(map(len, run.datas))
        cost = payload_bytes + ENTRY_OVERHEAD_BYTES * count
        if cost > self.capacity_bytes:
            return
        ledger_id, first = run.ledger_id, run.first_entry_id
        starts = self._starts.get(ledger_id)
        if starts is None:
            starts = self._starts[ledger_id] = []
        elif starts[-1] >= first or self._run_end(ledger_id, starts[-1]) >= first:
            self._remove_overlapping(ledger_id, starts, first, first + count - 1)
        insort(starts, first)
        self._runs[ledger_id << ENTRY_KEY_SHIFT | first] = (run, cost)
        self.size_bytes += cost
        if self.size_bytes > self.capacity_bytes:
            self._evict()

    def _run_end(self, ledger_id: int, first: int) -> int:
        return first + len(self._runs[ledger_id << ENTRY_KEY_SHIFT | first][0].datas) - 1

    def _remove_overlapping(self, ledger_id: int, starts: list[int], first: int, last: int) -> None:
        index = max(bisect_right(starts, first) - 1, 0)
        while index < len(starts) and starts[index] <= last:
            start = starts[index]
            if self._run_end(ledger_id, start) < first:
                index += 1
                continue
            _, cost = self._runs.pop(ledger_id << ENTRY_KEY_SHIFT | start)
            self.size_bytes -= cost
            del starts[index]

    def get(self, position: tuple[int, int]) -> Entry | None:
        entries = self._take(position[0], position[1], position[1])
        if entries:
            self.hits += 1
            return entries[0]
        self.misses += 1
        return None

    def get_run(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """The cached prefix of entries `first..last` of a ledger, stopping at the first one missing."""
        entries = self._take(ledger_id, first, last)
        self.hits += len(entries)
        if len(entries) < last - first + 1:
            self.misses += 1
        return entries

    def _take(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        starts = self._starts.get(ledger_id)
        if not starts:
            return []
        index = bisect_right(starts, first) - 1
        result: list[Entry] = []
        with gc_paused():
            while 0 <= index < len(starts) and first <= last:
                start = starts[index]
                run = self._runs[ledger_id << ENTRY_KEY_SHIFT | start][0]
                end = start + len(run.datas) - 1
                if not start <= first <= end:
                    break
                result.extend(entries_of_run(run, first - start, min(last, end) - start + 1))
                first = end + 1
                index += 1
        return result

    def invalidate_ledger(self, ledger_id: int, entries: int) -> None:
        """Forget every entry of a ledger (it was deleted)."""
        for start in self._starts.pop(ledger_id, ()):
            _, cost = self._runs.pop(ledger_id << ENTRY_KEY_SHIFT | start)
            self.size_bytes -= cost

    def _evict(self) -> None:
        # Evict the oldest runs down to 90% so that a full cache does not evict on every put. One
        # pass of one iterator: `next(iter(dict))` per victim would rescan the emptied front slots.
        excess = self.size_bytes - self.capacity_bytes * 9 // 10
        victims = []
        for key, (_, cost) in self._runs.items():
            if excess <= 0:
                break
            victims.append(key)
            excess -= cost
        for key in victims:
            run, cost = self._runs.pop(key)
            starts = self._starts[run.ledger_id]
            del starts[bisect_right(starts, run.first_entry_id) - 1]
            if not starts:
                del self._starts[run.ledger_id]
            self.size_bytes -= cost
            self.evictions += len(run.datas)

    def __len__(self) -> int:
        return sum(len(run.datas) for run, _ in self._runs.values())

    def check_invariants(self) -> None:
        assert self.size_bytes == sum(cost for _, cost in self._runs.values())
        assert self.size_bytes <= self.capacity_bytes
        for run, cost in self._runs.values():
            assert cost == sum(map(len, run.datas)) + ENTRY_OVERHEAD_BYTES * len(run.datas)
        for ledger_id, starts in self._starts.items():
            assert starts == sorted(starts) and starts
            for start, following in zip(starts, starts[1:]):
                assert self._run_end(ledger_id, start) < following, f"runs overlap in ledger {ledger_id}"
        assert sum(map(len, self._starts.values())) == len(self._runs)
