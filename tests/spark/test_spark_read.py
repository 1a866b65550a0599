"""spark.read.format("magnetar"): what was produced comes back, keys stay in one partition in order,
and bad options fail at planning time naming the option."""

from __future__ import annotations

import collections
import json

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F
from spark_helpers import Sent, keep, keyed_messages, produce, read_back, source

from magnetar.core.sticky_key import key_hash, range_slot


def test_batch_read_equals_what_was_produced(spark, module_broker, client_factory, topic) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    plain = [
        Sent(f"key-{i % 7}", f"single-{i}".encode(), {"n": str(i), "kind": "plain"}, 1_700_000_000_000 + i)
        for i in range(50)
    ]
    ordered = [Sent(None, f"ordered-{i}".encode(), ordering_key=f"ok-{i % 3}".encode()) for i in range(30)]
    batched = keyed_messages(400, keys=11, prefix="batched-")
    produce(client, topic, plain, batched=False)
    produce(client, topic, ordered, batched=False)
    produce(client, topic, batched, batched=True)

    rows = source(spark, module_broker, topic).collect()

    assert len(rows) == 480
    got = {(r.key, r.value, tuple(sorted(r.properties.items())), r.orderingKey) for r in rows}
    sent = {(m.key, m.value, tuple(sorted(m.properties.items())), m.ordering_key) for m in plain + ordered + batched}
    assert got == sent
    by_value = {r.value: r for r in rows}
    first = by_value[b"single-3"]
    assert first.eventTime.timestamp() * 1000 == 1_700_000_000_003
    assert first.batchIndex == -1 and first.topic == topic
    assert first.messageId == f"{first.ledgerId}:{first.entryId}:-1:-1"
    batch_row = by_value[b"batched-25"]
    assert batch_row.batchIndex >= 0 and batch_row.eventTime is None
    assert batch_row.messageId == f"{batch_row.ledgerId}:{batch_row.entryId}:-1:{batch_row.batchIndex}"
    assert batch_row.keyHash == range_slot(key_hash(batch_row.key.encode()))
    # Stored entries in order, each row at its place: ledger, entry, then batch index.
    stored = read_back(module_broker, topic)
    assert sum(entry.num_messages for _position, entry in stored) == 480
    positions = [(r.ledgerId, r.entryId, r.batchIndex) for r in rows]
    assert positions == sorted(positions)


def test_reading_between_offsets_and_a_column_subset(spark, module_broker, client_factory, topic) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(20, keys=4), batched=False)
    rows = source(spark, module_broker, topic).select("ledgerId", "entryId").collect()
    ledger = rows[0].ledgerId
    start = {topic: {"ledgerId": ledger, "entryId": 4}}  # already processed: read from entry 5 on
    end = {topic: {"ledgerId": ledger, "entryId": 9}}  # the last entry read
    middle = source(spark, module_broker, topic, startingOffsets=json.dumps(start), endingOffsets=json.dumps(end))
    assert [r.value for r in middle.collect()] == [f"m{i}".encode() for i in range(5, 10)]
    narrow = spark.read.format("magnetar").schema("value binary, entryId bigint")
    narrow = narrow.option("serviceUrl", module_broker.url).option("adminUrl", module_broker.http_url)
    assert narrow.option("topic", topic).load().count() == 20


def test_every_key_in_exactly_one_partition_in_order(spark, module_broker, client_factory, topic) -> None:
    client = client_factory(module_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(2000, keys=50), batched=True, batch_max=20)
    produce(client, topic, keyed_messages(300, keys=50, prefix="late"), batched=False)
    frame = source(spark, module_broker, topic, keyHashRanges=4)
    assert frame.rdd.getNumPartitions() == 4
    rows = (
        frame.withColumn("partition", F.spark_partition_id())
        .select("partition", "key", "ledgerId", "entryId", "batchIndex", "keyHash")
        .collect()
    )
    assert len(rows) == 2300
    partitions_of = collections.defaultdict(set)
    last_of: dict[str, tuple[int, int, int]] = {}
    for row in rows:  # collect() keeps partition order and the order inside each partition
        partitions_of[row.key].add(row.partition)
        position = (row.ledgerId, row.entryId, row.batchIndex)
        assert last_of.get(row.key, (-1, -1, -1)) < position, f"{row.key} out of order in partition {row.partition}"
        last_of[row.key] = position
        assert row.keyHash // 16384 == row.partition  # the quarter of the hash space it was read for
    assert all(len(p) == 1 for p in partitions_of.values())
    assert len(partitions_of) == 50


