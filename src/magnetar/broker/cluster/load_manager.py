"""The decisions of Pulsar 4.0's ModularLoadManagerImpl, over the brokers' LocalBrokerData.

Owns: the load data the decisions read (each bundle's short- and long-term averages of its reported
rates, the bundles assigned but not yet reported, the bundles shed lately and where they go), when a
broker writes its report (`need_broker_data_update`), a broker's usage, which broker gets a bundle nobody
owns (LeastLongTermMessageRate behind Pulsar's filters), which bundles to shed (ThresholdShedder) and which
to split (BundleSplitterTask). Ties are broken by broker id and bundle name where Pulsar draws at random,
so that brokers deciding from the same data decide alike.
Must not touch: the store, the clock, topics: it is pure. The load manager's loops
(modular_load_manager.py) give it the figures and carry its decisions out.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.broker.cluster.brokers import LocalBrokerData, NamespaceBundleStats
from magnetar.broker.config import BrokerConfig

__all__ = [
    "BundleData",
    "LoadData",
    "LoadSettings",
    "ThresholdShedder",
    "TimeAverageMessageData",
    "find_bundles_to_split",
    "max_resource_usage",
    "need_broker_data_update",
    "select_broker",
    "select_broker_for_assignment",
]

log = logging.getLogger("magnetar.broker.cluster")

MIB = 1024 * 1024  # LoadManagerShared.MIBI, and ThresholdShedder's MB
# ModularLoadManagerImpl's rates assumed for a bundle no report has shown yet, and its samples kept.
DEFAULT_MESSAGE_RATE = 50.0
DEFAULT_MESSAGE_THROUGHPUT = 50000.0
NUM_SHORT_SAMPLES = 10
NUM_LONG_SAMPLES = 1000
# ThresholdShedder offloads enough to bring a broker this far below the average plus the threshold.
ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05


@dataclass(frozen=True, slots=True)
class LoadSettings:
    """The settings the decisions read, in their units (bytes/s, milliseconds, fractions of one)."""

    report_update_threshold_percentage: float
    report_update_max_interval_ms: int
    shedding_grace_period_ms: int
    threshold_shedder: float
    history_resource_percentage: float
    bundle_unload_min_throughput: float
    cpu_resource_weight: float
    overloaded_threshold: float
    broker_max_topics: int
    distribute_bundles_evenly: bool
    bundle_max_topics: int
    bundle_max_sessions: int
    bundle_max_msg_rate: float
    bundle_max_bandwidth: float
    namespace_maximum_bundles: int

    @classmethod
    def of(cls, config: BrokerConfig) -> LoadSettings:
        return cls(
            report_update_threshold_percentage=config["loadBalancerReportUpdateThresholdPercentage"],
            report_update_max_interval_ms=config["loadBalancerReportUpdateMaxIntervalMinutes"] * 60_000,
            shedding_grace_period_ms=config["loadBalancerSheddingGracePeriodMinutes"] * 60_000,
            threshold_shedder=config["loadBalancerBrokerThresholdShedderPercentage"] / 100,
            history_resource_percentage=config["loadBalancerHistoryResourcePercentage"],
            bundle_unload_min_throughput=config["loadBalancerBundleUnloadMinThroughputThreshold"] * MIB,
            cpu_resource_weight=config["loadBalancerCPUResourceWeight"],
            overloaded_threshold=config["loadBalancerBrokerOverloadedThresholdPercentage"] / 100,
            broker_max_topics=config["loadBalancerBrokerMaxTopics"],
            distribute_bundles_evenly=config["loadBalancerDistributeBundlesEvenlyEnabled"],
            bundle_max_topics=config["loadBalancerNamespaceBundleMaxTopics"],
            bundle_max_sessions=config["loadBalancerNamespaceBundleMaxSessions"],
            bundle_max_msg_rate=config["loadBalancerNamespaceBundleMaxMsgRate"],
            bundle_max_bandwidth=config["loadBalancerNamespaceBundleMaxBandwidthMbytes"] * MIB,
            namespace_maximum_bundles=config["loadBalancerNamespaceMaximumBundles"],
        )


# ------------------------------------------------------------------------------------ reports


def max_resource_usage(data: LocalBrokerData, settings: LoadSettings) -> float:
    """Pulsar's `getMaxResourceUsageWithWeight` over the one resource magnetar measures, as a fraction.

    A usage past its limit counts as the limit: the process's worker threads (SQLite's) can take it past
    one core, and such a broker is overloaded, where Pulsar's ThresholdShedder would drop a signal above
    100% as misconfigured and see the broker idle."""
    return min(data.cpu.percent_usage(), 100.0) * settings.cpu_resource_weight / 100


def _percent_change(old: float, new: float) -> float:
    """ModularLoadManagerImpl's `percentChange`."""
    if old == 0:
        return 0.0 if new == 0 else math.inf
    return 100 * abs((old - new) / old)


