"""What the broker tells a dispatcher (events) and what the dispatcher tells the broker (decisions).

Owns: the vocabulary between the asyncio shell and the pure dispatchers, and `Entry`, the core's view
of a stored entry.
Must not touch: anything with behaviour. These are values.

Events are facts in the past tense; decisions are imperatives. A read is three steps on purpose: the
dispatcher decides to read (`ReadEntries` / `ReplayEntries`), the read completes (`ReadCompleted`),
and later the dispatcher's turn to send comes (`DispatchDue`). Consumers may join, leave, ack and
flow between any two of them, as they do between Pulsar's threads; the simulator relies on that to
reproduce the races of PIP-282 and Pulsar #23307.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from magnetar.positions import Position

__all__ = [
    "Entry",
    "KeySharedMeta",
    "ConsumerAdded",
    "ConsumerRemoved",
    "Flow",
    "ReadCompleted",
    "ReadCancelled",
    "DispatchDue",
    "Acked",
    "BatchIndexAcked",
    "CumulativeAcked",
    "RedeliverRequested",
    "MarkDeleteAdvanced",
    "Tick",
    "Event",
    "HANDLER_NAMES",
    "Dispatch",
    "ReadEntries",
    "ReplayEntries",
    "CancelRead",
    "WakeUp",
    "RewindCursor",
    "ActiveConsumerChanged",
    "AckFiltered",
    "Decision",
]


class Entry(NamedTuple):
    """One stored entry as the core sees it.

    `key_hash` is Murmur3 of the entry's sticky key masked to 31 bits (see `sticky_key.key_hash`); each
    selector maps it into its own hash space. `message_count` is the number of messages the entry still
    holds for this subscription (a batch minus the indexes already acknowledged); it is what the entry
    costs in permits. `payload` is opaque to the core and handed back in `Dispatch`. `deliver_at_ms`
    (the message's deliver_at_time, 0 for none) holds it back until then on Shared and Key_Shared.
    """

    position: Position
    key_hash: int = 0
    message_count: int = 1
    payload: object = None
    deliver_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class KeySharedMeta:
    """A Key_Shared consumer's policy, as sent in CommandSubscribe.keySharedMeta."""

    mode: str = "AUTO_SPLIT"  # or "STICKY"
    allow_out_of_order_delivery: bool = False
    sticky_ranges: tuple[tuple[int, int], ...] = ()


# ---------------------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class ConsumerAdded:
    consumer_id: int
    consumer_name: str
    priority_level: int = 0
    key_shared_meta: KeySharedMeta | None = None


@dataclass(frozen=True, slots=True)
class ConsumerRemoved:
    consumer_id: int


@dataclass(frozen=True, slots=True)
class Flow:
    consumer_id: int
    permits: int


@dataclass(frozen=True, slots=True)
class ReadCompleted:
    """The read the dispatcher asked for returned these entries, in position order."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class ReadCancelled:
    """A waiting normal read was cancelled at the dispatcher's request (`CancelRead`)."""


@dataclass(frozen=True, slots=True)
class DispatchDue:
    """The dispatcher's turn to send what the last read returned."""


@dataclass(frozen=True, slots=True)
class Acked:
    """Individual acks of whole entries (every message of a batch entry acknowledged)."""

    consumer_id: int
    positions: tuple[Position, ...]


@dataclass(frozen=True, slots=True)
class BatchIndexAcked:
    """`message_count` more messages of the batch entry at `position` were acknowledged; the entry is
    still partly unacknowledged (when it is complete the broker sends `Acked`)."""

    consumer_id: int
    position: Position
    message_count: int


@dataclass(frozen=True, slots=True)
class CumulativeAcked:
    consumer_id: int
    position: Position


@dataclass(frozen=True, slots=True)
class RedeliverRequested:
    """Negative acks or redeliverUnacknowledgedMessages; `positions=None` means all of the consumer's."""

    consumer_id: int
    positions: tuple[Position, ...] | None = None


@dataclass(frozen=True, slots=True)
class MarkDeleteAdvanced:
    """The cursor's mark-delete position moved to `position`.

    `by_ack=False` when something other than consumer acks moved it (message TTL expiry, skip): what
    consumers still hold up to it counts as acknowledged from then on.
    """

    position: Position
    by_ack: bool = True


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed; the dispatcher runs what it scheduled with `WakeUp`."""


Event = (
    ConsumerAdded
    | ConsumerRemoved
    | Flow
    | ReadCompleted
    | ReadCancelled
    | DispatchDue
    | Acked
    | BatchIndexAcked
    | CumulativeAcked
    | RedeliverRequested
    | MarkDeleteAdvanced
    | Tick
)

# Each dispatcher handles event X in its method HANDLER_NAMES[X].
HANDLER_NAMES: dict[type, str] = {
    ConsumerAdded: "_on_consumer_added",
    ConsumerRemoved: "_on_consumer_removed",
    Flow: "_on_flow",
    ReadCompleted: "_on_read_completed",
    ReadCancelled: "_on_read_cancelled",
    DispatchDue: "_on_dispatch_due",
    Acked: "_on_acked",
    BatchIndexAcked: "_on_batch_index_acked",
    CumulativeAcked: "_on_cumulative_acked",
    RedeliverRequested: "_on_redeliver_requested",
    MarkDeleteAdvanced: "_on_mark_delete_advanced",
    Tick: "_on_tick",
}

# ------------------------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Send these entries to the consumer; `redelivery_counts` is None when every count is 0."""

    consumer_id: int
    entries: list[Entry]
    redelivery_counts: list[int] | None = None


@dataclass(frozen=True, slots=True)
class ReadEntries:
    """Read up to `max_entries` new entries from the cursor's read position (waiting if there are none)."""

    max_entries: int


@dataclass(frozen=True, slots=True)
class ReplayEntries:
    """Read these positions again (they are in the replay queue)."""

    positions: tuple[Position, ...]


@dataclass(frozen=True, slots=True)
class CancelRead:
    """Cancel the normal read that waits for new entries: the replay queue has work."""


@dataclass(frozen=True, slots=True)
class WakeUp:
    """Deliver a `Tick` at or after `at_ms`."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class RewindCursor:
    """Move the cursor's read position back to the first unacknowledged entry."""


@dataclass(frozen=True, slots=True)
class ActiveConsumerChanged:
    """Failover/Exclusive: tell every consumer which one is active now (CommandActiveConsumerChange)."""

    active_consumer_id: int | None


@dataclass(frozen=True, slots=True)
class AckFiltered:
    """Acknowledge these entries on the subscription's cursor: they are outside the hash ranges of its
    only consumer (a reader with key hash ranges), so nobody will ever receive them from it. Pulsar
    acks filtered entries the same way, so that the cursor moves past them."""

    positions: tuple[Position, ...]


Decision = (
    Dispatch | ReadEntries | ReplayEntries | CancelRead | WakeUp | RewindCursor | ActiveConsumerChanged | AckFiltered
)
