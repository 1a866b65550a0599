"""`magnetar admin topics …` as subprocesses against one broker process.

Messages are published with `magnetar produce` (or the official client where a consumer must hold
them); every operation is checked by its effect: peeked payloads, backlogs in stats, what the
explainers name.
"""

from __future__ import annotations

import uuid

import pulsar
import pytest
from cli_runner import fails, magnetar, ok, ok_json


@pytest.fixture
def admin(module_broker):
    """`admin(*args)` → the argument list of `magnetar admin --admin-url <broker> *args`."""
    return lambda *args: ["admin", "--admin-url", module_broker.http_url, *args]


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/cli-{uuid.uuid4().hex[:10]}"


def produce(broker, topic: str, *messages: str) -> None:
    """One entry per message (no batching), so that entry counts and message counts agree."""
    ok("produce", topic, "-m", ",".join(messages), "--disable-batching", "--service-url", broker.url)


def backlog(admin, topic: str, subscription: str) -> int:
    return ok_json(*admin("topics", "stats", topic))["subscriptions"][subscription]["msgBacklog"]


def peek(admin, topic: str, subscription: str, count: int) -> list[dict]:
    return ok_json(*admin("topics", "peek-messages", topic, "-s", subscription, "-n", str(count)))


def test_topic_create_list_delete(admin, topic) -> None:
    ok(*admin("topics", "create", topic))
    assert topic in ok_json(*admin("topics", "list", "public/default"))
    assert "already exists" in fails(*admin("topics", "create", topic))
    assert ok_json(*admin("topics", "get-partitioned-topic-metadata", topic))["partitions"] == 0
    ok(*admin("topics", "delete", topic))
    assert topic not in ok_json(*admin("topics", "list", "public/default"))
    assert "not found" in fails(*admin("topics", "stats", topic))


def test_partitioned_topic_lifecycle(admin, topic, module_broker) -> None:
    ok(*admin("topics", "create-partitioned-topic", topic, "-p", "2"))
    assert ok_json(*admin("topics", "get-partitioned-topic-metadata", topic))["partitions"] == 2
    assert topic in ok_json(*admin("topics", "list-partitioned-topics", "public/default"))
    ok(*admin("topics", "update-partitioned-topic", topic, "--partitions", "3"))
    assert ok_json(*admin("topics", "get-partitioned-topic-metadata", topic))["partitions"] == 3
    assert "already exists" in fails(*admin("topics", "create-partitioned-topic", topic, "-p", "2"))

    ok("produce", topic, "-m", "a,b,c,d,e,f", "-db", "--service-url", module_broker.url)
    stats = ok_json(*admin("topics", "partitioned-stats", topic, "--per-partition"))
    assert stats["metadata"]["partitions"] == 3
    assert sum(partition["msgInCounter"] for partition in stats["partitions"].values()) == 6

    ok(*admin("topics", "delete-partitioned-topic", topic))
    assert topic not in ok_json(*admin("topics", "list-partitioned-topics", "public/default"))
    assert "not found" in fails(*admin("topics", "get-partitioned-topic-metadata", topic))


def test_peek_skip_reset_expire_and_unsubscribe(admin, topic, module_broker) -> None:
    ok(*admin("topics", "create-subscription", topic, "-s", "audit", "-m", "earliest"))
    produce(module_broker, topic, "m0", "m1", "m2", "m3", "m4")
    assert ok_json(*admin("topics", "subscriptions", topic)) == ["audit"]
    assert backlog(admin, topic, "audit") == 5

    peeked = peek(admin, topic, "audit", 2)
    assert [m["payload"] for m in peeked] == ["m0", "m1"]
    first_id = peeked[0]["messageId"]
    # Peeking consumes nothing.
    assert backlog(admin, topic, "audit") == 5
    # Past the backlog's end a peek returns what there is.
    assert [m["payload"] for m in peek(admin, topic, "audit", 10)] == ["m0", "m1", "m2", "m3", "m4"]

    ok(*admin("topics", "skip", topic, "-s", "audit", "-n", "2"))
    assert backlog(admin, topic, "audit") == 3
    assert peek(admin, topic, "audit", 1)[0]["payload"] == "m2"

    ok(*admin("topics", "reset-cursor", topic, "-s", "audit", "-m", first_id))
    assert backlog(admin, topic, "audit") == 5
    ok(*admin("topics", "reset-cursor", topic, "-s", "audit", "-m", first_id, "--exclude-message"))
    assert peek(admin, topic, "audit", 1)[0]["payload"] == "m1"

    ok(*admin("topics", "skip-all", topic, "-s", "audit"))
    assert backlog(admin, topic, "audit") == 0
    assert peek(admin, topic, "audit", 3) == []
    ok(*admin("topics", "reset-cursor", topic, "-s", "audit", "-t", "1h"))
    assert backlog(admin, topic, "audit") == 5

    # Everything was published more than 0 seconds ago.
    ok(*admin("topics", "expire-messages", topic, "-s", "audit", "-t", "0"))
    assert backlog(admin, topic, "audit") == 0

    last = ok_json(*admin("topics", "last-message-id", topic))
    assert f"{last['ledgerId']}:{last['entryId']}" == peek_all_ids(admin, topic)[-1]

    ok(*admin("topics", "unsubscribe", topic, "-s", "audit"))
    assert ok_json(*admin("topics", "subscriptions", topic)) == []
    assert "not found" in fails(*admin("topics", "peek-messages", topic, "-s", "audit"))


