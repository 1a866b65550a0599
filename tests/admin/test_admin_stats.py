"""Topic stats and internal stats over HTTP, black-box against broker processes with the official client.

Field names, types and nesting are Pulsar 4.0's (its TopicStatsImpl, SubscriptionStatsImpl,
ConsumerStatsImpl and PersistentTopicInternalStats): TopicStats with publishers and subscriptions,
SubscriptionStats, ConsumerStats with the Key_Shared fields of each ordering mode, partitioned stats and
internal stats; counters are checked against what the test sent and received. One broker per ordering mode
serves the module; each test has its own topic.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable

import httpx
import pulsar
import pytest

from admin.admin_helpers import eventually, message_id
from e2e.key_shared_helpers import key_shared, keys_owned, ring_slot
from magnetar.admin.stats import iso_time

NS = "public/default"

# ConsumerStats and SubscriptionStats fields every consumer and subscription carries (Pulsar 4.0's
# primitives, always serialized), whatever the subscription type.
CONSUMER_FIELDS = {
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "consumerName",
    "availablePermits",
    "unackedMessages",
    "avgMessagesPerEntry",
    "blockedConsumerOnUnackedMsgs",
    "drainingHashesCount",
    "drainingHashesClearedTotal",
    "drainingHashesUnackedMessages",
    "address",
    "connectedSince",
    "clientVersion",
    "lastAckedTimestamp",
    "lastConsumedTimestamp",
    "lastConsumedFlowTimestamp",
    "metadata",
    "lastAckedTime",
    "lastConsumedTime",
}
SUBSCRIPTION_FIELDS = {
    "msgRateOut",
    "msgThroughputOut",
    "bytesOutCounter",
    "msgOutCounter",
    "msgRateRedeliver",
    "messageAckRate",
    "chunkedMessageRate",
    "msgBacklog",
    "backlogSize",
    "earliestMsgPublishTimeInBacklog",
    "msgBacklogNoDelayed",
    "blockedSubscriptionOnUnackedMsgs",
    "msgDelayed",
    "msgInReplay",
    "unackedMessages",
    "type",
    "msgRateExpired",
    "totalMsgExpired",
    "lastExpireTimestamp",
    "lastConsumedFlowTimestamp",
    "lastConsumedTimestamp",
    "lastAckedTimestamp",
    "lastMarkDeleteAdvancedTimestamp",
    "consumers",
    "isDurable",
    "isReplicated",
    "allowOutOfOrderDelivery",
    "consumersAfterMarkDeletePosition",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
    "subscriptionProperties",
    "drainingHashesCount",
    "drainingHashesClearedTotal",
    "drainingHashesUnackedMessages",
}
TOPIC_FIELDS = {
    "msgRateIn",
    "msgThroughputIn",
    "msgRateOut",
    "msgThroughputOut",
    "bytesInCounter",
    "msgInCounter",
    "bytesOutCounter",
    "msgOutCounter",
    "averageMsgSize",
    "msgChunkPublished",
    "storageSize",
    "backlogSize",
    "publishRateLimitedTimes",
    "earliestMsgPublishTimeInBacklogs",
    "offloadedStorageSize",
    "publishers",
    "waitingPublishers",
    "subscriptions",
    "replication",
    "deduplicationStatus",
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
    "compaction",
    "ownerBroker",
}
PUBLISHER_FIELDS = {
    "accessMode",
    "msgRateIn",
    "msgThroughputIn",
    "averageMsgSize",
    "chunkedMessageRate",
    "producerId",
    "supportsPartialProducer",
    "producerName",
    "address",
    "connectedSince",
    "clientVersion",
    "metadata",
}


@pytest.fixture(scope="module")
def brokers(module_broker_factory) -> Callable[[str], object]:
    """A broker per Key_Shared ordering mode, started on first use and shared by the module."""
    return lambda mode="pip379": module_broker_factory(keySharedOrderingMode=mode, keySharedUnblockingIntervalMs=0)


@pytest.fixture
def name() -> str:
    return f"stats-{uuid.uuid4().hex[:10]}"


def admin(broker) -> httpx.Client:
    return httpx.Client(base_url=f"{broker.http_url}/admin/v2/persistent/{NS}", timeout=10)


# --- topic, publisher, subscription and consumer stats ----------------------------------------------


def test_topic_stats_count_what_was_sent_received_and_acknowledged(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, consumer_name="reader")
    producer = client.create_producer(topic, producer_name="writer", batching_enabled=False)
    payloads = [b"x" * (10 + i) for i in range(20)]
    for payload in payloads:
        producer.send(payload)
    received = [consumer.receive(5000) for _ in payloads]
    for message in received[:5]:
        consumer.acknowledge(message)
    with admin(broker) as http:
        stats = eventually(
            lambda: (s := http.get(f"/{name}/stats").json())["subscriptions"]["sub"]["unackedMessages"] == 15 and s
        )
        assert set(stats) >= TOPIC_FIELDS
        assert stats["msgInCounter"] == 20
        assert stats["bytesInCounter"] == stats["storageSize"] > sum(map(len, payloads))  # metadata included
        assert stats["deduplicationStatus"] == "Disabled"
        (publisher,) = stats["publishers"]
        assert set(publisher) >= PUBLISHER_FIELDS
        assert (publisher["producerName"], publisher["accessMode"]) == ("writer", "Shared")
        assert publisher["address"].startswith("/127.0.0.1:") and publisher["clientVersion"].startswith("Pulsar")
        sub = stats["subscriptions"]["sub"]
        assert set(sub) >= SUBSCRIPTION_FIELDS
        assert (sub["type"], sub["isDurable"], sub["msgBacklog"], sub["msgOutCounter"]) == ("Shared", True, 15, 20)
        assert sub["msgBacklogNoDelayed"] == 15 and sub["backlogSize"] > 0
        assert sub["lastAckedTimestamp"] > 0 and sub["lastConsumedFlowTimestamp"] > 0
        assert sub["lastMarkDeleteAdvancedTimestamp"] > 0  # the first five acks moved it
        assert "keySharedMode" not in sub
        (stats_consumer,) = sub["consumers"]
        assert set(stats_consumer) >= CONSUMER_FIELDS
        assert "drainingHashes" not in stats_consumer and "keyHashRangeArrays" not in stats_consumer
        assert (stats_consumer["consumerName"], stats_consumer["unackedMessages"]) == ("reader", 15)
        assert stats_consumer["msgOutCounter"] == 20 and stats_consumer["bytesOutCounter"] == stats["bytesOutCounter"]
        assert stats["msgOutCounter"] == 20
        assert stats_consumer["lastConsumedTimestamp"] >= stats_consumer["lastConsumedFlowTimestamp"] > 0

        # Rates cover a window of at least a second that started when each side connected.
        time.sleep(1.1)
        stats = http.get(f"/{name}/stats").json()
        assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0 and stats["averageMsgSize"] > 10
        assert stats["msgRateOut"] > 0 and stats["subscriptions"]["sub"]["messageAckRate"] > 0
        assert stats["msgRateIn"] == stats["publishers"][0]["msgRateIn"]

        # Counters outlive the producers and consumers that moved them.
        producer.close()
        consumer.close()
        stats = http.get(f"/{name}/stats").json()
        assert stats["publishers"] == [] and stats["subscriptions"]["sub"]["consumers"] == []
        assert stats["msgInCounter"] == 20 and stats["subscriptions"]["sub"]["msgOutCounter"] == 20


def test_stats_options(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared).close()
    producer = client.create_producer(topic, batching_enabled=False)
    before_ms = int(time.time() * 1000)
    producer.send(b"one")
    client.subscribe(topic, "live", consumer_type=pulsar.ConsumerType.Shared)
    with admin(broker) as http:
        stats = http.get(
            f"/{name}/stats", params={"subscriptionBacklogSize": "false", "getEarliestTimeInBacklog": "true"}
        ).json()
        sub = stats["subscriptions"]["sub"]
        assert sub["backlogSize"] == -1 and before_ms <= sub["earliestMsgPublishTimeInBacklog"] <= time.time() * 1000
        assert stats["earliestMsgPublishTimeInBacklogs"] == sub["earliestMsgPublishTimeInBacklog"]
        stats = http.get(f"/{name}/stats", params={"excludePublishers": "true", "excludeConsumers": "true"}).json()
        assert stats["publishers"] == [] and stats["subscriptions"]["live"]["consumers"] == []
        assert http.get(f"/{name}/stats").json()["subscriptions"]["sub"]["earliestMsgPublishTimeInBacklog"] == 0


@pytest.mark.parametrize("mode", ["pip379", "pip282", "classic"])
def test_key_shared_fields_are_named_as_pulsar_names_them_in_each_mode(brokers, client_factory, name, mode) -> None:
    """pip379: keyHashRangeArrays and the draining fields; classic: keyHashRanges strings and
    readPositionWhenJoining; pip282 (never in a Pulsar release): arrays and PIP-282's own fields."""
    broker = brokers(mode)
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    moving = keys_owned([(["c1"], "c1"), (["c1", "c2"], "c2")], 2)
    c1 = key_shared(client, topic, "c1")
    producer = client.create_producer(topic, batching_enabled=False)
    for key in moving:
        producer.send(b"v", partition_key=key)
    for _ in moving:
        c1.receive(5000)  # held unacked
    key_shared(client, topic, "c2")
    with admin(broker) as http:
        sub = eventually(
            lambda: (
                (s := http.get(f"/{name}/stats").json()["subscriptions"]["key_shared"])
                and len(s["consumers"]) == 2
                and s
            )
        )
        assert (sub["type"], sub["keySharedMode"], sub["allowOutOfOrderDelivery"]) == (
            "Key_Shared",
            "AUTO_SPLIT",
            False,
        )
        first, second = sub["consumers"]
        for consumer in (first, second):
            assert set(consumer) >= CONSUMER_FIELDS
        if mode == "classic":
            spans = [
                tuple(map(int, text.strip("[]").split(", "))) for c in (first, second) for text in c["keyHashRanges"]
            ]
            assert all("keyHashRangeArrays" not in c and "drainingHashes" not in c for c in (first, second))
            assert second["readPositionWhenJoining"]
            assert list(sub["consumersAfterMarkDeletePosition"].values())
        else:
            spans = [tuple(span) for c in (first, second) for span in c["keyHashRangeArrays"]]
            assert all("keyHashRanges" not in c for c in (first, second))
        # The two consumers' ranges cover the consistent-hashing space [1, 65535] exactly once.
        spans.sort()
        assert spans[0][0] == 1 and spans[-1][1] == 65535
        assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(spans))
        if mode == "pip379":
            assert first["drainingHashes"] and second["drainingHashes"] == []
            assert first["drainingHashesCount"] == sub["drainingHashesCount"] == len({ring_slot(k) for k in moving})
        else:
            assert sub["drainingHashesCount"] == first["drainingHashesCount"] == 0
        if mode == "pip282":
            assert second["lastSentPositionWhenJoining"] and "lastSentPosition" in sub
            assert "individuallySentPositions" in sub


