"""End-to-end throughput: 1 producer, 4 Key_Shared consumers, 100 B messages, fsync on.

For each case (KeyBased batching, no batching) a fresh broker with the default
`journalSyncData=true` is started; `magnetar perf consume` (4 consumers, one process, the official
client) subscribes first, then `magnetar perf produce` publishes, by default with `--client magnetar`
(our wire client, ~2 µs/msg batched) because the official Python client's producer burns ~37 µs/msg and
would be what the run measures; `--client pulsar` runs the official one. `--consumer-client magnetar`
runs the consumers on our client too (~2 µs/msg against the official consumer's ~6). The official
consumers take their messages with `batch_receive` (up to `--batch-receive` 100 at a time, or 10 ms),
acking each message as before: one receive per message hands the GIL between the client's four
threads and its C++ threads for every message, 7.7-8.7 µs of CPU per message against 5.3-6.2
(a 1,000,000-message backlog drained alone: 125-137k against 163-188k msg/s); `--batch-receive 0`
receives one at a time. Producer and consumers are processes of their own, so the
broker's CPU time (utime + stime from /proc, read just before the producer starts and after the last
message is received) is the broker's alone. Reported: the consumers' receive rate over the run, the
producer's rate, end-to-end latency, and CPU µs per message for the broker (all threads, and its
event-loop thread alone) and for each client process.
Prints a table and writes bench/results/e2e_throughput.json.

    python bench/e2e_throughput.py [--messages 1000000] [--keys 100] [--max-pending 10000] [--client pulsar]
        [--consumer-client magnetar] [--batch-receive 0]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import MAGNETAR, Broker, cpu_seconds, load_line, machine

RESULTS = Path(__file__).parent / "results"
CONSUMERS = 4
SIZE_BYTES = 100
RUN_TIMEOUT_S = 1800


def run_case(
    directory: Path, batching: bool, messages: int, args: argparse.Namespace, rate: float = 0, name: str = ""
) -> dict:
    """One broker, one consume process, one produce process (at `rate` msg/s, 0 = as fast as it can);
    returns both summaries and the broker's CPU. `args` gives keys, max_pending and quiet."""
    name = name or ("batching" if batching else "no-batching")
    run_id = f"{name}-{uuid.uuid4().hex[:8]}"
    broker = Broker(directory / f"data-{run_id}")
    broker.start()
    topic = f"persistent://public/default/perf-{run_id}"
    produce_json, consume_json = directory / f"produce-{run_id}.json", directory / f"consume-{run_id}.json"
    try:
        consume = subprocess.Popen(
            MAGNETAR
            + ["perf", "consume", "--service-url", broker.url, "--topic", topic, "--type", "Key_Shared"]
            + ["--consumers", str(CONSUMERS), "--messages", str(messages), "--size", str(SIZE_BYTES)]
            + ["--client", args.consumer_client, "--json", str(consume_json)]
            + (["--batch-receive", str(args.batch_receive)] if args.consumer_client == "pulsar" else []),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert consume.stdout is not None
        for line in consume.stdout:  # the subscription must exist before the first message is published
            print(line, end="", flush=True)
            if "subscribed" in line:
                break
        # The main thread runs the event loop, which every message passes through: its share is
        # what caps the broker, however many cores there are.
        cpu_start, loop_cpu_start = cpu_seconds(broker.pid), cpu_seconds(broker.pid, broker.pid)
        produce = subprocess.Popen(
            MAGNETAR
            + ["perf", "produce", "--service-url", broker.url, "--topic", topic]
            + ["--messages", str(messages), "--size", str(SIZE_BYTES), "--keys", str(args.keys)]
            + ["--max-pending", str(args.max_pending), "--batching" if batching else "--no-batching"]
            + ["--rate", str(rate), "--client", args.client, "--json", str(produce_json)],
            stdout=subprocess.DEVNULL if args.quiet else None,
        )
        for line in consume.stdout:
            if not args.quiet:
                print(line, end="", flush=True)
        consume.wait(timeout=RUN_TIMEOUT_S)
        broker_cpu = cpu_seconds(broker.pid) - cpu_start
        loop_cpu = cpu_seconds(broker.pid, broker.pid) - loop_cpu_start
        produce.wait(timeout=RUN_TIMEOUT_S)
        # A consumer run that ends short (idle timeout) still wrote its summary: keep it, flagged,
        # since messages that never arrive are a finding, not a reason to lose the other numbers.
        if not (produce_json.exists() and consume_json.exists()):
            raise RuntimeError(f"perf failed: consume {consume.returncode}, produce {produce.returncode}")
    finally:
        broker.stop()
    return {
        "case": name,
        "complete": consume.returncode == 0 and produce.returncode == 0,
        "produce": json.loads(produce_json.read_text()),
        "consume": json.loads(consume_json.read_text()),
        "broker_cpu_s": broker_cpu,
        "broker_cpu_us_per_msg": broker_cpu / messages * 1e6,
        "broker_loop_cpu_us_per_msg": loop_cpu / messages * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100, help="distinct keys, round robin")
    parser.add_argument("--max-pending", type=int, default=10_000, help="producer sends in flight")
    parser.add_argument("--cases", default="batching,no-batching")
    parser.add_argument(
        "--client",
        choices=("magnetar", "pulsar"),
        default="magnetar",
        help="the producer's client (perf produce --client)",
    )
    parser.add_argument(
        "--consumer-client",
        choices=("pulsar", "magnetar"),
        default="pulsar",
        help="the consumers' client (perf consume --client)",
    )
    parser.add_argument(
        "--batch-receive",
        type=int,
        default=100,
        metavar="N",
        help="the official consumers take up to N messages per batch_receive (perf consume --batch-receive); 0 = "
        "one receive per message",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="magnetar-bench-", dir=args.dir))
    load_before = machine()
    try:
        cases = [run_case(directory, case == "batching", args.messages, args) for case in args.cases.split(",")]
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    result = {
        "bench": "e2e_throughput",
        "messages": args.messages,
        "consumers": CONSUMERS,
        "size_bytes": SIZE_BYTES,
        "keys": args.keys,
        "max_pending": args.max_pending,
        "producer_client": args.client,
        "consumer_client": args.consumer_client,
        "batch_receive": args.batch_receive if args.consumer_client == "pulsar" else None,
        "machine_before": load_before,
        "machine_after": machine(),
        "cases": cases,
    }
    print()
    print(
        f"{args.messages:,} msg of {SIZE_BYTES} B, {args.keys} keys, 1 producer (client: {args.client}), "
        f"{CONSUMERS} Key_Shared consumers (client: {args.consumer_client})"
    )
    print(load_line(load_before, result["machine_after"]))
    print("case | e2e msg/s | produce msg/s | e2e p50 ms | p99 | broker µs/msg | loop thread | producer | consumers")
    for case in cases:
        consume, produce = case["consume"], case["produce"]
        print(
            f"{case['case']}{'' if case['complete'] else ' (INCOMPLETE)'} | {consume['msg_per_s']:,.0f} | {produce['msg_per_s']:,.0f} | "
            f"{consume['latency_ms']['p50']:.1f} | {consume['latency_ms']['p99']:.1f} | "
            f"{case['broker_cpu_us_per_msg']:.1f} | {case['broker_loop_cpu_us_per_msg']:.1f} | "
            f"{produce['client_cpu_us_per_msg']:.1f} | {consume['client_cpu_us_per_msg']:.1f}"
        )
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "e2e_throughput.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