def need_broker_data_update(last: LocalBrokerData, local: LocalBrokerData, now_ms: int, settings: LoadSettings) -> bool:
    """ModularLoadManagerImpl's `needBrokerDataUpdate`: whether the figures measured now (`local`) differ
    enough from the ones written last (`last`), or the last write is too old."""
    if now_ms - last.last_update > settings.report_update_max_interval_ms:
        return True
    change = max(
        _percent_change(last.msg_rate_in + last.msg_rate_out, local.msg_rate_in + local.msg_rate_out),
        _percent_change(
            last.msg_throughput_in + last.msg_throughput_out, local.msg_throughput_in + local.msg_throughput_out
        ),
        _percent_change(last.num_bundles, local.num_bundles),
        100 * abs(max_resource_usage(last, settings) - max_resource_usage(local, settings)),
    )
    return change > settings.report_update_threshold_percentage


# ------------------------------------------------------------------------------------ load data


@dataclass(slots=True)
class TimeAverageMessageData:
    """Pulsar's TimeAverageMessageData: averages of a bundle's rates over its last `max_samples` reports;
    the defaults stand until the first sample replaces them."""

    max_samples: int
    msg_rate_in: float = DEFAULT_MESSAGE_RATE
    msg_rate_out: float = DEFAULT_MESSAGE_RATE
    msg_throughput_in: float = DEFAULT_MESSAGE_THROUGHPUT
    msg_throughput_out: float = DEFAULT_MESSAGE_THROUGHPUT
    num_samples: int = 0

    def update(self, stats: NamespaceBundleStats) -> None:
        self.num_samples = min(self.num_samples + 1, self.max_samples)
        n = self.num_samples
        self.msg_rate_in = ((n - 1) * self.msg_rate_in + stats.msg_rate_in) / n
        self.msg_rate_out = ((n - 1) * self.msg_rate_out + stats.msg_rate_out) / n
        self.msg_throughput_in = ((n - 1) * self.msg_throughput_in + stats.msg_throughput_in) / n
        self.msg_throughput_out = ((n - 1) * self.msg_throughput_out + stats.msg_throughput_out) / n

    @property
    def total_msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    @property
    def total_msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out


@dataclass(slots=True)
class BundleData:
    """Pulsar's BundleData: a bundle's short-term (10 reports) and long-term (1,000 reports) averages."""

    short_term: TimeAverageMessageData = field(default_factory=lambda: TimeAverageMessageData(NUM_SHORT_SAMPLES))
    long_term: TimeAverageMessageData = field(default_factory=lambda: TimeAverageMessageData(NUM_LONG_SAMPLES))
    topics: int = 0

    def update(self, stats: NamespaceBundleStats) -> None:
        self.short_term.update(stats)
        self.long_term.update(stats)
        self.topics = stats.topics


