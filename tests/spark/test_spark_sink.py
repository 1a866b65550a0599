"""df.write / df.writeStream .format("magnetar"): columns round-trip, and the sink is exactly once when a
write task fails or is killed and its micro-batch is replayed."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from pyspark.sql import types as T
from spark_helpers import admin_post, admin_put, keep, keyed_messages, produce, read_back, run_available_now, source

NAMESPACE_DEDUP = "/admin/v2/namespaces/public/default/deduplication"


@pytest.fixture(scope="module")
def dedup_broker(module_broker):
    """The module's broker with deduplication on for public/default (the sink's requirement), and a
    namespace public/plain that keeps the broker's default: off."""
    admin_post(module_broker, NAMESPACE_DEDUP, True)
    admin_put(module_broker, "/admin/v2/namespaces/public/plain")
    return module_broker


def sink(frame, broker, topic: str | None, streaming: bool = False, **options):
    writer = frame.writeStream if streaming else frame.write.mode("append")
    writer = writer.format("magnetar").option("serviceUrl", broker.url).option("adminUrl", broker.http_url)
    if topic is not None:
        writer = writer.option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, str(value))
    return writer


def test_columns_round_trip_through_a_topic(spark, dedup_broker, topic) -> None:
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    rows = [
        ("k1", b"v1", None, {"a": "1"}, moment),
        (None, b"v2", b"ok", {}, None),
        ("k1", b"v3", None, None, None),
    ]
    schema = "key string, value binary, orderingKey binary, properties map<string,string>, eventTime timestamp"
    sink(spark.createDataFrame(rows, schema).coalesce(1), dedup_broker, topic).save()
    back = source(spark, dedup_broker, topic).orderBy("ledgerId", "entryId", "batchIndex").collect()
    by_value = {r.value: r for r in back}
    assert set(by_value) == {b"v1", b"v2", b"v3"}
    assert (by_value[b"v1"].key, dict(by_value[b"v1"].properties)) == ("k1", {"a": "1"})
    assert by_value[b"v1"].eventTime.timestamp() == moment.timestamp()  # collect() gives local naive times
    assert (by_value[b"v2"].key, by_value[b"v2"].orderingKey, by_value[b"v2"].eventTime) == (None, b"ok", None)
    # Rows of one key travel in one entry, so Key_Shared consumers downstream see them on one consumer.
    assert (by_value[b"v1"].ledgerId, by_value[b"v1"].entryId) == (by_value[b"v3"].ledgerId, by_value[b"v3"].entryId)
    assert by_value[b"v1"].producerName.startswith("spark-")


def test_string_values_and_a_topic_column(spark, dedup_broker, topic) -> None:
    other = f"{topic}-other"
    rows = [(f"{topic}", "to-first", "a"), (other, "to-second", "b"), (None, "to-default", "c")]
    frame = spark.createDataFrame(rows, "topic string, value string, key string")
    sink(frame, dedup_broker, topic).save()
    assert sorted(r.value for r in source(spark, dedup_broker, topic).collect()) == [b"to-default", b"to-first"]
    assert [r.value for r in source(spark, dedup_broker, other).collect()] == [b"to-second"]


def test_a_target_without_deduplication_is_refused_at_planning(spark, dedup_broker) -> None:
    target = f"persistent://public/plain/t-{uuid.uuid4().hex[:8]}"
    frame = spark.createDataFrame([("x",)], "value string")
    with pytest.raises(PySparkException) as refused:
        sink(frame, dedup_broker, target).save()
    assert f"topic: deduplication is off for {target}" in str(refused.value)
    with pytest.raises(PySparkException, match="needs a value column"):
        sink(spark.createDataFrame([("x",)], "key string"), dedup_broker, "persistent://public/default/x").save()
    with pytest.raises(PySparkException, match="drop or fold into properties"):
        sink(
            spark.createDataFrame([("x", 1)], "value string, n int"), dedup_broker, "persistent://public/default/x"
        ).save()


@pytest.mark.parametrize("failure", ["fail", "kill"])
def test_replaying_a_failed_write_stores_each_row_once(
    spark, dedup_broker, client_factory, topic, tmp_path: Path, failure
) -> None:
    """A write task sends some entries, then fails (an exception) or its input worker dies (kill -9
    of the Python worker); the query stops, restarts on its checkpoint and replays the micro-batch with
    the same producer names and sequence ids: the broker drops what the first attempt stored."""
    client = client_factory(dedup_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(300, keys=10), batched=True, batch_max=30)
    target = f"{topic}-copy"
    marker = tmp_path / "failed-once"
    target_stats = f"{dedup_broker.http_url}/admin/v2/{target.replace('://', '/')}/internalStats"

    def transform(value: bytes) -> str | None:
        import json
        import os
        import time
        import urllib.request

        text = value.decode().upper()
        if text == "M250" and not os.path.exists(marker):
            open(marker, "w").close()
            if failure == "kill":
                # Die only once the sink has stored something of this batch: the UDF's worker runs
                # ahead of the writer's, so dying at once may leave nothing for the replay to drop.
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    try:
                        with urllib.request.urlopen(target_stats, timeout=5) as answer:
                            if json.load(answer)["numberOfEntries"] > 0:
                                break
                    except OSError:  # the target topic does not exist yet (404)
                        pass
                    time.sleep(0.05)
                os._exit(1)
            return None  # the sink refuses a null value: the task fails after writing earlier groups
        return text

    upper = F.udf(transform, T.StringType())
    stream = source(spark, dedup_broker, topic, streaming=True, startingOffsets="earliest", keyHashRanges=2)
    copied = stream.select("key", upper("value").alias("value"))
    checkpoint = str(tmp_path / "checkpoint")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")
    try:
        with pytest.raises(PySparkException):
            run_available_now(
                sink(copied, dedup_broker, target, streaming=True, batchingMaxMessages=4).option(
                    "checkpointLocation", checkpoint
                )
            )
        assert marker.exists()
        first_attempt = sum(entry.num_messages for _position, entry in read_back(dedup_broker, target))
        assert 0 < first_attempt < 300, "the failed attempt should have stored part of the batch"
        run_available_now(
            sink(copied, dedup_broker, target, streaming=True, batchingMaxMessages=4).option(
                "checkpointLocation", checkpoint
            )
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    values = [r.value for r in source(spark, dedup_broker, target).collect()]
    assert len(values) == 300
    assert sorted(values) == sorted(f"M{i}".encode() for i in range(300))
