"""Write latency of a managed ledger: every durable entry is counted once, in Pulsar's buckets."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.storage.write_latency import WRITE_LATENCY_BOUNDS_MS, LatencyBuckets

TOPIC = "persistent://public/default/latency"


def test_buckets_hold_values_up_to_their_bound_and_weigh_them_by_entries() -> None:
    buckets = LatencyBuckets()
    buckets.record(0.5)  # le_0_5 includes its bound
    buckets.record(0.51, entries=3)
    buckets.record(999.0)
    buckets.record(5_000.0)  # overflow
    assert buckets.buckets == [1, 3, 0, 0, 0, 0, 0, 0, 1, 1]
    assert len(buckets.buckets) == len(WRITE_LATENCY_BOUNDS_MS) + 1
    assert buckets.count == 6 and buckets.sum_ms == pytest.approx(0.5 + 3 * 0.51 + 999 + 5000)
    buckets.check_invariants()


def test_every_appended_entry_is_timed_once_it_is_durable(run_storage) -> None:
    async def scenario(factory):
        ledger = await factory.open_ledger(TOPIC)
        await ledger.append_many([b"a"] * 7, [0] * 7, [1] * 7, [0] * 7, ["p"] * 7, list(range(7)))
        await asyncio.gather(*(ledger.append(b"x", 0, 1, 0, "q", i) for i in range(4)))
        latency = ledger.write_latency
        latency.check_invariants()
        assert latency.count == 11 and latency.sum_ms > 0
        assert not ledger._submitted  # nothing left waiting to be timed

    run_storage(scenario)
