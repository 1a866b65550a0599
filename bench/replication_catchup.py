"""Geo-replication catch-up: how fast r1 drains its replication backlog to r2 after r2 was away.

Two `magnetar standalone` processes (`clusterName` r1 and r2, fresh data directories, fsync on, ports
chosen up front so that r2 comes back at the same URLs), wired on both brokers through the admin HTTP
API: both clusters registered, tenant `bench` allowed on both, namespace `bench/geo` replicating to
[r1, r2]. For each case (KeyBased batching, no batching), on a fresh topic:

1. the topic is created on r1 and the run waits until r1's replicator to r2 is connected;
2. r2 is stopped (SIGTERM);
3. `magnetar perf produce` (magnetar's wire client) publishes N messages of 100 B on r1 (default
   1,000,000), with nothing consuming on r1: the replicator's cursor `pulsar.repl.r2` holds them, and
   r1's topic stats `replication.r2.replicationBacklog` (entries) is the backlog;
4. r2 starts again on the same ports and data directory; r1's topic stats are polled every 100 ms until
   the backlog is 0.

While r2 was away the replicator retried with a backoff growing from 100 ms to 1 min, so its reconnect
comes some time after r2 is back: that wait is reported apart (from launching r2 again to the
replicator's `outboundConnectedSince`, so r2's own start-up is in it), and the catch-up rate is over
the drain alone, from the reconnect to the first poll that sees the backlog at 0 (±0.1 s): entries per
second and messages per second (the same without batching). The issue's goal: at least 100,000 msg/s.
Also reported: each broker's CPU µs per entry over the drain (utime + stime from /proc, from the poll
that first sees the replicator connected to the one that sees the backlog at 0), r2's msgInCounter
after the drain (messages stored since its restart; more than N means duplicates), how often r1's log
says the replicator failed and started again (an exception, not r2 being away), and the backlog over
time (in the JSON). A drain that stalls (no progress for `--stall` s) or takes longer than `--timeout`
is kept, flagged INCOMPLETE, with the brokers' log lines about replication.
Prints a table and writes bench/results/replication_catchup.json.

    python bench/replication_catchup.py [--messages 1000000] [--cases batching,no-batching] [--broker-setting K=V] [--quick] [--keep]
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import cpu_seconds, load_line, machine
from replication_common import (
    SIZE_BYTES,
    TENANT,
    ClusterBroker,
    add_broker_setting_argument,
    broker_settings,
    create_topic,
    log_excerpts,
    produce_command,
    read_json,
    replicator_failures,
    running_pair,
    topic_stats,
    wait_process,
    write_result,
)

GOAL_MSG_PER_S = 100_000
POLL_S = 0.1
RECONNECT_TIMEOUT_S = 90  # the replicator's backoff tops out at 60 s


def replicator_stats(r1: ClusterBroker, topic: str) -> dict[str, Any]:
    return ((topic_stats(r1, topic) or {}).get("replication") or {}).get("r2") or {}


def connected_since(stats: dict[str, Any]) -> float | None:
    """`outboundConnectedSince` as epoch seconds: Pulsar gives it as an ISO-8601 date (ms precision)."""
    since = stats.get("outboundConnectedSince")
    if isinstance(since, (int, float)):
        return since / 1000
    try:
        return datetime.datetime.fromisoformat(since).timestamp() if since else None
    except ValueError:
        return None


def run_case(brokers: dict[str, ClusterBroker], directory: Path, batching: bool, args: argparse.Namespace) -> dict:
    case = "batching" if batching else "no-batching"
    run_id = f"{case}-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{TENANT}/geo/catchup-{run_id}"
    r1, r2 = brokers["r1"], brokers["r2"]
    produce_json = directory / f"produce-{run_id}.json"
    print(f"--- {case}: {args.messages:,} messages published on r1 while r2 is stopped", flush=True)
    create_topic(brokers, topic, replicated=True)
    r2.stop()
    stopped_at = time.time()
    produce = subprocess.Popen(
        produce_command(r1, topic, args.messages, batching, produce_json, args),
        stdout=subprocess.DEVNULL if args.quiet else None,
    )
    if wait_process(produce, "perf produce", args.timeout) != 0 or not produce_json.exists():
        raise RuntimeError(f"perf produce on r1 failed ({produce.returncode})\n{log_excerpts(brokers)}")
    produced = read_json(produce_json)
    before = replicator_stats(r1, topic)
    backlog = before.get("replicationBacklog")
    print(
        f"r1: {args.messages:,} messages published in {produced.get('entries', '?')} "
        f"entries; replicator to r2: backlog {backlog} entries, connected {before.get('connected')}",
        flush=True,
    )

    restarted_at = time.time()
    r2.start()
    ready_at = time.time()
    print(
        f"r2 ready again after {restarted_at - stopped_at:.1f} s away (started in {ready_at - restarted_at:.1f} s); "
        "waiting for the backlog to drain",
        flush=True,
    )
    samples: list[tuple[float, int, bool]] = []  # (seconds since r2 was started again, backlog, connected)
    connected_at = drained_at = None
    cpu_start: dict[str, float] | None = None
    cpu: dict[str, float] = {}
    problem = ""
    last_change, last_backlog = time.monotonic(), backlog
    deadline = time.monotonic() + RECONNECT_TIMEOUT_S + args.timeout
    while True:
        stats = replicator_stats(r1, topic)
        now = time.time()
        current, connected = stats.get("replicationBacklog"), bool(stats.get("connected"))
        samples.append((round(now - restarted_at, 3), current, connected))
        if connected and connected_at is None:
            connected_at = connected_since(stats) or now
            cpu_start = {name: cpu_seconds(broker.pid) for name, broker in brokers.items()}
        if current == 0:
            drained_at = now
            if cpu_start is not None:
                cpu = {name: cpu_seconds(broker.pid) - cpu_start[name] for name, broker in brokers.items()}
            break
        if current != last_backlog:
            last_change, last_backlog = time.monotonic(), current
        if connected_at is None and now - ready_at > RECONNECT_TIMEOUT_S:
            problem = f"r1's replicator did not reconnect to r2 within {RECONNECT_TIMEOUT_S} s of r2 being ready"
        elif connected_at is not None and time.monotonic() - last_change > args.stall:
            problem = f"the backlog stayed at {current} entries for {args.stall:.0f} s"
        elif time.monotonic() > deadline:
            problem = f"the backlog was still {current} entries after {args.timeout:.0f} s"
        if problem:
            print(f"!!! {case}: {problem}; r1 replicator stats: {stats}\n{log_excerpts(brokers)}", flush=True)
            break
        time.sleep(POLL_S)
    after_r2 = topic_stats(r2, topic) or {}
    drain_s = drained_at - connected_at if drained_at is not None and connected_at is not None else None
    result = {
        "case": case,
        "topic": topic,
        "complete": not problem,
        "problem": problem or None,
        "produce": produced,
        "backlog_entries": backlog,
        "r2_away_s": restarted_at - stopped_at,
        "r2_start_s": ready_at - restarted_at,
        "reconnect_wait_s": connected_at - restarted_at if connected_at is not None else None,
        "drain_s": drain_s,
        "total_catchup_s": drained_at - restarted_at if drained_at is not None else None,
        "entries_per_s": backlog / drain_s if drain_s and backlog else None,
        "msg_per_s": args.messages / drain_s if drain_s else None,
        "broker_cpu_us_per_entry": {name: seconds / backlog * 1e6 for name, seconds in cpu.items()} if backlog else {},
        "r1_replicator_after": replicator_stats(r1, topic),
        "r2_msg_in_counter": after_r2.get("msgInCounter"),
        "r1_replicator_failures": replicator_failures(r1, topic),
        "backlog_samples": samples,
    }
    if drain_s is not None:
        print(
            f"{case}: reconnected {result['reconnect_wait_s']:.1f} s after r2 was started again, drained {backlog:,} "
            f"entries in {drain_s:.2f} s: {result['msg_per_s']:,.0f} msg/s",
            flush=True,
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="published on r1 while r2 is stopped")
    parser.add_argument("--cases", default="batching,no-batching")
    parser.add_argument("--keys", type=int, default=100, help="distinct keys, round robin")
    parser.add_argument("--max-pending", type=int, default=10_000, help="producer sends in flight")
    parser.add_argument(
        "--client",
        choices=("magnetar", "pulsar"),
        default="magnetar",
        help="the producer's client (perf produce --client)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds the publishing, and the drain, may each take (default 60 + 1 s per 5,000 messages)",
    )
    parser.add_argument("--stall", type=float, default=30, help="give up on a drain without progress for this long")
    add_broker_setting_argument(parser)
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 messages")
    parser.add_argument("--quiet", action="store_true", help="no progress lines from the producer")
    parser.add_argument("--dir", default=None, help="where the temporary data directories go")
    parser.add_argument("--keep", action="store_true", help="keep the data directories and broker logs")
    args = parser.parse_args()
    if args.quick:
        args.messages = 20_000
    args.timeout = args.timeout or 60 + args.messages / 5_000
    load_before = machine()
    settings = broker_settings(args)
    with running_pair({"geo": ["r1", "r2"]}, args.dir, args.keep, settings) as (brokers, directory):
        cases = [run_case(brokers, directory, case == "batching", args) for case in args.cases.split(",")]
    load_after = machine()
    result = {
        "bench": "replication_catchup",
        "quick": args.quick,
        "messages": args.messages,
        "size_bytes": SIZE_BYTES,
        "keys": args.keys,
        "producer_client": args.client,
        "broker_settings": settings,
        "goal_msg_per_s": GOAL_MSG_PER_S,
        "machine_before": load_before,
        "machine_after": load_after,
        "cases": cases,
    }

    def number(value: float | None, digits: int = 0) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    print()
    print(
        f"{args.messages:,} msg of {SIZE_BYTES} B, {args.keys} keys, published on r1 (client: {args.client}) "
        f"while r2 was stopped, then r2 started again"
        + (f", broker settings {settings}" if settings else "")
        + (" [--quick: smoke run, numbers not meaningful]" if args.quick else "")
    )
    print(load_line(load_before, load_after))
    print(
        "case | backlog entries | r2 away s | r2 start to reconnect s | drain s | entries/s | msg/s | r1 µs/entry "
        "| r2 µs/entry | r2 msgInCounter | replicator failures"
    )
    for c in cases:
        cpu = c["broker_cpu_us_per_entry"]
        verdict = ""
        if c["msg_per_s"] is not None:
            verdict = " (goal met)" if c["msg_per_s"] >= GOAL_MSG_PER_S else f" (below the {GOAL_MSG_PER_S:,} goal)"
        print(
            f"{c['case']}{'' if c['complete'] else ' (INCOMPLETE)'} | {number(c['backlog_entries'])} | "
            f"{c['r2_away_s']:.1f} | {number(c['reconnect_wait_s'], 1)} | {number(c['drain_s'], 2)} | "
            f"{number(c['entries_per_s'])} | {number(c['msg_per_s'])}{verdict} | {number(cpu.get('r1'), 1)} | "
            f"{number(cpu.get('r2'), 1)} | {number(c['r2_msg_in_counter'])} | "
            f"{c['r1_replicator_failures']}"
        )
    print(f"wrote {write_result('replication_catchup', result)}")


if __name__ == "__main__":
    main()
