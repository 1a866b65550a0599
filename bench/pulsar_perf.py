"""Key_Shared under Apache Pulsar's own load generator, `pulsar-perf` (org.apache.pulsar:pulsar-testclient
4.0.8, Pulsar's Java client), against magnetar and, when given one, a Pulsar broker on the same machine.

Each row starts `pulsar-perf consume` (one Key_Shared subscription of 4 consumers) on a new topic, then
`pulsar-perf produce` (100 B messages with random keys, default batching unless the row says otherwise)
for `--seconds`; the consumers get up to `--drain-seconds` more to receive what was sent, then stop and
print Pulsar's aggregated figures. Rows of the two brokers alternate. Reported per row: messages sent,
delivered by the time the producer stopped and after the drain (and their shares), end-to-end latency
p50 / p99 / p99.9 as the consumers measure it (publish time to receipt) over the whole run, the p99 of
the steady window (the worst of the consumers' 10-s windows that begin `STEADY_AFTER_S` or more after the
producer started, when the JVMs' start-up is over; with the default 20 s that is one window, which
begins about 2 s before the producer stops), and the broker's CPU time per message sent, read from /proc
for the broker's process (`--pulsar-pid` for a Pulsar broker started elsewhere). Prints a table and
writes bench/results/pulsar_perf.json. The Java classpath comes from `make pulsar-perf` (build/pulsar-perf).

    python bench/pulsar_perf.py [--rows 120k,80k,max,5k-unbatched] [--seconds 20] [--drain-seconds 30]
        [--pulsar pulsar://127.0.0.1:6651 --pulsar-pid PID] [-c KEY=VALUE (a setting of magnetar's broker)]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import Broker, cpu_seconds, load_line, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CLASSPATH = ROOT / "build" / "pulsar-perf" / "classpath.txt"
MAIN = "org.apache.pulsar.testclient.PulsarPerfTestTool"
CONSUMERS = 4
# (publish rate msg/s, batching); "max" asks more than one producer can send: as fast as it can (a rate of 0
# makes pulsar-perf send nothing)
ROWS = {"120k": (120_000, True), "80k": (80_000, True), "max": (10_000_000, True), "5k-unbatched": (5_000, False)}
# The consumers subscribe before the producer starts: time for the JVM and the four subscriptions.
SUBSCRIBE_WAIT_S = 6
SENT = re.compile(r"Aggregated throughput stats --- (\d+) records sent")
RECEIVED = re.compile(r"Aggregated throughput stats --- (\d+) records received")
LATENCY = re.compile(
    r"Aggregated latency stats --- Latency: mean:\s*([\d.]+) ms - med:\s*([\d.]+) - 95pct:\s*([\d.]+)"
    r" - 99pct:\s*([\d.]+) - 99.9pct:\s*([\d.]+)"
)


def _java(classpath: str, conf: Path, *args: str, log: Path) -> subprocess.Popen:
    command = ["java", "-Xms256m", "-Xmx1g", "-cp", classpath, MAIN, str(conf), *args]
    with open(log, "w") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM: pulsar-perf prints its aggregated figures from its shutdown hook."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def run_row(
    name: str, service_url: str, broker_pid: int, classpath: str, work: Path, seconds: int, drain_s: int
) -> dict:
    rate, batching = ROWS[name]
    topic = f"persistent://public/default/perf-{name}-{uuid.uuid4().hex[:8]}"
    conf = work / "client.conf"
    conf.touch()
    consumer_log, producer_log = work / f"{name}-consume.log", work / f"{name}-produce.log"
    consumer = _java(
        classpath,
        conf,
        "consume",
        "-u",
        service_url,
        "-st",
        "Key_Shared",
        "-n",
        str(CONSUMERS),
        "-ss",
        "perf",
        # A line a second with the count received so far: what was delivered by the producer's end.
        "-i",
        "1",
        topic,
        log=consumer_log,
    )
    try:
        time.sleep(SUBSCRIBE_WAIT_S)
        cpu_before = cpu_seconds(broker_pid)
        produce = ["produce", "-u", service_url, "-r", str(rate), "-s", "100", "-mk", "random", "-time", str(seconds)]
        if not batching:
            produce.append("-db")
        producer_started = time.time()
        producer = _java(classpath, conf, *produce, topic, log=producer_log)
        producer.wait(timeout=seconds + 120)
        received_at_end = _received_so_far(consumer_log)
        sent = int(SENT.findall(producer_log.read_text())[-1])
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline and _received_so_far(consumer_log) < sent:
            time.sleep(0.5)
    finally:
        _stop(consumer)
    cpu_s = cpu_seconds(broker_pid) - cpu_before
    output = consumer_log.read_text()
    received = int(RECEIVED.findall(output)[-1]) if RECEIVED.search(output) else 0
    latency = LATENCY.findall(output)
    p50, p99, p999 = (float(latency[-1][i]) for i in (1, 3, 4)) if latency else (0.0, 0.0, 0.0)
    windows = _windows(consumer_log, producer_started)
    steady = [p99_ms for start, p99_ms in windows if STEADY_AFTER_S <= start < seconds]
    return {
        "row": name,
        "rate": rate,
        "batching": batching,
        "seconds": seconds,
        "sent": sent,
        "received_by_producer_end": received_at_end,
        # What the goal compares: the rate consumers got while the producer ran.
        "delivered_rate_in_run": received_at_end / seconds,
        "delivered_in_run_share": received_at_end / sent if sent else 0.0,
        "received": received,
        "delivered_share": received / sent if sent else 0.0,
        "e2e_p50_ms": p50,
        "e2e_p99_ms": p99,
        "e2e_p999_ms": p999,
        "window_p99_ms": [[round(start, 1), p99_ms] for start, p99_ms in windows],
        "steady_p99_ms": max(steady) if steady else None,
        "broker_cpu_us_per_msg": cpu_s / sent * 1e6 if sent else 0.0,
    }


# The consumers print a line every 10 s with the messages received so far and that window's latency.
_SO_FAR = re.compile(r"Throughput received:\s+(\d+) msg")
_WINDOW = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d),(\d{3}) .*Throughput received:.*Latency: mean:.* - 99pct:\s*([\d.]+)",
    re.MULTILINE,
)
WINDOW_S = 10
# The producer's JVM and the first seconds of its connection are over by then (docs/performance.md, "Where
# the p99 of the slower rows comes from").
STEADY_AFTER_S = 10


def _windows(log: Path, producer_started: float) -> list[tuple[float, float]]:
    """(start of the window in seconds after the producer started, its p99 ms) of each window line."""
    found = []
    for stamp, millis, p99 in _WINDOW.findall(log.read_text()):
        end = time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S")) + int(millis) / 1000
        found.append((end - WINDOW_S - producer_started, float(p99)))
    return found


def _received_so_far(log: Path) -> int:
    counts = _SO_FAR.findall(log.read_text())
    return int(counts[-1]) if counts else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"which rows, of {', '.join(ROWS)}")
    parser.add_argument("--seconds", type=int, default=20, help="how long the producer publishes")
    parser.add_argument("--drain-seconds", type=int, default=30, help="how long the consumers may catch up")
    parser.add_argument("--pulsar", help="a Pulsar broker's service URL, to run every row against it too")
    parser.add_argument("--pulsar-pid", type=int, help="the Pulsar broker's process id, for its CPU time")
    parser.add_argument(
        "-c", "--setting", action="append", default=[], metavar="KEY=VALUE", help="a setting of the magnetar broker"
    )
    args = parser.parse_args()
    settings = dict(setting.split("=", 1) for setting in args.setting)
    if not CLASSPATH.exists():
        sys.exit(f"{CLASSPATH} is missing: run `make pulsar-perf` first")
    if args.pulsar and not args.pulsar_pid:
        sys.exit("--pulsar needs --pulsar-pid: the broker's CPU time is read from /proc")
    rows = [row for row in args.rows.split(",") if row]
    unknown = [row for row in rows if row not in ROWS]
    if unknown:
        sys.exit(f"unknown rows {', '.join(unknown)}: use {', '.join(ROWS)}")
    classpath = CLASSPATH.read_text().strip()
    work = Path(tempfile.mkdtemp(prefix="magnetar-pulsar-perf-"))
    before = machine()
    results = []
    try:
        for row in rows:
            brokers = [("magnetar", None), ("pulsar", args.pulsar)] if args.pulsar else [("magnetar", None)]
            for label, url in brokers:
                if url is None:
                    broker = Broker(work / f"data-{row}", settings)
                    broker.start()
                    try:
                        result = run_row(row, broker.url, broker.pid, classpath, work, args.seconds, args.drain_seconds)
                    finally:
                        broker.stop()
                else:
                    result = run_row(row, url, args.pulsar_pid, classpath, work, args.seconds, args.drain_seconds)
                results.append({"broker": label, **result})
                print(f"{label} {row}: {json.dumps(result)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    after = machine()
    print(f"\npulsar-perf 4.0.8, {CONSUMERS} Key_Shared consumers, 100 B messages, random keys, {args.seconds} s")
    print(load_line(before, after))
    print(
        "broker | row | sent | delivered by the producer's end | delivered msg/s in the run | delivered after the drain"
        " | e2e p50 ms | p99 | p99.9 | steady p99 | broker µs/msg"
    )
    for r in results:
        print(
            f"{r['broker']} | {r['row']} | {r['sent']:,} | {r['received_by_producer_end']:,} "
            f"({r['delivered_in_run_share']:.0%}) | {r['delivered_rate_in_run']:,.0f} | "
            f"{r['received']:,} ({r['delivered_share']:.0%}) | "
            f"{r['e2e_p50_ms']:.1f} | {r['e2e_p99_ms']:.1f} | {r['e2e_p999_ms']:.1f} | "
            f"{'-' if r['steady_p99_ms'] is None else format(r['steady_p99_ms'], '.1f')} | "
            f"{r['broker_cpu_us_per_msg']:.1f}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "pulsar_perf.json").write_text(
        json.dumps({"machine": before, "machine_after": after, "results": results}, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