def _namespace(bundle: str) -> str:
    """LoadManagerShared's `getNamespaceNameFromBundleName`."""
    return bundle.rpartition("/")[0]


@dataclass(slots=True)
class LoadData:
    """Pulsar's LoadData, and the load manager's maps beside it. Invariants: `preallocated` names live
    brokers only, and no bundle a broker reports owning (its preallocation is over once reported)."""

    # The live brokers' reports, by broker id.
    brokers: dict[str, LocalBrokerData] = field(default_factory=dict)
    # Each bundle some report shows (or that was assigned since), by its full name.
    bundles: dict[str, BundleData] = field(default_factory=dict)
    # Bundles assigned to a broker whose report does not show them yet (preallocatedBundleToBroker).
    preallocated: dict[str, str] = field(default_factory=dict)
    # Bundles shed, and when (epoch ms): not shed again within the grace period.
    recently_unloaded: dict[str, int] = field(default_factory=dict)
    # Where a bundle shed goes (the leader's bundleBrokerAffinityMap), consumed by its next assignment.
    affinity: dict[str, str] = field(default_factory=dict)

    def update(self, brokers: Mapping[str, LocalBrokerData]) -> None:
        """updateAllBrokerData and updateBundleData: the reports read now. A bundle's averages take one
        sample from each report that shows new figures of it (Pulsar takes one per update, new or not; a
        report written because the owned bundles changed repeats the figures it had)."""
        for broker_id, data in brokers.items():
            seen = self.brokers.get(broker_id)
            before = seen.last_stats if seen is not None else {}
            for bundle, stats in data.last_stats.items():
                if before.get(bundle) != stats:
                    self.bundles.setdefault(bundle, BundleData()).update(stats)
        self.brokers = dict(brokers)
        reported = {bundle for data in brokers.values() for bundle in data.bundles}
        self.preallocated = {
            bundle: broker
            for bundle, broker in self.preallocated.items()
            if broker in brokers and bundle not in reported
        }
        active = {bundle for data in brokers.values() for bundle in data.last_stats} | set(self.preallocated)
        self.bundles = {bundle: data for bundle, data in self.bundles.items() if bundle in active}

    def forget_unloaded_before(self, since_ms: int) -> None:
        """The grace period of the bundles shed before `since_ms` is over."""
        self.recently_unloaded = {b: at for b, at in self.recently_unloaded.items() if at >= since_ms}

    def bundle_data(self, bundle: str) -> BundleData:
        """The bundle's averages, the defaults for a bundle no report showed."""
        return self.bundles.get(bundle) or BundleData()


# ------------------------------------------------------------------------------------ placement


def _long_term_message_rate(broker: str, data: LocalBrokerData, load: LoadData) -> float:
    """LeastLongTermMessageRate's estimate: the long-term rate of the bundles the broker reports
    (TimeAverageBrokerData) and of the ones assigned to it since (its preallocated bundle data)."""
    reported = sum(load.bundle_data(bundle).long_term.total_msg_rate for bundle in data.last_stats)
    assigned = sum(
        load.bundle_data(bundle).long_term.total_msg_rate
        for bundle, owner in load.preallocated.items()
        if owner == broker
    )
    return reported + assigned


def _least_long_term_message_rate(
    candidates: list[str], brokers: Mapping[str, LocalBrokerData], load: LoadData, settings: LoadSettings
) -> str | None:
    """LeastLongTermMessageRate.selectBroker: the lowest score, an overloaded broker scoring infinity (all
    overloaded: all tie). Ties go to the lowest broker id."""

    def score(broker: str) -> float:
        data = brokers[broker]
        if max_resource_usage(data, settings) > settings.overloaded_threshold:
            log.warning("Broker %s is overloaded: CPU %.1f%%", broker, data.cpu.percent_usage())
            return math.inf
        return _long_term_message_rate(broker, data, load)

    return min(sorted(candidates), key=score, default=None)


