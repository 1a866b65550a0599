"""Append throughput of the storage layer against the machine's raw write+fsync limit.

For 100 B and 1 KB entries and 1 and 16 topics, with fsync on (`journalSyncData=true`): producers
keep a window of appends in flight per topic (Pulsar's maxPendingPublishRequestsPerConnection, 1000)
and the group commit forms batches by itself. Two APIs are measured:

- `append_many`: what the broker calls, once per socket read, with the SENDs of that read. A read
  of 64 KB holds 64 KB / (entry + ~64 B of frame and metadata) SENDs: 399 of 100 B, 60 of 1 KB.
  The columns are built once, as tuples, which is what the broker passes (ServerProducer._append);
  parsing them out of a socket read is the broker's cost, not storage's.
- `append`: one call and one future per entry.

Then, in the same run, a minimal Python loop writes the same bytes in the same batch sizes (the
measured mean entries per commit) with one fsync per batch: the raw limit. Each row is run
`--repeat` times (default 3) and the run with the median ratio is reported, with the best entries/s,
the load average, and the process's CPU time per entry over the measured seconds (every thread:
the event loop's appends and the commit thread), which moves less with the machine's other load than
entries/s does. Prints a table and writes bench/results/storage_append.json.

    python bench/storage_append.py [--seconds 3] [--api many|single|both] [--dir /path/on/the/disk]
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

from magnetar.storage import ManagedLedgerFactory, StorageConfig

WINDOW_PER_TOPIC = 1000  # Pulsar's default maxPendingPublishRequestsPerConnection
SOCKET_READ_BYTES = 64 * 1024
SEND_FRAME_OVERHEAD_BYTES = 64  # command, metadata and checksum around a small message


def sends_per_read(entry_size: int) -> int:
    return max(1, SOCKET_READ_BYTES // (entry_size + SEND_FRAME_OVERHEAD_BYTES))


class Appenders:
    """Appenders that keep WINDOW_PER_TOPIC entries in flight per topic, as a broker does for its
    producers, counting completed entries in `done` until `stop` is set."""

    def __init__(self, entry_size: int) -> None:
        self.entry_size = entry_size
        self.payload = os.urandom(entry_size)
        self.done = 0
        self.stop = False

    async def singles(self, ledger) -> None:
        """`append` once per entry."""
        payload = self.payload
        in_flight: list = []
        sequence = 0
        while not self.stop:
            while len(in_flight) < WINDOW_PER_TOPIC:
                in_flight.append(ledger.append(payload, sequence & 0x7FFFFFFF, 1, 0, "bench", sequence))
                sequence += 1
            # Wait for the oldest half, as a client waits for receipts before sending more; appends
            # of one topic complete in order, so the last of the half completes last.
            half = len(in_flight) // 2
            await in_flight[half - 1]
            self.done += half
            del in_flight[:half]
        await asyncio.gather(*in_flight)

    async def batches(self, ledger) -> None:
        """`append_many` once per socket read's worth of SENDs, with tuples as the broker passes them."""
        batch = sends_per_read(self.entry_size)
        datas, counts, times, names = (self.payload,) * batch, (1,) * batch, (0,) * batch, ("bench",) * batch
        in_flight: list = []
        sequence = 0
        while not self.stop:
            while len(in_flight) * batch < WINDOW_PER_TOPIC:
                sequence_ids = tuple(range(sequence, sequence + batch))
                in_flight.append(ledger.append_many(datas, sequence_ids, counts, times, names, sequence_ids))
                sequence += batch
            half = max(1, len(in_flight) // 2)
            await in_flight[half - 1]
            self.done += half * batch
            del in_flight[:half]
        await asyncio.gather(*in_flight)


async def measure_storage(data_dir: str, entry_size: int, topics: int, seconds: float, api: str) -> dict:
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)
    factory = await ManagedLedgerFactory.open(data_dir, config)
    ledgers = [await factory.open_ledger(f"persistent://public/default/bench-{i}") for i in range(topics)]
    appenders = Appenders(entry_size)

    produce = appenders.batches if api == "many" else appenders.singles
    tasks = [asyncio.ensure_future(produce(ledger)) for ledger in ledgers]
    await asyncio.sleep(0.5)  # warm-up: first commits, cache, page cache
    commits_before, done_before = factory.engine.commits, appenders.done
    start, cpu_start = time.perf_counter(), time.process_time()
    await asyncio.sleep(seconds)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    entries, commits = appenders.done - done_before, factory.engine.commits - commits_before
    appenders.stop = True
    await asyncio.gather(*tasks)
    await factory.close()
    return {
        "entries_per_s": entries / elapsed,
        "mb_per_s": entries * entry_size / elapsed / 1e6,
        "commits_per_s": commits / elapsed,
        "entries_per_commit": entries / max(commits, 1),
        "cpu_us_per_entry": cpu / max(entries, 1) * 1e6,
        "api": "append_many" if api == "many" else "append",
        "entries_per_call": sends_per_read(entry_size) if api == "many" else 1,
    }


