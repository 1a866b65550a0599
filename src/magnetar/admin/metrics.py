"""`GET /metrics`: Prometheus text format, with Pulsar's metric names and labels where Pulsar has them.

Owns: one prometheus-client collector that reads the loaded topics when scraped (topic, subscription
and storage figures under Pulsar's names and `cluster`/`namespace`/`topic`/`subscription` labels;
`magnetar_*` gauges for draining hashes), plus the process collectors.
Must not touch: state, or the hot path: nothing is instrumented per message. A scrape reads the
counters producers, consumers and storage keep anyway, the core's `summary()` (no per-consumer or
per-hash lists), and rates from the same meters the stats use (admin/stats.py).

As in Pulsar with `exposeTopicLevelMetricsInPrometheus=true` (its default), figures are per topic (a
partition is a topic); only loaded topics appear. Unlike Pulsar, whose storage latency buckets hold
the last minute's counts, `pulsar_storage_write_latency_*` count every entry since the topic loaded,
so `rate()` over them works as on any Prometheus counter.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import choose_encoder

from magnetar.admin.stats import consumer_rates, producer_rates, replication_stats
from magnetar.broker import figures as broker_figures
from magnetar.storage.write_latency import WRITE_LATENCY_BOUNDS_MS

if TYPE_CHECKING:
    from magnetar.broker.context import BrokerContext
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic

__all__ = ["router", "BrokerCollector"]

router = APIRouter()

_TOPIC = ["cluster", "namespace", "topic"]
_SUBSCRIPTION = [*_TOPIC, "subscription"]

# name -> help, for the per-topic gauges, in Pulsar's order.
_TOPIC_GAUGES = {
    "pulsar_subscriptions_count": "Subscriptions of the topic.",
    "pulsar_producers_count": "Connected producers.",
    "pulsar_consumers_count": "Connected consumers, over all subscriptions.",
    "pulsar_rate_in": "Messages published per second.",
    "pulsar_rate_out": "Messages dispatched per second, over all subscriptions.",
    "pulsar_throughput_in": "Bytes published per second.",
    "pulsar_throughput_out": "Bytes dispatched per second, over all subscriptions.",
    "pulsar_average_msg_size": "Average size of the messages published in the last rate window (bytes).",
    "pulsar_storage_size": "Bytes the topic's ledgers hold.",
    "pulsar_storage_logical_size": "Bytes the topic's ledgers hold (one copy: no replicas).",
    "pulsar_msg_backlog": "Entries not acknowledged, summed over subscriptions.",
    "pulsar_storage_backlog_size": "Estimated bytes not acknowledged by the slowest durable subscription.",
}
_LATENCY_NAMES = [
    "pulsar_storage_write_latency_le_" + f"{bound:g}".replace(".", "_") for bound in WRITE_LATENCY_BOUNDS_MS
] + ["pulsar_storage_write_latency_overflow"]

_SUBSCRIPTION_GAUGES = {
    "pulsar_subscription_back_log": "Entries not acknowledged.",
    "pulsar_subscription_back_log_no_delayed": "Entries not acknowledged, without the delayed ones.",
    "pulsar_subscription_delayed": "Messages held until their deliver-at time.",
    "pulsar_subscription_in_replay": "Messages in the replay queue (to be redelivered before newer ones).",
    "pulsar_subscription_msg_rate_redeliver": "Entries redelivered per second (negative acks, ack timeouts).",
    "pulsar_subscription_unacked_messages": "Messages sent to consumers and not acknowledged.",
    "pulsar_subscription_blocked_on_unacked_messages": "1 while the subscription is at maxUnackedMessagesPerSubscription.",
    "pulsar_subscription_msg_rate_out": "Messages dispatched per second.",
    "pulsar_subscription_msg_ack_rate": "Message ids acknowledged per second.",
    "pulsar_subscription_msg_throughput_out": "Bytes dispatched per second.",
    "pulsar_subscription_last_acked_timestamp": "When a consumer last acknowledged (epoch ms).",
    "pulsar_subscription_last_consumed_flow_timestamp": "When a consumer last asked for messages (epoch ms).",
    "pulsar_subscription_last_consumed_timestamp": "When a consumer was last sent messages (epoch ms).",
    "pulsar_subscription_last_mark_delete_advanced_timestamp": "When the mark-delete position last moved (epoch ms).",
    "pulsar_subscription_consumers_count": "Connected consumers.",
    "magnetar_subscription_draining_hashes": "Key_Shared (PIP-379): sticky hashes draining from a consumer.",
    "magnetar_subscription_draining_hashes_unacked_messages": "Key_Shared (PIP-379): unacked messages of "
    "draining hashes, which hold those hashes back from their new consumers.",
    "magnetar_subscription_draining_hashes_cleared": "Key_Shared (PIP-379): hashes that stopped draining, "
    "summed over the connected consumers since each connected.",
}


_REPLICATION = [*_TOPIC, "remote_cluster"]
_REPLICATION_GAUGES = {
    "pulsar_replication_rate_in": "Messages per second received from the remote cluster's replicator.",
    "pulsar_replication_rate_out": "Messages per second sent to the remote cluster.",
    "pulsar_replication_throughput_in": "Bytes per second received from the remote cluster's replicator.",
    "pulsar_replication_throughput_out": "Bytes per second sent to the remote cluster.",
    "pulsar_replication_backlog": "Entries not yet replicated to the remote cluster.",
    "pulsar_replication_connected_count": "1 while the replicator to the remote cluster is connected.",
    "pulsar_replication_disconnected_count": "1 while the replicator to the remote cluster is not connected.",
    "pulsar_replication_rate_expired": "Messages per second expired before replication (message TTL).",
    "pulsar_replication_delay_in_seconds": "Age of the oldest entry sent to the remote cluster and not confirmed.",
}


def _gauges(names: dict[str, str], labels: list[str]) -> dict[str, GaugeMetricFamily]:
    return {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in names.items()}


class BrokerCollector:
    """Builds every family from the broker's state each time the registry collects."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    def collect(self) -> Iterator[Metric]:
        context = self.context
        cluster = context.config["clusterName"]
        now_s = context.clock.time_ms() / 1000
        topic_gauges = _gauges(_TOPIC_GAUGES, _TOPIC)
        latency = {
            name: GaugeMetricFamily(
                name,
                "Entries made durable within this bound of storage write latency (ms) since the topic loaded.",
                labels=_TOPIC,
            )
            for name in _LATENCY_NAMES
        }
        latency_count = GaugeMetricFamily("pulsar_storage_write_latency_count", "Entries timed.", labels=_TOPIC)
        latency_sum = GaugeMetricFamily(
            "pulsar_storage_write_latency_sum", "Sum of their latencies (ms).", labels=_TOPIC
        )
        in_bytes = CounterMetricFamily("pulsar_in_bytes", "Bytes published since the topic loaded.", labels=_TOPIC)
        in_messages = CounterMetricFamily(
            "pulsar_in_messages", "Messages published since the topic loaded.", labels=_TOPIC
        )
        subscription_gauges = _gauges(_SUBSCRIPTION_GAUGES, _SUBSCRIPTION)
        out_bytes = CounterMetricFamily(
            "pulsar_out_bytes", "Bytes dispatched by the subscription.", labels=_SUBSCRIPTION
        )
        out_messages = CounterMetricFamily(
            "pulsar_out_messages", "Messages dispatched by the subscription.", labels=_SUBSCRIPTION
        )
        topics_count = GaugeMetricFamily(
            "pulsar_topics_count", "Loaded topics of the namespace.", labels=["cluster", "namespace"]
        )
        replication_gauges = _gauges(_REPLICATION_GAUGES, _REPLICATION)
        per_namespace: dict[str, int] = {}
        for topic in list(context.registry.topics.values()):
            namespace = topic.name.namespace_name
            per_namespace[namespace] = per_namespace.get(namespace, 0) + 1
            labels = [cluster, namespace, str(topic.name)]
            figures = _topic_figures(topic, now_s, labels, subscription_gauges, out_bytes, out_messages)
            for name, value in figures.items():
                topic_gauges[name].add_metric(labels, value)
            buckets = broker_figures.write_latency(topic)
            for name, count in zip(_LATENCY_NAMES, buckets.buckets):
                latency[name].add_metric(labels, count)
            latency_count.add_metric(labels, buckets.count)
            latency_sum.add_metric(labels, buckets.sum_ms)
            in_bytes.add_metric(labels, topic.bytes_in_counter)
            in_messages.add_metric(labels, topic.msg_in_counter)
            for remote, stats in replication_stats(topic, now_s).items():
                figures = {
                    "pulsar_replication_rate_in": stats["msgRateIn"],
                    "pulsar_replication_rate_out": stats["msgRateOut"],
                    "pulsar_replication_throughput_in": stats["msgThroughputIn"],
                    "pulsar_replication_throughput_out": stats["msgThroughputOut"],
                    "pulsar_replication_backlog": stats["replicationBacklog"],
                    "pulsar_replication_connected_count": int(stats["connected"]),
                    "pulsar_replication_disconnected_count": int(not stats["connected"]),
                    "pulsar_replication_rate_expired": stats["msgRateExpired"],
                    "pulsar_replication_delay_in_seconds": stats["replicationDelayInSeconds"],
                }
                for name, value in figures.items():
                    replication_gauges[name].add_metric([*labels, remote], value)
        for namespace, count in sorted(per_namespace.items()):
            topics_count.add_metric([cluster, namespace], count)
        yield topics_count
        yield from topic_gauges.values()
        yield in_bytes
        yield in_messages
        yield from latency.values()
        yield latency_count
        yield latency_sum
        yield from subscription_gauges.values()
        yield out_bytes
        yield out_messages
        yield from replication_gauges.values()
        yield from _replicated_subscriptions_families(context, cluster)
        yield from _connection_families(context, cluster)
        yield from _cache_families(context, cluster)