def peek_all_ids(admin, topic: str) -> list[str]:
    """Ids of every stored message, through a fresh subscription from the earliest."""
    ok(*admin("topics", "create-subscription", topic, "-s", "ids", "-m", "earliest"))
    ids = [m["messageId"] for m in peek(admin, topic, "ids", 100)]
    ok(*admin("topics", "unsubscribe", topic, "-s", "ids"))
    return ids


def test_examine_message_from_either_end(admin, topic, module_broker) -> None:
    produce(module_broker, topic, "first", "middle", "last")
    assert ok_json(*admin("topics", "examine-message", topic, "-i", "earliest", "-m", "1"))[0]["payload"] == "first"
    assert ok_json(*admin("topics", "examine-message", topic, "-i", "earliest", "-m", "2"))[0]["payload"] == "middle"
    assert ok_json(*admin("topics", "examine-message", topic))[0]["payload"] == "last"


def test_peek_splits_batches_with_keys_and_properties(admin, topic, module_broker) -> None:
    ok(*admin("topics", "create-subscription", topic, "-s", "s", "-m", "earliest"))
    ok("produce", topic, "-m", "x,y", "-k", "order-7", "-p", "source=cli", "--service-url", module_broker.url)
    peeked = peek(admin, topic, "s", 5)
    assert [m["payload"] for m in peeked] == ["x", "y"]
    ledger_entry = peeked[0]["messageId"].rsplit(":", 1)[0]
    assert [m["messageId"] for m in peeked] == [f"{ledger_entry}:0", f"{ledger_entry}:1"]
    assert all(m["key"] == "order-7" and m["properties"] == {"source": "cli"} for m in peeked)
    table = ok(*admin("-o", "table", "topics", "peek-messages", topic, "-s", "s", "-n", "5")).stdout
    rows = [line for line in table.splitlines() if "order-7" in line]
    assert len(rows) == 2 and all("source=cli" in row for row in rows)


def test_internal_stats_and_unload(admin, topic, module_broker) -> None:
    # A subscription keeps the entries: without one, the reloaded topic trims the ledger it closed, as
    # Pulsar's does under the default retention.
    ok(*admin("topics", "create-subscription", topic, "-s", "s", "-m", "earliest"))
    produce(module_broker, topic, "a", "b")
    internal = ok_json(*admin("topics", "internal-stats", topic))
    assert internal["numberOfEntries"] == 2
    assert isinstance(internal["ledgers"], list) and isinstance(internal["cursors"], dict)
    ok(*admin("topics", "unload", topic))
    # The topic loads again on the next use, with what it stored.
    produce(module_broker, topic, "c")
    assert ok_json(*admin("topics", "internal-stats", topic))["numberOfEntries"] == 3


def test_pending_acks_and_explain_key_name_the_holding_messages(admin, topic, module_broker, client_factory) -> None:
    client = client_factory(module_broker.url)
    holder = client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="holder")
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [producer.send(f"m{i}".encode(), partition_key="customer-1") for i in range(3)]
    held = [holder.receive(timeout_millis=10_000) for _ in sent]
    client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="joiner")
    sent_ids = [f"{m.ledger_id()}:{m.entry_id()}" for m in sent]

    pending = ok_json(*admin("topics", "pending-acks", topic, "-s", "ks"))
    by_name = {consumer["consumerName"]: consumer for consumer in pending["consumers"]}
    assert [p["messageId"] for p in by_name["holder"]["pendingAcks"]] == sent_ids
    assert by_name["joiner"]["pendingAcks"] == []

    explained = ok_json(*admin("topics", "explain-key", topic, "-s", "ks", "--key", "customer-1"))
    assert explained["consumer"]["consumerName"] == "holder"
    assert [p["messageId"] for p in explained["pendingMessages"]] == sent_ids
    by_hash = ok_json(*admin("topics", "explain-key", topic, "-s", "ks", "--hash", str(explained["stickyKeyHash"])))
    assert [p["messageId"] for p in by_hash["pendingMessages"]] == sent_ids

    table = ok(*admin("--output", "table", "topics", "pending-acks", topic, "-s", "ks")).stdout
    assert all(message_id in table for message_id in sent_ids)

    for message in held:
        holder.acknowledge(message)
    assert_eventually_no_pending(admin, topic)


