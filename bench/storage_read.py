"""Read throughput: a 1,000,000-entry cold backlog, and reads served by the entry cache.

Fills one topic with 1,000,000 entries of 100 B through the append API, closes the storage, opens it
again (the entry cache is empty: "cold" for magnetar; the OS page cache is whatever the fill left,
reported as such) and reads the whole backlog in `read_entries` calls of 10,000 entries. Then appends
150,000 more and reads them back, entirely from the entry cache, as a tailing consumer does. Prints a
table and writes bench/results/storage_read.json.

    python bench/storage_read.py [--entries 1000000] [--dir /path/on/the/disk/to/measure]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import tempfile
import time
from pathlib import Path

from magnetar.positions import EARLIEST
from magnetar.storage import ManagedLedgerFactory, StorageConfig

TOPIC = "persistent://public/default/backlog"
CONFIG = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)
READ_BATCH = 10_000
FILL_WINDOW = 20_000  # appends in flight while filling; well under managedLedgerMaxPendingAdds


async def fill(data_dir: str, entries: int, entry_size: int = 100) -> float:
    factory = await ManagedLedgerFactory.open(data_dir, CONFIG)
    ledger = await factory.open_ledger(TOPIC)
    payload = os.urandom(entry_size)
    start = time.perf_counter()
    in_flight = []
    for sequence in range(entries):
        in_flight.append(ledger.append(payload, sequence & 0x7FFFFFFF, 1, sequence, "fill", sequence))
        if len(in_flight) == FILL_WINDOW:
            await in_flight[-1]
            in_flight.clear()
    if in_flight:
        await in_flight[-1]
    elapsed = time.perf_counter() - start
    await factory.close()
    return elapsed


async def read_all(ledger, start, limit: int) -> int:
    total = 0
    position = start
    while total < limit:
        entries = await ledger.read_entries(position, min(READ_BATCH, limit - total))
        if not entries:
            break
        total += len(entries)
        position = ledger.next_valid_position(entries[-1].position)
    return total


async def measure_cold(data_dir: str, entries: int) -> float:
    factory = await ManagedLedgerFactory.open(data_dir, CONFIG)
    ledger = await factory.open_ledger(TOPIC)
    start = time.perf_counter()
    cold = await read_all(ledger, EARLIEST, entries)
    seconds = time.perf_counter() - start
    assert cold == entries, cold
    await factory.close()
    return entries / seconds


async def measure(data_dir: str, entries: int) -> dict:
    """The most recent entries, as a tailing consumer reads them: appended by this open, so the entry
    cache holds them (what is read back from disk may fill only a quarter of it)."""
    factory = await ManagedLedgerFactory.open(data_dir, CONFIG)
    ledger = await factory.open_ledger(TOPIC)
    recent = min(150_000, entries)
    payload = os.urandom(100)
    tail_start = None
    for window in range(0, recent, FILL_WINDOW):
        in_flight = [
            ledger.append(payload, sequence, 1, sequence, "tail", sequence)
            for sequence in range(window, min(window + FILL_WINDOW, recent))
        ]
        tail_start = tail_start or await in_flight[0]
        await in_flight[-1]
    hits_before = factory.cache.hits
    start = time.perf_counter()
    cached = await read_all(ledger, tail_start, recent)
    cached_seconds = time.perf_counter() - start
    all_hits = factory.cache.hits - hits_before == cached
    await factory.close()
    return {
        "cache_entries": cached,
        "cache_entries_per_s": cached / cached_seconds,
        "cache_all_hits": all_hits,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir)
    try:
        data_dir = os.path.join(directory, "data")
        fill_seconds = asyncio.run(fill(data_dir, args.entries))
        size = os.path.getsize(os.path.join(data_dir, "magnetar.db"))
        # The machine is shared: repeat the cold read (each from a fresh open) and report the median
        # and the best, with the load average beside them.
        colds = sorted(asyncio.run(measure_cold(data_dir, args.entries)) for _ in range(args.repeat))
        result = asyncio.run(measure(data_dir, args.entries))
        result.update(
            cold_entries=args.entries,
            cold_entries_per_s=colds[len(colds) // 2],
            cold_entries_per_s_best=colds[-1],
            cold_runs=colds,
            load_average=os.getloadavg(),
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result.update({"fill_seconds": fill_seconds, "fill_entries_per_s": args.entries / fill_seconds, "db_bytes": size})
    print(f"{'measurement':<38} {'entries':>10} {'entries/s':>12}")
    print(f"{'fill (append API, 100 B)':<38} {args.entries:>10,} {result['fill_entries_per_s']:>12,.0f}")
    print(f"{'cold backlog read, median':<38} {result['cold_entries']:>10,} {result['cold_entries_per_s']:>12,.0f}")
    print(f"{'cold backlog read, best':<38} {result['cold_entries']:>10,} {result['cold_entries_per_s_best']:>12,.0f}")
    print(f"{'entry cache read':<38} {result['cache_entries']:>10,} {result['cache_entries_per_s']:>12,.0f}")
    print(
        f"database size: {size / 1e6:.0f} MB; cache read all hits: {result['cache_all_hits']}; "
        f"load average {result['load_average'][0]:.2f}"
    )
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "storage_read.json").write_text(
        json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), **result}, indent=2)
    )


if __name__ == "__main__":
    main()
