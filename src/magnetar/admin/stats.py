"""Admin routes: topic stats and internal stats, in the JSON shapes of Pulsar 4.0's `/admin/v2`.

Owns: `GET .../{topic}/stats`, `.../internalStats`, `.../partitioned-stats` and
`.../partitioned-internalStats`; Pulsar's TopicStats, PublisherStats, SubscriptionStats, ConsumerStats,
PartitionedTopicStats and PersistentTopicInternalStats shapes; rates derived from the broker's counters
when stats are read; finding the topic a path names (explain.py and metrics.py use these too).
Must not touch: state, nor ledgers and cursors: it reads the broker's objects, the core's stats and
queries, and the storage figures the broker's queries give (broker/figures.py).

Rates. Producers and consumers only count (per socket read or dispatch, never per message). A rate is
the change of a counter over the window between two reads of it, a window of at least
`RATE_WINDOW_MIN_S`; reads within a window return that window's rates. Pulsar computes the same rates
on a timer every `statsUpdateFrequencyInSecs`; here nothing runs unless someone asks, and a scraper
polling every 15 s gets rates over 15 s. The first window of a producer or consumer starts when it
connected.
"""

from __future__ import annotations

import datetime
import functools
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from fastapi import APIRouter, Request

from magnetar.admin.clusters import check_namespace
from magnetar.admin.errors import error_responses, not_found, precondition_failed
from magnetar.admin.topics import topic_domain
from magnetar.broker import figures
from magnetar.broker.registry import TopicNotFoundError
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.core.stats import SubscriptionSummary

if TYPE_CHECKING:
    from magnetar.broker.consumer import ServerConsumer
    from magnetar.broker.context import BrokerContext
    from magnetar.broker.figures import ConsumerFigures
    from magnetar.broker.producer import ServerProducer
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic

__all__ = [
    "router",
    "RATE_WINDOW_MIN_S",
    "find_topic",
    "find_subscription",
    "topic_stats",
    "producer_rates",
    "consumer_rates",
    "replication_stats",
    "iso_time",
]

# Mounted by app.py under topics.py's two prefixes, persistent and non-persistent, as topics.py's router.
router = APIRouter(prefix="/{tenant}/{namespace}/{topic}")

# Shorter windows make rates jumpy (a dispatch of 100 messages in a 10 ms window reads as 10,000/s);
# one second is the shortest window Pulsar can be configured with (statsUpdateFrequencyInSecs).
RATE_WINDOW_MIN_S = 1.0

_ERRORS = error_responses(404, 412)


# ------------------------------------------------------------------------------------- rates


class _RateMeter:
    """Per-second rates of some monotonic counters over the last completed window."""

    __slots__ = ("at_s", "counters", "rates")

    def __init__(self, at_s: float, width: int) -> None:
        self.at_s = at_s
        self.counters: tuple[int, ...] = (0,) * width
        self.rates: tuple[float, ...] = (0.0,) * width

    def read(self, now_s: float, counters: tuple[int, ...]) -> tuple[float, ...]:
        elapsed = now_s - self.at_s
        if elapsed >= RATE_WINDOW_MIN_S:
            self.rates = tuple((now - before) / elapsed for now, before in zip(counters, self.counters))
            self.at_s, self.counters = now_s, counters
        return self.rates


# Keyed by the producer or consumer object: a meter goes with the connection it measures.
_meters: WeakKeyDictionary[object, _RateMeter] = WeakKeyDictionary()


def _rates(owner: object, since_ms: int, counters: tuple[int, ...], now_s: float) -> tuple[float, ...]:
    meter = _meters.get(owner)
    if meter is None:
        meter = _meters[owner] = _RateMeter(since_ms / 1000, len(counters))
    return meter.read(now_s, counters)