def _cache_families(context: BrokerContext, cluster: str) -> Iterator[Metric]:
    """The broker's entry cache (storage/entry_cache.py), Pulsar's `pulsar_ml_cache_used_size`, and as
    counters what Pulsar reports as per-second rates (`pulsar_ml_cache_hits_rate`, ...): a read that misses
    goes to the disk or the bookies."""
    cache = context.storage.cache
    used = GaugeMetricFamily("pulsar_ml_cache_used_size", "Bytes the entry cache holds.", labels=["cluster"])
    used.add_metric([cluster], cache.size_bytes)
    counters = {
        "magnetar_ml_cache_hits": ("Entries read from the entry cache.", cache.hits),
        "magnetar_ml_cache_misses": ("Reads the entry cache could not answer whole.", cache.misses),
        "magnetar_ml_cache_evictions": ("Entries evicted from the entry cache.", cache.evictions),
    }
    yield used
    for name, (doc, value) in counters.items():
        counter = CounterMetricFamily(name, doc, labels=["cluster"])
        counter.add_metric([cluster], value)
        yield counter


def _connection_families(context: BrokerContext, cluster: str) -> Iterator[Metric]:
    """Pulsar's broker-wide connection metrics: client connections open now, opened since start, and not
    read now for the publish limits (broker/publish_limits.py)."""
    active = GaugeMetricFamily("pulsar_active_connections", "Client connections open.", labels=["cluster"])
    active.add_metric([cluster], context.connections.active)
    created = GaugeMetricFamily(
        "pulsar_connection_created_total_count",
        "Client connections opened since the broker started.",
        labels=["cluster"],
    )
    created.add_metric([cluster], context.connections.created)
    buffer = context.publish_buffer
    throttled = GaugeMetricFamily(
        "pulsar_broker_throttled_connections",
        "Connections not read now: their SENDs waiting for receipts reached maxPendingPublishRequestsPerConnection.",
        labels=["cluster"],
    )
    throttled.add_metric([cluster], buffer.throttled_connections)
    throttled_global = GaugeMetricFamily(
        "pulsar_broker_throttled_connections_global_limit",
        "Connections not read now: the broker's unanswered SENDs passed maxMessagePublishBufferSizeInMB.",
        labels=["cluster"],
    )
    throttled_global.add_metric([cluster], buffer.throttled_global)
    yield active
    yield created
    yield throttled
    yield throttled_global