def _topics_of(broker: str, brokers: Mapping[str, LocalBrokerData], load: LoadData) -> int:
    assigned = sum(load.bundle_data(b).topics for b, owner in load.preallocated.items() if owner == broker)
    return brokers[broker].num_topics + assigned


def _bundles_of_namespace(broker: str, namespace: str, brokers: Mapping[str, LocalBrokerData], load: LoadData) -> int:
    owned = {bundle for bundle in brokers[broker].bundles if _namespace(bundle) == namespace}
    assigned = {b for b, owner in load.preallocated.items() if owner == broker and _namespace(b) == namespace}
    return len(owned | assigned)


def _candidates(
    bundle: str, brokers: Mapping[str, LocalBrokerData], load: LoadData, settings: LoadSettings
) -> list[str]:
    """The brokers selectBroker's filters keep: LoadManagerShared's `filterBrokersWithLargeTopicCount`
    (unless it would keep none), then `removeMostServicingBrokersForNamespace` when bundles are
    distributed evenly (loadBalancerDistributeBundlesEvenlyEnabled)."""
    candidates = sorted(brokers)
    small = [b for b in candidates if _topics_of(b, brokers, load) <= settings.broker_max_topics]
    candidates = small or candidates
    if settings.distribute_bundles_evenly and candidates:
        counts = {b: _bundles_of_namespace(b, _namespace(bundle), brokers, load) for b in candidates}
        fewest = min(counts.values())
        candidates = [b for b in candidates if counts[b] == fewest]
    return candidates


def select_broker(
    bundle: str, brokers: Mapping[str, LocalBrokerData], load: LoadData, settings: LoadSettings
) -> str | None:
    """ModularLoadManagerImpl.selectBroker: the placement strategy among the filtered candidates; when the
    one it picks is overloaded, among every live broker. None when no broker is live."""
    chosen = _least_long_term_message_rate(_candidates(bundle, brokers, load, settings), brokers, load, settings)
    if chosen is not None and max_resource_usage(brokers[chosen], settings) > settings.overloaded_threshold:
        chosen = _least_long_term_message_rate(list(brokers), brokers, load, settings) or chosen
    return chosen


def select_broker_for_assignment(
    bundle: str, brokers: Mapping[str, LocalBrokerData], load: LoadData, settings: LoadSettings
) -> str | None:
    """Which live broker gets `bundle`, which nobody owns (ModularLoadManagerWrapper.getLeastLoaded and
    selectBrokerForAssignment): where the leader shed it to, else the broker it was assigned to already,
    else `select_broker`'s choice, remembered as preallocated."""
    destination = load.affinity.pop(bundle, None)
    if destination in brokers:
        return destination
    assigned = load.preallocated.get(bundle)
    if assigned in brokers:
        return assigned
    chosen = select_broker(bundle, brokers, load, settings)
    if chosen is not None:
        load.preallocated[bundle] = chosen
    return chosen


# ------------------------------------------------------------------------------------ shedding


