"""What a broker measures of its own load for its report: each owned bundle's NamespaceBundleStats, from
its loaded topics' counters, and the broker's CPU usage.

Owns: the rates (the change of a topic's counters between two samples, over the time between them on the
broker's clock: Pulsar's stats take the same rates over `statsUpdateFrequencyInSecs`), the counts, and
the CPU usage as a percentage of one core (the process's CPU time over the same time: magnetar's event
loop runs on one core), from a CPU-time function the tests replace.
Must not touch: when the report is written (load_manager.py) or the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.cluster.brokers import NamespaceBundleStats, ResourceUsage
from magnetar.broker.topic_name import TopicName
from magnetar.clock import Clock

if TYPE_CHECKING:
    from magnetar.broker.figures import TopicCounters

__all__ = ["LoadSampler", "LoadedTopics", "process_cpu_time_s"]

# The process's CPU time in seconds (every thread's): the default CPU-time function.
process_cpu_time_s: Callable[[], float] = time.process_time

# The CPU usage's limit: one core, in percent.
ONE_CORE = 100.0


class LoadedTopics(Protocol):
    """The loaded topics, as far as measuring them needs (the admin operations give it)."""

    def topic_counters(self) -> dict[TopicName, TopicCounters]: ...


@dataclass(slots=True)
class _BundleSums:
    msg_rate_in: float = 0.0
    msg_throughput_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_out: float = 0.0
    consumers: int = 0
    producers: int = 0
    topics: int = 0

    def stats(self) -> NamespaceBundleStats:
        return NamespaceBundleStats(
            self.msg_rate_in,
            self.msg_throughput_in,
            self.msg_rate_out,
            self.msg_throughput_out,
            self.consumers,
            self.producers,
            self.topics,
        )


class LoadSampler:
    """Samples of the broker's load; each one's rates are over the time since the one before."""

    def __init__(self, clock: Clock, cpu_time_s: Callable[[], float]) -> None:
        self._clock = clock
        self._cpu_time_s = cpu_time_s
        self._at_s = clock.monotonic()
        self._cpu_s = cpu_time_s()
        self._counters: dict[TopicName, TopicCounters] = {}

    def sample(
        self,
        counters: Mapping[TopicName, TopicCounters],
        bundle_of: Callable[[TopicName], str | None],
        owned: Iterable[str],
    ) -> tuple[ResourceUsage, dict[str, NamespaceBundleStats]]:
        """The CPU usage, and the stats of each `owned` bundle (a bundle of no loaded topic: zeros) from
        the topics' `counters` now; `bundle_of` names a topic's bundle. A topic loaded since the last
        sample counts from zero, a counter that went back (a subscription deleted) as no change."""
        now_s, cpu_s = self._clock.monotonic(), self._cpu_time_s()
        elapsed_s = now_s - self._at_s
        usage = 100 * (cpu_s - self._cpu_s) / elapsed_s if elapsed_s > 0 else 0.0
        sums = {bundle: _BundleSums() for bundle in owned}
        for name, now in counters.items():
            found = sums.get(bundle_of(name) or "")
            if found is None:
                continue
            before = self._counters.get(name)
            found.topics += 1
            found.producers += now.producers
            found.consumers += now.consumers
            if elapsed_s > 0:
                found.msg_rate_in += _rate(now.msg_in, before.msg_in if before else 0, elapsed_s)
                found.msg_throughput_in += _rate(now.bytes_in, before.bytes_in if before else 0, elapsed_s)
                found.msg_rate_out += _rate(now.msg_out, before.msg_out if before else 0, elapsed_s)
                found.msg_throughput_out += _rate(now.bytes_out, before.bytes_out if before else 0, elapsed_s)
        self._at_s, self._cpu_s, self._counters = now_s, cpu_s, dict(counters)
        return ResourceUsage(max(usage, 0.0), ONE_CORE), {bundle: found.stats() for bundle, found in sums.items()}


def _rate(now: int, before: int, elapsed_s: float) -> float:
    return max(now - before, 0) / elapsed_s
