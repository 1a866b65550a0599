"""What a broker measures for its load report (load_report.py): each owned bundle's rates from its
topics' counters over the time between two samples, its counts, and the CPU usage of one core."""

from __future__ import annotations

from magnetar.broker.cluster.brokers import NamespaceBundleStats, ResourceUsage
from magnetar.broker.cluster.load_report import LoadSampler
from magnetar.broker.figures import TopicCounters
from magnetar.broker.topic_name import TopicName

A, B, C = (TopicName.parse(t) for t in ("a", "b", "c"))
BUNDLE, OTHER = "public/default/0x00000000_0x40000000", "public/default/0x40000000_0x80000000"


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s


class Cpu:
    def __init__(self) -> None:
        self.seconds = 7.0

    def __call__(self) -> float:
        return self.seconds


def test_rates_are_the_counters_change_over_the_time_since_the_last_sample() -> None:
    clock, cpu = Clock(), Cpu()
    sampler = LoadSampler(clock, cpu)  # type: ignore[arg-type]
    bundle_of = {A: BUNDLE, B: BUNDLE, C: None}.get
    clock.now_s += 10
    cpu.seconds += 2.5
    counters = {
        A: TopicCounters(msg_in=100, bytes_in=10_000, msg_out=300, bytes_out=30_000, producers=1, consumers=3),
        B: TopicCounters(msg_in=50, bytes_in=500, msg_out=0, bytes_out=0, producers=2, consumers=0),
        C: TopicCounters(msg_in=1000, bytes_in=1000, msg_out=0, bytes_out=0, producers=1, consumers=0),
    }
    usage, stats = sampler.sample(counters, bundle_of, [BUNDLE, OTHER])
    # 2.5 s of CPU in 10 s: 25% of one core. C's bundle is not this broker's: not counted.
    assert usage == ResourceUsage(25.0, 100.0)
    assert stats == {
        BUNDLE: NamespaceBundleStats(15.0, 1050.0, 30.0, 3000.0, consumer_count=3, producer_count=3, topics=2),
        OTHER: NamespaceBundleStats(),
    }
    # The next sample: the change since this one. B went back (reloaded): no change, not a negative rate.
    clock.now_s += 5
    counters[A] = TopicCounters(msg_in=150, bytes_in=15_000, msg_out=300, bytes_out=30_000, producers=1, consumers=1)
    counters[B] = TopicCounters(msg_in=10, bytes_in=100, msg_out=0, bytes_out=0, producers=1, consumers=0)
    usage, stats = sampler.sample(counters, bundle_of, [BUNDLE])
    assert usage == ResourceUsage(0.0, 100.0)
    assert stats == {BUNDLE: NamespaceBundleStats(10.0, 1000.0, 0.0, 0.0, consumer_count=1, producer_count=2, topics=2)}