class ThresholdShedder:
    """Pulsar's ThresholdShedder: a broker whose usage (a running average, loadBalancerHistoryResource-
    Percentage of it the past) is above the brokers' average plus loadBalancerBrokerThresholdShedderPercentage
    sheds its busiest bundles until the throughput marked is enough to bring it 5% below that; at least one
    bundle, none of a broker with a single bundle, none shed within the grace period, nothing when the
    throughput to offload is below loadBalancerBundleUnloadMinThroughputThreshold. The leader keeps one:
    the running averages are its state."""

    def __init__(self) -> None:
        self._usage: dict[str, float] = {}

    def find_bundles_for_unloading(self, load: LoadData, settings: LoadSettings) -> dict[str, list[str]]:
        """Bundles to shed, by the broker that owns them."""
        average = self._average_usage(load.brokers, settings)
        if average == 0:
            return {}
        selected: dict[str, list[str]] = {}
        for broker, data in sorted(load.brokers.items()):
            usage = self._usage[broker]
            if usage < average + settings.threshold_shedder:
                continue
            share = usage - average - settings.threshold_shedder + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            offload = (data.msg_throughput_in + data.msg_throughput_out) * share
            if offload < settings.bundle_unload_min_throughput:
                continue
            if len(data.bundles) == 1:
                log.warning("Sole namespace bundle %s is overloading broker %s: not shed", data.bundles[0], broker)
                continue
            chosen = _busiest_bundles(load, data, offload)
            if chosen:
                log.info(
                    "Shedding %s off %s: usage %.0f%% > average %.0f%% + %.0f%%, offloading %.1f MB/s",
                    ", ".join(chosen),
                    broker,
                    100 * usage,
                    100 * average,
                    100 * settings.threshold_shedder,
                    offload / MIB,
                )
                selected[broker] = chosen
        return selected

    def _average_usage(self, brokers: Mapping[str, LocalBrokerData], settings: LoadSettings) -> float:
        """Each broker's running average updated with its report; their mean."""
        history = settings.history_resource_percentage
        usage = {}
        for broker, data in brokers.items():
            now = max_resource_usage(data, settings)
            before = self._usage.get(broker)
            usage[broker] = now if before is None else before * history + (1 - history) * now
        self._usage = usage
        return sum(usage.values()) / len(usage) if usage else 0.0


def _busiest_bundles(load: LoadData, data: LocalBrokerData, offload: float) -> list[str]:
    """The broker's bundles by short-term throughput, busiest first, until `offload` is marked (at least
    one), skipping the ones shed within the grace period."""
    candidates = [b for b in data.bundles if b in load.bundles and b not in load.recently_unloaded]
    candidates.sort(key=lambda b: (-load.bundles[b].short_term.total_msg_throughput, b))
    chosen: list[str] = []
    marked = 0.0
    for bundle in candidates:
        if marked >= offload and chosen:
            break
        chosen.append(bundle)
        marked += load.bundles[bundle].short_term.total_msg_throughput
    return chosen


# ------------------------------------------------------------------------------------ splitting


def _is_hot(stats: NamespaceBundleStats, data: BundleData | None, settings: LoadSettings) -> bool:
    """BundleSplitterTask's thresholds: topics and sessions as reported, rates long-term (none before the
    bundle has averages)."""
    sessions = stats.consumer_count + stats.producer_count
    rate = data.long_term.total_msg_rate if data is not None else 0.0
    throughput = data.long_term.total_msg_throughput if data is not None else 0.0
    return (
        stats.topics > settings.bundle_max_topics
        or (settings.bundle_max_sessions > 0 and sessions > settings.bundle_max_sessions)
        or rate > settings.bundle_max_msg_rate
        or throughput > settings.bundle_max_bandwidth
    )


def find_bundles_to_split(load: LoadData, bundle_counts: Mapping[str, int], settings: LoadSettings) -> dict[str, str]:
    """BundleSplitterTask.findBundlesToSplit: the hot bundles of at least two topics, by the broker that
    reports them, while their namespace has fewer than loadBalancerNamespaceMaximumBundles bundles
    (`bundle_counts`, counting the splits chosen here)."""
    selected: dict[str, str] = {}
    splits: Counter[str] = Counter()
    for broker, data in sorted(load.brokers.items()):
        for bundle, stats in sorted(data.last_stats.items()):
            if stats.topics < 2 or not _is_hot(stats, load.bundles.get(bundle), settings):
                continue
            namespace = _namespace(bundle)
            count = bundle_counts.get(namespace, 0) + splits[namespace]
            if count >= settings.namespace_maximum_bundles:
                log.warning("Bundle %s is not split: namespace %s has %d bundles", bundle, namespace, count)
                continue
            selected[bundle] = broker
            splits[namespace] += 1
    return selected
