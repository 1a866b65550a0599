"""Failover of a magnetar cluster: the time from `kill -9` of a topic's owner until its consumer receives
newly sent messages again.

A local cluster (`magnetar local-cluster`'s LocalCluster: one ZooKeeper, three bookies, three brokers,
E/W/A 3/3/2, fsync on) with `metadataStoreSessionTimeoutMillis` `--session-timeout-ms` (5000). Per run, on
a topic of its own: a Key_Shared consumer and a producer of the official Python client on the cluster's
multi-host service URL, one message every 10 ms carrying its send time; two seconds of steady traffic;
then the topic's owner is killed (SIGKILL) and the clock runs until the consumer receives the first
message sent after the kill. The killed broker is started again before the next run. The issue's goal is
the session timeout + 2 s.

`--broker pulsar` runs the same on Apache Pulsar 4.0.7 brokers over the same fixture (bench/pulsar_cluster.py,
`make pulsar-broker`): Pulsar's own failover, with the same client, timeout and bookies.

Prints a table and writes bench/results/cluster_failover[_pulsar].json.

    python bench/cluster_failover.py [--runs 5] [--session-timeout-ms 5000] [--broker magnetar|pulsar]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pulsar

from magnetar.cli.local_cluster import LocalCluster
from pulsar_cluster import PulsarCluster

RESULTS = Path(__file__).resolve().parent / "results"
SEND_INTERVAL_S = 0.01
STEADY_S = 2.0
GIVE_UP_S = 120.0


class Traffic:
    """A producer sending its send time every 10 ms and a consumer noting when each arrives."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.consumer = client.subscribe(
            topic, "failover", consumer_type=pulsar.ConsumerType.KeyShared, receiver_queue_size=100
        )
        self.producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=60_000)
        self.received: list[tuple[float, float]] = []  # (sent at, received at), wall clock
        self.receipts = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._send), threading.Thread(target=self._receive)]
        for thread in self._threads:
            thread.start()

    def _send(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            sequence += 1
            self.producer.send_async(
                f"{time.time():.6f}".encode(), self._receipted, partition_key=f"key-{sequence % 50}"
            )
            time.sleep(SEND_INTERVAL_S)

    def _receipted(self, result: pulsar.Result, _message_id: object) -> None:
        if result == pulsar.Result.Ok:
            self.receipts += 1

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                message = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                continue
            self.received.append((float(message.data()), time.time()))
            self.consumer.acknowledge(message)

    def first_sent_after(self, instant: float) -> float | None:
        """When the first message sent after `instant` arrived, None if none has."""
        for sent, arrived in list(self.received):
            if sent > instant:
                return arrived
        return None

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self.producer.close()
        self.consumer.close()


def one_run(cluster: LocalCluster | PulsarCluster, index: int) -> dict[str, float]:
    topic = f"persistent://public/default/failover-{index}"
    client = pulsar.Client(cluster.service_url, operation_timeout_seconds=60)
    traffic = Traffic(client, topic)
    try:
        time.sleep(STEADY_S)
        owner = cluster.owner(topic)
        killed_at = time.time()
        cluster.kill_broker(owner)
        deadline = killed_at + GIVE_UP_S
        arrived = None
        while arrived is None and time.time() < deadline:
            time.sleep(0.05)
            arrived = traffic.first_sent_after(killed_at)
        if arrived is None:
            raise RuntimeError(f"run {index}: no message sent after the kill arrived within {GIVE_UP_S} s")
        time.sleep(1.0)
    finally:
        traffic.stop()
        client.close()
    cluster.restart_broker(owner)
    return {"owner": owner, "failover_s": arrived - killed_at}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--session-timeout-ms", type=int, default=5000)
    parser.add_argument("--broker", choices=["magnetar", "pulsar"], default="magnetar")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="magnetar-failover-"))
    cluster: LocalCluster | PulsarCluster = (
        PulsarCluster(root, session_timeout_ms=args.session_timeout_ms)
        if args.broker == "pulsar"
        else LocalCluster(root, session_timeout_ms=args.session_timeout_ms)
    )
    runs = []
    try:
        cluster.start()
        for index in range(args.runs):
            runs.append(one_run(cluster, index))
            print(f"run {index}: owner broker-{runs[-1]['owner']} killed, {runs[-1]['failover_s']:.2f} s", flush=True)
    finally:
        cluster.terminate()
        shutil.rmtree(root, ignore_errors=True)
    times = [run["failover_s"] for run in runs]
    goal = args.session_timeout_ms / 1000 + 2
    print()
    print(f"| figure | {args.broker} |")
    print("|---|---|")
    print(f"| session timeout | {args.session_timeout_ms} ms |")
    print(f"| failover, each run | {', '.join(f'{t:.2f}' for t in times)} s |")
    print(f"| median / max | {statistics.median(times):.2f} / {max(times):.2f} s |")
    print(f"| goal (timeout + 2 s) | {goal:.1f} s: {'met' if max(times) <= goal else 'not met'} |")
    RESULTS.mkdir(exist_ok=True)
    name = "cluster_failover.json" if args.broker == "magnetar" else "cluster_failover_pulsar.json"
    (RESULTS / name).write_text(
        json.dumps(
            {
                "benchmark": "cluster_failover",
                "broker": args.broker,
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load": os.getloadavg()},
                "session_timeout_ms": args.session_timeout_ms,
                "runs": runs,
                "median_s": statistics.median(times),
                "max_s": max(times),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
