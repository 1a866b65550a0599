"""Where the CPU of an `append_many` goes, per entry and per thread: the event loop, the group-commit
thread (encoding segments, SQLite's insert and commit, the fsync call) and the checkpoint thread.

The same workload as bench/storage_append.py's `append_many` rows (a window of 1000 appends in
flight per topic, one call per 64 KB socket read), but reporting CPU time instead of throughput:
each thread's user+system time from /proc/self/task/<tid>/stat over the measured seconds, divided
by the entries that became durable. CPU time moves less with the machine's load than wall time,
which is what the storage_append ratio is made of. Then, outside the pipeline, the commit thread's
encoding alone (`_encode_segments` over the same runs) and SQLite alone (the encoded rows inserted
and committed with fsync), so that the commit thread's time splits into its two parts.

    python bench/storage_append_stages.py [--seconds 3] [--entry 100] [--topics 1 16]
Prints a table and writes bench/results/storage_append_stages.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from magnetar.storage import ManagedLedgerFactory, StorageConfig, sqlite_engine
from magnetar.storage.sqlite_engine import Run
from storage_append import Appenders, sends_per_read

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def bytes_written() -> int:
    """What this process handed to write(2) and friends so far (`wchar`): the WAL, the checkpoints'
    copies into the database file, commit-seq. Unlike time, it does not move with the load."""
    with open("/proc/self/io") as file:
        for line in file:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/self/io")


def thread_cpu_seconds() -> dict[str, float]:
    """User+system CPU seconds of every thread of this process, by thread name."""
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    result: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as file:
                fields = file.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "other")
        if name.startswith("magnetar-storage-read"):
            name = "reader"
        result[name] = result.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return result


async def measure_pipeline(data_dir: str, entry_size: int, topics: int, seconds: float) -> dict:
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)
    factory = await ManagedLedgerFactory.open(data_dir, config)
    ledgers = [await factory.open_ledger(f"persistent://public/default/stages-{i}") for i in range(topics)]
    appenders = Appenders(entry_size)

    tasks = [asyncio.ensure_future(appenders.batches(ledger)) for ledger in ledgers]
    await asyncio.sleep(0.5)
    cpu_before, done_before, commits_before = thread_cpu_seconds(), appenders.done, factory.engine.commits
    written_before = bytes_written()
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    elapsed = time.perf_counter() - start
    cpu_after, entries = thread_cpu_seconds(), appenders.done - done_before
    written = bytes_written() - written_before
    commits = factory.engine.commits - commits_before
    appenders.stop = True
    await asyncio.gather(*tasks)
    await factory.close()
    per_entry_us = {
        name: (cpu_after[name] - cpu_before.get(name, 0.0)) / entries * 1e6
        for name in cpu_after
        if cpu_after[name] - cpu_before.get(name, 0.0) > 0
    }
    return {
        "entries_per_s": entries / elapsed,
        "entries_per_commit": entries / max(commits, 1),
        "cpu_us_per_entry": per_entry_us,
        "bytes_written_per_entry": written / entries,
    }


def measure_encode_and_sqlite(directory: str, entry_size: int, batch_entries: int, commits: int) -> dict:
    """The commit thread's two parts, apart: encoding a commit's runs, and SQLite inserting and
    committing the rows (fsync on), on a fresh engine with nothing else running."""
    engine = sqlite_engine.SqliteEngine(os.path.join(directory, "alone"))
    engine.open()
    payload = os.urandom(entry_size)
    call = sends_per_read(entry_size)
    calls = max(1, batch_entries // call)
    encode_s = sqlite_s = 0.0
    try:
        writer = engine._writer
        for commit in range(commits):
            first = commit * calls * call
            runs = [
                Run(
                    1,
                    first + index * call,
                    (payload,) * call,
                    tuple(range(call)),
                    (1,) * call,
                    (0,) * call,
                    ("bench",) * call,
                    tuple(range(call)),
                )
                for index in range(calls)
            ]
            started = time.thread_time()
            rows: list = []
            sqlite_engine._encode_segments(1, runs, rows, engine._segment_crc)
            encoded = time.thread_time()
            writer.execute("BEGIN")
            sqlite_engine._insert_rows(writer, sqlite_engine._insert_segments_sql, rows)
            writer.execute("COMMIT")
            if commit % 16 == 15:
                writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finished = time.thread_time()
            encode_s += encoded - started
            sqlite_s += finished - encoded
    finally:
        engine.close()
    entries = commits * calls * call
    return {"encode_us_per_entry": encode_s / entries * 1e6, "sqlite_us_per_entry": sqlite_s / entries * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--entry", type=int, default=100, help="entry bytes")
    parser.add_argument("--topics", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    rows = []
    for topics in args.topics:
        directory = tempfile.mkdtemp(prefix="magnetar-stages-", dir=args.dir)
        try:
            pipeline = asyncio.run(measure_pipeline(os.path.join(directory, "data"), args.entry, topics, args.seconds))
            alone = measure_encode_and_sqlite(directory, args.entry, round(pipeline["entries_per_commit"]), 200)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        rows.append(
            {"entry_bytes": args.entry, "topics": topics, **pipeline, **alone, "load_average": os.getloadavg()[0]}
        )
    print(
        "CPU us per entry (threads from /proc over the run; encode and sqlite measured apart); "
        "bytes the process wrote per entry (WAL, checkpoints)"
    )
    print(
        f"{'entry':>6} {'topics':>6} {'entries/s':>10} {'per commit':>10} {'loop':>6} {'commit':>7} "
        f"{'ckpt':>6} {'encode':>7} {'sqlite':>7} {'written':>8} {'load':>5}"
    )
    for row in rows:
        cpu = row["cpu_us_per_entry"]
        print(
            f"{row['entry_bytes']:>5}B {row['topics']:>6} {row['entries_per_s']:>10,.0f} "
            f"{row['entries_per_commit']:>10.0f} {cpu.get('MainThread', 0):>6.3f} "
            f"{cpu.get('magnetar-group-commit', 0):>7.3f} {cpu.get('magnetar-checkpoint', 0):>6.3f} "
            f"{row['encode_us_per_entry']:>7.3f} {row['sqlite_us_per_entry']:>7.3f} "
            f"{row['bytes_written_per_entry']:>7.0f}B {row['load_average']:>5.2f}"
        )
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "storage_append_stages.json").write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
