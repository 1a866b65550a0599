"""Geo-replication throughput: publish in cluster r1, receive in cluster r2, against the same load on r1 alone.

Two `magnetar standalone` processes (`clusterName` r1 and r2, fresh data directories, fsync on as by
default) are wired as an operator does, on both brokers through the admin HTTP API: both clusters
registered, tenant `bench` allowed on both, namespace `bench/geo` replicating to [r1, r2] and, on r1,
`bench/local` replicating to [r1] only. For each case (KeyBased batching, no batching), on a fresh topic
created on r1 through the admin API (replicated: once r1's replicator to r2 is connected):

- replicated: `magnetar perf consume` (4 Key_Shared consumers, one process) subscribes on r2, then
  `magnetar perf produce` publishes N messages of 100 B on r1; every message reaches the consumers
  through r1's replicator (its cursor, its producer on r2, r2's storage). The consumers' receive rate is
  the replication throughput end to end; their latency is receive time in r2 minus the publish time
  stamped by the producer's client in r1 (whole ms, one machine, one clock).
- local (the baseline): the same consumers and producer on r1 alone, namespace `bench/local`.

And without consumers ("stored", the replication alone): the producer publishes N messages on r1 and the
run polls the brokers' topic stats (`msgInCounter`) every 20 ms; the rate is N over the time from the first
message stored in r1 to the last one stored where the workload ends: in r2 (replicated, r2's counter
counts what r1's replicator sent) or in r1 (local). Both are timed the same way, from the midpoints
between polls (±20 ms each end: use enough messages for runs of several seconds). A third stored mode,
both, is what the machine gives for the same two copies without a replicator: a second producer
publishes the same N messages on r2 (namespace `bench/local-r2`) while the first publishes on r1, timed
from the first message stored in either to the last stored in both. The replicator does in r1 what the
second producer's client does in its own process, so the replicated rate near the both rate says the
two copies, not the replicator, are what the two cores are short of.

Clients as in e2e_throughput: the producer on magnetar's wire client (`--client`), the consumers on the
official client with `batch_receive` of up to 100 (`--consumer-client`, `--batch-receive`). Reported per
run: r1's publish rate (the producer's receipts), the receive rate, end-to-end latency, each broker's
CPU µs per message (utime + stime from /proc, consumer subscribed to last message received); and per
case the ratio of the replicated receive rate to the local publish rate (the issue's goal: replication
keeps up with at least 90% of it) and to the local receive rate. Also r1's replicator counters, r2's
msgInCounter after the run (more than N means duplicates) and how often r1's log says the replicator
failed and started again. A run whose messages do not all arrive is
kept, flagged INCOMPLETE, with the brokers' log lines about replication.
Prints a table and writes bench/results/replication_throughput.json.

    python bench/replication_throughput.py [--messages 200000] [--cases batching,no-batching] [--quick]
        [--measures received,stored,both] [--client pulsar] [--consumer-client magnetar] [--batch-receive 0] [--keep]
        [--external r1=pulsar://h:p,http://h:p --external r2=...]   (clusters already running: replication_external)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from broker_process import cpu_seconds, load_line, machine
from replication_common import (
    CONSUMERS,
    SIZE_BYTES,
    TENANT,
    ClusterBroker,
    add_broker_setting_argument,
    add_client_arguments,
    admin,
    broker_settings,
    create_topic,
    finish_consume,
    log_excerpts,
    produce_command,
    progress_windows,
    read_json,
    replicator_failures,
    start_consume,
    topic_stats,
    wait_process,
    write_result,
)
from replication_external import add_external_argument, clusters

NAMESPACES = {"geo": ["r1", "r2"], "local": ["r1"], "local-r2": ["r2"]}
IDLE_TIMEOUT_S = 30  # the consumers give up after this long without a message
POLL_S = 0.02  # stored runs: how often the brokers' counters are read


def run(
    brokers: dict[str, ClusterBroker],
    directory: Path,
    batching: bool,
    replicated: bool,
    messages: int,
    args: argparse.Namespace,
    rate: float = 0,
) -> dict[str, Any]:
    """One producer on r1 (at `rate` msg/s, 0 = as fast as it can), the consumers on r2 (replicated) or on
    r1 (local); a fresh topic. `args` gives the clients' flags, quiet and timeout."""
    case = "batching" if batching else "no-batching"
    mode = "replicated" if replicated else "local"
    run_id = f"{case}-{mode}-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{TENANT}/{'geo' if replicated else 'local'}/tp-{run_id}"
    source, target = brokers["r1"], brokers["r2" if replicated else "r1"]
    produce_json, consume_json = directory / f"produce-{run_id}.json", directory / f"consume-{run_id}.json"
    pace = f" at {rate:,.0f} msg/s" if rate else ""
    print(f"--- {case}, {mode}: {messages:,} messages{pace}, produce on r1, consume on {target.cluster}", flush=True)
    create_topic(brokers, topic, replicated)
    consume = start_consume(target, topic, messages, consume_json, args, IDLE_TIMEOUT_S)
    produce: subprocess.Popen | None = None
    try:
        cpu_start = {name: cpu_seconds(broker.pid) for name, broker in brokers.items()}
        produce = subprocess.Popen(
            produce_command(source, topic, messages, batching, produce_json, args, rate),
            stdout=subprocess.DEVNULL if args.quiet else None,
        )
        lines = finish_consume(consume, args.quiet, args.timeout)
        cpu = {name: cpu_seconds(broker.pid) - cpu_start[name] for name, broker in brokers.items()}
        wait_process(produce, "perf produce", args.timeout)
    finally:
        for process in (consume, produce):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    produced, consumed = read_json(produce_json), read_json(consume_json)
    if produced is None or consumed is None:
        raise RuntimeError(
            f"perf failed: consume {consume.returncode}, produce {produce.returncode}\n{log_excerpts(brokers)}"
        )
    result: dict[str, Any] = {
        "case": case,
        "mode": mode,
        "topic": topic,
        "complete": consume.returncode == 0 and produce.returncode == 0,
        "produce": produced,
        "consume": consumed,
        "broker_cpu_us_per_msg": {name: seconds / messages * 1e6 for name, seconds in cpu.items()},
        "windows": progress_windows(lines),
    }
    if replicated:
        r1_stats, r2_stats = topic_stats(brokers["r1"], topic) or {}, topic_stats(brokers["r2"], topic) or {}
        result["r1_replicator"] = (r1_stats.get("replication") or {}).get("r2")
        result["r2_msg_in_counter"] = r2_stats.get("msgInCounter")
        if isinstance(brokers["r1"], ClusterBroker):
            result["r1_replicator_failures"] = replicator_failures(brokers["r1"], topic)
    if not result["complete"]:
        print(
            f"!!! {case}, {mode}: only {consumed['messages']:,} of {messages:,} messages received; "
            f"r1 replicator: {result.get('r1_replicator')}\n{log_excerpts(brokers)}",
            flush=True,
        )
    return result


