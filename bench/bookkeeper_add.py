"""Adds of magnetar's BookKeeper client against real bookies: latency one at a time, throughput pipelined.

The benchmark starts its own cluster with `tests/bookkeeper_fixture.py`'s `LocalBookKeeperCluster`
(ZooKeeper and 3 bookies of BookKeeper 4.18.0, each its own JVM on loopback, `journalSyncData=true`: every
acknowledged add was fsynced by the bookie's journal; needs `make bookkeeper`). Each row writes a fresh
ledger with CRC32C digests for `--seconds`, after a warm-up of `--warmup` seconds on the same ledger
(connections open, the bookies' JIT compiled):

- serial: one add at a time, 100 B entries; latency is append() to its acknowledgement;
- pipelined: `--window` adds in flight (coroutines each awaiting its add, then adding the next), 100 B
  entries, and 64 KiB entries with `--window-large` in flight (a window of 1,000 such entries is 64 MiB
  inside bookies started with 128 MiB heaps);

for E=3 W=3 A=2 (each entry on every bookie, acknowledged by two) and E=W=A=2. Latency is wall time on the
benchmark's loop, which also runs the client; the client's cost is the Python process's CPU time (every
thread: the loop and kazoo's) over the measured seconds, per add. The bookies' JVMs and ZooKeeper share
the machine's cores with it, so the load average is printed and kept with each row. Prints a table and
writes bench/results/bookkeeper_add.json.

    python bench/bookkeeper_add.py [--seconds 10] [--window 1000] [--window-large 100] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bookkeeper_fixture import LocalBookKeeperCluster
from broker_process import machine
from magnetar.bookkeeper import BookKeeper, DigestType, LedgerHandle

RESULTS = Path(__file__).parent / "results"
SMALL = 100
LARGE = 64 * 1024
QUORUMS = ((3, 3, 2), (2, 2, 2))


class Adder:
    """Adds `payload` to `ledger` from `window` coroutines until `stop`, keeping each add's latency once
    `measuring` is set."""

    def __init__(self, ledger: LedgerHandle, payload: bytes, window: int) -> None:
        self.ledger = ledger
        self.payload = payload
        self.window = window
        self.latencies: list[float] = []
        self.measuring = False
        self.stop = False

    async def _one_slot(self) -> None:
        append, payload, latencies = self.ledger.append, self.payload, self.latencies
        while not self.stop:
            start = time.perf_counter()
            await append(payload)
            if self.measuring:
                latencies.append(time.perf_counter() - start)

    async def run(self, warmup_s: float, seconds: float) -> dict:
        slots = [asyncio.ensure_future(self._one_slot()) for _ in range(self.window)]
        await asyncio.sleep(warmup_s)
        self.measuring = True
        start, cpu_start = time.perf_counter(), time.process_time()
        await asyncio.sleep(seconds)
        self.measuring = False
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        adds = len(self.latencies)
        self.stop = True
        await asyncio.gather(*slots)
        return {
            "adds": adds,
            "adds_per_s": adds / elapsed,
            "mb_per_s": adds * len(self.payload) / elapsed / 1e6,
            "cpu_us_per_add": cpu / max(adds, 1) * 1e6,
            "latency_ms": percentiles(self.latencies),
        }


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if not ordered:
        return {}

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1e3

    return {"p50": at(0.5), "p99": at(0.99), "p99_9": at(0.999), "max": ordered[-1] * 1e3}


async def measure(uri: str, args: argparse.Namespace) -> list[dict]:
    client = await BookKeeper.connect(uri)
    rows = []
    try:
        for ensemble, write, ack in QUORUMS:
            for mode, size, window in (
                ("serial", SMALL, 1),
                ("pipelined", SMALL, args.window),
                ("pipelined", LARGE, args.window_large),
            ):
                ledger = await client.create_ledger(ensemble, write, ack, DigestType.CRC32C, b"bench")
                figures = await Adder(ledger, os.urandom(size), window).run(args.warmup, args.seconds)
                await ledger.close()
                row = {"E": ensemble, "W": write, "A": ack, "mode": mode, "entry_bytes": size, "window": window}
                rows.append(row | figures | {"loadavg": Path("/proc/loadavg").read_text().split()[:3]})
                print_row(rows[-1])
    finally:
        await client.close()
    return rows


HEADER = "E/W/A | mode | entry | window | adds/s | MB/s | p50 ms | p99 | p99.9 | max | CPU µs/add | load"


def print_row(row: dict) -> None:
    latency = row["latency_ms"]
    if not latency:
        print(
            f"{row['E']}/{row['W']}/{row['A']} | {row['mode']} | {row['entry_bytes']:,} B | no add completed",
            flush=True,
        )
        return
    print(
        f"{row['E']}/{row['W']}/{row['A']} | {row['mode']} | {row['entry_bytes']:,} B | {row['window']} | "
        f"{row['adds_per_s']:,.0f} | {row['mb_per_s']:.2f} | {latency['p50']:.2f} | {latency['p99']:.2f} | "
        f"{latency['p99_9']:.2f} | {latency['max']:.2f} | {row['cpu_us_per_add']:.1f} | {' '.join(row['loadavg'])}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds of each row")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of adds before each row's measure")
    parser.add_argument("--window", type=int, default=1000, help="adds in flight, 100 B (the client's bound)")
    parser.add_argument("--window-large", type=int, default=100, help="adds in flight, 64 KiB")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 s rows after 0.5 s of warm-up")
    parser.add_argument("--dir", default=None, help="where the bookies keep their journals (default: a temp dir)")
    args = parser.parse_args()
    # The client logs each bookie failure and ensemble change at INFO: a row they slowed says so.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("magnetar.bookkeeper").setLevel(logging.INFO)
    if args.quick:
        args.seconds, args.warmup = 1.0, 0.5
    with tempfile.TemporaryDirectory(prefix="magnetar-bench-bk-", dir=args.dir) as root:
        cluster = LocalBookKeeperCluster(Path(root))
        try:
            cluster.start()
            before = machine()
            print(HEADER, flush=True)
            rows = asyncio.run(measure(cluster.metadata_service_uri, args))
            after = machine()
        finally:
            cluster.stop()
    print(f"load average before {' '.join(before['loadavg'])}, after {' '.join(after['loadavg'])}")
    result = {
        "bench": "bookkeeper_add",
        "seconds": args.seconds,
        "warmup_s": args.warmup,
        "digest": "CRC32C",
        "journal_sync_data": cluster.journal_sync_data,
        "machine_before": before,
        "machine_after": after,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bookkeeper_add.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
