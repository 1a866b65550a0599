"""Key_Shared throughput of a magnetar cluster of 1, 2 and 3 brokers on one machine, with Apache Pulsar's
own load generator (`pulsar-perf` 4.0.8, from `make pulsar-perf`).

Per cluster size: a local cluster (LocalCluster: one ZooKeeper, three bookies, E/W/A 3/3/2, fsync on, the
brokers as processes), `pulsar-perf consume` of `--topics` topics (one Key_Shared subscription of 2
consumers each) and `pulsar-perf produce` to the same topics at `--rate` messages/s in total (100 B,
random keys, default batching, or an entry per message with `--unbatched`) for `--seconds`, all
through the cluster's multi-host service URL; the topics' bundles spread over the brokers. Reported: sent, delivered while the producer ran, the brokers'
CPU time together per message (from /proc), each broker's share of it, the arithmetic for a machine
with a core per broker: 1 core / (CPU per message of the busiest broker's share), and the brokers' entry
cache over the run (entries read from it, reads it could not answer, which went to the bookies, and
evictions), from their /metrics, and the metadata writes ZooKeeper took while the producer ran, counted
there: all of them (the zxid's advance), the topics' ledger lists and their cursors (the versions of
their nodes), and the rest (ownership, load reports, the leader's).

On a 2-core machine the bookies, ZooKeeper, pulsar-perf and the brokers share the cores: the rates are
the machine's, the CPU per message is the brokers'. Prints a table and writes
bench/results/cluster_scale.json.

    python bench/cluster_scale.py [--brokers 1,2,3] [--rate 20000] [--topics 8] [--seconds 20] [--unbatched]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from kazoo.client import KazooClient

from broker_process import cpu_seconds, machine
from magnetar.cli.local_cluster import LocalCluster
from magnetar.storage.bookkeeper_engine import managed_ledger_path
from pulsar_perf import CLASSPATH, RECEIVED, SENT, SUBSCRIBE_WAIT_S, _java, _received_so_far, _stop

RESULTS = Path(__file__).resolve().parent / "results" / "cluster_scale.json"
CONSUMERS = 2
WRITE_KINDS = ("total", "ledger_lists", "cursors", "other")
CACHE_COUNTERS = ("magnetar_ml_cache_hits_total", "magnetar_ml_cache_misses_total", "magnetar_ml_cache_evictions_total")


def cache_counters(http_urls: list[str]) -> dict[str, int]:
    """The entry cache counters of the brokers together."""
    totals = dict.fromkeys(CACHE_COUNTERS, 0)
    for url in http_urls:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
            for line in answer.read().decode().splitlines():
                name = line.split("{", 1)[0]
                if name in totals:
                    totals[name] += int(float(line.rsplit(" ", 1)[1]))
    return totals


class MetadataWrites:
    """ZooKeeper's write transactions, counted: the zxid (its counter of writes) read from a probe node
    this creates, and the version (writes so far) of each topic's ledger list and of its cursors."""

    def __init__(self, address: str) -> None:
        self._zk = KazooClient(hosts=address)
        self._zk.start(timeout=30)

    def zxid(self) -> int:
        probe = self._zk.create("/magnetar-bench-probe-", ephemeral=True, sequence=True)
        stat = self._zk.exists(probe)
        self._zk.delete(probe)
        return stat.czxid

    def versions(self, topics: list[str]) -> tuple[int, dict[str, int]]:
        """The ledger lists' versions together, and each cursor's version by its path."""
        lists, cursors = 0, {}
        for topic in topics:
            path = managed_ledger_path(topic)
            stat = self._zk.exists(path)
            if stat is None:
                continue
            lists += stat.version
            for child in self._zk.get_children(path):
                cursor = self._zk.exists(f"{path}/{child}")
                if cursor is not None:
                    cursors[f"{path}/{child}"] = cursor.version
        return lists, cursors

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()


def written(before: tuple[int, tuple[int, dict[str, int]]], after: tuple[int, tuple[int, dict[str, int]]]) -> dict:
    """The writes between two readings of (zxid, versions); the probe's own create and delete are two."""
    (zxid_before, (lists_before, cursors_before)), (zxid_after, (lists_after, cursors_after)) = before, after
    # A cursor created meanwhile was written once more than its version says.
    cursor_writes = sum(version - cursors_before.get(path, -1) for path, version in cursors_after.items())
    total = zxid_after - zxid_before - 2
    ledger_lists = lists_after - lists_before
    return {
        "total": total,
        "ledger_lists": ledger_lists,
        "cursors": cursor_writes,
        "cursor_count": len(cursors_after),
        "other": total - ledger_lists - cursor_writes,
    }


