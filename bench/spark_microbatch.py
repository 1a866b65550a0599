"""Micro-batch overhead of spark.readStream.format("magnetar") against Spark's floor, and the latency
from publish to foreachBatch.

Overhead: 3 rounds of 25 micro-batches of 100 rows each (Trigger.AvailableNow with a per-trigger limit) into the
memory sink, from magnetar (10 entries of 10 messages per batch, 2 key hash ranges) and from an
in-memory Python streaming source with 2 partitions (Spark's floor for a Python data source); the
median `triggerExecution` of each, and their ratio (target: at most 1.2).
Latency: a processing-time trigger of 0 s while a producer publishes one message every 50 ms; for
each row, the time from its publish time to the start of the foreachBatch call that received it.

    python bench/spark_microbatch.py [--batches N] [--latency-seconds S]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import pulsar
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from broker_process import Broker, machine
from magnetar.spark.schema import spark_schema
from spark_common import spark_session

RESULTS = Path(__file__).parent / "results" / "spark_microbatch.json"
ROWS_PER_BATCH = 100


class _Half(InputPartition):
    def __init__(self, start: int, end: int) -> None:
        super().__init__(start)
        self.start, self.end = start, end


class _FloorReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets count rows; each micro-batch is ROWS_PER_BATCH rows split in two partitions, with the
    same admission control and AvailableNow support as magnetar's reader."""

    def __init__(self, total: int) -> None:
        self.total = total

    def initialOffset(self) -> dict:
        return {"rows": 0}

    def getDefaultReadLimit(self) -> object:
        return ReadMaxRows(ROWS_PER_BATCH)

    def prepareForTriggerAvailableNow(self) -> None:
        """Everything is available from the start."""

    def latestOffset(self, start: dict, limit: object) -> dict:
        return {"rows": min(start["rows"] + limit.max_rows, self.total)}

    def partitions(self, start: dict, end: dict) -> list[_Half]:
        middle = (start["rows"] + end["rows"]) // 2
        return [_Half(start["rows"], middle), _Half(middle, end["rows"])]

    def read(self, partition: _Half):
        import datetime

        now = datetime.datetime.now(datetime.UTC)
        for i in range(partition.start, partition.end):
            yield (
                f"key-{i % 10}",
                b"x" * 100,
                "memory",
                f"1:{i}:-1:-1",
                1,
                i,
                -1,
                now,
                None,
                {},
                None,
                i % 65536,
                "p",
                i,
            )

    def commit(self, end: dict) -> None:
        pass


class FloorSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "floor_stream"

    def schema(self):
        return spark_schema()

    def streamReader(self, schema):
        return _FloorReader(int(self.options.get("rows", "2500")))


def trigger_ms(query) -> list[float]:
    return [p["durationMs"]["triggerExecution"] for p in query.recentProgress if p["numInputRows"] > 0]