def _replicated_subscriptions_families(context: BrokerContext, cluster: str) -> Iterator[Metric]:
    """Pulsar's broker-wide snapshot metrics of replicated subscriptions (PIP-33), summed over the
    controllers of the loaded topics: counts run from when a topic's controller started, so they go down
    when a topic unloads, which Prometheus's rate() reads as a counter reset."""
    pending = timed_out = count = 0
    total_ms = 0.0
    for topic in list(context.registry.topics.values()):
        controller = topic.replicated_subscriptions
        if controller is None:
            continue
        pending += len(controller.snapshots.pending)
        timed_out += controller.snapshots.timed_out_count
        count += controller.snapshot_ms_count
        total_ms += controller.snapshot_ms_sum
    labels = ["cluster"]
    gauge = GaugeMetricFamily(
        "pulsar_replicated_subscriptions_pending_snapshots",
        "Snapshots started and neither complete nor timed out.",
        labels=labels,
    )
    gauge.add_metric([cluster], pending)
    yield gauge
    counter = CounterMetricFamily(
        "pulsar_replicated_subscriptions_timedout_snapshots",
        "Snapshots that timed out (replicatedSubscriptionsSnapshotTimeoutSeconds).",
        labels=labels,
    )
    counter.add_metric([cluster], timed_out)
    yield counter
    summary = SummaryMetricFamily(
        "pulsar_replicated_subscriptions_snapshot_ms",
        "Time taken to complete a snapshot across the clusters (ms).",
        labels=labels,
    )
    summary.add_metric([cluster], count_value=count, sum_value=total_ms)
    yield summary