def producer_rates(producer: ServerProducer, now_s: float) -> tuple[float, float]:
    """(msgRateIn, msgThroughputIn)."""
    rate, throughput = _rates(
        producer, producer.connected_since_ms, (producer.msg_in_counter, producer.bytes_in_counter), now_s
    )
    return rate, throughput


def consumer_rates(consumer: ServerConsumer, redelivered: int, now_s: float) -> tuple[float, float, float, float]:
    """(msgRateOut, msgThroughputOut, msgRateRedeliver, messageAckRate); `redelivered` is the core's
    count of entries this consumer asked to have redelivered."""
    counters = (consumer.msg_out_counter, consumer.bytes_out_counter, redelivered, consumer.msg_ack_counter)
    rate, throughput, redeliver, ack = _rates(consumer, consumer.connected_since_ms, counters, now_s)
    return rate, throughput, redeliver, ack


# ---------------------------------------------------------------------------------- rendering


# Entries sent in one dispatch share their time: pendingAcks of 10,000 messages formats a few dates.
@functools.lru_cache(maxsize=4096)
def iso_time(epoch_ms: int) -> str:
    """Pulsar's DateFormatter (Java's ISO_OFFSET_DATE_TIME): the broker's time zone, the offset `Z` when it
    is zero, and only the digits of the fraction that are not trailing zeros (`.071`, `.1`, none)."""
    moment = datetime.datetime.fromtimestamp(epoch_ms // 1000).astimezone()
    text = moment.isoformat(timespec="seconds")
    offset = text[19:]
    fraction = f".{epoch_ms % 1000:03d}".rstrip("0") if epoch_ms % 1000 else ""
    return text[:19] + fraction + ("Z" if offset == "+00:00" else offset)


def _address(connection: Any) -> str:
    peer = connection.peer
    return f"/{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


def _publisher_stats(producer: ServerProducer, now_s: float) -> dict[str, Any]:
    rate, throughput = producer_rates(producer, now_s)
    return {
        "accessMode": producer.access_mode,
        "msgRateIn": rate,
        "msgThroughputIn": throughput,
        "averageMsgSize": throughput / rate if rate else 0.0,
        "chunkedMessageRate": 0.0,
        "producerId": producer.producer_id,
        "supportsPartialProducer": False,
        "producerName": producer.name,
        "address": _address(producer.connection),
        "connectedSince": iso_time(producer.connected_since_ms),
        "clientVersion": producer.connection.client_version,
        "metadata": {},
    }


def replication_stats(
    topic: PersistentTopic, now_s: float, publishers: list[dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """ReplicatorStats per remote cluster this topic replicates to, with Pulsar 4.0.7's fields in its
    order: its outbound replicator, and the inbound side from the producer that cluster's replicator
    opened here (`publishers`: their stats, when the caller has them). As in Pulsar, a cluster that only
    sends here is not listed, and a field with no value (a connection there is not) is left out."""
    if publishers is None:
        publishers = [_publisher_stats(p, now_s) for p in topic.producers.values()]
    inbound: dict[str, tuple[ServerProducer, dict[str, Any]]] = {}
    for producer, published in zip(topic.producers.values(), publishers):
        if producer.remote_cluster is not None:
            inbound[producer.remote_cluster] = (producer, published)
    found: dict[str, dict[str, Any]] = {}
    for cluster, replicator in topic.replicators.items():
        outbound = replicator.stats()
        since_ms = outbound.outbound_connected_since_ms
        rate, throughput = _rates(
            replicator, since_ms or int(now_s * 1000), (outbound.msg_out_count, outbound.bytes_out_count), now_s
        )
        remote = inbound.get(cluster)
        stats: dict[str, Any] = {
            "msgRateIn": remote[1]["msgRateIn"] if remote else 0.0,
            "msgInCount": remote[0].msg_in_counter if remote else 0,
            "msgThroughputIn": remote[1]["msgThroughputIn"] if remote else 0.0,
            "bytesInCount": remote[0].bytes_in_counter if remote else 0,
            "msgRateOut": rate,
            "msgOutCount": outbound.msg_out_count,
            "msgThroughputOut": throughput,
            "bytesOutCount": outbound.bytes_out_count,
            "msgRateExpired": 0.0,
            "replicationBacklog": outbound.replication_backlog,
            "connected": outbound.connected,
            "replicationDelayInSeconds": outbound.replication_delay_s,
        }
        if remote:
            stats["inboundConnection"] = remote[1]["address"]
            stats["inboundConnectedSince"] = remote[1]["connectedSince"]
        if outbound.outbound_connection is not None:
            stats["outboundConnection"] = outbound.outbound_connection
        if since_ms:
            stats["outboundConnectedSince"] = iso_time(since_ms)
        stats["msgExpiredCount"] = 0
        found[cluster] = stats
    return found


_DRAINING_KEYS = ("drainingHashesCount", "drainingHashesClearedTotal", "drainingHashesUnackedMessages")


def _consumer_stats(figures: ConsumerFigures, ordering_mode: str | None, now_s: float) -> dict[str, Any]:
    consumer, core = figures.consumer, figures.core
    rate, throughput, redeliver, ack = consumer_rates(consumer, figures.redelivered, now_s)
    stats: dict[str, Any] = {
        "msgRateOut": rate,
        "msgThroughputOut": throughput,
        "bytesOutCounter": consumer.bytes_out_counter,
        "msgOutCounter": consumer.msg_out_counter,
        "msgRateRedeliver": redeliver,
        "messageAckRate": ack,
        "chunkedMessageRate": 0.0,
        "consumerName": core.name,
        "availablePermits": core.permits,
        "unackedMessages": core.unacked_messages,
        # An int in Pulsar, 0 until something was sent.
        "avgMessagesPerEntry": round(core.avg_messages_per_entry) if consumer.msg_out_counter else 0,
        "blockedConsumerOnUnackedMsgs": core.blocked_on_unacked,
    }
    if core.read_position_when_joining is not None:
        stats["readPositionWhenJoining"] = str(core.read_position_when_joining)
    if core.last_sent_position_when_joining is not None:
        stats["lastSentPositionWhenJoining"] = str(core.last_sent_position_when_joining)
    # Java ints: present, and 0, on every consumer; the per-hash list only where hashes can drain.
    draining = core.draining
    stats["drainingHashesCount"] = draining.count if draining else 0
    stats["drainingHashesClearedTotal"] = draining.cleared_total if draining else 0
    stats["drainingHashesUnackedMessages"] = draining.unacked_messages if draining else 0
    if draining is not None:
        stats["drainingHashes"] = [
            {"hash": h.hash, "unackMsgs": h.unacked_messages, "blockedAttempts": h.blocked_attempts}
            for h in draining.hashes
        ]
    stats.update(
        {
            "address": _address(consumer.connection),
            "connectedSince": iso_time(consumer.connected_since_ms),
            "clientVersion": consumer.connection.client_version,
            "lastAckedTimestamp": consumer.last_acked_ms,
            "lastConsumedTimestamp": consumer.last_consumed_ms,
            "lastConsumedFlowTimestamp": consumer.last_consumed_flow_ms,
        }
    )
    if core.hash_ranges is not None:
        if ordering_mode == "classic":
            # Pulsar 4.0's classic implementation reports ranges as strings, the PIP-379 one as arrays.
            stats["keyHashRanges"] = [f"[{start}, {end}]" for start, end in core.hash_ranges]
        else:
            stats["keyHashRangeArrays"] = [[start, end] for start, end in core.hash_ranges]
    stats["metadata"] = {}
    stats["lastAckedTime"] = iso_time(consumer.last_acked_ms)
    stats["lastConsumedTime"] = iso_time(consumer.last_consumed_ms)
    return stats


async def subscription_stats(
    subscription: PersistentSubscription,
    now_s: float,
    *,
    with_backlog_size: bool = True,
    earliest_time: bool = False,
    exclude_consumers: bool = False,
) -> dict[str, Any]:
    """SubscriptionStats: the core's figures, the consumers' counters and rates, the cursor's backlog."""
    subscription_figures = figures.subscription_figures(subscription)
    core = subscription_figures.core
    ordering_mode = core.ordering_mode if core is not None else None
    consumers = [_consumer_stats(consumer, ordering_mode, now_s) for consumer in subscription_figures.consumers]
    summary = core.summary if core is not None else SubscriptionSummary()
    msg_backlog = subscription_figures.backlog
    delayed = summary.msg_delayed
    last_consumed = max((c.last_consumed_ms for c in subscription.consumers.values()), default=0)
    last_acked = max((c.last_acked_ms for c in subscription.consumers.values()), default=0)
    cursor = figures.cursor_figures(subscription)
    stats: dict[str, Any] = {
        "msgRateOut": sum(c["msgRateOut"] for c in consumers),
        "msgThroughputOut": sum(c["msgThroughputOut"] for c in consumers),
        "bytesOutCounter": subscription.bytes_out_from_removed_consumers + sum(c["bytesOutCounter"] for c in consumers),
        "msgOutCounter": subscription.msg_out_from_removed_consumers + sum(c["msgOutCounter"] for c in consumers),
        "msgRateRedeliver": sum(c["msgRateRedeliver"] for c in consumers),
        "messageAckRate": sum(c["messageAckRate"] for c in consumers),
        "chunkedMessageRate": 0,
        "msgBacklog": msg_backlog,
        "backlogSize": figures.backlog_size(subscription) if with_backlog_size else -1,
        "earliestMsgPublishTimeInBacklog": await figures.earliest_publish_time(subscription) if earliest_time else 0,
        "msgBacklogNoDelayed": msg_backlog - delayed,
        "blockedSubscriptionOnUnackedMsgs": summary.blocked_on_unacked,
        "msgDelayed": delayed,
        "msgInReplay": summary.msg_in_replay,
        "unackedMessages": summary.unacked_messages,
        # Pulsar names no type while no consumer is connected (no dispatcher).
        "type": (core.type if core is not None else "") or "None",
    }
    if core is not None and core.active_consumer_name is not None:
        stats["activeConsumerName"] = core.active_consumer_name
    stats.update(
        {
            # Message TTL expiry is applied, but not counted yet.
            "msgRateExpired": 0.0,
            "totalMsgExpired": 0,
            "lastExpireTimestamp": 0,
            "lastConsumedFlowTimestamp": subscription.last_consumed_flow_ms,
            "lastConsumedTimestamp": last_consumed,
            "lastAckedTimestamp": last_acked,
            "lastMarkDeleteAdvancedTimestamp": subscription.last_mark_delete_advanced_ms,
            "consumers": [] if exclude_consumers else consumers,
            "isDurable": subscription_figures.durable,
            "isReplicated": subscription.replicated,
            "allowOutOfOrderDelivery": core is not None and core.allow_out_of_order_delivery,
        }
    )
    if core is not None and core.key_shared_mode is not None:
        stats["keySharedMode"] = core.key_shared_mode
    joined = core.consumers_after_mark_delete if core is not None else None
    stats["consumersAfterMarkDeletePosition"] = {
        f"consumerName={name}, consumerId={consumer_id}": str(position)
        for (name, consumer_id), position in (joined or {}).items()
    }
    if core is not None and core.last_sent_position is not None:  # pip282 (PIP-282's names)
        stats["lastSentPosition"] = str(core.last_sent_position)
    if core is not None and core.individually_sent_positions is not None:
        stats["individuallySentPositions"] = core.individually_sent_positions.to_string(", ", ", ")
    stats.update(
        {
            "nonContiguousDeletedMessagesRanges": cursor.unacked_ranges,
            "nonContiguousDeletedMessagesRangesSerializedSize": cursor.unacked_ranges_serialized_size,
            "delayedMessageIndexSizeInBytes": 0,
            "subscriptionProperties": cursor.properties,
            "filterProcessedMsgCount": 0,
            "filterAcceptedMsgCount": 0,
            "filterRejectedMsgCount": 0,
            "filterRescheduledMsgCount": 0,
            "dispatchThrottledMsgEventsBySubscriptionLimit": 0,
            "dispatchThrottledBytesEventsBySubscriptionLimit": 0,
            "dispatchThrottledMsgEventsByTopicLimit": 0,
            "dispatchThrottledBytesEventsByTopicLimit": 0,
            "dispatchThrottledMsgEventsByBrokerLimit": 0,
            "dispatchThrottledBytesEventsByBrokerLimit": 0,
            "drainingHashesCount": sum(c["drainingHashesCount"] for c in consumers),
            "drainingHashesClearedTotal": sum(c["drainingHashesClearedTotal"] for c in consumers),
            "drainingHashesUnackedMessages": sum(c["drainingHashesUnackedMessages"] for c in consumers),
            # Jackson also writes the boolean getters isDurable()/isReplicated() under these names.
            "durable": subscription_figures.durable,
            "replicated": subscription.replicated,
        }
    )
    return stats


async def topic_stats(
    topic: PersistentTopic,
    owner: str,
    *,
    with_backlog_size: bool = True,
    earliest_time: bool = False,
    exclude_publishers: bool = False,
    exclude_consumers: bool = False,
) -> dict[str, Any]:
    """TopicStats of one (non-partitioned, or partition) topic."""
    now_s = topic.context.clock.time_ms() / 1000
    publishers = [_publisher_stats(p, now_s) for p in topic.producers.values()]
    subscriptions = {}
    for name, subscription in list(topic.subscriptions.items()):
        subscriptions[name] = await subscription_stats(
            subscription,
            now_s,
            with_backlog_size=with_backlog_size,
            earliest_time=earliest_time,
            exclude_consumers=exclude_consumers,
        )
    rate_in = sum(p["msgRateIn"] for p in publishers)
    throughput_in = sum(p["msgThroughputIn"] for p in publishers)
    durable = [s for s in subscriptions.values() if s["isDurable"]]
    earliest = [s["earliestMsgPublishTimeInBacklog"] for s in durable if s["earliestMsgPublishTimeInBacklog"] > 0]
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": throughput_in,
        "msgRateOut": sum(s["msgRateOut"] for s in subscriptions.values()),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subscriptions.values()),
        "bytesInCounter": topic.bytes_in_counter,
        "msgInCounter": topic.msg_in_counter,
        "systemTopicBytesInCounter": 0,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subscriptions.values()),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subscriptions.values()),
        "bytesOutInternalCounter": 0,
        "averageMsgSize": throughput_in / rate_in if rate_in else 0.0,
        "msgChunkPublished": False,
        "storageSize": figures.storage_size(topic),
        "backlogSize": max((s["backlogSize"] for s in durable), default=0),
        "backlogQuotaLimitSize": -1,
        "backlogQuotaLimitTime": -1,
        "publishRateLimitedTimes": 0,
        "earliestMsgPublishTimeInBacklogs": min(earliest, default=0),
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "ongoingTxnCount": 0,
        "abortedTxnCount": 0,
        "committedTxnCount": 0,
        "publishers": [] if exclude_publishers else publishers,
        "waitingPublishers": topic.waiting_publishers(),
        "subscriptions": subscriptions,
        "replication": replication_stats(topic, now_s, publishers),
        "deduplicationStatus": "Enabled" if topic.deduplication_enabled else "Disabled",
        "nonContiguousDeletedMessagesRanges": sum(
            s["nonContiguousDeletedMessagesRanges"] for s in subscriptions.values()
        ),
        "nonContiguousDeletedMessagesRangesSerializedSize": sum(
            s["nonContiguousDeletedMessagesRangesSerializedSize"] for s in subscriptions.values()
        ),
        "delayedMessageIndexSizeInBytes": 0,
        "compaction": {
            "lastCompactionRemovedEventCount": 0,
            "lastCompactionSucceedTimestamp": 0,
            "lastCompactionFailedTimestamp": 0,
            "lastCompactionDurationTimeInMills": 0,
        },
        "ownerBroker": owner,
    }