def phases_ms(queries: list) -> dict[str, float]:
    """Median of each phase Spark times in a micro-batch (latestOffset, addBatch, walCommit, ...)."""
    batches = [p["durationMs"] for query in queries for p in query.recentProgress if p["numInputRows"] > 0]
    return {name: statistics.median(b.get(name, 0) for b in batches) for name in sorted(batches[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    args = parser.parse_args()
    before = machine()
    total = args.batches * ROWS_PER_BATCH
    with tempfile.TemporaryDirectory() as scratch:
        broker = Broker(Path(scratch) / "data")
        broker.start()
        try:
            spark = spark_session()
            spark.dataSource.register(FloorSource)
            client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
            topic = "persistent://public/default/microbatch"
            client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest).close()
            producer = client.create_producer(
                topic,
                batching_enabled=True,
                batching_type=pulsar.BatchingType.KeyBased,
                batching_max_messages=100,
                batching_max_publish_delay_ms=1000,
                block_if_queue_full=True,
            )
            for i in range(total):  # 10 keys: entries of about 10 messages, in both hash ranges
                producer.send_async(b"x" * 100, None, partition_key=f"key-{i % 10}")
            producer.flush()

            def run(frame, name: str):
                writer = frame.writeStream.format("memory").queryName(name)
                writer = writer.option("checkpointLocation", str(Path(scratch) / name)).trigger(availableNow=True)
                query = writer.start()
                query.awaitTermination()
                return query

            def magnetar(ranges: int = 2, **options):
                read = spark.readStream.format("magnetar").option("serviceUrl", broker.url)
                read = read.option("adminUrl", broker.http_url).option("topic", topic).option("keyHashRanges", ranges)
                for name, value in options.items():
                    read = read.option(name, value)
                return read.load()

            # Warm both paths up (first Python data source jobs, planner processes).
            run(spark.readStream.format("floor_stream").option("rows", 300).load(), "warm_floor")
            run(magnetar(startingOffsets="earliest", maxEntriesPerTrigger=10), "warm_magnetar")
            # Rounds alternate the two sources, so that both see the same drift in the machine's load.
            floor_ms: list[float] = []
            ours_ms: list[float] = []
            floor_runs, ours_runs = [], []
            for round_ in range(args.rounds):
                floor = run(spark.readStream.format("floor_stream").option("rows", total).load(), f"floor{round_}")
                ours = run(magnetar(startingOffsets="earliest", maxEntriesPerTrigger=10), f"magnetar{round_}")
                assert sum(p["numInputRows"] for p in ours.recentProgress) == total
                assert len(trigger_ms(floor)) == len(trigger_ms(ours)) == args.batches
                floor_ms += trigger_ms(floor)
                ours_ms += trigger_ms(ours)
                floor_runs.append(floor)
                ours_runs.append(ours)
            floor_phases, ours_phases = phases_ms(floor_runs), phases_ms(ours_runs)

            # Latency: publish one message every 50 ms while a 0 s processing-time trigger runs.
            latencies: list[float] = []

            def record(frame, _batch_id: int) -> None:
                started = time.time() * 1000
                for row in frame.select("publishTime").collect():
                    latencies.append(started - row.publishTime.timestamp() * 1000)

            live = magnetar(ranges=2).writeStream.foreachBatch(record)
            live = live.option("checkpointLocation", str(Path(scratch) / "live")).trigger(processingTime="0 seconds")
            query = live.start()
            while query.lastProgress is None:
                time.sleep(0.1)
            single = client.create_producer(topic, batching_enabled=False)
            stop = threading.Event()

            def publish() -> None:
                while not stop.is_set():
                    single.send(b"y" * 100, partition_key="live")
                    time.sleep(0.05)

            publisher = threading.Thread(target=publish)
            publisher.start()
            time.sleep(args.latency_seconds)
            stop.set()
            publisher.join()
            time.sleep(2)
            query.stop()
            client.close()
            spark.stop()
        finally:
            broker.stop()
    after = machine()
    floor_median, ours_median = statistics.median(floor_ms), statistics.median(ours_ms)
    ordered = sorted(latencies)

    def percentile(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    print(
        f"{args.rounds} x {args.batches} micro-batches of {ROWS_PER_BATCH} rows into the memory sink "
        f"(triggerExecution, ms)"
    )
    print(f"{'source':<34} {'median':>8} {'p90':>8} {'min':>8}")
    for name, values in (("in-memory Python source (floor)", floor_ms), ("magnetar, 2 hash ranges", ours_ms)):
        print(
            f"{name:<34} {statistics.median(values):>8.0f} {sorted(values)[int(0.9 * len(values))]:>8.0f} {min(values):>8.0f}"
        )
    print(f"overhead: {ours_median / floor_median:.2f} x the floor (target <= 1.2)")
    print(
        "median phases, ms (floor / magnetar): "
        + ", ".join(
            f"{name} {floor_phases[name]:.0f}/{ours_phases[name]:.0f}"
            for name in ours_phases
            if name != "triggerExecution"
        )
    )
    print(
        f"publish -> foreachBatch over {len(ordered)} messages: p50 {percentile(0.5):.0f} ms, "
        f"p90 {percentile(0.9):.0f} ms, max {ordered[-1]:.0f} ms"
    )
    print(f"load average before {' '.join(before['loadavg'])}, after {' '.join(after['loadavg'])}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "rows_per_batch": ROWS_PER_BATCH,
                "floor_trigger_ms": floor_ms,
                "magnetar_trigger_ms": ours_ms,
                "floor_median_ms": floor_median,
                "magnetar_median_ms": ours_median,
                "ratio": ours_median / floor_median,
                "floor_phases_ms": floor_phases,
                "magnetar_phases_ms": ours_phases,
                "latency_ms": {
                    "p50": percentile(0.5),
                    "p90": percentile(0.9),
                    "max": ordered[-1],
                    "count": len(ordered),
                },
                "machine": before,
                "loadavg_after": after["loadavg"],
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
