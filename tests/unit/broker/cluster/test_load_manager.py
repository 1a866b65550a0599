"""The load manager's decisions (load_manager.py, pure) on hand-made reports: when a report is written
(Pulsar's needBrokerDataUpdate), which broker gets a bundle (LeastLongTermMessageRate behind
ModularLoadManagerImpl's filters), which bundles are shed (ThresholdShedder) and split
(BundleSplitterTask)."""

from __future__ import annotations

import dataclasses

import pytest

from magnetar.broker.cluster.brokers import LocalBrokerData, NamespaceBundleStats, ResourceUsage
from magnetar.broker.cluster.bundles import Bundle, NamespaceBundles, default_boundaries, range_equally_divide
from magnetar.broker.cluster.load_manager import (
    MIB,
    LoadData,
    LoadSettings,
    ThresholdShedder,
    TimeAverageMessageData,
    find_bundles_to_split,
    max_resource_usage,
    need_broker_data_update,
    select_broker,
    select_broker_for_assignment,
)
from magnetar.broker.config import load_config

NS = "public/default"
B0, B1, B2, B3 = (str(b) for b in NamespaceBundles(NS, tuple(default_boundaries(4))).bundles)
NOW_MS = 1_000_000_000


def settings(**overrides: str) -> LoadSettings:
    return LoadSettings.of(load_config(overrides=overrides))


def broker(cpu: float = 0.0, stats: dict[str, NamespaceBundleStats] | None = None, **fields: object) -> LocalBrokerData:
    """A report with `cpu` percent of one core and these bundles' stats (the bundles it owns)."""
    data = LocalBrokerData("http://h:8080", None, "pulsar://h:6650", None, last_update=NOW_MS)
    stats = stats or {}
    data.bundles = list(stats)
    data.num_bundles = len(stats)
    data.update_stats(ResourceUsage(cpu, 100.0), stats)
    return dataclasses.replace(data, **fields)  # type: ignore[arg-type]


def throughput(mb_per_s: float, topics: int = 1) -> NamespaceBundleStats:
    """Stats of a bundle moving `mb_per_s` in and as much out, 100 messages a second each way."""
    return NamespaceBundleStats(100.0, mb_per_s * MIB, 100.0, mb_per_s * MIB, 1, 1, topics)


# ------------------------------------------------------------------------------------ reports


def test_a_report_is_written_when_a_figure_changed_by_more_than_the_threshold() -> None:
    rules = settings()
    last = broker(cpu=50.0, stats={B0: throughput(10)}, msg_rate_in=100.0, msg_rate_out=100.0)
    same = dataclasses.replace(last, msg_rate_in=109.0, msg_rate_out=100.0)
    assert not need_broker_data_update(last, same, NOW_MS + 1000, rules)
    # Rates: 200 -> 230 msg/s is 15%, over loadBalancerReportUpdateThresholdPercentage (10).
    assert need_broker_data_update(last, dataclasses.replace(last, msg_rate_in=130.0), NOW_MS + 1000, rules)
    # CPU: the usage's change in points of percent: 50% -> 61%.
    assert need_broker_data_update(last, dataclasses.replace(last, cpu=ResourceUsage(61, 100)), NOW_MS, rules)
    assert not need_broker_data_update(last, dataclasses.replace(last, cpu=ResourceUsage(59, 100)), NOW_MS, rules)
    # Bundles: from none to some is an infinite change.
    empty = broker()
    assert need_broker_data_update(empty, broker(stats={B0: NamespaceBundleStats()}), NOW_MS, rules)
    assert not need_broker_data_update(empty, broker(), NOW_MS, rules)


def test_a_report_is_written_at_least_every_max_interval() -> None:
    rules = settings(loadBalancerReportUpdateMaxIntervalMinutes="15")
    last = broker(cpu=10.0)
    assert not need_broker_data_update(last, last, NOW_MS + 15 * 60_000, rules)
    assert need_broker_data_update(last, last, NOW_MS + 15 * 60_000 + 1, rules)


def test_the_usage_is_the_cpu_of_one_core_weighted_and_capped_at_the_limit() -> None:
    assert max_resource_usage(broker(cpu=42.0), settings()) == pytest.approx(0.42)
    assert max_resource_usage(broker(cpu=42.0), settings(loadBalancerCPUResourceWeight="0.5")) == pytest.approx(0.21)
    # The worker threads can take the process past one core: that is an overloaded broker.
    assert max_resource_usage(broker(cpu=130.0), settings()) == 1.0
    assert max_resource_usage(LocalBrokerData("http://h:8080", None, "pulsar://h:6650", None), settings()) == 0.0


def test_an_average_starts_at_pulsars_defaults_and_the_first_sample_replaces_them() -> None:
    average = TimeAverageMessageData(10)
    assert (average.total_msg_rate, average.total_msg_throughput) == (100.0, 100000.0)
    average.update(NamespaceBundleStats(10.0, 1000.0, 30.0, 3000.0))
    assert (average.total_msg_rate, average.total_msg_throughput) == (40.0, 4000.0)
    average.update(NamespaceBundleStats(30.0, 3000.0, 50.0, 5000.0))
    assert average.total_msg_rate == 60.0