def _topic_figures(
    topic: PersistentTopic,
    now_s: float,
    labels: list[str],
    gauges: dict[str, GaugeMetricFamily],
    out_bytes: CounterMetricFamily,
    out_messages: CounterMetricFamily,
) -> dict[str, float]:
    """Adds each subscription's samples; returns the topic's figures."""
    rate_in = throughput_in = rate_out = throughput_out = 0.0
    for producer in list(topic.producers.values()):
        rate, throughput = producer_rates(producer, now_s)
        rate_in += rate
        throughput_in += throughput
    backlog = consumers = slowest = 0
    for name, subscription in list(topic.subscriptions.items()):
        figures = _subscription_figures(subscription, now_s)
        sub_labels = [*labels, name]
        for metric, value in figures.items():
            if metric in gauges:
                gauges[metric].add_metric(sub_labels, value)
        out_bytes.add_metric(sub_labels, figures["bytes_out"])
        out_messages.add_metric(sub_labels, figures["messages_out"])
        rate_out += figures["pulsar_subscription_msg_rate_out"]
        throughput_out += figures["pulsar_subscription_msg_throughput_out"]
        backlog += figures["pulsar_subscription_back_log"]
        consumers += figures["pulsar_subscription_consumers_count"]
        if subscription.durable:
            slowest = max(slowest, broker_figures.backlog_size(subscription))
    size = broker_figures.storage_size(topic)
    return {
        "pulsar_subscriptions_count": len(topic.subscriptions),
        "pulsar_producers_count": len(topic.producers),
        "pulsar_consumers_count": consumers,
        "pulsar_rate_in": rate_in,
        "pulsar_rate_out": rate_out,
        "pulsar_throughput_in": throughput_in,
        "pulsar_throughput_out": throughput_out,
        "pulsar_average_msg_size": throughput_in / rate_in if rate_in else 0.0,
        "pulsar_storage_size": size,
        "pulsar_storage_logical_size": size,
        "pulsar_msg_backlog": backlog,
        "pulsar_storage_backlog_size": slowest,
    }


def _subscription_figures(subscription: PersistentSubscription, now_s: float) -> dict[str, Any]:
    summary = broker_figures.dispatcher_summary(subscription)
    rate_out = throughput_out = redeliver = ack = 0.0
    bytes_out = subscription.bytes_out_from_removed_consumers
    messages_out = subscription.msg_out_from_removed_consumers
    last_acked = last_consumed = 0
    for consumer in list(subscription.consumers.values()):
        redelivered = broker_figures.redelivered(subscription, consumer.consumer_id)
        rate, throughput, redelivery, acks = consumer_rates(consumer, redelivered, now_s)
        rate_out += rate
        throughput_out += throughput
        redeliver += redelivery
        ack += acks
        bytes_out += consumer.bytes_out_counter
        messages_out += consumer.msg_out_counter
        last_acked = max(last_acked, consumer.last_acked_ms)
        last_consumed = max(last_consumed, consumer.last_consumed_ms)
    backlog = broker_figures.backlog_entries(subscription)
    delayed = summary.msg_delayed
    figures: dict[str, Any] = {
        "pulsar_subscription_back_log": backlog,
        "pulsar_subscription_back_log_no_delayed": backlog - delayed,
        "pulsar_subscription_delayed": delayed,
        "pulsar_subscription_in_replay": summary.msg_in_replay,
        "pulsar_subscription_msg_rate_redeliver": redeliver,
        "pulsar_subscription_unacked_messages": summary.unacked_messages,
        "pulsar_subscription_blocked_on_unacked_messages": int(summary.blocked_on_unacked),
        "pulsar_subscription_msg_rate_out": rate_out,
        "pulsar_subscription_msg_ack_rate": ack,
        "pulsar_subscription_msg_throughput_out": throughput_out,
        "pulsar_subscription_last_acked_timestamp": last_acked,
        "pulsar_subscription_last_consumed_flow_timestamp": subscription.last_consumed_flow_ms,
        "pulsar_subscription_last_consumed_timestamp": last_consumed,
        "pulsar_subscription_last_mark_delete_advanced_timestamp": subscription.last_mark_delete_advanced_ms,
        "pulsar_subscription_consumers_count": len(subscription.consumers),
        "bytes_out": bytes_out,
        "messages_out": messages_out,
    }
    if summary.draining is not None:
        figures["magnetar_subscription_draining_hashes"] = summary.draining.count
        figures["magnetar_subscription_draining_hashes_unacked_messages"] = summary.draining.unacked_messages
        figures["magnetar_subscription_draining_hashes_cleared"] = summary.draining.cleared_total
    return figures


def _registry(request: Request) -> CollectorRegistry:
    """One registry per application, made on the first scrape."""
    state = request.app.state
    registry = getattr(state, "metrics_registry", None)
    if registry is None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(state.context))
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        state.metrics_registry = registry
    return registry


@router.get("/metrics", tags=["metrics"], response_class=Response)
async def get_metrics(request: Request) -> Response:
    """Prometheus text format 0.0.4, as Pulsar serves it, or what the scraper's Accept header asks
    for (OpenMetrics, text 1.0.0)."""
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(_registry(request)), headers={"Content-Type": content_type})
