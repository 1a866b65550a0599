"""spark.readStream.format("magnetar"): micro-batches, limits, restarts, replays, the durable
subscription, and data lost to retention."""

from __future__ import annotations

import threading

import pytest
from pyspark.errors import PySparkException
from spark_helpers import (
    admin_get,
    keep,
    keyed_messages,
    produce,
    run_available_now,
    source,
    wait_for,
)

from magnetar.client import wire
from magnetar.protocol.messages import encode_batch, encode_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata, SingleMessageMetadata


def batches_with_rows(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def test_available_now_reads_everything_in_max_entries_batches(
    spark, module_broker, client_factory, topic, tmp_path
) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(25, keys=5), batched=False)
    stream = source(spark, module_broker, topic, streaming=True, startingOffsets="earliest", maxEntriesPerTrigger=10)
    writer = stream.writeStream.format("memory").queryName("entries_limit").option("checkpointLocation", str(tmp_path))
    query = run_available_now(writer)
    assert batches_with_rows(query) == [10, 10, 5]
    values = [r.value for r in spark.sql("select value from entries_limit").collect()]
    assert sorted(values) == sorted(f"m{i}".encode() for i in range(25))


def test_max_records_per_trigger_counts_messages_of_batch_entries(spark, module_broker, topic, tmp_path) -> None:
    with wire.Connection(module_broker.url) as connection:
        connection.subscribe(topic, "keep", durable=True, create_topic=True)
        producer = wire.Producer(connection, topic, "tens")
        for entry in range(10):  # 10 entries of exactly 10 messages
            first = entry * 10
            singles = [(SingleMessageMetadata(partition_key="k"), f"r{first + i}".encode()) for i in range(10)]
            metadata = MessageMetadata(
                producer_name="tens", sequence_id=first, publish_time=1, num_messages_in_batch=10
            )
            producer.send(first, first + 9, 10, encode_entry(metadata, encode_batch(singles)))
        producer.flush()
    stream = source(spark, module_broker, topic, streaming=True, startingOffsets="earliest", maxRecordsPerTrigger=25)
    writer = stream.writeStream.format("memory").queryName("records_limit").option("checkpointLocation", str(tmp_path))
    query = run_available_now(writer)
    assert batches_with_rows(query) == [20] * 5  # a third entry of 10 would pass 25
    assert spark.sql("select count(distinct value) from records_limit").first()[0] == 100


def test_processing_time_trigger_keeps_up_with_live_publishing(
    spark, module_broker, client_factory, topic, tmp_path
) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    stream = source(spark, module_broker, topic, streaming=True, keyHashRanges=2)
    writer = stream.writeStream.format("memory").queryName("live").option("checkpointLocation", str(tmp_path))
    query = writer.trigger(processingTime="200 milliseconds").start()
    try:
        wait_for(lambda: query.lastProgress is not None, what="the first micro-batch")
        produce(client, topic, keyed_messages(60, keys=6, prefix="a"), batched=True, batch_max=10)
        wait_for(lambda: spark.sql("select count(*) from live").first()[0] == 60, what="the first wave")
        produce(client, topic, keyed_messages(40, keys=6, prefix="b"), batched=False)
        wait_for(lambda: spark.sql("select count(*) from live").first()[0] == 100, what="the second wave")
    finally:
        query.stop()
    assert spark.sql("select count(distinct messageId) from live").first()[0] == 100


def test_restart_on_the_checkpoint_reads_only_what_is_new(
    spark, module_broker, client_factory, topic, tmp_path
) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(50, keys=5, prefix="old"), batched=True, batch_max=7)
    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run() -> None:
        stream = source(spark, module_broker, topic, streaming=True, startingOffsets="earliest", keyHashRanges=3)
        run_available_now(
            stream.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint)
        )

    run()
    produce(client, topic, keyed_messages(30, keys=5, prefix="new"), batched=False)
    run()
    rows = spark.read.parquet(output)
    assert rows.count() == 80
    assert rows.select("messageId").distinct().count() == 80
    assert {r.value for r in rows.select("value").collect()} == {f"old{i}".encode() for i in range(50)} | {
        f"new{i}".encode() for i in range(30)
    }