def test_partitioned_stats_sum_the_partitions(brokers, client_factory, name) -> None:
    broker = brokers()
    with admin(broker) as http:
        assert http.put(f"/{name}/partitions", json=3).status_code == 204
        client = client_factory(broker.url)
        topic = f"persistent://{NS}/{name}"
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared, consumer_name="reader")
        producer = client.create_producer(topic, producer_name="writer", batching_enabled=False)
        for i in range(30):
            producer.send(b"m%d" % i, partition_key=f"k{i}")
        for _ in range(30):
            consumer.acknowledge(consumer.receive(5000))
        stats = eventually(
            lambda: (
                (s := http.get(f"/{name}/partitioned-stats").json())["subscriptions"]["sub"]["msgBacklog"] == 0 and s
            )
        )
        assert stats["metadata"] == {"partitions": 3}
        assert sorted(stats["partitions"]) == [f"{topic}-partition-{i}" for i in range(3)]
        assert stats["msgInCounter"] == 30 == sum(p["msgInCounter"] for p in stats["partitions"].values())
        assert stats["subscriptions"]["sub"]["msgOutCounter"] == 30
        (reader,) = stats["subscriptions"]["sub"]["consumers"]  # one consumer per partition, joined by name
        assert reader["consumerName"] == "reader" and reader["msgOutCounter"] == 30
        assert [p["producerName"] for p in stats["publishers"]] == ["writer"]
        assert http.get(f"/{name}/partitioned-stats", params={"perPartition": "false"}).json()["partitions"] == {}

        internal = http.get(f"/{name}/partitioned-internalStats").json()
        assert internal["metadata"] == {"partitions": 3} and len(internal["partitions"]) == 3
        assert sum(p["numberOfEntries"] for p in internal["partitions"].values()) == 30

        # A partitioned topic is not a topic; a plain topic is not partitioned (Pulsar's 404s).
        assert http.get(f"/{name}/stats").status_code == 404
        producer.close()
        client.create_producer(f"persistent://{NS}/{name}-plain").close()
        response = http.get(f"/{name}-plain/partitioned-stats")
        assert response.status_code == 404
        assert response.json() == {"reason": f"Partitioned Topic persistent://{NS}/{name}-plain not found"}