# --------------------------------------------------------------------------------- aggregation


def _add_consumer(into: dict[str, Any], stats: dict[str, Any]) -> None:
    for key in (
        "msgRateOut",
        "msgThroughputOut",
        "bytesOutCounter",
        "msgOutCounter",
        "msgRateRedeliver",
        "messageAckRate",
        "availablePermits",
        "unackedMessages",
        *_DRAINING_KEYS,
    ):
        into[key] += stats[key]
    into["blockedConsumerOnUnackedMsgs"] |= stats["blockedConsumerOnUnackedMsgs"]
    for key in ("lastAckedTimestamp", "lastConsumedTimestamp", "lastConsumedFlowTimestamp"):
        into[key] = max(into[key], stats[key])


# Hash ranges and draining hashes belong to one partition's selector: a sum across partitions is
# meaningless, so the aggregate leaves them to `partitions`.
_PER_PARTITION_CONSUMER_KEYS = ("drainingHashes", "keyHashRangeArrays", "keyHashRanges")

_SUBSCRIPTION_SUMS = (
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "msgBacklog",
    "msgBacklogNoDelayed",
    "msgDelayed",
    "msgInReplay",
    "unackedMessages",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    *_DRAINING_KEYS,
)


def _add_subscription(into: dict[str, Any], stats: dict[str, Any]) -> None:
    for key in _SUBSCRIPTION_SUMS:
        into[key] += stats[key]
    if stats["backlogSize"] >= 0:
        into["backlogSize"] = max(into["backlogSize"], 0) + stats["backlogSize"]
    into["blockedSubscriptionOnUnackedMsgs"] |= stats["blockedSubscriptionOnUnackedMsgs"]
    for key in (
        "lastConsumedFlowTimestamp",
        "lastConsumedTimestamp",
        "lastAckedTimestamp",
        "lastMarkDeleteAdvancedTimestamp",
    ):
        into[key] = max(into[key], stats[key])
    by_name = {c["consumerName"]: c for c in into["consumers"]}
    for consumer in stats["consumers"]:
        mine = by_name.get(consumer["consumerName"])
        if mine is None:
            mine = {k: v for k, v in consumer.items() if k not in _PER_PARTITION_CONSUMER_KEYS}
            into["consumers"].append(mine)
            by_name[mine["consumerName"]] = mine
        else:
            _add_consumer(mine, consumer)


