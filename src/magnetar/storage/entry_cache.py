"""The entry cache: recently appended and recently read entries, shared by all topics.

Owns: a byte budget (`managedLedgerCacheSizeMB`) and the entries inside it, keyed by position (ledger
ids are unique across topics, so one dict serves every topic). Must not touch: the engine or the
files; it is only ever used on the event loop thread.

Eviction is by age of insertion, not by last use: a tailing consumer reads what was just appended
and a catching-up consumer reads forward once, so the oldest insertion is the least likely to be read
again. Pulsar evicts the same way (by time and by entries behind the slowest reader).
"""

from __future__ import annotations

from operator import itemgetter

from magnetar.storage.sqlite_engine import Entry

__all__ = ["EntryCache", "ENTRY_OVERHEAD_BYTES"]

# What an Entry costs beyond its payload: the tuple, its Position, the dict slot and the small ints.
ENTRY_OVERHEAD_BYTES = 200
_position_of = itemgetter(0)
_data_of = itemgetter(1)


class EntryCache:
    """Invariants: `size_bytes` is the sum of `cost(entry)` over the entries held, and stays at or
    below `capacity_bytes` after every public call."""

    __slots__ = ("capacity_bytes", "size_bytes", "_entries", "hits", "misses", "evictions")

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self.size_bytes = 0
        self._entries: dict[tuple[int, int], Entry] = {}
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def put(self, entry: Entry) -> None:
        cost = len(entry.data) + ENTRY_OVERHEAD_BYTES
        if cost > self.capacity_bytes:
            return
        old = self._entries.pop(entry.position, None)
        if old is not None:
            self.size_bytes -= len(old.data) + ENTRY_OVERHEAD_BYTES
        self._entries[entry.position] = entry
        self.size_bytes += cost
        if self.size_bytes > self.capacity_bytes:
            self._evict()

    def put_new(self, entry: Entry) -> None:
        """`put` for an entry just appended, which cannot be in the cache yet."""
        cost = len(entry.data) + ENTRY_OVERHEAD_BYTES
        self._entries[entry.position] = entry
        self.size_bytes += cost
        if self.size_bytes > self.capacity_bytes:
            self._evict()

    def put_new_many(self, entries: list[Entry]) -> None:
        """`put_new` for a batch just appended, in C loops: one `append_many` costs per batch here."""
        self._entries.update(zip(map(_position_of, entries), entries))
        self.size_bytes += sum(map(len, map(_data_of, entries))) + ENTRY_OVERHEAD_BYTES * len(entries)
        if self.size_bytes > self.capacity_bytes:
            self._evict()

    def put_all(self, entries: list[Entry]) -> None:
        """Entries read from disk. In C loops when none is cached yet (the usual case for a read that
        missed): a backlog read inserts hundreds of thousands per second."""
        if not entries:
            return
        positions = list(map(_position_of, entries))
        sizes = list(map(len, map(_data_of, entries)))
        held = self._entries
        if any(map(held.__contains__, positions)) or max(sizes) + ENTRY_OVERHEAD_BYTES > self.capacity_bytes:
            for entry in entries:
                self.put(entry)
            return
        held.update(zip(positions, entries))
        self.size_bytes += sum(sizes) + ENTRY_OVERHEAD_BYTES * len(entries)
        if self.size_bytes > self.capacity_bytes:
            self._evict()

    def get(self, position: tuple[int, int]) -> Entry | None:
        entry = self._entries.get(position)
        if entry is None:
            self.misses += 1
        else:
            self.hits += 1
        return entry

    def get_run(self, ledger_id: int, first: int, last: int) -> list[Entry]:
        """The cached prefix of entries `first..last` of a ledger, stopping at the first one missing."""
        entries = self._entries
        result = []
        for entry_id in range(first, last + 1):
            entry = entries.get((ledger_id, entry_id))
            if entry is None:
                break
            result.append(entry)
        self.hits += len(result)
        if len(result) < last - first + 1:
            self.misses += 1
        return result

    def invalidate_ledger(self, ledger_id: int, entries: int) -> None:
        pop = self._entries.pop
        for entry_id in range(entries):
            entry = pop((ledger_id, entry_id), None)
            if entry is not None:
                self.size_bytes -= len(entry.data) + ENTRY_OVERHEAD_BYTES

    def _evict(self) -> None:
        # Evict down to 90% so that a full cache does not evict on every single put.
        # One pass of one iterator: taking `next(iter(dict))` per victim would rescan the slots
        # already emptied at the front of the dict every time, quadratic in the number evicted.
        target = self.capacity_bytes * 9 // 10
        excess = self.size_bytes - target
        victims = []
        for position, entry in self._entries.items():
            if excess <= 0:
                break
            excess -= len(entry.data) + ENTRY_OVERHEAD_BYTES
            victims.append(position)
        entries = self._entries
        for position in victims:
            entry = entries.pop(position)
            self.size_bytes -= len(entry.data) + ENTRY_OVERHEAD_BYTES
        self.evictions += len(victims)

    def __len__(self) -> int:
        return len(self._entries)

    def check_invariants(self) -> None:
        assert self.size_bytes == sum(len(e.data) + ENTRY_OVERHEAD_BYTES for e in self._entries.values())
        assert self.size_bytes <= self.capacity_bytes