def test_internal_stats(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(b"m%d" % i)
    messages = [consumer.receive(5000) for _ in range(5)]
    consumer.acknowledge(messages[0])
    consumer.acknowledge(messages[2])
    with admin(broker) as http:
        stats = eventually(
            lambda: (
                (s := http.get(f"/{name}/internalStats").json())["cursors"]["sub"]["markDeletePosition"]
                == message_id(messages[0])
                and s
            )
        )
        assert stats["numberOfEntries"] == stats["entriesAddedCounter"] == 5
        assert stats["lastConfirmedEntry"] == message_id(messages[4])
        cursor = stats["cursors"]["sub"]
        assert cursor["individuallyDeletedMessages"] == f"[({message_id(messages[1])}..{message_id(messages[2])}]]"
        assert cursor["totalNonContiguousDeletedMessagesRange"] == 1
        # Everything was sent: the dispatcher's read waits for new entries.
        assert cursor["subscriptionHavePendingRead"] is True and cursor["waitingReadOp"] is True
        assert cursor["subscriptionHavePendingReplayRead"] is False
        assert stats["compactedLedger"]["ledgerId"] == -1 and stats["schemaLedgers"] == []
        nonzero = http.get(f"/{name}/stats").json()["subscriptions"]["sub"]
        assert nonzero["nonContiguousDeletedMessagesRanges"] == 1
        assert nonzero["nonContiguousDeletedMessagesRangesSerializedSize"] > 0


@pytest.mark.parametrize("path", ["stats", "internalStats", "partitioned-stats", "partitioned-internalStats"])
def test_unknown_topics_and_namespaces_are_404_and_bad_names_412(brokers, path) -> None:
    with httpx.Client(base_url=f"{brokers().http_url}/admin/v2/persistent", timeout=10) as http:
        for url in (f"/{NS}/no-such-topic/{path}", f"/public/no-such-ns/t/{path}", f"/no-such-tenant/ns/t/{path}"):
            response = http.get(url)
            assert response.status_code == 404, url
            assert response.json()["reason"]
        response = http.get(f"/{NS}/bad%20name/{path}")
        assert response.status_code == 412 and response.json() == {"reason": "Topic name is not valid"}


def test_failover_names_its_active_consumer_and_an_idle_subscription_has_no_type(brokers, client_factory, name) -> None:
    broker = brokers()
    client = client_factory(broker.url)
    topic = f"persistent://{NS}/{name}"
    client.subscribe(topic, "failover", consumer_type=pulsar.ConsumerType.Failover, consumer_name="first")
    client.subscribe(topic, "failover", consumer_type=pulsar.ConsumerType.Failover, consumer_name="second")
    client.subscribe(topic, "idle").close()
    with admin(broker) as http:
        subscriptions = http.get(f"/{name}/stats").json()["subscriptions"]
    failover = subscriptions["failover"]
    assert failover["type"] == "Failover" and failover["activeConsumerName"] in ("first", "second")
    assert [c["consumerName"] for c in failover["consumers"]] == ["first", "second"]
    assert all(set(c) >= CONSUMER_FIELDS for c in failover["consumers"])
    idle = subscriptions["idle"]
    assert idle["type"] == "None" and idle["consumers"] == [] and "activeConsumerName" not in idle


@pytest.mark.parametrize(
    ("zone", "epoch_ms", "text"),
    [
        ("UTC", 1_795_746_484_915, "2026-11-27T02:28:04.915Z"),
        ("UTC", 1_795_746_484_900, "2026-11-27T02:28:04.9Z"),
        ("UTC", 1_795_746_484_070, "2026-11-27T02:28:04.07Z"),
        ("UTC", 1_795_746_484_000, "2026-11-27T02:28:04Z"),
        ("Asia/Kolkata", 1_795_746_484_915, "2026-11-27T07:58:04.915+05:30"),
    ],
)
def test_times_are_formatted_as_pulsars_date_formatter_formats_them(monkeypatch, zone, epoch_ms, text) -> None:
    """Java's ISO_OFFSET_DATE_TIME, which Pulsar's stats use: `Z` for UTC (Python would say +00:00), and
    the fraction without its trailing zeros."""
    monkeypatch.setenv("TZ", zone)
    time.tzset()
    iso_time.cache_clear()
    try:
        assert iso_time(epoch_ms) == text
    finally:
        monkeypatch.undo()
        time.tzset()
        iso_time.cache_clear()
