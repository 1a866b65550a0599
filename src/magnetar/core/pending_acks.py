"""Pending acks of one consumer: what it was sent and has not acknowledged yet.

Owns: position -> (batch size, key hash, time sent) for one consumer, with Pulsar's `PendingAcksMap`
operations: add-if-allowed behind a veto hook, remove, remove-all-up-to, for-each and for-each-and-close,
and a remove hook that keeps the draining hashes tracker in step (PIP-379 point 4).
Must not touch: other consumers, the replay queue, the wire, the clock (the time sent is the `now_ms`
of the event that sent the entry).

The key hash is `Entry.key_hash` (the 31-bit Murmur3 of the sticky key); the dispatcher maps it to its
selector's sticky hash when it needs one. Storing the selector-independent value keeps the map right
when a subscription's Key_Shared policy changes.

Entries are kept in a dict keyed by position: adding and removing, the per-message operations of the
hot path, are O(1). The ordered views (`for_each`, `remove_all_up_to`) sort on demand; they run on
consumer changes and cumulative acks, which are rare next to individual acks.

The time sent rides in the value tuple the hot path builds anyway (one more slot, the same int object
for a whole dispatch), so the pendingAcks and key explainers of the admin API cost nothing per message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from magnetar.core.events import Entry
from magnetar.positions import Position

__all__ = ["PendingAcks", "AddHandler", "RemoveHandler"]

# The consumer that owns the map, handed back to the hooks.
C = TypeVar("C")
# (consumer, position, key_hash) -> whether the entry may be added (and so sent).
AddHandler = Callable[[C, Position, int], bool]
# (consumer, position, key_hash, closing) -> None, called after the entry left the map.
RemoveHandler = Callable[[C, Position, int, bool], None]


class PendingAcks(Generic[C]):
    """Invariants:
    - once closed, the map stays empty and refuses every add;
    - every stored batch size is >= 1 (an entry holds at least one message).
    """

    __slots__ = ("consumer", "_acks", "closed", "add_handler", "remove_handler")

    def __init__(self, consumer: C) -> None:
        self.consumer = consumer
        # position -> (batch_size, key_hash, sent_at_ms)
        self._acks: dict[Position, tuple[int, int, int]] = {}
        self.closed = False
        self.add_handler: AddHandler[C] | None = None
        self.remove_handler: RemoveHandler[C] | None = None

    def add_if_allowed(self, position: Position, batch_size: int, key_hash: int, sent_at_ms: int = 0) -> bool:
        """Record that `position` is being sent, unless the map is closed or the add hook vetoes it.

        The veto is PIP-379 point 7: the last check before a message leaves, made against the state the
        sender sees now, so a hash that started draining after filtering is never sent to another consumer.
        """
        if self.closed:
            return False
        handler = self.add_handler
        if handler is not None and not handler(self.consumer, position, key_hash):
            return False
        self._acks[position] = (batch_size, key_hash, sent_at_ms)
        return True

    def add_all(self, entries: Sequence[tuple[Entry, int]], sent_at_ms: int = 0) -> int:
        """Add (entry, key hash) pairs without consulting the add hook; returns their message count.

        For a caller that has established the hook would allow every entry (nothing drains, nothing of
        these keys waits for replay): the hot path of a steady subscription, one dict store per entry.
        """
        acks = self._acks
        messages = 0
        for entry, key_hash in entries:
            count = entry.message_count
            acks[entry.position] = (count, key_hash, sent_at_ms)
            messages += count
        return messages

    def get(self, position: Position) -> tuple[int, int, int] | None:
        """(batch size, key hash, time sent) of a pending entry, or None."""
        return self._acks.get(position)

    def __contains__(self, position: object) -> bool:
        return position in self._acks

    def __len__(self) -> int:
        return len(self._acks)

    def remove(self, position: Position) -> tuple[int, int, int] | None:
        """Forget `position`; returns its (batch size, key hash, time sent), or None if it was not pending."""
        value = self._acks.pop(position, None)
        if value is not None and self.remove_handler is not None:
            self.remove_handler(self.consumer, position, value[1], False)
        return value

    def remove_batch(self, positions: tuple[Position, ...], notify: bool = True) -> tuple[int, list[Position]]:
        """Remove many positions; returns (their total batch size, the positions that were not pending).

        `notify=False` skips the remove hook, for a caller that knows no listener needs it now.
        """
        acks = self._acks
        handler = self.remove_handler if notify else None
        removed_messages = 0
        missing: list[Position] = []
        for position in positions:
            value = acks.pop(position, None)
            if value is None:
                missing.append(position)
                continue
            removed_messages += value[0]
            if handler is not None:
                handler(self.consumer, position, value[1], False)
        return removed_messages, missing

    def remove_all_up_to(self, position: Position) -> list[tuple[Position, int, int]]:
        """Remove every pending entry at or below `position` (inclusive); returns them in order."""
        removed = [(p, size, h) for p, (size, h, _sent) in sorted(self._acks.items()) if p <= position]
        handler = self.remove_handler
        for p, _size, h in removed:
            del self._acks[p]
            if handler is not None:
                handler(self.consumer, p, h, False)
        return removed

    def items(self) -> Iterator[tuple[Position, tuple[int, int, int]]]:
        """Entries in position order."""
        return iter(sorted(self._acks.items()))

    def positions(self) -> Iterator[Position]:
        """Pending positions, in no particular order."""
        return iter(self._acks)

    def values(self) -> Iterator[tuple[int, int, int]]:
        """(batch size, key hash, time sent) of every entry, in no particular order (cheapest full scan)."""
        return iter(self._acks.values())

    def for_each(self, callback: Callable[[Position, int, int], None]) -> None:
        for position, (batch_size, key_hash, _sent) in sorted(self._acks.items()):
            callback(position, batch_size, key_hash)

    def entries(self) -> list[tuple[Position, int, int, int]]:
        """Every pending entry as (position, batch size, key hash, time sent), in position order."""
        return [(position, *value) for position, value in sorted(self._acks.items())]

    def for_each_and_close(self, callback: Callable[[Position, int, int], object]) -> None:
        """Hand every entry to `callback` in position order, then close: later adds are refused.

        The remove hook is told `closing=True`, so the draining tracker releases the hashes without
        announcing an unblock: the entries go back to the replay queue and are dispatched anew.
        """
        self.closed = True
        entries = sorted(self._acks.items())
        self._acks.clear()
        handler = self.remove_handler
        for position, (batch_size, key_hash, _sent) in entries:
            callback(position, batch_size, key_hash)
            if handler is not None:
                handler(self.consumer, position, key_hash, True)

    def unacked_messages(self) -> int:
        return sum(value[0] for value in self._acks.values())

    def check_invariants(self) -> None:
        if self.closed:
            assert not self._acks, "a closed pending-acks map still holds entries"
        for position, (batch_size, _key_hash, _sent) in self._acks.items():
            assert batch_size >= 1, f"pending entry {position} has batch size {batch_size}"
