"""Rows/s that spark.read.format("magnetar") delivers from a broker process, against the ceiling of
Spark's Python Data Source API measured in the same run with in-memory sources.

1,000,000 messages of 100 B published with the official client, batched by key (64 keys, up to 1,000
messages an entry), read with 2 and 8 key hash ranges into Spark's `noop` sink (which makes Spark
materialise every column). Besides wall-clock rows/s, each run's CPU time (driver, JVM, Python
workers, broker) gives the CPU per row and what two otherwise idle cores could sustain at that cost:
the machine is shared, and wall-clock numbers move with its load. Prints a table; writes
bench/results/spark_read.json.

    python bench/spark_read.py [--messages N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from broker_process import Broker, machine
from spark_common import fill_topic, spark_session, timed_with_cpu

RESULTS = Path(__file__).parent / "results" / "spark_read.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = machine()
    with tempfile.TemporaryDirectory() as scratch:
        broker = Broker(Path(scratch) / "data")
        broker.start()
        try:
            topic = "persistent://public/default/spark-read"
            publish_s = fill_topic(broker.url, topic, args.messages, keys=64)
            spark = spark_session()

            def noop(frame) -> None:
                frame.write.format("noop").mode("overwrite").save()

            def memory(kind: str, rows: int, partitions: int = 2):
                return spark.read.format(kind).option("rows", rows).option("partitions", partitions).load()

            def magnetar(ranges: int):
                read = (
                    spark.read.format("magnetar").option("serviceUrl", broker.url).option("adminUrl", broker.http_url)
                )
                return read.option("topic", topic).option("keyHashRanges", ranges).load()

            # The first Python data source job of a session costs seconds: pay it before measuring.
            noop(memory("memory_arrow", 10_000))
            assert magnetar(2).count() == args.messages
            # Each Spark task of a Python data source costs about 0.1 s of CPU whatever it reads, so
            # the 8-range read is set against an in-memory source with 8 partitions too.
            paths = {
                "in-memory tuples, 2 partitions": lambda: noop(memory("memory_tuples", args.messages)),
                "in-memory Arrow, 2 partitions": lambda: noop(memory("memory_arrow", args.messages)),
                "in-memory Arrow, 8 partitions": lambda: noop(memory("memory_arrow", args.messages, 8)),
                "magnetar, 2 hash ranges": lambda: noop(magnetar(2)),
                "magnetar, 8 hash ranges": lambda: noop(magnetar(8)),
            }
            ceilings = {
                "in-memory tuples, 2 partitions": "in-memory Arrow, 2 partitions",
                "in-memory Arrow, 2 partitions": "in-memory Arrow, 2 partitions",
                "in-memory Arrow, 8 partitions": "in-memory Arrow, 8 partitions",
                "magnetar, 2 hash ranges": "in-memory Arrow, 2 partitions",
                "magnetar, 8 hash ranges": "in-memory Arrow, 8 partitions",
            }
            results = {}
            for name, action in paths.items():
                runs = [timed_with_cpu(action, os.getpid(), broker.pid) for _ in range(args.repeats)]
                seconds = [wall for wall, _cpu in runs]
                cpu = statistics.median(sum(cpu) for _wall, cpu in runs)
                broker_cpu = statistics.median(cpu[1] for _wall, cpu in runs)
                results[name] = {
                    "seconds": seconds,
                    "cpu_seconds": [sum(cpu) for _wall, cpu in runs],
                    "broker_cpu_us_per_row": broker_cpu / args.messages * 1e6,
                    "rows_per_s_best": args.messages / min(seconds),
                    "rows_per_s_median": args.messages / statistics.median(seconds),
                    "cpu_us_per_row": cpu / args.messages * 1e6,
                    # What 2 otherwise idle cores could sustain at this CPU cost per row.
                    "rows_per_s_2_idle_cores": 2 * args.messages / cpu,
                }
            spark.stop()
        finally:
            broker.stop()
    after = machine()
    print(f"{args.messages:,} messages of 100 B, published in {publish_s:.1f} s; {args.repeats} runs each")
    print(
        f"{'path':<30} {'best rows/s':>12} {'median rows/s':>14} {'of Arrow':>9} {'CPU us/row':>11} "
        f"{'broker':>7} {'2 idle cores':>13}"
    )
    for name, result in results.items():
        share = result["rows_per_s_median"] / results[ceilings[name]]["rows_per_s_median"]
        result["of_arrow_ceiling"] = share
        print(
            f"{name:<30} {result['rows_per_s_best']:>12,.0f} {result['rows_per_s_median']:>14,.0f} {share:>9.0%} "
            f"{result['cpu_us_per_row']:>11.2f} {result['broker_cpu_us_per_row']:>7.2f} "
            f"{result['rows_per_s_2_idle_cores']:>13,.0f}"
        )
    print(f"load average before {' '.join(before['loadavg'])}, after {' '.join(after['loadavg'])}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "messages": args.messages,
                "message_bytes": 100,
                "publish_s": publish_s,
                "results": results,
                "machine": before,
                "loadavg_after": after["loadavg"],
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
