"""Consumer join and leave on a Key_Shared subscription holding 100,000 pending acks over 64 consumers.

A join moves hash ranges to the newcomer; in pip379 every pending ack in a moved range must be found
and registered as draining (PIP-379 point 1), so the cost grows with pending acks. A leave hands the
consumer's pending messages to the replay queue and re-registers the ranges that moved. Reported:
milliseconds per join and per leave (median of several), and how many hashes started draining.

Prints a table; writes JSON to bench/results/core_join_leave.json.
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import time
from pathlib import Path

from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.events import ConsumerAdded, ConsumerRemoved, Dispatch, DispatchDue, Entry, Flow, ReadCompleted
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position

CONSUMERS = 64
PENDING = 100_000
KEYS = 50_000
REPEATS = 7
RESULTS = Path(__file__).parent / "results"


def loaded_dispatcher(mode: str) -> KeySharedDispatcher:
    """64 consumers holding 100,000 unacked entries between them."""
    settings = DispatcherSettings(
        key_shared_ordering_mode=mode,
        max_read_batch_size=10_000,
        max_unacked_messages_per_consumer=0,
        max_unacked_messages_per_subscription=0,
    )
    dispatcher = KeySharedDispatcher(settings)
    for i in range(CONSUMERS):
        dispatcher.handle(ConsumerAdded(i, f"consumer-{i}"), 0)
        dispatcher.handle(Flow(i, 10 * PENDING), 0)
    rng = random.Random(7)
    hashes = [key_hash(f"key-{i}".encode()) for i in range(KEYS)]
    sent = 0
    while sent < PENDING:
        read = tuple(Entry(Position(1, sent + i), hashes[rng.randrange(KEYS)]) for i in range(10_000))
        dispatcher.handle(ReadCompleted(read), 0)
        for decision in dispatcher.handle(DispatchDue(), 0):
            if isinstance(decision, Dispatch):
                sent += len(decision.entries)
    assert dispatcher.total_unacked == PENDING
    return dispatcher


def measure(mode: str) -> dict[str, object]:
    joins, leaves, draining = [], [], []
    for repeat in range(REPEATS):
        dispatcher = loaded_dispatcher(mode)
        started = time.perf_counter()
        dispatcher.handle(ConsumerAdded(1000, f"joiner-{repeat}"), 0)
        joins.append(time.perf_counter() - started)
        draining.append(len(dispatcher.draining))
        started = time.perf_counter()
        dispatcher.handle(ConsumerRemoved(repeat), 0)
        leaves.append(time.perf_counter() - started)
        dispatcher.check_invariants()
    return {
        "mode": mode,
        "consumers": CONSUMERS,
        "pending_acks": PENDING,
        "join_ms": round(statistics.median(joins) * 1e3, 2),
        "leave_ms": round(statistics.median(leaves) * 1e3, 2),
        "join_ms_max": round(max(joins) * 1e3, 2),
        "leave_ms_max": round(max(leaves) * 1e3, 2),
        "hashes_draining_after_join": statistics.median(draining),
    }


def main() -> None:
    rows = [measure(mode) for mode in ("pip379", "pip282", "classic")]
    print(
        f"{'mode':<8} {'consumers':>9} {'pending':>8} {'join ms':>8} {'leave ms':>9} {'max join':>9} {'max leave':>10} {'draining':>9}"
    )
    for r in rows:
        print(
            f"{r['mode']:<8} {r['consumers']:>9} {r['pending_acks']:>8} {r['join_ms']:>8} {r['leave_ms']:>9} "
            f"{r['join_ms_max']:>9} {r['leave_ms_max']:>10} {r['hashes_draining_after_join']:>9}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": platform.platform(), "python": platform.python_version(), "rows": rows}
    (RESULTS / "core_join_leave.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