def _copy_subscription(stats: dict[str, Any]) -> dict[str, Any]:
    copy = dict(stats)
    copy["consumers"] = [
        {k: v for k, v in c.items() if k not in _PER_PARTITION_CONSUMER_KEYS} for c in stats["consumers"]
    ]
    return copy


_TOPIC_SUMS = (
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "bytesInCounter",
    "msgInCounter",
    "bytesOutCounter",
    "msgOutCounter",
    "storageSize",
    "backlogSize",
    "waitingPublishers",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
)


_REPLICATION_SUMS = (
    "msgRateIn",
    "msgInCount",
    "msgThroughputIn",
    "bytesInCount",
    "msgRateOut",
    "msgOutCount",
    "msgThroughputOut",
    "bytesOutCount",
    "msgRateExpired",
    "replicationBacklog",
    "msgExpiredCount",
)
# Each partition's own: the sum leaves them to `partitions`.
_REPLICATION_CONNECTIONS = (
    "inboundConnection",
    "inboundConnectedSince",
    "outboundConnection",
    "outboundConnectedSince",
)


def _add_replication(into: dict[str, dict[str, Any]], replication: dict[str, dict[str, Any]]) -> None:
    """ReplicatorStatsImpl.add per remote cluster: sums, `connected` only if every partition's replicator
    is, the largest delay, no connections. Pulsar 4.0.7 leaves the counts it added later (msgInCount, ...)
    at 0 in this sum; here they are summed."""
    for cluster, stats in replication.items():
        mine = into.get(cluster)
        if mine is None:
            into[cluster] = {k: v for k, v in stats.items() if k not in _REPLICATION_CONNECTIONS}
            continue
        for key in _REPLICATION_SUMS:
            mine[key] += stats[key]
        mine["connected"] = mine["connected"] and stats["connected"]
        mine["replicationDelayInSeconds"] = max(mine["replicationDelayInSeconds"], stats["replicationDelayInSeconds"])


