"""Read-only queries over a topic's ledger and a subscription's cursor, as plain figures: what the admin
API and the metrics report about storage, so that they read no ledger or cursor themselves.

Owns: Pulsar's estimates that need the ledger's and the cursor's internals (backlogSize, the earliest
publish time in a backlog, the serialized size of the unacked ranges) and the managed ledger's internal
stats with the broker's per-cursor read state.
Must not touch: state (no reads move a cursor, no figure is cached), nor any JSON key of Pulsar's REST
shapes but the internal stats', which the storage layer already writes in Pulsar's shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.storage.cursor import encode_ranges
from magnetar.storage.internal_stats import managed_ledger_internal_stats

if TYPE_CHECKING:
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic
    from magnetar.storage.write_latency import LatencyBuckets

__all__ = [
    "CursorFigures",
    "backlog_entries",
    "backlog_size",
    "cursor_figures",
    "earliest_publish_time",
    "mark_delete_position",
    "storage_size",
    "topic_internal_stats",
    "write_latency",
]


@dataclass(frozen=True, slots=True)
class CursorFigures:
    """A subscription's cursor, in figures: its individually acked ranges and its properties."""

    unacked_ranges: int  # ranges of individually acked entries above the mark-delete position
    unacked_ranges_serialized_size: int  # bytes those ranges take when persisted (capped as they are)
    properties: dict[str, Any]


def cursor_figures(subscription: PersistentSubscription) -> CursorFigures:
    cursor = subscription.cursor
    ranges = cursor.individually_deleted
    max_ranges = subscription.topic.service.config["managedLedgerMaxUnackedRangesToPersist"]
    return CursorFigures(
        unacked_ranges=ranges.range_count(),
        unacked_ranges_serialized_size=len(encode_ranges(ranges, max_ranges)) if ranges else 0,
        properties=dict(cursor.properties),
    )


def mark_delete_position(subscription: PersistentSubscription) -> tuple[int, int]:
    """(ledger id, entry id) of the last entry at and below which everything is acknowledged."""
    return subscription.cursor.mark_delete_position


def backlog_entries(subscription: PersistentSubscription) -> int:
    """Entries after the mark-delete position not individually acknowledged (Pulsar's msgBacklog)."""
    return subscription.cursor.number_of_entries_in_backlog()


def backlog_size(subscription: PersistentSubscription) -> int:
    """Pulsar's estimate of the bytes after the mark-delete position: whole ledgers after it, and the
    share of its own ledger's bytes that its entries after the position hold."""
    mark_delete = subscription.cursor.mark_delete_position
    size = 0
    for info in subscription.topic.ledger.ledgers:
        if info.ledger_id > mark_delete[0]:
            size += info.size
        elif info.ledger_id == mark_delete[0] and info.entries:
            after = info.entries - (mark_delete[1] + 1)
            if after > 0:
                size += info.size * after // info.entries
    return size


async def earliest_publish_time(subscription: PersistentSubscription) -> int:
    """The publish time of the first unacknowledged entry, -1 when nothing is in the backlog."""
    if subscription.cursor.number_of_entries_in_backlog() == 0:
        return -1
    ledger = subscription.topic.ledger
    entries = await ledger.read_entries(ledger.next_valid_position(subscription.cursor.mark_delete_position), 1)
    return entries[0].publish_time if entries else -1


def storage_size(topic: PersistentTopic) -> int:
    """Bytes the topic's ledgers hold."""
    return topic.ledger.total_size


def write_latency(topic: PersistentTopic) -> LatencyBuckets:
    """The topic's histogram of append latencies (pulsar_storage_write_latency)."""
    return topic.ledger.write_latency


def topic_internal_stats(topic: PersistentTopic) -> dict[str, Any]:
    """PersistentTopicInternalStats: the managed ledger's, with what only the broker knows per cursor."""
    stats = managed_ledger_internal_stats(topic.ledger)
    for name, cursor_stats in stats["cursors"].items():
        subscription = topic.subscriptions.get(name)
        pending, pending_replay, waiting = subscription.read_state() if subscription else (False, False, False)
        cursor_stats["waitingReadOp"] = waiting
        cursor_stats["subscriptionHavePendingRead"] = pending
        cursor_stats["subscriptionHavePendingReplayRead"] = pending_replay
    stats["schemaLedgers"] = []
    stats["compactedLedger"] = {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False}
    return stats
