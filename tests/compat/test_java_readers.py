"""The official Java client 4.0.x (compat/java): readers, seek, delayed delivery, partitioned topics
and regex subscriptions against magnetar."""

from __future__ import annotations

from collections import defaultdict

import pytest


def test_readers_from_earliest_an_id_and_latest(java, topic):
    seen = java("reader_basic", topic=topic)
    assert seen["earliest"] == {"values": [f"m-{i}" for i in range(10)], "availableAfter": False}
    assert seen["afterFifth"] == {"values": [f"m-{i}" for i in range(5, 10)], "availableAfter": False}
    assert seen["fromFifthInclusive"] == {"values": [f"m-{i}" for i in range(4, 10)], "availableAfter": False}
    assert seen["latestAvailable"] is False
    assert seen["latestRead"] == "late"


def test_readers_started_inside_a_batch(java, topic):
    # Without the batch index in GET_LAST_MESSAGE_ID, hasMessageAvailable() said no and nothing was read.
    seen = java("reader_batch", topic=topic)
    assert [batch for _, _, batch, _ in seen["ids"]] == [0, 1, 2, 3, 4]
    assert seen["afterThird"] == {"values": ["m-3", "m-4"], "availableAfter": False}
    assert seen["fromThirdInclusive"] == {"values": ["m-2", "m-3", "m-4"], "availableAfter": False}


@pytest.mark.parametrize("batched", [False, True])
def test_inclusive_reader_from_latest_reads_the_last_message(java, topic, batched):
    # A regression: on a batched topic GET_LAST_MESSAGE_ID had no batch index, and this reader read nothing.
    seen = java("reader_latest_inclusive", topic=topic, batched=batched)
    assert seen["values"] == ["m-4"]
    assert seen["availableAfter"] is False
    assert seen["lastMessageIds"] == [seen["lastId"]]
    assert seen["lastId"][2] == (4 if batched else -1)


@pytest.mark.parametrize("batched", [False, True])
def test_consumer_seeks_by_message_id(java, topic, batched):
    seen = java("seek_message_id", topic=topic, batched=batched)
    # The broker resets to the 4th message; the Java client, not inclusive, starts after it.
    assert seen["afterSeekToFourth"] == [f"m-{i}" for i in range(4, 10)]
    assert seen["afterSeekToEarliest"] == [f"m-{i}" for i in range(10)]


def test_consumer_and_reader_seek_by_time(java, topic):
    # A regression: SEEK was answered before the consumers were closed; the reader's hasMessageAvailable()
    # then asked the broker about a consumer it had just closed ("unknown consumer").
    seen = java("seek_time", topic=topic)
    assert seen["consumerAfterSeek"] == [f"m-{i}" for i in range(5, 10)]
    assert seen["readerBeforeSeek"] == ["m-8", "m-9"]
    assert seen["readerAfterSeek"] == {"values": [f"m-{i}" for i in range(5, 10)], "availableAfter": False}


def test_delayed_delivery_on_a_shared_subscription(java, topic):
    seen = java("delayed", topic=topic, subscriptionType="Shared", delayMs=1500)
    assert seen["order"] == ["now-1", "now-2", "later"]
    assert seen["laterAfterMs"] >= 1400


def test_exclusive_subscription_ignores_delays_as_pulsar_does(java, topic):
    seen = java("delayed", topic=topic, subscriptionType="Exclusive", delayMs=1500)
    assert seen["order"] == ["later", "now-1", "now-2"]


def test_partitioned_topic_keeps_each_key_on_one_partition(java, topic):
    seen = java("partitioned", topic=topic, partitions=3)
    assert seen["partitions"] == [f"{topic}-partition-{i}" for i in range(3)]
    assert seen["producerPartitions"] == 3
    partitions: dict[str, set[str]] = defaultdict(set)
    order: dict[str, list[int]] = defaultdict(list)
    unkeyed = []
    for partition, value in seen["received"]:
        if value.startswith("unkeyed"):
            unkeyed.append(partition)
            continue
        key, index = value.split(":")
        partitions[key].add(partition)
        order[key].append(int(index))
    assert all(len(p) == 1 for p in partitions.values())
    assert order == {f"key-{k}": list(range(k, 30, 6)) for k in range(6)}
    assert len({p for ps in partitions.values() for p in ps}) > 1
    # Round robin: six messages without a key cover all three partitions.
    assert sorted(unkeyed) == sorted(seen["partitions"] * 2)


def test_regex_subscription_finds_matching_topics(java, topic):
    seen = java("pattern", topic=topic)
    assert sorted(seen["received"]) == [[f"{topic}-a", "to-a"], [f"{topic}-b", "to-b"]]