def partitioned_stats(partitions: dict[str, dict[str, Any]], count: int, per_partition: bool) -> dict[str, Any]:
    """PartitionedTopicStats: sums over the partitions (publishers and consumers joined by name, as the
    clients name every partition's producer and consumer alike), averageMsgSize their mean."""
    total: dict[str, Any] | None = None
    for stats in partitions.values():
        if total is None:
            total = {k: v for k, v in stats.items() if k not in ("publishers", "subscriptions", "replication")}
            total["publishers"] = [dict(p) for p in stats["publishers"]]
            total["subscriptions"] = {n: _copy_subscription(s) for n, s in stats["subscriptions"].items()}
            total["replication"] = {}
            _add_replication(total["replication"], stats["replication"])
            continue
        for key in _TOPIC_SUMS:
            total[key] += stats[key]
        _add_replication(total["replication"], stats["replication"])
        publishers = {p["producerName"]: p for p in total["publishers"]}
        for publisher in stats["publishers"]:
            mine = publishers.get(publisher["producerName"])
            if mine is None:
                total["publishers"].append(dict(publisher))
            else:
                mine["msgRateIn"] += publisher["msgRateIn"]
                mine["msgThroughputIn"] += publisher["msgThroughputIn"]
                mine["averageMsgSize"] = mine["msgThroughputIn"] / mine["msgRateIn"] if mine["msgRateIn"] else 0.0
        for name, subscription in stats["subscriptions"].items():
            if name in total["subscriptions"]:
                _add_subscription(total["subscriptions"][name], subscription)
            else:
                total["subscriptions"][name] = _copy_subscription(subscription)
    if total is None:
        total = {"msgRateIn": 0.0, "msgRateOut": 0.0, "publishers": [], "subscriptions": {}}
    else:
        sizes = [s["averageMsgSize"] for s in partitions.values()]
        total["averageMsgSize"] = sum(sizes) / len(sizes)
    total["metadata"] = {"partitions": count}
    total["partitions"] = partitions if per_partition else {}
    return total


