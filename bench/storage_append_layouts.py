"""The commit thread's work for one batch of appends, in the layout storage uses and in the one
docs/storage.md weighs against it: payloads in a log file of our own, SQLite keeping the rest.

Per commit: `ledgers` ledgers x `entries` entries of `--entry` bytes (one ledger's runs as the
broker makes them, a socket read each), encoded by the storage code itself, then
- `sqlite`: the segment rows inserted and committed, fsync on (what SqliteEngine does);
- `log`: the segments' payload bytes appended to a file and fdatasync'ed, then the same rows with
  an empty payload column inserted and committed, fsync on (the log layout's two fsyncs);
- `raw`: the payloads joined, written and fsync'ed, nothing else (the issue's yardstick).
A PASSIVE checkpoint runs every 4 commits in the first two, inline, so its copy counts. Reports,
per entry: CPU us (this thread), wall us, bytes handed to write(2). Nothing else runs, so the wall
time is the serial path of one commit with no event loop: an upper bound on what each layout allows.

    python bench/storage_append_layouts.py [--entry 100] [--ledgers 1 16] [--commits 100]
Prints a table and writes bench/results/storage_append_layouts.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from itertools import chain
from pathlib import Path

from magnetar.storage import sqlite_engine
from magnetar.storage.sqlite_engine import Run
from storage_append import WINDOW_PER_TOPIC, sends_per_read
from storage_append_stages import bytes_written


def commit_runs(entry_size: int, ledgers: int, commit: int, payload: bytes) -> list[list[Run]]:
    """One commit's runs per ledger: a topic's window of socket reads, as the append benchmark has."""
    call = sends_per_read(entry_size)
    calls = -(-WINDOW_PER_TOPIC // call)
    first = commit * calls * call
    return [
        [
            Run(
                ledger,
                first + index * call,
                (payload,) * call,
                tuple(range(first, first + call)),
                (1,) * call,
                (1_700_000_000_000,) * call,
                ("standalone-0-1",) * call,
                tuple(range(first, first + call)),
            )
            for index in range(calls)
        ]
        for ledger in range(1, ledgers + 1)
    ]


def measure(layout: str, directory: str, entry_size: int, ledgers: int, commits: int) -> dict:
    payload = os.urandom(entry_size)
    engine = sqlite_engine.SqliteEngine(os.path.join(directory, layout))
    engine.open()
    log_fd = os.open(os.path.join(directory, f"{layout}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    writer = engine._writer
    entries = 0
    cpu = wall = 0.0
    written = 0
    try:
        for commit in range(commits):
            per_ledger = commit_runs(entry_size, ledgers, commit, payload)
            written_before, cpu_before, wall_before = bytes_written(), time.thread_time(), time.perf_counter()
            if layout == "raw":
                datas = [run.datas for runs in per_ledger for run in runs]
                entries += sum(map(len, datas))
                os.write(log_fd, b"".join(chain.from_iterable(datas)))
                os.fsync(log_fd)
            else:
                rows: list = []
                for ledger, runs in enumerate(per_ledger, 1):
                    entries += sqlite_engine._encode_segments(ledger, runs, rows, engine._segment_crc)[0]
                if layout == "log":
                    os.write(log_fd, b"".join(row[2] for row in rows))
                    os.fdatasync(log_fd)
                    rows = [(row[0], row[1], b"", *row[3:]) for row in rows]
                writer.execute("BEGIN")
                sqlite_engine._insert_rows(writer, sqlite_engine._insert_segments_sql, rows)
                writer.execute("UPDATE meta SET value=value+1 WHERE key='commit_seq'")
                writer.execute("COMMIT")
                if commit % 4 == 3:
                    writer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            cpu += time.thread_time() - cpu_before
            wall += time.perf_counter() - wall_before
            written += bytes_written() - written_before
    finally:
        os.close(log_fd)
        engine.close()
    return {
        "layout": layout,
        "cpu_us_per_entry": cpu / entries * 1e6,
        "wall_us_per_entry": wall / entries * 1e6,
        "bytes_written_per_entry": written / entries,
        "entries_per_commit": entries / commits,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", type=int, default=100)
    parser.add_argument("--ledgers", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3, help="runs per layout; the lowest CPU is reported")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    rows = []
    for ledgers in args.ledgers:
        for layout in ("sqlite", "log", "raw"):
            runs = []
            for _ in range(args.repeat):
                directory = tempfile.mkdtemp(prefix="magnetar-layouts-", dir=args.dir)
                try:
                    runs.append(measure(layout, directory, args.entry, ledgers, args.commits))
                finally:
                    shutil.rmtree(directory, ignore_errors=True)
            best = min(runs, key=lambda run: run["cpu_us_per_entry"])
            rows.append({"entry_bytes": args.entry, "ledgers": ledgers, **best, "load_average": os.getloadavg()[0]})
    print("per entry, one thread, no event loop; lowest CPU of the runs")
    print(
        f"{'entry':>6} {'ledgers':>7} {'per commit':>10} {'layout':>7} {'CPU us':>7} {'wall us':>8} {'written':>8} {'load':>5}"
    )
    for row in rows:
        print(
            f"{row['entry_bytes']:>5}B {row['ledgers']:>7} {row['entries_per_commit']:>10.0f} {row['layout']:>7} "
            f"{row['cpu_us_per_entry']:>7.3f} {row['wall_us_per_entry']:>8.3f} {row['bytes_written_per_entry']:>7.0f}B "
            f"{row['load_average']:>5.2f}"
        )
    results = Path(__file__).with_name("results")
    results.mkdir(exist_ok=True)
    (results / "storage_append_layouts.json").write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
