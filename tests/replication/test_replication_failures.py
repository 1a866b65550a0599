"""Geo-replication when a cluster goes away: the remote stopped and started again, a broker killed with
SIGKILL in the middle of the stream, an operator clearing a replicator's backlog while the remote is down,
retention keeping what the replicator has not sent.

Each test starts its own two clusters (r1 replicating to r2 through namespace `geo/ns`), since it stops
or kills one; `restart` keeps a broker's data directory and ports, so r1's registration of r2 stays valid.
"""

from __future__ import annotations

import threading
import time
import uuid

import pulsar
import pytest

from geo_helpers import (
    WAIT_S,
    admin,
    check_exactly_once,
    check_order,
    collect,
    explained,
    message,
    metric_samples,
    new_topic,
    publish,
    replication_details,
    replication_stats,
    start_again,
    topic_path,
    topic_stats,
    wait_until,
)

# A remote that was down may wait out a reconnection backoff of several seconds (100 ms doubling to 1 min).
RECONNECT_WAIT_S = 2 * WAIT_S


def replicator(geo, topic: str, remote: str = "r2") -> dict:
    return replication_stats(geo["r1"], topic).get(remote, {})


def backlog_metric(geo, topic: str, remote: str = "r2") -> list[float]:
    return [
        value
        for labels, value in metric_samples(geo["r1"], "pulsar_replication_backlog")
        if labels.get("topic") == topic and labels.get("remote_cluster") == remote
    ]


def test_remote_down_backlog_grows_then_drains_and_nothing_is_lost(geo_factory, client_factory) -> None:
    """r2 stopped: r1 keeps accepting, stats.replication.r2 shows connected false and a replicationBacklog
    that grows with what is published (40, then 100 entries; the metric says the same); r2 started again:
    the replicator reconnects by itself, the backlog drains to 0 and r2 has every message exactly once, in
    order."""
    geo = geo_factory({"r1": {}, "r2": {}}, {"ns": ["r1", "r2"]})
    topic = new_topic("ns", "down")
    details = replication_details(geo, topic)
    producer = client_factory(geo["r1"].url).create_producer(topic, producer_name=f"down-{uuid.uuid4().hex[:6]}")
    first = publish(producer, "down", 50)
    r2_client = client_factory(geo["r2"].url)
    with explained(details):
        check_exactly_once(
            collect(r2_client, topic, "r2", 50, linger_s=0.2), [s.payload for s in first], "r2 before it was stopped"
        )
    wait_until(
        lambda: (
            replicator(geo, topic).get("replicationBacklog") == 0 and replicator(geo, topic).get("connected") is True
        ),
        "r1's replicator to r2 is connected with an empty backlog",
        details,
    )
    r2_client.close()

    geo["r2"].stop()
    second = publish(producer, "down", 40, start=50)
    wait_until(
        lambda: (
            replicator(geo, topic).get("connected") is False and replicator(geo, topic).get("replicationBacklog") == 40
        ),
        "r1 shows r2 disconnected with replicationBacklog 40",
        details,
    )
    third = publish(producer, "down", 60, start=90)
    wait_until(
        lambda: replicator(geo, topic).get("replicationBacklog") == 100,
        "r1's replicationBacklog to r2 grew to 100",
        details,
    )
    assert replicator(geo, topic).get("connected") is False, details()
    metric = backlog_metric(geo, topic)
    assert metric == [100.0], f'r1\'s pulsar_replication_backlog{{remote_cluster="r2"}} for {topic}: {metric}'

    start_again(geo["r2"])
    wait_until(
        lambda: (
            replicator(geo, topic).get("connected") is True and replicator(geo, topic).get("replicationBacklog") == 0
        ),
        "r2 is back: r1's replicator reconnected and its backlog drained to 0",
        details,
        timeout_s=RECONNECT_WAIT_S,
    )
    expected = [s.payload for s in first + second + third]
    with explained(details):
        in_r2 = collect(client_factory(geo["r2"].url), topic, "r2", len(expected))
        check_exactly_once(in_r2, expected, "r2 after it came back")
        check_order(in_r2, "r2")
        assert backlog_metric(geo, topic) == [0.0], f"metric after the drain: {backlog_metric(geo, topic)}"


class Stream(threading.Thread):
    """Sends `count` messages one at a time (each waits for its receipt), recording which the broker
    acknowledged; a send that fails is recorded and the stream goes on."""

    def __init__(self, producer: pulsar.Producer, stream: str, count: int) -> None:
        super().__init__(daemon=True)
        self.producer, self.stream, self.count = producer, stream, count
        self.acked: list[str] = []
        self.failed: list[tuple[str, str]] = []

    def run(self) -> None:
        for seq in range(self.count):
            record, kwargs = message(self.stream, seq)
            try:
                self.producer.send(record.payload.encode(), **kwargs)
                self.acked.append(record.payload)
            except Exception as error:  # noqa: BLE001 - a crash may fail a send; the test judges the outcome
                self.failed.append((record.payload, repr(error)))
            time.sleep(0.002)