# -------------------------------------------------------------------------------------- lookup


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


def topic_name(request: Request, tenant: str, namespace: str, topic: str) -> TopicName:
    """The topic a path names, in a namespace that exists: 412 for a name Pulsar would not parse, 404
    for an unknown tenant or namespace (the checks and reasons of topics.py)."""
    try:
        name = TopicName.parse(f"{topic_domain(request)}://{tenant}/{namespace}/{topic}")
    except InvalidTopicName as error:
        raise precondition_failed("Topic name is not valid") from error
    check_namespace(_context(request), tenant, namespace)
    return name


async def find_topic(request: Request, tenant: str, namespace: str, topic: str) -> PersistentTopic:
    """A stored non-partitioned topic or partition, loaded if it is not; 404 otherwise."""
    name = topic_name(request, tenant, namespace, topic)
    try:
        return await _context(request).registry.get_topic(name, create=False)
    except TopicNotFoundError as error:
        raise not_found(f"Topic {name} not found") from error


async def find_subscription(
    request: Request, tenant: str, namespace: str, topic: str, subscription: str
) -> PersistentSubscription:
    found_topic = await find_topic(request, tenant, namespace, topic)
    found = found_topic.subscriptions.get(subscription)
    if found is None:
        raise not_found(f"Subscription {subscription} not found for topic {found_topic.name}")
    return found


