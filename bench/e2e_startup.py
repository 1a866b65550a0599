"""Broker start-up: time from process start to accepting connections, and idle resident memory.

Each run starts `magnetar standalone` on a fresh data directory and free ports chosen here, then
tries the Pulsar handshake on the binary port until the broker answers CONNECT with CONNECTED (an
accepted TCP connection alone is not enough: the kernel accepts before the broker's loop runs); the
time is from just before `Popen`, so it includes the interpreter's start and every import. Then it
polls the HTTP port's /ready until it answers 200 (the admin API comes up after the binary port).
After `--idle` seconds with no client, VmRSS is read from /proc/<pid>/status. Median (and worst)
over `--runs`. Prints a table and writes bench/results/e2e_startup.json.

    python bench/e2e_startup.py [--runs 7] [--idle 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import MAGNETAR, load_line, machine
from magnetar.client.wire import Connection, ConnectionLost

RESULTS = Path(__file__).parent / "results"
START_TIMEOUT_S = 20
POLL_INTERVAL_S = 0.002


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def poll(process: subprocess.Popen, start: float, what: str, attempt) -> float:
    """Seconds from `start` until `attempt()` returns without an error."""
    while True:
        try:
            attempt()
            return time.perf_counter() - start
        except (OSError, ConnectionLost):
            if process.poll() is not None or time.perf_counter() - start > START_TIMEOUT_S:
                raise RuntimeError(f"broker did not answer {what} (exit code {process.poll()})") from None
            time.sleep(POLL_INTERVAL_S)


def handshake(port: int) -> None:
    Connection(f"pulsar://127.0.0.1:{port}", timeout_s=1).close()


def http_ready(port: int) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as response:
        if response.status != 200:
            raise urllib.error.URLError(f"/ready answered {response.status}")


def one_run(directory: Path, index: int, idle_s: float) -> tuple[float, float, int]:
    port, http_port = free_port(), free_port()
    args = MAGNETAR + ["standalone", "--data-dir", str(directory / f"data-{index}")]
    args += ["--port", str(port), "--http-port", str(http_port)]
    start = time.perf_counter()
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready_s = poll(process, start, "CONNECT", lambda: handshake(port))
        http_s = poll(process, start, "GET /ready", lambda: http_ready(http_port))
        time.sleep(idle_s)
        return ready_s, http_s, rss_bytes(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--idle", type=float, default=3, help="seconds idle before reading VmRSS")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir))
    load_before = machine()
    try:
        runs = [one_run(directory, index, args.idle) for index in range(args.runs)]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    ready = [run[0] for run in runs]
    http = [run[1] for run in runs]
    rss = [run[2] for run in runs]
    result = {
        "bench": "e2e_startup",
        "runs": args.runs,
        "idle_s": args.idle,
        "ready_s": {"median": statistics.median(ready), "worst": max(ready), "all": ready},
        "http_ready_s": {"median": statistics.median(http), "worst": max(http), "all": http},
        "rss_mb": {"median": statistics.median(rss) / 2**20, "worst": max(rss) / 2**20},
        "machine_before": load_before,
        "machine_after": machine(),
    }
    print(load_line(load_before, result["machine_after"]))
    print("metric | median | worst")
    ready_ms = {name: result["ready_s"][name] * 1e3 for name in ("median", "worst")}
    http_ms = {name: result["http_ready_s"][name] * 1e3 for name in ("median", "worst")}
    print(f"start to accepting connections (CONNECTED), ms | {ready_ms['median']:.0f} | {ready_ms['worst']:.0f}")
    print(f"start to HTTP /ready answering 200, ms | {http_ms['median']:.0f} | {http_ms['worst']:.0f}")
    print(f"idle VmRSS after {args.idle:g} s, MB | {result['rss_mb']['median']:.1f} | {result['rss_mb']['worst']:.1f}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "e2e_startup.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