@pytest.mark.parametrize("victim", ["source", "remote"])
def test_broker_killed_mid_stream_no_duplicate_and_no_loss(geo_factory, client_factory, victim: str) -> None:
    """SIGKILL r1 (the source: its replicator restarts from the persisted cursor and re-sends) or r2 (the
    remote: in-flight sends are lost or already stored, the replicator rewinds and re-sends) while r1
    publishes 400 messages that replicate to r2; both restart on their data. With deduplication on (on r2
    for the replicator's re-sends; on r1 too, so the client's own re-sends after a source crash are not
    stored twice), r2 ends with exactly what r1 stored: no duplicate, no loss, in order; r1 stored every
    acknowledged message."""
    dedup = {"brokerDeduplicationEnabled": "true"}
    geo = geo_factory({"r1": dedup, "r2": dedup}, {"ns": ["r1", "r2"]})
    topic = new_topic("ns", f"kill-{victim}")
    details = replication_details(geo, topic)
    producer = client_factory(geo["r1"].url).create_producer(
        topic, producer_name=f"kill-{uuid.uuid4().hex[:6]}", send_timeout_millis=60_000
    )
    stream = Stream(producer, "kill", 400)
    stream.start()
    wait_until(lambda: len(stream.acked) >= 150 or not stream.is_alive(), "150 sends acknowledged")
    geo["r1" if victim == "source" else "r2"].restart(kill=True)
    stream.join(timeout=120)
    assert not stream.is_alive(), f"the stream is stuck after {len(stream.acked)} acknowledged sends"

    wait_until(
        lambda: (
            replicator(geo, topic).get("connected") is True and replicator(geo, topic).get("replicationBacklog") == 0
        ),
        "r1's replicator to r2 is connected and drained after the crash",
        details,
        timeout_s=RECONNECT_WAIT_S,
    )
    with explained(details):
        in_r1 = collect(client_factory(geo["r1"].url), topic, "r1", len(stream.acked))
        stored = [r.payload for r in in_r1]
        lost = sorted(set(stream.acked) - set(stored))
        assert not lost, f"r1 lost {len(lost)} acknowledged messages: {lost[:10]} (failed sends: {stream.failed[:5]})"
        check_exactly_once(in_r1, sorted(set(stored)), "r1 (the source, deduplicating the client's re-sends)")
        in_r2 = collect(client_factory(geo["r2"].url), topic, "r2", len(stored))
        check_exactly_once(in_r2, stored, f"r2 after {victim} was killed mid-stream")
        check_order(in_r2, "r2")


def test_a_producer_that_moves_to_the_remote_cluster_continues_its_sequence(geo_factory, client_factory) -> None:
    """With deduplication on, r2 drops a replicated entry again by its original producer's name and sequence
    id; so a producer of that name that moves to r2 (an application failing over) must learn there the last
    sequence id r1 gave it, as Pulsar's broker tells it, or its new messages, numbered from 0 again, would be
    dropped as duplicates and acknowledged: lost."""
    dedup = {"brokerDeduplicationEnabled": "true"}
    geo = geo_factory({"r1": dedup, "r2": dedup}, {"ns": ["r1", "r2"]})
    topic = new_topic("ns", "mover")
    details = replication_details(geo, topic)
    name = f"mover-{uuid.uuid4().hex[:6]}"
    on_r1 = client_factory(geo["r1"].url).create_producer(topic, producer_name=name)
    for i in range(20):
        on_r1.send(f"r1-{i}".encode())
    on_r1.close()
    wait_until(
        lambda: (topic_stats(geo["r2"], topic) or {}).get("msgInCounter", 0) >= 20,
        "r2 stored the 20 messages r1 replicated",
        details,
    )
    on_r2 = client_factory(geo["r2"].url).create_producer(topic, producer_name=name)
    assert on_r2.last_sequence_id() == 19
    for i in range(5):
        on_r2.send(f"r2-{i}".encode())
    with explained(details):
        in_r2 = collect(client_factory(geo["r2"].url), topic, "r2", 25)
        check_exactly_once(in_r2, [f"r1-{i}" for i in range(20)] + [f"r2-{i}" for i in range(5)], "r2")


