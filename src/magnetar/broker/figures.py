"""Read-only queries over a topic's ledger, a subscription's cursor and its dispatcher, as figures: what
the admin API and the metrics report, so that they read no ledger, cursor or dispatcher themselves.

Owns: a subscription's figures (the dispatcher's, each consumer on the wire beside the core's figures of
it, the backlog), Pulsar's estimates that need the ledger's and the cursor's internals (backlogSize, the
earliest publish time in a backlog, the serialized size of the unacked ranges) and the managed ledger's
internal stats with the broker's per-cursor read state.
Must not touch: state (no reads move a cursor, no figure is cached), nor any JSON key of Pulsar's REST
shapes but the internal stats', which the storage layer writes in Pulsar's shape and this module
completes with each cursor's read state and the schema and compaction ledgers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.core.dispatchers import SharedDispatcher
from magnetar.core.stats import SubscriptionSummary
from magnetar.replication.replicator import cursor_cluster
from magnetar.storage.cursor import encode_ranges
from magnetar.storage.internal_stats import managed_ledger_internal_stats

if TYPE_CHECKING:
    from magnetar.broker.consumer import ServerConsumer
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic
    from magnetar.core.stats import ConsumerStats, SubscriptionStats
    from magnetar.storage.write_latency import LatencyBuckets

__all__ = [
    "ConsumerFigures",
    "CursorFigures",
    "SubscriptionFigures",
    "TopicCounters",
    "backlog_entries",
    "backlog_size",
    "cursor_figures",
    "dispatcher_summary",
    "earliest_publish_time",
    "mark_delete_position",
    "redelivered",
    "storage_size",
    "subscription_figures",
    "topic_counters",
    "topic_internal_stats",
    "write_latency",
]


@dataclass(frozen=True, slots=True)
class TopicCounters:
    """A loaded topic's counters since it was loaded (the consumers' out counters, those of consumers
    that left included) and its producers and consumers now: the load report's rates come out of them."""

    msg_in: int
    bytes_in: int
    msg_out: int
    bytes_out: int
    producers: int
    consumers: int


def topic_counters(topic: PersistentTopic) -> TopicCounters:
    subscriptions = list(topic.subscriptions.values())
    consumers = [consumer for subscription in subscriptions for consumer in subscription.consumers.values()]
    return TopicCounters(
        topic.msg_in_counter,
        topic.bytes_in_counter,
        sum(s.msg_out_from_removed_consumers for s in subscriptions) + sum(c.msg_out_counter for c in consumers),
        sum(s.bytes_out_from_removed_consumers for s in subscriptions) + sum(c.bytes_out_counter for c in consumers),
        len(topic.producers),
        len(consumers),
    )


@dataclass(frozen=True, slots=True)
class ConsumerFigures:
    """A consumer as the dispatcher counts it, beside the consumer on the wire that it describes."""

    consumer: ServerConsumer  # its counters, timestamps and connection
    core: ConsumerStats  # the dispatcher's stats of it (permits, unacked, hash ranges, draining hashes)
    redelivered: int  # entries it asked to have redelivered, as the dispatcher counts them


@dataclass(frozen=True, slots=True)
class SubscriptionFigures:
    core: SubscriptionStats | None  # the dispatcher's (None without one); see `consumers` for its consumers
    consumers: list[ConsumerFigures]  # those on the wire, in the dispatcher's order
    durable: bool
    backlog: int  # entries after the mark-delete position not individually acked (msgBacklog)


def redelivered(subscription: PersistentSubscription, consumer_id: int) -> int:
    """Entries the consumer asked to have redelivered (0 while no dispatcher knows it)."""
    dispatcher = subscription.dispatcher
    known = dispatcher.consumers.get(consumer_id) if dispatcher is not None else None
    return known.redelivered_counter if known is not None else 0


def subscription_figures(subscription: PersistentSubscription) -> SubscriptionFigures:
    dispatcher = subscription.dispatcher
    core = dispatcher.stats() if dispatcher is not None else None
    consumers = []
    if dispatcher is not None and core is not None:
        # A dispatcher lists its consumers' stats in the order of its `consumers` dict.
        for (consumer_id, known), stats in zip(dispatcher.consumers.items(), core.consumers):
            server = subscription.consumers.get(consumer_id)
            if server is not None:
                consumers.append(ConsumerFigures(server, stats, known.redelivered_counter))
    return SubscriptionFigures(core, consumers, subscription.durable, backlog_entries(subscription))


def dispatcher_summary(subscription: PersistentSubscription) -> SubscriptionSummary:
    """The dispatcher's subscription-wide counters without the per-consumer work (what a metrics scrape
    reads for every subscription). Exclusive and Failover keep no replay queue and no unacked counts:
    zeros."""
    dispatcher = subscription.dispatcher
    return dispatcher.summary() if isinstance(dispatcher, SharedDispatcher) else SubscriptionSummary()


@dataclass(frozen=True, slots=True)
class CursorFigures:
    """A subscription's cursor, in figures: its individually acked ranges and its properties."""

    unacked_ranges: int  # ranges of individually acked entries above the mark-delete position
    unacked_ranges_serialized_size: int  # bytes those ranges take when persisted (capped as they are)
    properties: dict[str, Any]


def cursor_figures(subscription: PersistentSubscription) -> CursorFigures:
    cursor = subscription.cursor
    ranges = cursor.individually_deleted
    max_ranges = subscription.topic.context.config["managedLedgerMaxUnackedRangesToPersist"]
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
        cluster = cursor_cluster(name) if subscription is None else None
        if cluster is not None:
            replicator = topic.replicators.get(cluster)
            waiting = replicator is not None and replicator.waiting_for_entries
        cursor_stats["waitingReadOp"] = waiting
        properties = cursor_stats.pop("properties")  # Pulsar's order: the pending reads, then properties
        cursor_stats["subscriptionHavePendingRead"] = pending
        cursor_stats["subscriptionHavePendingReplayRead"] = pending_replay
        cursor_stats["properties"] = properties
    stats["schemaLedgers"] = []
    stats["compactedLedger"] = {"ledgerId": -1, "entries": -1, "size": -1, "offloaded": False, "underReplicated": False}
    return stats
