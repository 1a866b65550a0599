"""Publish latency and throughput of the managed ledger on the BookKeeper engine against the SQLite engine,
on the same machine.

BookKeeper: ZooKeeper and 3 bookies started here (tests/bookkeeper_fixture.py: each its own JVM on loopback,
fsync on: `journalSyncData=true`, `journalMaxGroupWaitMSec=1`), ledgers of E=3 W=3 A=2, CRC32C; the
managed-ledger records in the in-process memory metadata store (they are written at a load and a rollover,
not per entry). SQLite: the default engine on a temporary directory, fsync on.

First `--warmup-seconds` (5) of the unbatched workload on each engine, not counted: the bookies' JVMs compile
their add path in their first seconds, and the first run's p99 was that (36-74 ms against 12-19 ms in the
next run of the same code). Then two workloads, each on one topic, each `--runs` times alternating the
engines:
- latency at a fixed rate: `--rate` messages/s (10 000) for `--seconds`, one `append` per entry every
  millisecond tick (unbatched: 100 B entries of 1 message; batched: 10 KB entries of 100 messages, as a
  client's batching makes them), the time from the call to the future's completion (the SEND_RECEIPT's
  condition: durable, for BookKeeper acknowledged by the ack quorum), and the CPU this process (the
  managed ledger, the engine and its BookKeeper client or SQLite threads) spent per message;
- throughput: as many 100 B entries as 1000 appends in flight allow (Pulsar's
  maxPendingPublishRequestsPerConnection), unbatched.

Prints a table and writes bench/results/storage_bookkeeper.json.

    python bench/storage_bookkeeper.py [--seconds 10] [--runs 3] [--rate 10000] [--warmup-seconds 5]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bookkeeper_fixture import LocalBookKeeperCluster
from magnetar.bookkeeper import BookKeeper
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.storage import ManagedLedgerFactory, StorageConfig
from magnetar.storage.bookkeeper_engine import BookKeeperEngine

TOPIC = "persistent://public/default/bench"
CONFIG = StorageConfig(
    managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=3, managedLedgerDefaultAckQuorum=2
)
WINDOW = 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def open_factory(engine_name: str, cluster: LocalBookKeeperCluster, data_dir: str) -> ManagedLedgerFactory:
    if engine_name == "sqlite":
        return await ManagedLedgerFactory.open(data_dir, CONFIG)
    bookkeeper = await BookKeeper.connect(cluster.metadata_service_uri, timeout_s=30)
    engine = BookKeeperEngine(
        bookkeeper, MemoryMetadataServer().connect(), CONFIG, owns_bookkeeper=True, owns_store=True
    )
    return await ManagedLedgerFactory.open(data_dir, CONFIG, engine=engine)


async def fixed_rate(factory: ManagedLedgerFactory, rate: int, seconds: float, messages_per_entry: int) -> dict:
    """Entries of `messages_per_entry` 100 B messages at `rate` messages/s; latency of each entry."""
    ledger = await factory.open_ledger(TOPIC)
    payload = os.urandom(100 * messages_per_entry)
    latencies: list[float] = []
    pending: set[asyncio.Future] = set()
    entries_per_s = rate / messages_per_entry
    sent_entries = 0
    cpu_start = time.process_time()
    start = time.perf_counter()
    tick = 0
    while time.perf_counter() - start < seconds:
        tick += 1
        # What the rate owes by now, so that a slow loop iteration is made up at the next, not dropped.
        due = int((time.perf_counter() - start) * entries_per_s) - sent_entries
        for _ in range(due):
            sent_entries += 1
            sent = time.perf_counter()
            future = ledger.append(payload, 0, messages_per_entry, 0, "bench", sent_entries)
            future.add_done_callback(lambda done, sent=sent: latencies.append(time.perf_counter() - sent))
            pending.add(future)
            future.add_done_callback(pending.discard)
        await asyncio.sleep(max(0.0, start + tick / 1000 - time.perf_counter()))
    if pending:
        await asyncio.gather(*pending)
    elapsed = time.perf_counter() - start
    return {
        "p50_ms": percentile(latencies, 0.50) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "messages_per_s": len(latencies) * messages_per_entry / elapsed,
        "cpu_us_per_message": (time.process_time() - cpu_start) * 1e6 / (len(latencies) * messages_per_entry),
    }


async def saturated(factory: ManagedLedgerFactory, seconds: float) -> dict:
    """100 B entries, WINDOW appends in flight."""
    ledger = await factory.open_ledger(TOPIC + "-max")
    payload = os.urandom(100)
    window = asyncio.Semaphore(WINDOW)
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        await window.acquire()
        future = ledger.append(payload, 0, 1, 0, "bench", done)

        def completed(_: asyncio.Future) -> None:
            nonlocal done
            done += 1
            window.release()

        future.add_done_callback(completed)
    for _ in range(WINDOW):
        await window.acquire()
    return {"entries_per_s": done / (time.perf_counter() - start)}


async def warm_up(engine_name: str, cluster: LocalBookKeeperCluster, args: argparse.Namespace) -> None:
    data_dir = tempfile.mkdtemp(prefix="bench-storage-")
    factory = await open_factory(engine_name, cluster, data_dir)
    try:
        await fixed_rate(factory, args.rate, args.warmup_seconds, 1)
    finally:
        await factory.close()
        shutil.rmtree(data_dir, ignore_errors=True)


async def one_run(engine_name: str, cluster: LocalBookKeeperCluster, args: argparse.Namespace) -> dict:
    data_dir = tempfile.mkdtemp(prefix="bench-storage-")
    factory = await open_factory(engine_name, cluster, data_dir)
    try:
        return {
            "engine": engine_name,
            "unbatched": await fixed_rate(factory, args.rate, args.seconds, 1),
            "batched": await fixed_rate(factory, args.rate, args.seconds, 100),
            "throughput": await saturated(factory, args.seconds / 2),
            "load_average": os.getloadavg()[0],
        }
    finally:
        await factory.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--warmup-seconds", type=float, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-bookkeeper-"))
    cluster = LocalBookKeeperCluster(root)
    cluster.start()
    runs = []
    try:
        if args.warmup_seconds > 0:
            for engine_name in ("sqlite", "bookkeeper"):
                asyncio.run(warm_up(engine_name, cluster, args))
        for run in range(args.runs):
            order = ["sqlite", "bookkeeper"] if run % 2 == 0 else ["bookkeeper", "sqlite"]
            for engine_name in order:
                runs.append(asyncio.run(one_run(engine_name, cluster, args)))
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{'engine':>10} {'unbatched p50/p99 ms':>21} {'µs/msg':>7} {'batched p50/p99 ms':>19} {'µs/msg':>7} "
        f"{'msg/s':>8} {'max entries/s':>14} load"
    )
    for row in runs:
        unbatched, batched = row["unbatched"], row["batched"]
        print(
            f"{row['engine']:>10} {unbatched['p50_ms']:>10.2f} / {unbatched['p99_ms']:<8.2f} "
            f"{unbatched['cpu_us_per_message']:>7.1f} {batched['p50_ms']:>8.2f} / {batched['p99_ms']:<8.2f} "
            f"{batched['cpu_us_per_message']:>7.1f} {unbatched['messages_per_s']:>8,.0f} "
            f"{row['throughput']['entries_per_s']:>14,.0f} {row['load_average']:.2f}"
        )
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "storage_bookkeeper.json").write_text(
        json.dumps({"machine": platform.platform(), "cpus": os.cpu_count(), "args": vars(args), "runs": runs}, indent=2)
    )


if __name__ == "__main__":
    main()