def run_stored(
    brokers: dict[str, ClusterBroker],
    directory: Path,
    batching: bool,
    mode: str,
    messages: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """No consumers: N messages published on r1 and timed, by polling the brokers' msgInCounter, from the
    first stored in r1 to the last stored in r2 (`mode` replicated) or in r1 (local). Mode both: no
    replication, a second producer publishes the same N messages on r2 at the same time, timed from the
    first stored in either cluster to the last stored in both."""
    case = "batching" if batching else "no-batching"
    run_id = f"{case}-{mode}-stored-{uuid.uuid4().hex[:8]}"
    replicated = mode == "replicated"
    namespace = {"replicated": "geo", "local": "local", "both": "local"}[mode]
    # (broker, topic) each producer publishes to; the run ends when the last of `targets` stored N.
    sources = [(brokers["r1"], f"persistent://{TENANT}/{namespace}/tp-{run_id}")]
    if mode == "both":
        sources.append((brokers["r2"], f"persistent://{TENANT}/local-r2/tp-{run_id}"))
    targets = [(brokers["r2"], sources[0][1])] if replicated else sources
    print(
        f"--- {case}, {mode}, stored: {messages:,} messages, produce on "
        f"{' and '.join(broker.cluster for broker, _ in sources)}, stored in "
        f"{' and '.join(broker.cluster for broker, _ in targets)}",
        flush=True,
    )
    create_topic(brokers, sources[0][1], replicated)
    if mode == "both":
        admin(brokers["r2"], "PUT", "/admin/v2/persistent/" + sources[1][1].removeprefix("persistent://"))

    def counter(broker: ClusterBroker, topic: str) -> int:
        return (topic_stats(broker, topic) or {}).get("msgInCounter") or 0

    first = last = None
    cpu_start = {name: cpu_seconds(broker.pid) for name, broker in brokers.items()}
    produce_jsons = [directory / f"produce-{run_id}-{broker.cluster}.json" for broker, _ in sources]
    produces = [
        subprocess.Popen(
            produce_command(broker, topic, messages, batching, produce_json, args),
            stdout=subprocess.DEVNULL if args.quiet else None,
        )
        for (broker, topic), produce_json in zip(sources, produce_jsons)
    ]
    try:
        deadline = time.monotonic() + args.timeout
        previous = time.monotonic()
        while last is None:
            if time.monotonic() > deadline:
                stored = ", ".join(f"{counter(broker, topic):,} in {broker.cluster}" for broker, topic in targets)
                raise RuntimeError(
                    f"stored {stored} of {messages:,} messages in {args.timeout:.0f} s\n{log_excerpts(brokers)}"
                )
            now = time.monotonic()
            middle = (previous + now) / 2
            if first is None and any(counter(broker, topic) > 0 for broker, topic in sources):
                first = middle
            if first is not None and all(counter(broker, topic) >= messages for broker, topic in targets):
                # A run that began and ended within one poll interval is timed as the whole interval.
                first, last = (previous, now) if first == middle else (first, middle)
            previous = now
            time.sleep(POLL_S)
        cpu = {name: cpu_seconds(broker.pid) - cpu_start[name] for name, broker in brokers.items()}
        for produce in produces:
            wait_process(produce, "perf produce", args.timeout)
    finally:
        for produce in produces:
            if produce.poll() is None:
                produce.kill()
                produce.wait()
    produced = [read_json(path) for path in produce_jsons]
    if any(one is None for one in produced):
        codes = [produce.returncode for produce in produces]
        raise RuntimeError(f"perf produce failed with {codes}\n{log_excerpts(brokers)}")
    result: dict[str, Any] = {
        "case": case,
        "mode": mode,
        "measure": "stored",
        "topic": sources[0][1],
        "produce": produced[0],
        "seconds": last - first,
        "stored_msg_per_s": messages / (last - first),
        "broker_cpu_us_per_msg": {name: seconds / messages * 1e6 for name, seconds in cpu.items()},
        "target_msg_in_counter": min(counter(broker, topic) for broker, topic in targets),
    }
    if mode == "both":
        result["produce_r2"] = produced[1]
    if replicated and isinstance(brokers["r1"], ClusterBroker):
        result["r1_replicator_failures"] = replicator_failures(brokers["r1"], sources[0][1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a run may take before it is killed (default 60 + 1 s per 2,000 messages)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 5,000 messages")
    add_broker_setting_argument(parser)
    parser.add_argument(
        "--measures",
        default="received,stored,both",
        help="received: consumers on the target cluster; stored: no consumers, messages stored there; both "
        "(with stored): the same messages also published by a second producer on r2, no replication",
    )
    add_client_arguments(parser, batch_receive_default=100)
    add_external_argument(parser)
    args = parser.parse_args()
    if args.quick:
        args.messages = 5_000
    args.timeout = args.timeout or 60 + args.messages / 2_000
    load_before = machine()
    measures = args.measures.split(",")
    settings = broker_settings(args)
    with clusters(args, NAMESPACES, settings) as (brokers, directory):
        runs = [
            run(brokers, directory, case == "batching", replicated, args.messages, args)
            for case in args.cases.split(",")
            if "received" in measures
            for replicated in (False, True)
        ]
        stored_runs = [
            run_stored(brokers, directory, case == "batching", mode, args.messages, args)
            for case in args.cases.split(",")
            if "stored" in measures
            for mode in ("local", "replicated", "both")
            if mode != "both" or "both" in measures
        ]
    load_after = machine()

    summaries = []
    for case in args.cases.split(","):
        summary: dict[str, Any] = {"case": case}
        if "received" in measures:
            local = next(r for r in runs if r["case"] == case and r["mode"] == "local")
            replicated = next(r for r in runs if r["case"] == case and r["mode"] == "replicated")
            received = replicated["consume"]["msg_per_s"]
            summary["replicated_receive_over_local_publish"] = received / local["produce"]["msg_per_s"]
            summary["replicated_receive_over_local_receive"] = received / local["consume"]["msg_per_s"]
        if "stored" in measures:
            local = next(r for r in stored_runs if r["case"] == case and r["mode"] == "local")
            replicated = next(r for r in stored_runs if r["case"] == case and r["mode"] == "replicated")
            summary["replicated_stored_over_local_stored"] = replicated["stored_msg_per_s"] / local["stored_msg_per_s"]
            both = next((r for r in stored_runs if r["case"] == case and r["mode"] == "both"), None)
            if both is not None:
                summary["both_stored_over_local_stored"] = both["stored_msg_per_s"] / local["stored_msg_per_s"]
        summaries.append(summary)
    result = {
        "bench": "replication_throughput",
        "quick": args.quick,
        "messages": args.messages,
        "consumers": CONSUMERS,
        "size_bytes": SIZE_BYTES,
        "keys": args.keys,
        "max_pending": args.max_pending,
        "broker_settings": settings,
        "producer_client": args.client,
        "consumer_client": args.consumer_client,
        "batch_receive": args.batch_receive if args.consumer_client == "pulsar" else None,
        "machine_before": load_before,
        "machine_after": load_after,
        "runs": runs,
        "stored_runs": stored_runs,
        "summary": summaries,
    }
    print()
    print(
        f"{args.messages:,} msg of {SIZE_BYTES} B, {args.keys} keys, 1 producer on r1 (client: {args.client}), "
        f"{CONSUMERS} Key_Shared consumers (client: {args.consumer_client}) on r2 (replicated) or r1 (local)"
        + (" [--quick: smoke run, numbers not meaningful]" if args.quick else "")
    )
    print(load_line(load_before, load_after))
    print("case | mode | r1 publish msg/s | receive msg/s | e2e p50 ms | p99 | p99.9 | r1 µs/msg | r2 µs/msg")
    for r in runs:
        latency = r["consume"]["latency_ms"]
        print(
            f"{r['case']} | {r['mode']}{'' if r['complete'] else ' (INCOMPLETE)'} | {r['produce']['msg_per_s']:,.0f} | "
            f"{r['consume']['msg_per_s']:,.0f} | {latency['p50']:.1f} | {latency['p99']:.1f} | {latency['p99_9']:.1f} | "
            f"{r['broker_cpu_us_per_msg']['r1']:.1f} | {r['broker_cpu_us_per_msg']['r2']:.1f}"
        )
    if stored_runs:
        print("stored (no consumers): case | mode | stored msg/s | s | r1 µs/msg | r2 µs/msg | stored in target")
        for r in stored_runs:
            print(
                f"{r['case']} | {r['mode']} | {r['stored_msg_per_s']:,.0f} | {r['seconds']:.2f} | "
                f"{r['broker_cpu_us_per_msg']['r1']:.1f} | {r['broker_cpu_us_per_msg']['r2']:.1f} | "
                f"{r['target_msg_in_counter']:,}"
            )
    for s in summaries:
        if "replicated_receive_over_local_publish" in s:
            ratio = s["replicated_receive_over_local_publish"]
            print(
                f"{s['case']}: replicated receive rate = {ratio:.0%} of the local publish rate "
                f"({'meets' if ratio >= 0.9 else 'below'} the 90% goal), "
                f"{s['replicated_receive_over_local_receive']:.0%} of the local receive rate"
            )
        if "replicated_stored_over_local_stored" in s:
            ratio = s["replicated_stored_over_local_stored"]
            print(
                f"{s['case']}: replicated to r2 at {ratio:.0%} of the local store rate "
                f"({'meets' if ratio >= 0.9 else 'below'} the 90% goal)"
            )
        if "both_stored_over_local_stored" in s:
            print(
                f"{s['case']}: stored in both clusters by two producers, no replication, at "
                f"{s['both_stored_over_local_stored']:.0%} of the local store rate"
            )
    for r in runs:
        if r["mode"] == "replicated":
            rep = r.get("r1_replicator") or {}
            print(
                f"{r['case']}: r1 replicator to r2 msgOutCount {rep.get('msgOutCount')}, backlog "
                f"{rep.get('replicationBacklog')} entries; r2 msgInCounter {r.get('r2_msg_in_counter')}; "
                f"replicator failed and restarted {r.get('r1_replicator_failures', '-')} times (r1's log)"
            )
    print(f"wrote {write_result('replication_throughput', result)}")


if __name__ == "__main__":
    main()