def one_size(brokers: int, rate: int, topics: int, seconds: int, batching: bool, classpath: str) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"magnetar-scale-{brokers}-"))
    cluster = LocalCluster(root / "cluster", brokers=brokers, bookies=3)
    try:
        cluster.start()
        writes = MetadataWrites(cluster.bookkeeper.zookeeper.address)
        topic = f"persistent://public/default/scale-{uuid.uuid4().hex[:8]}"
        names = [f"{topic}-{index}" for index in range(topics)]
        conf = root / "client.conf"
        conf.touch()
        consumer_log, producer_log = root / "consume.log", root / "produce.log"
        url = cluster.service_url
        consumer = _java(
            classpath, conf, "consume", "-u", url, "-t", str(topics), "-st", "Key_Shared", "-n", str(CONSUMERS),
            "-ss", "scale", "-i", "1", topic, log=consumer_log,
        )  # fmt: skip
        try:
            time.sleep(SUBSCRIBE_WAIT_S)
            pids = [broker.process.pid for broker in cluster.brokers]
            before = [cpu_seconds(pid) for pid in pids if pid is not None]
            http_urls = [broker.http_url for broker in cluster.brokers]
            cache_before = cache_counters(http_urls)
            metadata_before = (writes.zxid(), writes.versions(names))
            produce = ["produce", "-u", url, "-t", str(topics), "-r", str(rate), "-s", "100", "-mk", "random"]
            if not batching:
                produce.append("-db")
            producer = _java(classpath, conf, *produce, "-time", str(seconds), topic, log=producer_log)
            producer.wait(timeout=seconds + 120)
            after = [cpu_seconds(pid) for pid in pids if pid is not None]
            metadata = written(metadata_before, (writes.zxid(), writes.versions(names)))
            received_in_run = _received_so_far(consumer_log)
            cache_after = cache_counters(http_urls)
            owners = sorted({cluster.owner(name) for name in names})
        finally:
            _stop(consumer)
            writes.close()
        sent = int(SENT.findall(producer_log.read_text())[-1])
        output = consumer_log.read_text()
        received = int(RECEIVED.findall(output)[-1]) if RECEIVED.search(output) else 0
    finally:
        cluster.terminate()
        shutil.rmtree(root, ignore_errors=True)
    per_broker_s = [b - a for a, b in zip(before, after, strict=True)]
    cpu_us = sum(per_broker_s) / sent * 1e6 if sent else 0.0
    busiest_us = max(per_broker_s) / sent * 1e6 if sent else 0.0
    return {
        "brokers": brokers,
        "topics": topics,
        "brokers_owning_topics": len(owners),
        "rate": rate,
        "batching": batching,
        "seconds": seconds,
        "sent": sent,
        "delivered_in_run": received_in_run,
        "received": received,
        "broker_cpu_us_per_msg": cpu_us,
        "broker_cpu_s": per_broker_s,
        # A core per broker: the busiest broker's CPU per message of the whole stream bounds the rate.
        "core_per_broker_capacity_msg_s": 1e6 / busiest_us if busiest_us else 0.0,
        "cache": {name.split("_")[3]: cache_after[name] - cache_before[name] for name in CACHE_COUNTERS},
        "metadata_writes": metadata,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--brokers", default="1,2,3")
    parser.add_argument("--rate", type=int, default=20_000)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--unbatched", action="store_true", help="an entry per message (pulsar-perf -db)")
    args = parser.parse_args()
    if not CLASSPATH.exists():
        sys.exit(f"{CLASSPATH} is missing: run `make pulsar-perf` first")
    classpath = CLASSPATH.read_text().strip()
    before = machine()
    rows = []
    for count in (int(n) for n in args.brokers.split(",")):
        rows.append(one_size(count, args.rate, args.topics, args.seconds, not args.unbatched, classpath))
        print(f"{count} broker(s): {rows[-1]}", flush=True)
    print()
    print(
        "| brokers | owning topics | sent | delivered in run | broker CPU / msg | each broker's CPU s "
        "| a core per broker | cache hits / misses / evictions | metadata writes/s: all, ledger lists, cursors, other |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        shares = ", ".join(f"{s:.1f}" for s in row["broker_cpu_s"])
        cache = row["cache"]
        rates = ", ".join(f"{row['metadata_writes'][kind] / row['seconds']:.2f}" for kind in WRITE_KINDS)
        print(
            f"| {row['brokers']} | {row['brokers_owning_topics']} | {row['sent']:,} | {row['delivered_in_run']:,} "
            f"| {row['broker_cpu_us_per_msg']:.1f} µs | {shares} | {row['core_per_broker_capacity_msg_s']:,.0f} msg/s "
            f"| {cache['hits']:,} / {cache['misses']:,} / {cache['evictions']:,} | {rates} |"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps({"benchmark": "cluster_scale", "machine": before, "after": machine(), "rows": rows}, indent=2)
    )


if __name__ == "__main__":
    main()
