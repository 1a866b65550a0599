"""Positions, offsets and the entry arithmetic of planning: pure functions, no network, no Spark.

Owns: a topic's ledger layout as the admin API reports it (`TopicState`), counting and advancing by
entries across ledgers, the index of an entry in the topic's whole history (which is how a checkpoint
learns how many entries retention deleted under it), the offset JSON Spark checkpoints, splitting the
sticky-hash space into ranges, and sharing an entry budget between topics.
Must not touch: the network (wire.py, rest.py) or Spark's classes.

A topic's offset is the position of the last entry already read, Pulsar's mark-delete style:
`{"ledgerId": L, "entryId": E, "index": I}`, with `(L, -1)` meaning "before ledger L's first entry"
and `index` the entry's index in the topic's history (-1 before any). A batch reads the entries after
its start offset up to and including its end offset. Offsets are JSON primitives only, with sorted
keys, because Spark compares them as JSON strings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "HASH_SLOTS",
    "Offset",
    "TopicState",
    "check_ranges",
    "decode_offsets",
    "encode_offsets",
    "even_ranges",
    "parse_position",
    "share_budget",
]

HASH_SLOTS = 65536  # sticky key hash slots, [0, 65535]: Pulsar's STICKY range space
Position = tuple[int, int]


@dataclass(frozen=True, order=True)
class Offset:
    """The last entry read on one topic, and its index in the topic's history (None when not known:
    a position a user gave that lies in a ledger retention already deleted)."""

    ledger_id: int
    entry_id: int
    index: int | None = None

    @property
    def position(self) -> Position:
        return (self.ledger_id, self.entry_id)

    def to_json(self) -> dict[str, int]:
        value = {"ledgerId": self.ledger_id, "entryId": self.entry_id}
        if self.index is not None:
            value["index"] = self.index
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Offset:
        index = value.get("index")
        return cls(int(value["ledgerId"]), int(value["entryId"]), None if index is None else int(index))


def encode_offsets(offsets: Mapping[str, Offset]) -> dict[str, dict[str, int]]:
    return {topic: offsets[topic].to_json() for topic in sorted(offsets)}


def decode_offsets(value: Mapping[str, Mapping[str, object]]) -> dict[str, Offset]:
    return {topic: Offset.from_json(position) for topic, position in value.items()}


def parse_position(text: str) -> Position:
    """`"L:E"`, as internalStats prints positions."""
    ledger, _, entry = text.partition(":")
    return (int(ledger), int(entry))


@dataclass(frozen=True)
class TopicState:
    """What planning knows of one topic: its ledgers in order as (ledger id, entries), the last entry
    stored, and the index of its first stored entry (entries retention deleted before it).

    Invariants: ledger ids increase; `last` is the last entry of the last ledger with entries, or
    `(current ledger, -1)` for a topic that stores none.
    """

    ledgers: tuple[tuple[int, int], ...]
    last: Position
    first_index: int

    @classmethod
    def from_internal_stats(cls, stats: Mapping[str, Any]) -> TopicState:
        ledgers = tuple((int(info["ledgerId"]), int(info["entries"])) for info in stats["ledgers"])
        stored = int(stats["numberOfEntries"])
        return cls(
            ledgers, parse_position(str(stats["lastConfirmedEntry"])), int(stats["entriesAddedCounter"]) - stored
        )

    def _with_entries(self) -> list[tuple[int, int]]:
        return [(ledger_id, entries) for ledger_id, entries in self.ledgers if entries > 0]

    @property
    def earliest(self) -> Offset:
        """Before the first stored entry."""
        stored = self._with_entries()
        if not stored:
            return Offset(self.last[0], self.last[1], self.first_index - 1)
        return Offset(stored[0][0], -1, self.first_index - 1)

    @property
    def latest(self) -> Offset:
        return Offset(self.last[0], self.last[1], self.index_of(self.last))

    @property
    def first_position(self) -> Position | None:
        stored = self._with_entries()
        return (stored[0][0], 0) if stored else None

    def _count_up_to(self, position: Position) -> int:
        """Stored entries at or before `position`."""
        ledger_id, entry_id = position
        count = 0
        for lid, entries in self.ledgers:
            if lid < ledger_id:
                count += entries
            elif lid == ledger_id:
                count += max(0, min(entries, entry_id + 1))
            else:
                break
        return count

    def index_of(self, position: Position) -> int:
        """The index in the topic's history of the entry at `position` (of the last one before it for
        `(L, -1)`); positions before the first stored entry answer `first_index - 1`."""
        return self.first_index + self._count_up_to(position) - 1

    def offset_at(self, position: Position) -> Offset:
        """An offset for a position a user gave: its index is unknown when its ledger is gone."""
        first = self.first_position
        known = first is None or position >= (first[0], -1)
        return Offset(position[0], position[1], self.index_of(position) if known else None)

    def count_after(self, start: Offset, end: Position) -> int:
        """Stored entries after `start` up to and including `end`."""
        return max(0, self._count_up_to(end) - self._count_up_to(start.position))

    def advance(self, start: Offset, entries: int) -> Offset:
        """The offset `entries` stored entries after `start`, no further than the last entry."""
        target = self._count_up_to(start.position) + entries
        if target >= self._count_up_to(self.last):
            return self.latest
        seen = 0
        for ledger_id, count in self.ledgers:
            if seen + count >= target and count > 0:
                position = (ledger_id, target - seen - 1)
                return Offset(position[0], position[1], self.index_of(position))
            seen += count
        return self.latest

    def lost_after(self, start: Offset) -> int | None:
        """Entries after `start` that retention deleted before they were read: 0 when none, None when
        it cannot be counted (the offset carries no index)."""
        first = self.first_position
        if first is None or start.position >= (first[0], -1):
            return 0
        if start.index is None:
            return None
        return max(0, self.first_index - start.index - 1)


def even_ranges(count: int) -> tuple[tuple[int, int], ...]:
    """`count` contiguous ranges of (nearly) equal size covering [0, 65535]."""
    bounds = [i * HASH_SLOTS // count for i in range(count + 1)]
    return tuple((bounds[i], bounds[i + 1] - 1) for i in range(count))


def check_ranges(ranges: Sequence[tuple[int, int]]) -> str | None:
    """What is wrong with explicit ranges (None when they cover [0, 65535] exactly once)."""
    ordered = sorted(ranges)
    expected = 0
    for start, end in ordered:
        if not 0 <= start <= end <= HASH_SLOTS - 1:
            return f"range {start}-{end} is not within 0-{HASH_SLOTS - 1} with start <= end"
        if start < expected:
            return f"range {start}-{end} overlaps another"
        if start > expected:
            return f"hashes {expected}-{start - 1} are in no range"
        expected = end + 1
    if expected != HASH_SLOTS:
        return f"hashes {expected}-{HASH_SLOTS - 1} are in no range"
    return None


def share_budget(available: Mapping[str, int], budget: int) -> dict[str, int]:
    """Split `budget` entries between topics in proportion to what each has available (as Spark's
    Kafka source prorates maxOffsetsPerTrigger), never giving a topic more than it has; any budget
    left by rounding goes to the topics with the most left, so a positive budget always moves."""
    total = sum(available.values())
    if total <= budget:
        return dict(available)
    shares = {topic: budget * count // total for topic, count in available.items()}
    left = budget - sum(shares.values())
    for topic in sorted(available, key=lambda t: (shares[t] - available[t], t)):
        if left <= 0:
            break
        if shares[topic] < available[topic]:
            shares[topic] += 1
            left -= 1
    return shares
