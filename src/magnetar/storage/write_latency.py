"""Storage write latency: how long appended entries wait from their hand-off to the commit thread until
they are durable.

Owns: Pulsar's bucket bounds for `pulsar_storage_write_latency_le_*` (0.5, 1, 5, 10, 20, 50, 100, 200
and 1000 ms, then overflow), the entry count of each bucket, and the total count and sum.
Must not touch: the managed ledger's state. It records one value per hand-off (one event-loop
iteration's appends to a topic), weighted by its entries, so measuring costs nothing per entry.
"""

from __future__ import annotations

from bisect import bisect_left

__all__ = ["LatencyBuckets", "WRITE_LATENCY_BOUNDS_MS"]

WRITE_LATENCY_BOUNDS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)


class LatencyBuckets:
    """Invariants: `count` is the sum of `buckets`; bucket i counts values in (bound[i-1], bound[i]],
    the last one everything above 1000 ms (Pulsar's buckets are not cumulative)."""

    __slots__ = ("buckets", "count", "sum_ms")

    def __init__(self) -> None:
        self.buckets = [0] * (len(WRITE_LATENCY_BOUNDS_MS) + 1)
        self.count = 0
        self.sum_ms = 0.0

    def record(self, latency_ms: float, entries: int = 1) -> None:
        self.buckets[bisect_left(WRITE_LATENCY_BOUNDS_MS, latency_ms)] += entries
        self.count += entries
        self.sum_ms += latency_ms * entries

    def check_invariants(self) -> None:
        assert self.count == sum(self.buckets), "bucket counts out of step with the total"