async def _partitions(request: Request, tenant: str, namespace: str, topic: str) -> tuple[TopicName, int]:
    name = topic_name(request, tenant, namespace, topic)
    count = _context(request).registry.partitions(name)
    if count == 0:
        raise not_found(f"Partitioned Topic {name} not found")
    return name, count


async def _loaded_partition(request: Request, name: TopicName) -> PersistentTopic | None:
    """A partition's topic, or None while no one has used it (its stats are all zero)."""
    try:
        return await _context(request).registry.get_topic(name, create=False)
    except TopicNotFoundError:
        return None


# -------------------------------------------------------------------------------------- routes


@router.get("/stats", tags=["persistent topic"], responses=_ERRORS)
async def get_stats(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    authoritative: bool = False,
    getPreciseBacklog: bool = False,
    subscriptionBacklogSize: bool = True,
    getEarliestTimeInBacklog: bool = False,
    excludePublishers: bool = False,
    excludeConsumers: bool = False,
) -> dict[str, Any]:
    """TopicStats. `getPreciseBacklog` changes nothing: backlogs are always counted in entries exactly."""
    found = await find_topic(request, tenant, namespace, topic)
    return await topic_stats(
        found,
        request.url.netloc,
        with_backlog_size=subscriptionBacklogSize,
        earliest_time=getEarliestTimeInBacklog,
        exclude_publishers=excludePublishers,
        exclude_consumers=excludeConsumers,
    )


