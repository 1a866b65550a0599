"""A consumer as a dispatcher sees it.

Owns: one consumer's permits, unacked message count, pending acks and counters.
Must not touch: other consumers or the subscription's shared state; the dispatcher does that.
"""

from __future__ import annotations

from magnetar.core.events import KeySharedMeta
from magnetar.core.pending_acks import PendingAcks
from magnetar.positions import Position

__all__ = ["Consumer"]


class Consumer:
    """Invariants:
    - `unacked_messages` equals the pending entries' message counts minus the batch indexes acked
      inside still-pending entries (`partially_acked`);
    - `partially_acked` only names pending positions.
    """

    __slots__ = (
        "consumer_id",
        "name",
        "priority_level",
        "key_shared_meta",
        "permits",
        "unacked_messages",
        "blocked_on_unacked",
        "pending_acks",
        "partially_acked",
        "msg_out_counter",
        "entries_out_counter",
        "avg_messages_per_entry",
        "redelivered_counter",
        "join_position",
    )

    def __init__(
        self, consumer_id: int, name: str, priority_level: int = 0, key_shared_meta: KeySharedMeta | None = None
    ) -> None:
        self.consumer_id = consumer_id
        self.name = name
        self.priority_level = priority_level
        self.key_shared_meta = key_shared_meta
        # Flow permits, counted in messages. A batch entry may take it below zero, as in Pulsar.
        self.permits = 0
        self.unacked_messages = 0
        self.blocked_on_unacked = False
        self.pending_acks: PendingAcks[Consumer] = PendingAcks(self)
        self.partially_acked: dict[Position, int] = {}
        self.msg_out_counter = 0
        self.entries_out_counter = 0
        # Pulsar's avgMessagesPerEntry: the first dispatch's, then a tenth to each newer one; 0 until then.
        self.avg_messages_per_entry = 0.0
        self.redelivered_counter = 0
        # classic: last position read when it joined; pip282: last sent position when it joined.
        self.join_position: Position | None = None

    def __repr__(self) -> str:
        return f"Consumer({self.consumer_id}, {self.name!r})"

    def sent(self, messages: int, entries: int) -> None:
        """Count a dispatch of `entries` entries holding `messages` messages."""
        self.msg_out_counter += messages
        self.entries_out_counter += entries
        average = messages / entries
        if self.avg_messages_per_entry < 1:
            self.avg_messages_per_entry = average
        else:
            self.avg_messages_per_entry = self.avg_messages_per_entry * 0.9 + 0.1 * average

    def check_invariants(self) -> None:
        self.pending_acks.check_invariants()
        expected = self.pending_acks.unacked_messages() - sum(self.partially_acked.values())
        assert self.unacked_messages == expected, (
            f"{self!r}: unacked_messages {self.unacked_messages} but pending acks hold {expected}"
        )
        for position in self.partially_acked:
            assert position in self.pending_acks, f"{self!r}: partial ack of {position} not pending"