# ------------------------------------------------------------------------------------ placement


def test_a_bundle_goes_to_the_broker_with_the_fewest_bundles_of_its_namespace_then_the_least_rate() -> None:
    load = LoadData()
    busy, idle, fresh = broker(stats={B0: throughput(1)}), broker(stats={B1: NamespaceBundleStats()}), broker()
    brokers = {"a:8080": busy, "b:8080": idle, "c:8080": fresh}
    load.update(brokers)
    # c owns no bundle of public/default: the even distribution keeps it alone.
    assert select_broker(B2, brokers, load, settings()) == "c:8080"
    # Without the even distribution, the least long-term message rate: b's idle bundle against a's 200.
    rules = settings(loadBalancerDistributeBundlesEvenlyEnabled="false")
    brokers.pop("c:8080")
    assert select_broker(B2, brokers, load, rules) == "b:8080"
    # A bundle of another namespace: a and b each have none of it; b has the lower rate.
    assert select_broker("acme/orders/0x00000000_0xffffffff", brokers, load, settings()) == "b:8080"


def test_an_assigned_bundle_counts_for_its_broker_until_its_report_shows_it() -> None:
    load = LoadData()
    brokers = {"a:8080": broker(), "b:8080": broker()}
    load.update(brokers)
    assert select_broker_for_assignment(B0, brokers, load, settings()) == "a:8080"
    assert load.preallocated == {B0: "a:8080"}
    # a is assigned B0 (preallocated, 100 msg/s assumed): the next bundle goes to b; B0 stays a's.
    assert select_broker_for_assignment(B1, brokers, load, settings()) == "b:8080"
    assert select_broker_for_assignment(B0, brokers, load, settings()) == "a:8080"
    # a's report shows B0: its preallocation is over.
    brokers["a:8080"] = broker(stats={B0: NamespaceBundleStats()}, last_update=NOW_MS + 1)
    load.update(brokers)
    assert load.preallocated == {B1: "b:8080"}


def test_an_overloaded_broker_gets_a_bundle_only_when_every_broker_is() -> None:
    load = LoadData()
    brokers = {"a:8080": broker(cpu=90.0), "b:8080": broker(cpu=20.0, stats={B0: throughput(5)})}
    load.update(brokers)
    # a has no bundle of the namespace, but 90% > loadBalancerBrokerOverloadedThresholdPercentage (85).
    assert select_broker(B1, brokers, load, settings()) == "b:8080"
    brokers["b:8080"] = broker(cpu=95.0, stats={B0: throughput(5)})
    assert select_broker(B1, brokers, load, settings()) == "a:8080"


def test_a_broker_over_the_topic_limit_gets_no_bundle_while_another_can_take_it() -> None:
    load = LoadData()
    brokers = {"a:8080": broker(num_topics=11), "b:8080": broker(num_topics=3, stats={B0: throughput(1)})}
    load.update(brokers)
    assert select_broker(B1, brokers, load, settings(loadBalancerBrokerMaxTopics="10")) == "b:8080"
    brokers["b:8080"] = broker(num_topics=12)
    assert select_broker(B1, brokers, load, settings(loadBalancerBrokerMaxTopics="10")) == "a:8080"


def test_a_bundle_shed_goes_where_the_leader_chose_once() -> None:
    load = LoadData(affinity={B0: "b:8080"})
    brokers = {"a:8080": broker(), "b:8080": broker(stats={B1: throughput(1), B2: throughput(1)})}
    assert select_broker_for_assignment(B0, brokers, load, settings()) == "b:8080"
    assert load.affinity == {}
    # A destination that left: the usual choice.
    load.affinity[B3] = "gone:8080"
    assert select_broker_for_assignment(B3, brokers, load, settings()) == "a:8080"


# ------------------------------------------------------------------------------------ shedding

# Thresholds low enough for small figures: 1 MB/s of throughput to offload suffices.
SHEDDING = {"loadBalancerBundleUnloadMinThroughputThreshold": "1"}


def test_the_busiest_bundles_of_a_broker_above_the_average_are_shed_until_enough_is_marked() -> None:
    load = LoadData()
    hot = broker(cpu=90.0, stats={B0: throughput(1), B1: throughput(8), B2: throughput(4), B3: throughput(2)})
    load.update({"a:8080": hot, "b:8080": broker(cpu=10.0), "c:8080": broker(cpu=20.0)})
    plan = ThresholdShedder().find_bundles_for_unloading(load, settings(**SHEDDING))
    # Average 40%; a is at 90% >= 40% + 10%: it offloads (0.9 - 0.4 - 0.1 + 0.05) = 45% of its 30 MB/s,
    # 13.5 MB/s: B1 (16 MB/s in and out) alone marks enough.
    assert plan == {"a:8080": [B1]}
    # Against b alone (average 50%), a offloads 35% of 75 MB/s, 26.25 MB/s: the next busiest follow B1
    # until enough is marked (16 + 8 + 4 MB/s), and B0 stays.
    load.update({"a:8080": dataclasses.replace(hot, msg_throughput_in=60 * MIB), "b:8080": broker(cpu=10.0)})
    assert ThresholdShedder().find_bundles_for_unloading(load, settings(**SHEDDING)) == {"a:8080": [B1, B2, B3]}