def test_a_failed_batch_is_replayed_with_the_same_offsets_and_rows(
    spark, module_broker, client_factory, topic, tmp_path
) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(15, keys=3), batched=False)
    attempts: list[tuple[int, list[str]]] = []
    failed_once = threading.Event()

    def record(frame, batch_id: int) -> None:
        attempts.append((batch_id, sorted(r.messageId for r in frame.select("messageId").collect())))
        if batch_id == 1 and not failed_once.is_set():
            failed_once.set()
            raise RuntimeError("injected failure in batch 1")

    def run():
        stream = source(spark, module_broker, topic, streaming=True, startingOffsets="earliest", maxEntriesPerTrigger=5)
        return stream.writeStream.foreachBatch(record).option("checkpointLocation", str(tmp_path))

    with pytest.raises(PySparkException, match="injected failure"):
        run_available_now(run())
    # Spark wrote batch 1's offsets before running it; the replay must plan the same range again.
    planned = (tmp_path / "offsets" / "1").read_text()
    assert not (tmp_path / "commits" / "1").exists()
    run_available_now(run())
    assert (tmp_path / "offsets" / "1").read_text() == planned and topic in planned
    assert [batch_id for batch_id, _ids in attempts] == [0, 1, 1, 2]
    assert attempts[1][1] == attempts[2][1] and len(attempts[1][1]) == 5
    seen = [m for _batch, ids in attempts[:1] + attempts[2:] for m in ids]
    assert len(seen) == len(set(seen)) == 15


def test_the_durable_subscription_follows_committed_batches(
    spark, module_broker, client_factory, topic, tmp_path
) -> None:
    client = client_factory(module_broker.url)
    produce(client, topic, keyed_messages(15, keys=3), batched=False)
    stream = source(
        spark,
        module_broker,
        topic,
        streaming=True,
        startingOffsets="earliest",
        maxEntriesPerTrigger=5,
        subscriptionName="pipeline",
    )
    run_available_now(
        stream.writeStream.format("memory").queryName("subscribed").option("checkpointLocation", str(tmp_path))
    )
    stats = admin_get(module_broker, f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
    # Spark commits a batch to its source when it plans the next one, so the last batch is not acked yet.
    assert stats["subscriptions"]["pipeline"]["msgBacklog"] == 5
    assert spark.sql("select count(*) from subscribed").first()[0] == 15


def test_fail_on_data_loss(spark, broker_factory, client_factory, topic, tmp_path) -> None:
    broker = broker_factory(managedLedgerMaxEntriesPerLedger=5, managedLedgerMinLedgerRolloverTimeMinutes=0)
    client = client_factory(broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(3, keys=1, prefix="read"), batched=False)
    checkpoint = str(tmp_path / "checkpoint")

    values: list[bytes] = []

    def run(fail_on_data_loss: bool):
        stream = source(
            spark,
            broker,
            topic,
            streaming=True,
            startingOffsets="earliest",
            failOnDataLoss=str(fail_on_data_loss).lower(),
        )
        writer = stream.writeStream.foreachBatch(lambda frame, _id: values.extend(r.value for r in frame.collect()))
        return run_available_now(writer.option("checkpointLocation", checkpoint))

    run(True)
    assert values == [b"read0", b"read1", b"read2"]
    produce(client, topic, keyed_messages(14, keys=1, prefix="lost"), batched=False)
    # Nothing holds the ledgers any more: retention deletes the closed ones at the next rollovers.
    client.subscribe(topic, "keep").unsubscribe()
    produce(client, topic, keyed_messages(6, keys=1, prefix="kept"), batched=False)
    internal = admin_get(broker, f"/admin/v2/persistent/{topic.split('://')[1]}/internalStats")
    first_index = internal["entriesAddedCounter"] - internal["numberOfEntries"]
    lost = first_index - 3  # the checkpoint holds entries 0..2
    assert lost > 0

    with pytest.raises(PySparkException) as failed:
        run(True)
    assert f"failOnDataLoss: {topic}: {lost} entries after" in str(failed.value)

    # The skip and its count are logged by the query's planner process, whose stderr is the driver's
    # (test_spark_planning checks the message); here: the query goes on with what is left.
    values.clear()
    run(False)
    assert len(values) == internal["numberOfEntries"] == 23 - 3 - lost
    assert values[-6:] == [f"kept{i}".encode() for i in range(6)]