def assert_eventually_no_pending(admin, topic: str) -> None:
    """Acks travel asynchronously from the client; the broker has them after a few round trips."""
    for _ in range(50):
        pending = ok_json(*admin("topics", "pending-acks", topic, "-s", "ks"))
        if all(consumer["pendingAcks"] == [] for consumer in pending["consumers"]):
            return
    raise AssertionError(f"acknowledged messages still pending: {pending}")


def test_option_errors(admin, topic) -> None:
    assert "exactly one of --key or --hash" in fails(*admin("topics", "explain-key", topic, "-s", "s"), code=2)
    assert "exactly one of --time or --messageId" in fails(*admin("topics", "reset-cursor", topic, "-s", "s"), code=2)
    assert "not a message id" in fails(*admin("topics", "reset-cursor", topic, "-s", "s", "-m", "yesterday"), code=2)
    assert "Missing option" in fails(*admin("topics", "skip", topic, "-s", "s"), code=2)
    assert "invalid" in fails(*admin("topics", "stats", "a/b/c/d"))


def test_replicated_subscription_status(admin, topic) -> None:
    """PIP-33's verbs: a subscription created replicated, its status read per topic, switched off and on;
    the cursor property that keeps it shows in internal stats."""
    ok(*admin("topics", "create-subscription", topic, "-s", "geo", "-m", "earliest", "--replicated"))
    assert ok_json(*admin("topics", "get-replicated-subscription-status", topic, "-s", "geo")) == {topic: True}
    cursor = ok_json(*admin("topics", "internal-stats", topic))["cursors"]["geo"]
    assert cursor["properties"] == {"pulsar.replicated.subscription": 1}
    ok(*admin("topics", "set-replicated-subscription-status", topic, "-s", "geo", "--disable"))
    assert ok_json(*admin("topics", "get-replicated-subscription-status", topic, "-s", "geo")) == {topic: False}
    assert ok_json(*admin("topics", "stats", topic))["subscriptions"]["geo"]["isReplicated"] is False
    ok(*admin("topics", "set-replicated-subscription-status", topic, "-s", "geo", "-e"))
    assert ok_json(*admin("topics", "stats", topic))["subscriptions"]["geo"]["isReplicated"] is True
    assert "exactly one of --enable or --disable" in fails(
        *admin("topics", "set-replicated-subscription-status", topic, "-s", "geo"), code=2
    )
    assert "not found" in fails(*admin("topics", "get-replicated-subscription-status", topic, "-s", "nobody"))


def test_topic_deduplication_overrides_the_namespace_and_applied_shows_the_one_in_force(admin, topic) -> None:
    assert "not found" in fails(*admin("topics", "set-deduplication", topic, "--enable"))
    ok(*admin("topics", "create", topic))
    assert ok_json(*admin("topics", "get-deduplication", topic)) is None
    assert ok_json(*admin("topics", "get-deduplication", topic, "--applied")) is False
    ok(*admin("topics", "set-deduplication", topic, "--enable"))
    assert ok_json(*admin("topics", "get-deduplication", topic)) is True
    assert ok_json(*admin("topics", "get-deduplication", topic, "--applied")) is True
    assert ok_json(*admin("namespaces", "get-deduplication", "public/default")) is None
    assert "exactly one" in fails(*admin("topics", "set-deduplication", topic), code=2)


def test_key_shared_stats_table_keeps_hash_ranges_in_one_cell(module_broker, client_factory, topic) -> None:
    """Two Key_Shared consumers with consistent hashing hold ~50 hash ranges each: a table shows each
    consumer's in one cell (the first ones and the count; all with --verbose), not one boxed table per range."""
    client = client_factory(module_broker.url)
    for _ in range(2):
        client.subscribe(topic, "ks", consumer_type=pulsar.ConsumerType.KeyShared)
    consumers = ok_json("admin", "--admin-url", module_broker.http_url, "topics", "stats", topic)["subscriptions"][
        "ks"
    ]["consumers"]
    ranges = [consumer["keyHashRangeArrays"] for consumer in consumers]
    assert all(len(held) > 4 for held in ranges)
    table = magnetar(
        "admin", "--admin-url", module_broker.http_url, "-o", "table", "topics", "stats", topic, env={"COLUMNS": "400"}
    ).stdout
    assert "keyHashRangeArrays[" not in table
    for held in ranges:
        first = " ".join(f"[{low}, {high}]" for low, high in held[:4])
        assert f"{first} … {len(held)} in all" in table
    wide = magnetar(
        "admin",
        "--admin-url",
        module_broker.http_url,
        "-o",
        "table",
        "-v",
        "topics",
        "stats",
        topic,
        env={"COLUMNS": "100000"},
    ).stdout
    for held in ranges:
        assert " ".join(f"[{low}, {high}]" for low, high in held) in wide