def measure_raw(directory: str, entry_size: int, batch_entries: int, seconds: float) -> dict:
    """The same bytes, the same batch size, one write and one fsync per batch: nothing else."""
    path = os.path.join(directory, "raw.bin")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    batch = os.urandom(entry_size) * batch_entries
    written = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < seconds:
            os.write(fd, batch)
            os.fsync(fd)
            written += batch_entries
            if written * entry_size > 1 << 30:  # keep the file under 1 GB
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
    finally:
        os.close(fd)
        os.unlink(path)
    elapsed = time.perf_counter() - start
    return {"entries_per_s": written / elapsed, "mb_per_s": written * entry_size / elapsed / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--api", choices=("many", "single", "both"), default="both")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the median ratio is reported")
    args = parser.parse_args()
    apis = ("many", "single") if args.api == "both" else (args.api,)
    rows = []
    for api in apis:
        for entry_size in (100, 1024):
            for topics in (1, 16):
                runs = []
                # The machine is shared and its fsync latency moves: each run measures storage and
                # then the raw loop at the batch size storage reached, back to back.
                for _ in range(args.repeat):
                    directory = tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir)
                    try:
                        data_dir = os.path.join(directory, "data")
                        storage = asyncio.run(measure_storage(data_dir, entry_size, topics, args.seconds, api))
                        batch = max(1, round(storage["entries_per_commit"]))
                        raw = measure_raw(directory, entry_size, batch, args.seconds)
                    finally:
                        shutil.rmtree(directory, ignore_errors=True)
                    runs.append(
                        {
                            "storage": storage,
                            "raw_batch_entries": batch,
                            "raw": raw,
                            "ratio": storage["entries_per_s"] / raw["entries_per_s"],
                            "load_average": os.getloadavg()[0],
                        }
                    )
                runs.sort(key=lambda run: run["ratio"])
                median = runs[len(runs) // 2]
                best = max(runs, key=lambda run: run["storage"]["entries_per_s"])
                rows.append(
                    {
                        "entry_bytes": entry_size,
                        "topics": topics,
                        **median,
                        "best_entries_per_s": best["storage"]["entries_per_s"],
                        "runs": runs,
                    }
                )
    print(f"median ratio of {args.repeat} runs per row (storage and raw measured back to back); best entries/s")
    print(
        f"{'api':>12} {'entry':>6} {'topics':>6} {'entries/s':>10} {'MB/s':>7} {'per commit':>10} "
        f"{'raw entries/s':>13} {'raw MB/s':>8} {'ratio':>6} {'best/s':>10} {'load':>5} {'cpu us':>6}"
    )
    for row in rows:
        storage, raw = row["storage"], row["raw"]
        print(
            f"{storage['api']:>12} {row['entry_bytes']:>5}B {row['topics']:>6} {storage['entries_per_s']:>10,.0f} "
            f"{storage['mb_per_s']:>7.1f} {storage['entries_per_commit']:>10.0f} {raw['entries_per_s']:>13,.0f} "
            f"{raw['mb_per_s']:>8.1f} {row['ratio']:>6.0%} {row['best_entries_per_s']:>10,.0f} {row['load_average']:>5.2f} "
            f"{storage['cpu_us_per_entry']:>6.3f}"
        )
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "storage_append.json").write_text(
        json.dumps(
            {
                "machine": platform.platform(),
                "cpus": os.cpu_count(),
                "seconds": args.seconds,
                "load_average": os.getloadavg(),
                "rows": rows,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
