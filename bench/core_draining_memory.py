"""Memory of the draining hashes tracker with 0, 1,000, 10,000 and 65,535 draining hashes (tracemalloc).

PIP-379 estimates 52 bytes a hash in Java (plans with 80) and promises nothing when nothing drains.
Reported per count: bytes held after adding the hashes (one reference each, spread over 4 consumers),
bytes per hash, and the peak while adding (the dict-to-array switch briefly holds both). For 0, a
steady-state Key_Shared dispatch + ack run with tracemalloc on: bytes allocated by the tracker's code.

Prints a table; writes JSON to bench/results/core_draining_memory.json.
"""

from __future__ import annotations

import json
import platform
import random
import tracemalloc
from pathlib import Path

import magnetar.core.draining_hashes as draining_module
from magnetar.core.dispatchers import KeySharedDispatcher
from magnetar.core.draining_hashes import DrainingHashesTracker
from magnetar.core.events import Acked, ConsumerAdded, Dispatch, DispatchDue, Entry, Flow, ReadCompleted
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position

RESULTS = Path(__file__).parent / "results"


def with_hashes(count: int) -> dict[str, object]:
    consumers = [object() for _ in range(4)]
    hashes = random.Random(3).sample(range(1, 65536), count)
    tracemalloc.start()
    tracker = DrainingHashesTracker()
    baseline = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    for i, sticky_hash in enumerate(hashes):
        tracker.add_entry(consumers[i % 4], sticky_hash)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tracker.check_invariants()
    held = current - baseline
    return {
        "draining_hashes": count,
        "bytes": held,
        "bytes_per_hash": round(held / count, 1),
        "peak_bytes": peak - baseline,
        "representation": "arrays" if tracker.is_dense else "dict",
    }


def nothing_draining() -> dict[str, object]:
    """Run dispatch + ack with no consumer change; count bytes allocated in draining_hashes.py."""
    dispatcher = KeySharedDispatcher(DispatcherSettings())
    for i in range(4):
        dispatcher.handle(ConsumerAdded(i, f"c{i}"), 0)
        dispatcher.handle(Flow(i, 10**9), 0)
    hashes = [key_hash(f"key-{i}".encode()) for i in range(1000)]
    rng = random.Random(5)
    tracemalloc.start()
    for r in range(200):
        read = tuple(Entry(Position(1, r * 100 + i), hashes[rng.randrange(1000)]) for i in range(100))
        dispatcher.handle(ReadCompleted(read), 0)
        for decision in dispatcher.handle(DispatchDue(), 0):
            if isinstance(decision, Dispatch):
                dispatcher.handle(Acked(decision.consumer_id, tuple(e.position for e in decision.entries)), 0)
    snapshot = tracemalloc.take_snapshot()
    tracemalloc.stop()
    mine = snapshot.filter_traces([tracemalloc.Filter(True, draining_module.__file__)])
    allocated = sum(stat.size for stat in mine.statistics("filename"))
    return {
        "draining_hashes": 0,
        "bytes": allocated,
        "bytes_per_hash": None,
        "peak_bytes": None,
        "representation": "empty dict (allocated once with the dispatcher)",
    }


def main() -> None:
    rows = [nothing_draining()] + [with_hashes(n) for n in (1_000, 10_000, 65_535)]
    print(f"{'hashes':>7} {'bytes':>9} {'B/hash':>7} {'peak bytes':>11}  representation")
    for r in rows:
        per = "-" if r["bytes_per_hash"] is None else r["bytes_per_hash"]
        peak = "-" if r["peak_bytes"] is None else r["peak_bytes"]
        print(f"{r['draining_hashes']:>7} {r['bytes']:>9} {per:>7} {peak:>11}  {r['representation']}")
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": platform.platform(), "python": platform.python_version(), "rows": rows}
    (RESULTS / "core_draining_memory.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
