"""The dispatchers' stats as plain figures: counts, permits, positions, hash ranges. Pulsar's JSON
shapes and names (SubscriptionStats, ConsumerStats) are the admin API's business (admin/stats.py).

Owns: the shapes of what a dispatcher reports about itself and each consumer.
Must not touch: anything but data; the dispatchers fill these in, nothing here computes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.core.draining_hashes import ConsumerDrainingStats
    from magnetar.core.selectors import Range
    from magnetar.positions import Position, PositionRangeSet

__all__ = ["ConsumerStats", "DrainingTotals", "SubscriptionStats", "SubscriptionSummary"]


@dataclass(frozen=True, slots=True)
class ConsumerStats:
    name: str
    permits: int
    msg_out_counter: int
    unacked_messages: int = 0
    blocked_on_unacked: bool = False
    avg_messages_per_entry: float = 1.0  # rounded to 3 places
    # Key_Shared: the selector's inclusive [start, end] ranges of this consumer.
    hash_ranges: list[Range] | None = None
    # Where hashes can drain (PIP-379): this consumer's draining hashes, zeros when none drain.
    draining: ConsumerDrainingStats | None = None
    # classic: the read position when it joined; pip282: the last sent position when it joined.
    read_position_when_joining: Position | None = None
    last_sent_position_when_joining: Position | None = None


@dataclass(frozen=True, slots=True)
class DrainingTotals:
    count: int
    unacked_messages: int
    cleared_total: int


@dataclass(frozen=True, slots=True)
class SubscriptionSummary:
    """The subscription-wide counters, without per-consumer work: what a metrics scrape reads."""

    msg_in_replay: int = 0
    msg_delayed: int = 0
    unacked_messages: int = 0
    blocked_on_unacked: bool = False
    draining: DrainingTotals | None = None  # where hashes can drain (PIP-379)


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    type: str
    msg_out_counter: int
    consumers: list[ConsumerStats]  # in the order of the dispatcher's `consumers`
    summary: SubscriptionSummary = field(default_factory=SubscriptionSummary)
    active_consumer_name: str | None = None  # Exclusive and Failover
    # Key_Shared
    ordering_mode: str | None = None
    key_shared_mode: str | None = None
    allow_out_of_order_delivery: bool = False
    # classic and pip282, while joined consumers wait: each one's (name, consumer id) and position.
    consumers_after_mark_delete: dict[tuple[str, int], Position] | None = None
    # pip282 (PIP-282's names)
    last_sent_position: Position | None = None
    individually_sent_positions: PositionRangeSet | None = None