def test_no_bundle_is_shed_from_a_broker_with_one_bundle_nor_below_the_minimum_throughput() -> None:
    load = LoadData()
    load.update({"a:8080": broker(cpu=90.0, stats={B0: throughput(50)}), "b:8080": broker(cpu=10.0)})
    assert ThresholdShedder().find_bundles_for_unloading(load, settings(**SHEDDING)) == {}
    # Two bundles, but 45% of 2 MB/s is below loadBalancerBundleUnloadMinThroughputThreshold (10 MB).
    load.update({"a:8080": broker(cpu=90.0, stats={B0: throughput(0.5), B1: throughput(0.5)}), "b:8080": broker()})
    assert ThresholdShedder().find_bundles_for_unloading(load, settings()) == {}


def test_a_bundle_shed_within_the_grace_period_is_not_shed_again() -> None:
    load = LoadData()
    load.update({"a:8080": broker(cpu=90.0, stats={B0: throughput(1), B1: throughput(8)}), "b:8080": broker()})
    load.recently_unloaded[B1] = NOW_MS
    assert ThresholdShedder().find_bundles_for_unloading(load, settings(**SHEDDING)) == {"a:8080": [B0]}
    load.forget_unloaded_before(NOW_MS + 1)
    assert ThresholdShedder().find_bundles_for_unloading(load, settings(**SHEDDING)) == {"a:8080": [B1]}


def test_a_brokers_usage_is_a_running_average_of_its_reports() -> None:
    shedder, load, rules = ThresholdShedder(), LoadData(), settings(**SHEDDING)
    busy = {B0: throughput(8), B1: throughput(8)}
    load.update({"a:8080": broker(cpu=30.0, stats=busy), "b:8080": broker(cpu=30.0)})
    assert shedder.find_bundles_for_unloading(load, rules) == {}
    # a jumps to 100%: its average moves by a tenth only (loadBalancerHistoryResourcePercentage 0.9), to
    # 37% against b's 30%: not 10 points above the mean.
    load.update({"a:8080": broker(cpu=100.0, stats=busy), "b:8080": broker(cpu=30.0)})
    assert shedder.find_bundles_for_unloading(load, rules) == {}
    # A fresh shedder takes the report as it is.
    assert ThresholdShedder().find_bundles_for_unloading(load, rules) == {"a:8080": [B0]}


# ------------------------------------------------------------------------------------ splitting


def test_a_bundle_over_a_threshold_is_split_unless_its_namespace_has_the_maximum_of_bundles() -> None:
    load = LoadData()
    reports = {
        B0: NamespaceBundleStats(topics=11),
        B1: NamespaceBundleStats(topics=2, consumer_count=6, producer_count=5),
        B2: NamespaceBundleStats(msg_rate_in=400.0, msg_rate_out=200.0, topics=2),
        B3: NamespaceBundleStats(topics=1, consumer_count=50),
    }
    load.update({"a:8080": broker(stats=reports)})
    rules = settings(
        loadBalancerNamespaceBundleMaxTopics="10",
        loadBalancerNamespaceBundleMaxSessions="10",
        loadBalancerNamespaceBundleMaxMsgRate="500",
    )
    # B3 has one topic only: a split would leave one half empty.
    assert find_bundles_to_split(load, {NS: 4}, rules) == {B0: "a:8080", B1: "a:8080", B2: "a:8080"}
    # The namespace may have 6 bundles: two splits fit.
    limited = dataclasses.replace(rules, namespace_maximum_bundles=6)
    assert find_bundles_to_split(load, {NS: 4}, limited) == {B0: "a:8080", B1: "a:8080"}
    assert find_bundles_to_split(load, {NS: 6}, limited) == {}
    # loadBalancerNamespaceBundleMaxSessions -1: sessions are no reason.
    unlimited = settings(loadBalancerNamespaceBundleMaxSessions="-1", loadBalancerNamespaceBundleMaxTopics="10")
    assert find_bundles_to_split(load, {NS: 4}, unlimited) == {B0: "a:8080"}


def test_a_bundle_splits_in_two_halves_of_its_range() -> None:
    assert range_equally_divide(Bundle(NS, 0, 0x40000000)) == 0x20000000
    assert range_equally_divide(Bundle(NS, 0xC0000000, 0xFFFFFFFF)) == 0xDFFFFFFF
    assert range_equally_divide(Bundle(NS, 7, 8)) is None
    bundles = NamespaceBundles(NS, tuple(default_boundaries(4)))
    split = bundles.split(Bundle(NS, 0, 0x40000000), 0x20000000)
    assert [b.range for b in split.bundles][:3] == [
        "0x00000000_0x20000000",
        "0x20000000_0x40000000",
        "0x40000000_0x80000000",
    ]
    with pytest.raises(ValueError):
        bundles.split(Bundle(NS, 0, 0x20000000), 0x10000000)