def test_partitioned_topics_expand_to_their_partitions(spark, module_broker, client_factory, topic) -> None:
    from spark_helpers import admin_put

    admin_put(module_broker, f"/admin/v2/persistent/{topic.split('://')[1]}/partitions", 3)
    client = client_factory(module_broker.url)
    keep(client, topic)
    produce(client, topic, keyed_messages(90, keys=9), batched=False)
    rows = source(spark, module_broker, topic, keyHashRanges=2).collect()
    assert len(rows) == 90
    assert {r.topic for r in rows} <= {f"{topic}-partition-{i}" for i in range(3)}
    assert all(r.messageId.split(":")[2] == r.topic.rsplit("-", 1)[1] for r in rows)
    pattern = topic.rsplit("/", 1)[0] + "/" + topic.rsplit("/", 1)[1][:6] + ".*"
    assert source(spark, module_broker, topic, topicsPattern=pattern).count() >= 90


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (
            {"topic": "persistent://public/default/no-such-topic-anywhere"},
            "topic: topic persistent://public/default/no-such-topic-anywhere does not exist",
        ),
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"startingOffsets": '{"persistent://public/default/x": {"ledgerId": "one"}}'}, "startingOffsets"),
        (
            {"keyHashRanges": "0-100,200-65535"},
            "keyHashRanges: the ranges must cover 0-65535 exactly once: hashes 101-199",
        ),
        ({"keyHashRanges": "two"}, "keyHashRanges"),
        ({"keyHashRanges": "0"}, "keyHashRanges"),
        ({"serviceUrl": "http://127.0.0.1:1"}, "serviceUrl"),
        ({"maxEntriesPerTrigger": "-5"}, "maxEntriesPerTrigger"),
    ],
    ids=[
        "unknown-topic",
        "malformed-json",
        "bad-message-id",
        "ranges-gap",
        "ranges-word",
        "ranges-zero",
        "service-url",
        "negative-limit",
    ],
)
def test_bad_options_fail_at_planning_naming_the_option(
    spark, module_broker, client_factory, topic, options, named
) -> None:
    client = client_factory(module_broker.url)
    produce(client, topic, keyed_messages(3, keys=1), batched=False)
    read = (
        spark.read.format("magnetar").option("serviceUrl", module_broker.url).option("adminUrl", module_broker.http_url)
    )
    read = read.option("topic", topic)
    for name, value in options.items():
        read = read.option(name, value)
    with pytest.raises(PySparkException) as failed:
        read.load().count()
    assert named in str(failed.value)


def test_streaming_bad_options_fail_when_the_query_starts(spark, module_broker, tmp_path) -> None:
    stream = source(spark, module_broker, "persistent://public/default/never-created-x", streaming=True)
    query = (
        stream.writeStream.format("memory").queryName("bad_start").option("checkpointLocation", str(tmp_path)).start()
    )
    with pytest.raises(PySparkException) as failed:
        query.awaitTermination(60)
    assert "topic: topic persistent://public/default/never-created-x does not exist" in str(failed.value)


def test_partitions_nobody_wrote_to_are_not_an_error(spark, module_broker, client_factory, topic, tmp_path) -> None:
    from spark_helpers import admin_put, run_available_now

    admin_put(module_broker, f"/admin/v2/persistent/{topic.split('://')[1]}/partitions", 4)
    client = client_factory(module_broker.url)
    # Written to partition 0 only: partitions 1-3 are declared but no topic exists behind them.
    produce(client, f"{topic}-partition-0", keyed_messages(12, keys=1), batched=False)
    assert source(spark, module_broker, topic).count() == 12
    stream = source(spark, module_broker, topic, streaming=True, startingOffsets="earliest")
    query = run_available_now(
        stream.writeStream.format("memory").queryName("one_partition").option("checkpointLocation", str(tmp_path))
    )
    assert sum(p["numInputRows"] for p in query.recentProgress) == 12