def test_skip_all_on_replicator_clears_its_backlog_while_remote_down(geo_factory, client_factory) -> None:
    """ReplicatorTest.testReplicatorClearBacklog: with r2 down, r1's replicator backlog holds 20 entries;
    POST .../subscription/pulsar.repl.r2/skip_all on r1 clears it (replicationBacklog 0); once r2 is back
    those 20 never reach it, while what is published afterwards does."""
    geo = geo_factory({"r1": {}, "r2": {}}, {"ns": ["r1", "r2"]})
    topic = new_topic("ns", "skip")
    details = replication_details(geo, topic)
    producer = client_factory(geo["r1"].url).create_producer(topic, producer_name=f"skip-{uuid.uuid4().hex[:6]}")
    before = publish(producer, "skip", 10)
    r2_client = client_factory(geo["r2"].url)
    with explained(details):
        check_exactly_once(
            collect(r2_client, topic, "r2", 10, linger_s=0.2), [s.payload for s in before], "r2 before it was stopped"
        )
    wait_until(lambda: replicator(geo, topic).get("replicationBacklog") == 0, "r1's replicator to r2 drained", details)
    r2_client.close()

    geo["r2"].stop()
    skipped = publish(producer, "skip", 20, start=10)
    wait_until(
        lambda: replicator(geo, topic).get("replicationBacklog") == 20,
        "r1's replicationBacklog to r2 is 20 while r2 is down",
        details,
    )
    admin(geo["r1"], "POST", f"{topic_path(topic)}/subscription/pulsar.repl.r2/skip_all", expect=(204,))
    wait_until(
        lambda: replicator(geo, topic).get("replicationBacklog") == 0,
        "skip_all on pulsar.repl.r2 cleared r1's replicationBacklog to r2",
        details,
    )

    start_again(geo["r2"])
    wait_until(
        lambda: replicator(geo, topic).get("connected") is True,
        "r1's replicator reconnected to r2",
        details,
        timeout_s=RECONNECT_WAIT_S,
    )
    after = publish(producer, "skip", 10, start=30)
    with explained(details):
        in_r2 = collect(client_factory(geo["r2"].url), topic, "r2", 20)
        came = [r.payload for r in in_r2 if r.payload in {s.payload for s in skipped}]
        assert not came, f"r2 received {len(came)} messages whose replication was skipped: {came[:10]}"
        check_exactly_once(in_r2, [s.payload for s in before + after], "r2 after skip_all")
        check_order(in_r2, "r2")


def test_retention_keeps_what_the_replicator_has_not_sent(geo_factory, client_factory) -> None:
    """The replicator's cursor holds back retention as a subscription does (in Pulsar it is a durable
    managed-ledger cursor, `pulsar.repl.<cluster>`). r1 keeps no consumed ledgers (retention 0) in ledgers of
    2 entries, and r2 is down before the topic exists. On a topic of a namespace that does not replicate, 20
    messages published and acknowledged by its only subscription lose their ledgers; on a replicated topic,
    the same 20 stay (its earliest message is still the first) and r2, started again, gets all of them; once
    the replicator has sent them, r1 deletes those ledgers too."""
    small_ledgers = {"managedLedgerMaxEntriesPerLedger": "2", "managedLedgerMinLedgerRolloverTimeMinutes": "0"}
    geo = geo_factory({"r1": small_ledgers, "r2": {}}, {"ns": ["r1", "r2"], "solo": ["r1"]})
    for namespace in ("ns", "solo"):
        admin(
            geo["r1"],
            "POST",
            f"/admin/v2/namespaces/geo/{namespace}/retention",
            {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
            expect=(204,),
        )
    geo["r2"].stop()
    replicated, solo = new_topic("ns", "kept"), new_topic("solo", "dropped")
    details = replication_details(geo, replicated)

    def earliest(topic: str) -> str:
        response = admin(
            geo["r1"],
            "GET",
            f"{topic_path(topic)}/examinemessage?initialPosition=earliest&messagePosition=1",
            expect=(200,),
        )
        return response.content.decode()

    r1_client = client_factory(geo["r1"].url)
    sent: dict[str, list[str]] = {}
    for topic in (replicated, solo):
        consumer = r1_client.subscribe(topic, "only", consumer_type=pulsar.ConsumerType.Shared)
        producer = r1_client.create_producer(topic, producer_name=f"kept-{uuid.uuid4().hex[:6]}")
        # One at a time: each send waits for its receipt, so the ledgers roll every two entries.
        sent[topic] = [s.payload for i in range(20) for s in publish(producer, "kept", 1, start=i)]
        for _ in range(20):
            consumer.acknowledge(consumer.receive(timeout_millis=int(WAIT_S * 1000)))
        # Rolls the ledger holding the last two acknowledged, so every consumed ledger is closed.
        sent[topic] += [s.payload for s in publish(producer, "kept", 1, start=20)]
        consumer.acknowledge(consumer.receive(timeout_millis=int(WAIT_S * 1000)))
    first = sent[solo][0]
    wait_until(lambda: earliest(solo) != first, f"{solo}: consumed ledgers deleted without retention", details)
    assert earliest(replicated) == sent[replicated][0], (
        f"{replicated}: the ledgers the replicator to r2 has not sent were deleted:\n{details()}"
    )
    assert replicator(geo, replicated).get("replicationBacklog") == 21, details()

    start_again(geo["r2"])
    wait_until(
        lambda: (
            replicator(geo, replicated).get("connected") is True
            and replicator(geo, replicated).get("replicationBacklog") == 0
        ),
        "r2 is back and r1's replicator sent its backlog",
        details,
        timeout_s=RECONNECT_WAIT_S,
    )
    with explained(details):
        in_r2 = collect(client_factory(geo["r2"].url), replicated, "r2", 21)
        check_exactly_once(in_r2, sent[replicated], "r2 after it came back")
        check_order(in_r2, "r2")
    wait_until(
        lambda: earliest(replicated) != sent[replicated][0],
        f"{replicated}: r1 deleted the consumed ledgers once the replicator sent them",
        details,
    )
