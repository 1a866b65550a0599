"""Key_Shared dispatch + ack cost per entry in steady state, with 1, 4 and 64 consumers.

One round: a read of 100 entries completes, is dispatched, every consumer acknowledges what it got
(one Acked per consumer, as the client's ack grouping sends them) and returns its permits with Flow.
Reported: microseconds per entry for the whole round, and for comparison a floor: the least Python
work any dispatcher must do per entry here (one dict insert when sent, one dict delete when acked).

Prints a table; writes JSON to bench/results/core_dispatch.json.
"""

from __future__ import annotations

import json
import platform
import random
import time
from pathlib import Path

from magnetar.core.dispatchers import KeySharedDispatcher, SharedDispatcher
from magnetar.core.events import Acked, ConsumerAdded, Dispatch, DispatchDue, Entry, Flow, ReadCompleted, ReadEntries
from magnetar.core.settings import DispatcherSettings
from magnetar.core.sticky_key import key_hash
from magnetar.positions import Position

READ_SIZE = 100
KEYS = 10_000
ENTRIES = 100_000
RESULTS = Path(__file__).parent / "results"


def steady_state(dispatcher, consumers: int, entries_total: int) -> float:
    """Seconds per entry for read-complete + dispatch + ack + flow rounds."""
    rng = random.Random(1)
    hashes = [key_hash(f"key-{i}".encode()) for i in range(KEYS)]
    for i in range(consumers):
        dispatcher.handle(ConsumerAdded(i, f"consumer-{i}"), 0)
        dispatcher.handle(Flow(i, 1_000_000), 0)
    # Pre-build the reads: storage hands the dispatcher ready entries; building them is not dispatching.
    rounds = entries_total // READ_SIZE
    reads = []
    for r in range(rounds):
        ledger, base = divmod(r * READ_SIZE, 50_000)
        reads.append(
            ReadCompleted(
                tuple(Entry(Position(ledger, base + i), hashes[rng.randrange(KEYS)]) for i in range(READ_SIZE))
            )
        )
    due = DispatchDue()
    handle = dispatcher.handle
    started = time.perf_counter()
    for read in reads:
        handle(read, 0)
        for decision in handle(due, 0):
            if isinstance(decision, Dispatch):
                consumer_id = decision.consumer_id
                handle(Acked(consumer_id, tuple([e.position for e in decision.entries])), 0)
                handle(Flow(consumer_id, len(decision.entries)), 0)
            elif not isinstance(decision, ReadEntries):
                raise AssertionError(f"unexpected decision in steady state: {decision}")
    elapsed = time.perf_counter() - started
    dispatcher.check_invariants()
    assert dispatcher.total_unacked == 0 and not len(dispatcher.replay)
    return elapsed / (rounds * READ_SIZE)


def floor_per_entry(entries_total: int) -> float:
    """The least per-entry Python work: a dict insert on send and a delete on ack."""
    positions = [Position(0, i) for i in range(entries_total)]
    pending: dict = {}
    started = time.perf_counter()
    for p in positions:
        pending[p] = 1
    for p in positions:
        del pending[p]
    return (time.perf_counter() - started) / entries_total


def main() -> None:
    rows = []
    floor = floor_per_entry(ENTRIES)
    for label, make in (
        ("Key_Shared pip379", lambda: KeySharedDispatcher(DispatcherSettings())),
        ("Key_Shared classic", lambda: KeySharedDispatcher(DispatcherSettings(key_shared_ordering_mode="classic"))),
        ("Shared", lambda: SharedDispatcher(DispatcherSettings())),
    ):
        for consumers in (1, 4, 64):
            per_entry = min(steady_state(make(), consumers, ENTRIES) for _ in range(3))
            rows.append(
                {
                    "dispatcher": label,
                    "consumers": consumers,
                    "us_per_entry": round(per_entry * 1e6, 3),
                    "entries_per_s": round(1 / per_entry),
                    "floor_us_per_entry": round(floor * 1e6, 3),
                    "ratio_to_floor": round(per_entry / floor, 1),
                }
            )
    print(f"{'dispatcher':<20} {'consumers':>9} {'us/entry':>9} {'entries/s':>10} {'floor us':>9} {'x floor':>8}")
    for row in rows:
        print(
            f"{row['dispatcher']:<20} {row['consumers']:>9} {row['us_per_entry']:>9.3f} {row['entries_per_s']:>10} "
            f"{row['floor_us_per_entry']:>9.3f} {row['ratio_to_floor']:>8.1f}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = {"machine": platform.platform(), "python": platform.python_version(), "read_size": READ_SIZE, "rows": rows}
    (RESULTS / "core_dispatch.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
