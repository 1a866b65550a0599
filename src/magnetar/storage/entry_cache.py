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

Entries read from disk are held apart from appended ones and may fill at most a quarter of the
budget (COLD_SHARE): a reader that scans a backlog larger than the cache would otherwise evict the
whole cache ahead of itself, the tail that tailing consumers and the next scan are about to read
included, and find nothing cached at all. Several readers scanning the same backlog together still
share their reads through that quarter (the readers of one topic's key hash ranges do), and a
rescan finds the appended tail in place. An append evicts entries read from disk first.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from itertools import pairwise

from magnetar.storage.sqlite_engine import (
    ENTRY_KEY_SHIFT,
    Entry,
    Run,
    entries_of_run,
    gc_paused,
    new_entry,
    new_position,
)

__all__ = ["EntryCache", "ENTRY_OVERHEAD_BYTES", "COLD_SHARE"]

# What an entry costs beyond its payload: its slots in the run's columns, its small ints, and the
# Entry and Position a read makes of it while the reader holds them.
ENTRY_OVERHEAD_BYTES = 200
# The share of the budget that entries read from disk may hold.
COLD_SHARE = 0.25


class EntryCache:
    """Invariants: `size_bytes` is the sum of `cost(run)` over the runs held and stays at or below
    `capacity_bytes` after every public call, `cold_bytes` that of the runs read from disk, at or
    below `cold_capacity_bytes`; the runs of a ledger do not overlap, and `_starts[ledger]` lists
    their first entry ids in order."""

    __slots__ = (
        "capacity_bytes",
        "cold_capacity_bytes",
        "size_bytes",
        "cold_bytes",
        "_runs",
        "_cold",
        "_starts",
        "hits",
        "misses",
        "evictions",
    )

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.cold_capacity_bytes = int(capacity_bytes * COLD_SHARE)
        self.size_bytes = 0
        self.cold_bytes = 0
        # key (ledger_id << 32 | first entry id) -> (run, cost); insertion order is eviction order.
        # Appended runs, and runs read from disk.
        self._runs: dict[int, tuple[Run, int]] = {}
        self._cold: dict[int, tuple[Run, int]] = {}
        self._starts: dict[int, list[int]] = {}
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def put(self, run: Run, payload_bytes: int = -1, from_disk: bool = False) -> None:
        """Cache a run (`payload_bytes`: the sum of its data lengths, if the caller knows it), appended
        or, with `from_disk`, read back from disk."""
        count = len(run.datas)
        if not count:
            return
        if payload_bytes < 0:
            payload_bytes = sum(map(len, run.datas))
        cost = payload_bytes + ENTRY_OVERHEAD_BYTES * count
        if cost > (self.cold_capacity_bytes if from_disk else self.capacity_bytes):
            return
        ledger_id, first = run.ledger_id, run.first_entry_id
        starts = self._starts.get(ledger_id)
        if starts is None:
            starts = self._starts[ledger_id] = []
        elif starts[-1] >= first or self._run_end(ledger_id, starts[-1]) >= first:
            self._remove_overlapping(ledger_id, starts, first, first + count - 1)
        insort(starts, first)
        self.size_bytes += cost
        if from_disk:
            self._cold[ledger_id << ENTRY_KEY_SHIFT | first] = (run, cost)
            self.cold_bytes += cost
            if self.cold_bytes > self.cold_capacity_bytes:
                self._evict(self._cold, self.cold_bytes - self.cold_capacity_bytes)
        else:
            self._runs[ledger_id << ENTRY_KEY_SHIFT | first] = (run, cost)
        if self.size_bytes > self.capacity_bytes:
            # Down to 90%, so that a full cache does not evict on every put.
            excess = self.size_bytes - self.capacity_bytes * 9 // 10
            cold = self._evict(self._cold, excess) if not from_disk else 0
            self._evict(self._runs, excess - cold)

    def put_read(self, run: Run, first: int, last: int) -> None:
        """Cache a segment read from disk for entries `first..last`: from `first` to the segment's end,
        or to the next run cached after `last` (which stays as it is). A reader going on where it
        stopped finds the rest of the segment here instead of decoding all of it again: segments hold up
        to 2,000 entries and reads are often smaller (a replicator reads a quarter of its queue at a
        time). When that is more than the budget for entries read from disk, `first..last` alone."""
        start = run.first_entry_id
        first = max(first, start)
        end = start + len(run.datas) - 1
        starts = self._starts.get(run.ledger_id)
        if starts:
            following = bisect_right(starts, last)
            if following < len(starts):
                end = min(end, starts[following] - 1)
        if end > last:
            extended = _cut(run, first, end)
            payload_bytes = sum(map(len, extended.datas))
            if payload_bytes + ENTRY_OVERHEAD_BYTES * len(extended.datas) <= self.cold_capacity_bytes:
                self.put(extended, payload_bytes, from_disk=True)
                return
        self.put(_cut(run, first, min(last, end)), from_disk=True)

    def _held(self, key: int) -> tuple[Run, int]:
        held = self._runs.get(key)
        return held if held is not None else self._cold[key]

    def _run_end(self, ledger_id: int, first: int) -> int:
        return first + len(self._held(ledger_id << ENTRY_KEY_SHIFT | first)[0].datas) - 1

    def _remove_overlapping(self, ledger_id: int, starts: list[int], first: int, last: int) -> None:
        index = max(bisect_right(starts, first) - 1, 0)
        while index < len(starts) and starts[index] <= last:
            start = starts[index]
            if self._run_end(ledger_id, start) < first:
                index += 1
                continue
            self._forget(ledger_id << ENTRY_KEY_SHIFT | start)
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
        if first == last:
            # One entry (a replay of a single position, mostly): made directly, without slicing the
            # run's six columns.
            if index < 0:
                return []
            start = starts[index]
            run = self._held(ledger_id << ENTRY_KEY_SHIFT | start)[0]
            at = first - start
            if at >= len(run.datas):
                return []
            return [
                new_entry(
                    (
                        new_position((ledger_id, first)),
                        run.datas[at],
                        run.sticky_key_hashes[at],
                        run.message_counts[at],
                        run.publish_times[at],
                        run.producer_names[at],
                        run.sequence_ids[at],
                    )
                )
            ]
        result: list[Entry] = []
        with gc_paused():
            while 0 <= index < len(starts) and first <= last:
                start = starts[index]
                run = self._held(ledger_id << ENTRY_KEY_SHIFT | start)[0]
                end = start + len(run.datas) - 1
                if not start <= first <= end:
                    break
                result.extend(entries_of_run(run, first - start, min(last, end) - first + 1))
                first = end + 1
                index += 1
        return result

    def invalidate_ledger(self, ledger_id: int, entries: int) -> None:
        """Forget every entry of a ledger (it was deleted)."""
        for start in self._starts.pop(ledger_id, ()):
            self._forget(ledger_id << ENTRY_KEY_SHIFT | start)

    def _forget(self, key: int) -> Run:
        held = self._runs.pop(key, None)
        if held is None:
            held = self._cold.pop(key)
            self.cold_bytes -= held[1]
        self.size_bytes -= held[1]
        return held[0]

    def _evict(self, runs: dict[int, tuple[Run, int]], excess: int) -> int:
        """Evict the oldest of `runs` until `excess` bytes are freed or none is left; return the bytes
        freed. One pass of one iterator: `next(iter(dict))` per victim would rescan the emptied
        front slots."""
        victims = []
        freed = 0
        for key, (_, cost) in runs.items():
            if freed >= excess:
                break
            victims.append(key)
            freed += cost
        # Each ledger's run starts are edited once per eviction, not once per victim: deleting from a
        # list of 100,000 starts one victim at a time stalled the loop for 300 ms when small appends
        # (a run per socket read) filled the cache.
        evicted: dict[int, list[int]] = {}
        for key in victims:
            run = self._forget(key)
            evicted.setdefault(run.ledger_id, []).append(run.first_entry_id)
            self.evictions += len(run.datas)
        for ledger_id, firsts in evicted.items():
            starts = self._starts[ledger_id]
            firsts.sort()
            if starts[: len(firsts)] == firsts:
                # The oldest runs of a ledger are its first: appends arrive in order.
                del starts[: len(firsts)]
            else:
                gone = set(firsts)
                starts[:] = [start for start in starts if start not in gone]
            if not starts:
                del self._starts[ledger_id]
        return freed

    def __len__(self) -> int:
        return sum(len(run.datas) for runs in (self._runs, self._cold) for run, _ in runs.values())

    def check_invariants(self) -> None:
        held = [*self._runs.values(), *self._cold.values()]
        assert self.size_bytes == sum(cost for _, cost in held)
        assert self.cold_bytes == sum(cost for _, cost in self._cold.values())
        assert self.size_bytes <= self.capacity_bytes and self.cold_bytes <= self.cold_capacity_bytes
        assert not self._runs.keys() & self._cold.keys()
        for run, cost in held:
            assert cost == sum(map(len, run.datas)) + ENTRY_OVERHEAD_BYTES * len(run.datas)
        for ledger_id, starts in self._starts.items():
            assert starts == sorted(starts) and starts
            for start, following in pairwise(starts):
                assert self._run_end(ledger_id, start) < following, f"runs overlap in ledger {ledger_id}"
        assert sum(map(len, self._starts.values())) == len(held)


def _cut(run: Run, first: int, last: int) -> Run:
    """Entries `first..last` of a run (the run itself when that is all of it)."""
    skip = first - run.first_entry_id
    take = last - first + 1
    if skip == 0 and take == len(run.datas):
        return run
    return Run._make((run.ledger_id, first, *[column[skip : skip + take] for column in run[2:]]))
