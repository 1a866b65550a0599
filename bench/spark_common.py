"""What the Spark benchmarks share: the session, filling a topic, and the in-memory ceilings.

The ceilings are Python data sources that produce rows of the same schema from memory, with no
network and no decoding: what Spark's Python Data Source API itself allows on this machine, measured
in the same run as magnetar so that both see the same load.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pulsar
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from magnetar.spark import local_session
from magnetar.spark.schema import arrow_schema, spark_schema

MESSAGE_BYTES = 100


def spark_session() -> Any:
    spark = local_session("magnetar-bench")
    # The ceiling sources live in this module: ship it to the workers, which unpickle them by reference.
    spark.sparkContext.addPyFile(__file__)
    spark.dataSource.register(MemoryArrowSource)
    spark.dataSource.register(MemoryTupleSource)
    spark.dataSource.register(DiscardSink)
    return spark


def fill_topic(url: str, topic: str, messages: int, keys: int, batch_messages: int = 1000) -> float:
    """Publish `messages` of MESSAGE_BYTES with the official client, batched by key (about
    `batch_messages` to an entry); returns seconds."""
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    # A durable subscription keeps the data: with none, retention may delete closed ledgers.
    client.subscribe(topic, "bench-keep", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_type=pulsar.BatchingType.KeyBased,
        # The key-based container counts messages over all keys: room for `batch_messages` per key.
        batching_max_messages=batch_messages * keys,
        batching_max_allowed_size_in_bytes=4 * 1024 * 1024,
        batching_max_publish_delay_ms=500,
        block_if_queue_full=True,
        max_pending_messages=50_000,
    )
    payload = b"x" * MESSAGE_BYTES
    started = time.perf_counter()
    for i in range(messages):
        producer.send_async(payload, None, partition_key=f"key-{i % keys}")
    producer.flush()
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


def _memory_batch(rows: int, offset: int) -> pa.RecordBatch:
    schema = arrow_schema(spark_schema())
    n = rows
    columns = {
        "key": pa.array([f"key-{(offset + i) % 64}" for i in range(n)], pa.string()),
        "value": pa.array([b"x" * MESSAGE_BYTES] * n, pa.binary()),
        "topic": pa.array(["persistent://public/default/memory"] * n, pa.string()),
        "messageId": pa.array([f"1:{(offset + i) // 1000}:-1:{(offset + i) % 1000}" for i in range(n)], pa.string()),
        "ledgerId": pa.array([1] * n, pa.int64()),
        "entryId": pa.array([(offset + i) // 1000 for i in range(n)], pa.int64()),
        "batchIndex": pa.array([(offset + i) % 1000 for i in range(n)], pa.int32()),
        "publishTime": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
        "eventTime": pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        "properties": pa.MapArray.from_arrays(
            pa.array([0] * (n + 1), pa.int32()),
            pa.array([], pa.string()),
            pa.array([], pa.string()),
            type=schema.field("properties").type,
        ),
        "orderingKey": pa.array([None] * n, pa.binary()),
        "keyHash": pa.array([(offset + i) % 65536 for i in range(n)], pa.int32()),
        "producerName": pa.array(["bench"] * n, pa.string()),
        "sequenceId": pa.array(range(offset, offset + n), pa.int64()),
    }
    return pa.RecordBatch.from_arrays([columns[name] for name in schema.names], schema=schema)


class _Slice(InputPartition):
    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.index, self.rows = index, rows


class _MemoryReader(DataSourceReader):
    def __init__(self, options: dict, arrow: bool) -> None:
        self.rows = int(options.get("rows", "1000000"))
        self.partitions_count = int(options.get("partitions", "2"))
        self.arrow = arrow

    def partitions(self) -> list[_Slice]:
        share = self.rows // self.partitions_count
        return [_Slice(i, share) for i in range(self.partitions_count)]

    def read(self, partition: _Slice):
        # Built before the first row is handed over, so the time measured is Spark's, not ours.
        batch = _memory_batch(32_768, partition.index * partition.rows)
        sent = 0
        if self.arrow:
            while sent < partition.rows:
                take = min(32_768, partition.rows - sent)
                yield batch.slice(0, take)
                sent += take
            return
        rows = batch.to_pylist()
        values = [tuple(dict(v) if name == "properties" else v for name, v in row.items()) for row in rows]
        while sent < partition.rows:
            take = min(len(values), partition.rows - sent)
            yield from values[:take]
            sent += take


class MemoryArrowSource(DataSource):
    """The ceiling for Arrow record batches: ready-made batches of the source's schema."""

    @classmethod
    def name(cls) -> str:
        return "memory_arrow"

    def schema(self) -> Any:
        return spark_schema()

    def reader(self, schema: Any) -> _MemoryReader:
        return _MemoryReader(self.options, arrow=True)


class MemoryTupleSource(MemoryArrowSource):
    """The ceiling for tuples: the same rows as Python tuples."""

    @classmethod
    def name(cls) -> str:
        return "memory_tuples"

    def reader(self, schema: Any) -> _MemoryReader:
        return _MemoryReader(self.options, arrow=False)


class _Count(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class _DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator):
        return _Count(sum(batch.num_rows for batch in iterator))


class DiscardSink(DataSource):
    """The ceiling for writes: an Arrow writer that only counts what Spark hands it."""

    @classmethod
    def name(cls) -> str:
        return "discard"

    def writer(self, schema: Any, overwrite: bool) -> _DiscardWriter:
        return _DiscardWriter()


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def tree_cpu_seconds(*roots: int) -> float:
    """utime + stime of the processes under `roots` (the driver, its JVM and Python workers; the
    broker): what a run costs in CPU whatever else the machine does, unlike its wall time. Processes
    that exit during the run (Spark's short-lived planner processes) are missed; they do little."""
    ticks = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / ticks
    wanted = set(roots)
    changed = True
    while changed:
        changed = False
        for pid, parent in parents.items():
            if parent in wanted and pid not in wanted:
                wanted.add(pid)
                changed = True
    return sum(times.get(pid, 0.0) for pid in wanted)


def timed_with_cpu(action: Any, *roots: int) -> tuple[float, list[float]]:
    """(wall seconds, CPU seconds of the process tree under each of `roots`) of one run of `action`."""
    cpu = [tree_cpu_seconds(root) for root in roots]
    started = time.perf_counter()
    action()
    wall = time.perf_counter() - started
    return wall, [tree_cpu_seconds(root) - before for root, before in zip(roots, cpu)]
