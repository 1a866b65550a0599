"""Rows/s that df.write.format("magnetar") stores, against the ceiling of Spark's Arrow writer API
measured in the same run with a sink that only counts what it is handed.

1,000,000 rows (a key of 64 distinct values, a 100 B value), cached in Spark first so that both
paths start from the same memory, written with 2 tasks to a broker with deduplication on (the sink's
exactly-once requirement). Wall-clock rows/s, and the CPU per row of the whole run (driver, JVM,
workers, broker) with what two otherwise idle cores could sustain at that cost. Prints a table;
writes bench/results/spark_write.json.

    python bench/spark_write.py [--rows N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from pyspark.sql import functions as F

from broker_process import Broker, machine
from magnetar.client import wire
from spark_common import spark_session, timed_with_cpu

RESULTS = Path(__file__).parent / "results" / "spark_write.json"


def stored_messages(url: str, topic: str) -> int:
    with wire.Connection(url) as connection:
        consumer_id = connection.subscribe(topic, "count", durable=False)
        last, _mark_delete = connection.last_message_id(consumer_id)
    return sum(e.entry.num_messages for e in wire.read_range(url, topic, wire.EARLIEST, last, wire.FULL_HASH_RANGE))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = machine()
    with tempfile.TemporaryDirectory() as scratch:
        broker = Broker(Path(scratch) / "data", {"brokerDeduplicationEnabled": "true"})
        broker.start()
        try:
            spark = spark_session()
            rows = spark.range(args.rows, numPartitions=2).select(
                F.concat(F.lit("key-"), (F.col("id") % 64).cast("string")).alias("key"),
                F.expr("cast(repeat('x', 100) as binary)").alias("value"),
            )
            rows = rows.cache()
            assert rows.count() == args.rows
            runs = iter(range(1_000))

            def magnetar() -> None:
                topic = f"persistent://public/default/spark-write-{next(runs)}"
                writer = rows.write.format("magnetar").mode("append").option("serviceUrl", broker.url)
                writer.option("adminUrl", broker.http_url).option("topic", topic).save()
                written.append(topic)

            def discard() -> None:
                rows.write.format("discard").mode("append").save()

            written: list[str] = []
            discard()
            magnetar()  # warm-up: first Python data source jobs, producers
            results = {}
            for name, action in (("discard Arrow writer (ceiling)", discard), ("magnetar sink", magnetar)):
                measured = [timed_with_cpu(action, os.getpid(), broker.pid) for _ in range(args.repeats)]
                seconds = [wall for wall, _cpu in measured]
                cpu = statistics.median(sum(cpu) for _wall, cpu in measured)
                results[name] = {
                    "seconds": seconds,
                    "cpu_seconds": [sum(cpu) for _wall, cpu in measured],
                    "rows_per_s_best": args.rows / min(seconds),
                    "rows_per_s_median": args.rows / statistics.median(seconds),
                    "cpu_us_per_row": cpu / args.rows * 1e6,
                    "broker_cpu_us_per_row": statistics.median(cpu[1] for _wall, cpu in measured) / args.rows * 1e6,
                    "rows_per_s_2_idle_cores": 2 * args.rows / cpu,
                }
            stored = stored_messages(broker.url, written[-1])
            spark.stop()
        finally:
            broker.stop()
    after = machine()
    ceiling = results["discard Arrow writer (ceiling)"]["rows_per_s_median"]
    print(f"{args.rows:,} rows of a key and 100 B, 2 tasks; {args.repeats} runs each; last topic holds {stored:,}")
    print(
        f"{'path':<32} {'best rows/s':>12} {'median rows/s':>14} {'of ceiling':>11} {'CPU us/row':>11} "
        f"{'broker':>7} {'2 idle cores':>13}"
    )
    for name, result in results.items():
        share = result["rows_per_s_median"] / ceiling
        print(
            f"{name:<32} {result['rows_per_s_best']:>12,.0f} {result['rows_per_s_median']:>14,.0f} {share:>10.0%} "
            f"{result['cpu_us_per_row']:>11.2f} {result['broker_cpu_us_per_row']:>7.2f} "
            f"{result['rows_per_s_2_idle_cores']:>13,.0f}"
        )
    print(f"load average before {' '.join(before['loadavg'])}, after {' '.join(after['loadavg'])}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "rows": args.rows,
                "value_bytes": 100,
                "stored_in_last_topic": stored,
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
