"""Restart time with 1,000,000 entries and 100 subscriptions holding 10,000 ack holes each.

Fills one topic with 1,000,000 entries of 100 B, opens 100 durable cursors and, on each, acknowledges
every other entry of the first 20,000 (10,000 holes, 10,000 persisted ranges per cursor, the
`managedLedgerMaxUnackedRangesToPersist` default), then closes. The measured restart is what a broker
does before it can serve the topic: open the data directory (file checks, `PRAGMA quick_check`, the
commit-seq check, metadata) and load the topic's ledgers and all 100 cursors with their ranges.
Repeated, median and best reported. Prints a table and writes bench/results/storage_restart.json.

    python bench/storage_restart.py [--entries 1000000] [--cursors 100] [--holes 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from magnetar.storage import ManagedLedgerFactory
from storage_read import CONFIG, TOPIC, fill


async def add_cursors(data_dir: str, cursors: int, holes: int) -> None:
    factory = await ManagedLedgerFactory.open(data_dir, CONFIG)
    ledger = await factory.open_ledger(TOPIC)
    positions = []
    position = ledger.first_position()
    for _ in range(2 * holes):
        positions.append(position)
        position = ledger.next_valid_position(position)
    acked = positions[1::2]
    for index in range(cursors):
        cursor = await ledger.open_cursor(f"sub-{index}", "earliest")
        cursor.delete(acked)
        assert cursor.individually_deleted.range_count() == holes
    await factory.close()


async def restart(data_dir: str) -> tuple[float, float, int]:
    start = time.perf_counter()
    factory = await ManagedLedgerFactory.open(data_dir, CONFIG)
    opened = time.perf_counter()
    ledger = await factory.open_ledger(TOPIC)
    loaded = time.perf_counter()
    ranges = sum(cursor.individually_deleted.range_count() for cursor in ledger.cursors.values())
    await factory.close()
    return opened - start, loaded - start, ranges


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--cursors", type=int, default=100)
    parser.add_argument("--holes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir)
    try:
        data_dir = os.path.join(directory, "data")
        asyncio.run(fill(data_dir, args.entries))
        asyncio.run(add_cursors(data_dir, args.cursors, args.holes))
        size = os.path.getsize(os.path.join(data_dir, "magnetar.db"))
        # By total restart time: median and best are of the whole restart, not of its first phase.
        runs = sorted((asyncio.run(restart(data_dir)) for _ in range(args.repeat)), key=lambda run: run[1])
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    open_seconds, total_seconds, ranges = runs[len(runs) // 2]
    assert ranges == args.cursors * args.holes, ranges
    result = {
        "entries": args.entries,
        "cursors": args.cursors,
        "holes_per_cursor": args.holes,
        "db_bytes": size,
        "open_seconds_median": open_seconds,
        "restart_seconds_median": total_seconds,
        "restart_seconds_best": runs[0][1],
        "runs": runs,
        "load_average": os.getloadavg(),
    }
    print(f"{'restart phase':<46} {'seconds':>8}")
    print(f"{'open data dir (checks, quick_check, metadata)':<46} {open_seconds:>8.2f}")
    print(f"{'+ load topic, 100 cursors x 10,000 ranges':<46} {total_seconds:>8.2f}  (best {runs[0][1]:.2f})")
    print(f"database size {size / 1e6:.0f} MB; load average {result['load_average'][0]:.2f}")
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "storage_restart.json").write_text(
        json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), **result}, indent=2)
    )


if __name__ == "__main__":
    main()
