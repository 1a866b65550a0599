"""Publish-to-receive latency at a fixed rate: 10,000 msg/s and half the maximum end-to-end rate.

The same setup as e2e_throughput (fresh broker, fsync on, 1 producer, 4 Key_Shared consumers,
100 B messages), but the producer is paced. The maximum is each case's consumer rate from
bench/results/e2e_throughput.json, or `--max-rate`. Latency is the consumers' receive time minus
the message's publish timestamp (whole milliseconds, stamped by the producer's client; one machine,
one clock), so p50 carries up to 1 ms of truncation. Prints a table and writes
bench/results/e2e_latency.json.

    python bench/e2e_latency.py [--seconds 20] [--max-rate MSG_PER_S] [--cases batching,no-batching]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import load_line, machine
from e2e_throughput import RESULTS, run_case

FIXED_RATE = 10_000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20, help="length of each paced run")
    parser.add_argument("--max-rate", type=float, help="instead of e2e_throughput.json (same for every case)")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--max-pending", type=int, default=10_000)
    parser.add_argument("--cases", default="batching,no-batching")
    parser.add_argument(
        "--client",
        choices=("magnetar", "pulsar"),
        default="magnetar",
        help="the producer's client, as in e2e_throughput",
    )
    parser.add_argument("--consumer-client", choices=("pulsar", "magnetar"), default="pulsar")
    parser.add_argument(
        "--batch-receive",
        type=int,
        default=0,
        metavar="N",
        help="as in e2e_throughput; 0 (default): one receive per message, since a batch_receive waits up to 10 ms "
        "for N messages, which is latency the broker did not add",
    )
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    if args.max_rate:
        max_rates = dict.fromkeys(args.cases.split(","), args.max_rate)
    else:
        throughput = json.loads((RESULTS / "e2e_throughput.json").read_text())
        max_rates = {case["case"]: case["consume"]["msg_per_s"] for case in throughput["cases"]}
    runs = [(case, rate) for case in args.cases.split(",") for rate in (FIXED_RATE, round(max_rates[case] / 2))]
    directory = Path(tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir))
    load_before = machine()
    try:
        results = [
            run_case(directory, case == "batching", int(rate * args.seconds), args, rate, f"{case}-{rate}")
            | {"rate": rate}
            for case, rate in runs
        ]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result = {
        "bench": "e2e_latency",
        "seconds": args.seconds,
        "keys": args.keys,
        "producer_client": args.client,
        "consumer_client": args.consumer_client,
        "max_rates": max_rates,
        "machine_before": load_before,
        "machine_after": machine(),
        "runs": results,
    }
    print()
    print(load_line(load_before, result["machine_after"]))
    print(f"producer client: {args.client}, consumers' client: {args.consumer_client}")
    print("case | target msg/s | achieved msg/s | e2e p50 ms | p99 | p99.9 | max | receipt p50 ms | receipt p99")
    for run in results:
        e2e, receipt = run["consume"]["latency_ms"], run["produce"]["latency_ms"]
        print(
            f"{run['case']} | {run['rate']:,} | {run['consume']['msg_per_s']:,.0f} | "
            f"{e2e['p50']:.1f} | {e2e['p99']:.1f} | {e2e['p99_9']:.1f} | {e2e['max']:.1f} | "
            f"{receipt['p50']:.2f} | {receipt['p99']:.2f}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "e2e_latency.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
