"""Geo-replication lag at a fixed rate: publish in cluster r1 at 10,000 msg/s, receive in cluster r2.

The same two clusters and setup as replication_throughput (r1 and r2, fresh data directories, fsync
on, namespace `bench/geo` replicating to [r1, r2], `bench/local` on r1 only), the same clients
(the producer on magnetar's wire client, 4 Key_Shared consumers on the official client), but the
producer is paced (`perf produce --rate`, default 10,000 msg/s) for `--seconds` (default 30). Each
topic is created on r1 through the admin API first and the run starts once r1's replicator to r2 is
connected. The lag is the consumers' receive time in r2 minus the publish timestamp the producer's
client stamped in r1 (whole milliseconds, one machine, one clock: p50 carries up to 1 ms of
truncation); the consumers take one message per receive (`--batch-receive 0`, as e2e_latency), since a
batch_receive would wait up to 10 ms for a full batch. The issue's goal: p99 at most 20 ms on loopback.
The same paced load published and consumed on r1 alone (`local`) is the baseline that shows what
replication adds. Reported per run: lag p50/p99/p99.9/max over the whole run, the worst one-second
p99 (a lag that grows through the run means replication does not keep up with the rate), the receive
rate, each broker's CPU µs per message, and how often r1's log says the replicator failed and started
again. Cases: KeyBased batching (1 ms batching delay) and none.
Prints a table and writes bench/results/replication_lag.json.

    python bench/replication_lag.py [--rate 10000] [--seconds 30] [--cases batching,no-batching]
        [--modes replicated,local] [--quick] [--external r1=pulsar://h:p,http://h:p --external r2=...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import load_line, machine
from replication_common import (
    CONSUMERS,
    SIZE_BYTES,
    add_client_arguments,
    write_result,
)
from replication_external import add_external_argument, clusters
from replication_throughput import NAMESPACES, run

GOAL_P99_MS = 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=10_000, help="msg/s published in r1")
    parser.add_argument("--seconds", type=float, default=30, help="length of each paced run")
    parser.add_argument("--modes", default="replicated,local", help="replicated (r1 -> r2) and/or local (r1 alone)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a run may take before it is killed (default 2 x --seconds + 60)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 s per run")
    add_client_arguments(parser, batch_receive_default=0)
    add_external_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.seconds = 3
    args.timeout = args.timeout or 2 * args.seconds + 60
    messages = int(args.rate * args.seconds)
    modes = args.modes.split(",")
    load_before = machine()
    with clusters(args, NAMESPACES, {}) as (brokers, directory):
        runs = [
            run(brokers, directory, case == "batching", mode == "replicated", messages, args, args.rate)
            for case in args.cases.split(",")
            for mode in modes
        ]
    load_after = machine()
    result = {
        "bench": "replication_lag",
        "quick": args.quick,
        "rate": args.rate,
        "seconds": args.seconds,
        "messages": messages,
        "consumers": CONSUMERS,
        "size_bytes": SIZE_BYTES,
        "keys": args.keys,
        "producer_client": args.client,
        "consumer_client": args.consumer_client,
        "batch_receive": args.batch_receive if args.consumer_client == "pulsar" else None,
        "goal_p99_ms": GOAL_P99_MS,
        "machine_before": load_before,
        "machine_after": load_after,
        "runs": runs,
    }
    print()
    print(
        f"{args.rate:,.0f} msg/s for {args.seconds:g} s ({messages:,} msg of {SIZE_BYTES} B) published on r1 "
        f"(client: {args.client}), {CONSUMERS} Key_Shared consumers (client: {args.consumer_client}) on r2 "
        f"(replicated) or r1 (local)" + (" [--quick: smoke run, numbers not meaningful]" if args.quick else "")
    )
    print(load_line(load_before, load_after))
    print(
        "case | mode | receive msg/s | lag p50 ms | p99 | p99.9 | max | worst 1 s p99 | r1 µs/msg | r2 µs/msg "
        "| replicator failures"
    )
    for r in runs:
        latency = r["consume"]["latency_ms"]
        worst = max((w["p99_ms"] for w in r["windows"]), default=float("nan"))
        verdict = ""
        if r["mode"] == "replicated":
            verdict = " (goal met)" if latency["p99"] <= GOAL_P99_MS else f" (above the {GOAL_P99_MS} ms goal)"
        print(
            f"{r['case']} | {r['mode']}{'' if r['complete'] else ' (INCOMPLETE)'} | {r['consume']['msg_per_s']:,.0f} | "
            f"{latency['p50']:.1f} | {latency['p99']:.1f}{verdict} | {latency['p99_9']:.1f} | {latency['max']:.1f} | "
            f"{worst:.1f} | {r['broker_cpu_us_per_msg']['r1']:.1f} | {r['broker_cpu_us_per_msg']['r2']:.1f} | "
            f"{r.get('r1_replicator_failures', '-')}"
        )
    print(f"wrote {write_result('replication_lag', result)}")


if __name__ == "__main__":
    main()
