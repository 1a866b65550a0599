"""Read-only answers about a dispatcher's state, for the admin API's explainers.

Owns: the plain values the dispatchers' query methods return (`PendingMessage`, `DrainingState`,
`HashExplanation`) and the reason codes that name what holds a sticky hash back.
Must not touch: state. Nothing here decides: the dispatchers fill these values in with the predicates
their decisions use (without their side effects), so an explanation cannot drift from what the
dispatcher does.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.positions import Position

__all__ = [
    "PendingMessage",
    "DrainingState",
    "HashExplanation",
    "NO_CONSUMERS",
    "NO_CONSUMER_FOR_HASH",
    "DRAINING",
    "NO_PERMITS",
    "CONSUMER_BLOCKED_ON_UNACKED",
    "SUBSCRIPTION_BLOCKED_ON_UNACKED",
    "RECENTLY_JOINED",
    "IN_REPLAY_QUEUE",
    "LOOK_AHEAD_LIMIT",
    "DELAYED",
]

# Why a message of a hash would not be delivered if it were read now. Several can hold at once.
NO_CONSUMERS = "NO_CONSUMERS"  # nobody is connected
NO_CONSUMER_FOR_HASH = "NO_CONSUMER_FOR_HASH"  # STICKY: no consumer declared a range holding the hash
DRAINING = "DRAINING"  # pip379: another consumer still holds unacked messages of the hash
NO_PERMITS = "NO_PERMITS"  # the owner asked for no more messages (its receiver queue is full)
CONSUMER_BLOCKED_ON_UNACKED = "CONSUMER_BLOCKED_ON_UNACKED"  # owner at maxUnackedMessagesPerConsumer
SUBSCRIPTION_BLOCKED_ON_UNACKED = "SUBSCRIPTION_BLOCKED_ON_UNACKED"  # at maxUnackedMessagesPerSubscription
RECENTLY_JOINED = "RECENTLY_JOINED"  # classic/pip282: the owner only gets entries up to its join position
IN_REPLAY_QUEUE = "IN_REPLAY_QUEUE"  # older messages of the hash wait to be redelivered first
LOOK_AHEAD_LIMIT = "LOOK_AHEAD_LIMIT"  # the replay queue is full: no new entries are read for any key
DELAYED = "DELAYED"  # messages of the hash carry a deliver_at_time still ahead


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """An entry sent to a consumer and not acknowledged yet.

    `sticky_hash` is the hash the subscription's selector routes by (None outside Key_Shared);
    `unacked_messages` is `batch_size` minus the batch indexes already acknowledged.
    """

    consumer_id: int
    consumer_name: str
    position: Position
    batch_size: int
    unacked_messages: int
    key_hash: int
    sticky_hash: int | None
    redelivery_count: int
    sent_at_ms: int


@dataclass(frozen=True, slots=True)
class DrainingState:
    """PIP-379: the consumer a hash drains from, its unacked messages of the hash, and how many
    deliveries of the hash to others were held back so far."""

    consumer_id: int
    consumer_name: str
    unacked_messages: int
    blocked_attempts: int


@dataclass(frozen=True, slots=True)
class HashExplanation:
    """Everything that decides whether messages of one sticky hash flow now.

    `owner_*` describe the consumer the selector assigns the hash to (None when there is none);
    `pending` lists every consumer's unacked messages of the hash, `replay` the queued positions
    with their key hashes, `delayed` (position, key hash, deliver_at_ms) of held messages;
    `owner_join_position` is the position a recently joined owner waits for (classic, pip282);
    `reasons` holds the codes above that apply now, empty when the hash flows.
    """

    sticky_hash: int
    key_hash: int | None
    ordering_mode: str
    owner_id: int | None
    owner_name: str | None
    owner_available_permits: int
    owner_unacked_messages: int
    draining: DrainingState | None
    pending: tuple[PendingMessage, ...]
    replay: tuple[tuple[Position, int], ...]
    delayed: tuple[tuple[Position, int, int], ...]
    owner_join_position: Position | None
    mark_delete_position: Position
    reasons: tuple[str, ...]