@router.get("/internalStats", tags=["persistent topic"], responses=_ERRORS)
async def get_internal_stats(
    request: Request, tenant: str, namespace: str, topic: str, authoritative: bool = False, metadata: bool = False
) -> dict[str, Any]:
    return figures.topic_internal_stats(await find_topic(request, tenant, namespace, topic))


@router.get("/partitioned-stats", tags=["persistent topic"], responses=_ERRORS)
async def get_partitioned_stats(
    request: Request,
    tenant: str,
    namespace: str,
    topic: str,
    perPartition: bool = True,
    authoritative: bool = False,
    getPreciseBacklog: bool = False,
    subscriptionBacklogSize: bool = True,
    getEarliestTimeInBacklog: bool = False,
    excludePublishers: bool = False,
    excludeConsumers: bool = False,
) -> dict[str, Any]:
    name, count = await _partitions(request, tenant, namespace, topic)
    partitions: dict[str, dict[str, Any]] = {}
    for index in range(count):
        partition = name.partition(index)
        loaded = await _loaded_partition(request, partition)
        if loaded is None:
            continue
        partitions[str(partition)] = await topic_stats(
            loaded,
            request.url.netloc,
            with_backlog_size=subscriptionBacklogSize,
            earliest_time=getEarliestTimeInBacklog,
            exclude_publishers=excludePublishers,
            exclude_consumers=excludeConsumers,
        )
    return partitioned_stats(partitions, count, perPartition)


@router.get("/partitioned-internalStats", tags=["persistent topic"], responses=_ERRORS)
async def get_partitioned_internal_stats(
    request: Request, tenant: str, namespace: str, topic: str, authoritative: bool = False
) -> dict[str, Any]:
    name, count = await _partitions(request, tenant, namespace, topic)
    partitions = {}
    for index in range(count):
        loaded = await _loaded_partition(request, name.partition(index))
        if loaded is not None:
            partitions[str(name.partition(index))] = figures.topic_internal_stats(loaded)
    return {"metadata": {"partitions": count}, "partitions": partitions}
