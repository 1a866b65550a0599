"""Replicated subscriptions (PIP-33) between broker processes, with the official client: Pulsar's
ReplicatedSubscriptionTest scenarios with its expected values, and the position a
consumer group finds in the other cluster after failing over.

Snapshots every 100 ms (Pulsar's tests use small frequencies too), so that a test waits fractions of a
second for a subscription to move in the other cluster. Most tests share one pair of clusters (`pair`);
those that need other settings, a third cluster, or a broker to stop start their own (`geo_factory`).

Markers are invisible to clients, so the tests see them as an operator does: a topic's entry count in
internal stats (markers are entries), the snapshot metrics, the subscriptions' positions and status.
Pulsar's rule bounds the duplicates after a failover: the other cluster resumes at the last snapshot the
acknowledged position passed, so a consumer gets again at most what was published between that snapshot
and its acknowledged position. `settle` waits until no marker is being written, which means every message
published so far has a completed snapshot after it (a tick starts one whenever data came after the start
of the last one), so a test knows where the snapshots are.
"""

from __future__ import annotations

import time
import uuid

import pulsar
import pytest

from geo_helpers import Geo, admin, metric_samples, new_topic, publish, start_again, topic_path, wait_until

FREQUENCY_MS = 100
SETTINGS = {"replicatedSubscriptionsSnapshotFrequencyMillis": str(FREQUENCY_MS)}
# How long no marker may be written for a topic's snapshots to count as settled: several ticks.
QUIET_S = 5 * FREQUENCY_MS / 1000
# A consumer has received everything once nothing came for this long (dispatch is immediate on loopback).
DRAIN_QUIET_MS = 500
STATUS = "replicatedSubscriptionStatus"
SNAPSHOT_COUNT = "pulsar_replicated_subscriptions_snapshot_ms_count"
PENDING = "pulsar_replicated_subscriptions_pending_snapshots"
TIMED_OUT = "pulsar_replicated_subscriptions_timedout_snapshots_total"


@pytest.fixture(scope="module")
def pair(module_broker_factory) -> Geo:
    """Clusters r1 and r2, namespace `geo/rs` replicating between them, `geo/local` only in r1."""
    geo = Geo({name: module_broker_factory(clusterName=name, **SETTINGS) for name in ("r1", "r2")})
    geo.connect()
    geo.create_tenant()
    geo.create_namespace("rs", ["r1", "r2"])
    geo.create_namespace("local", ["r1"])
    return geo


# ------------------------------------------------------------------------------------ what an operator sees


def subscription_stats(broker, topic: str, subscription: str) -> dict | None:
    response = admin(broker, "GET", topic_path(topic) + "/stats", expect=(200, 404))
    if response.status_code == 404:
        return None
    return response.json().get("subscriptions", {}).get(subscription)


def internal_stats(broker, topic: str) -> dict | None:
    response = admin(broker, "GET", topic_path(topic) + "/internalStats", expect=(200, 404))
    return None if response.status_code == 404 else response.json()


def mark_delete(broker, topic: str, subscription: str) -> tuple[int, int] | None:
    cursor = ((internal_stats(broker, topic) or {}).get("cursors") or {}).get(subscription)
    if cursor is None:
        return None
    ledger, entry = cursor["markDeletePosition"].split(":")
    return int(ledger), int(entry)


def moved(broker, topic: str, subscription: str) -> bool:
    """The subscription exists and its mark-delete position is on an entry (not before the first)."""
    position = mark_delete(broker, topic, subscription)
    return position is not None and position[1] >= 0


def entries(broker, topic: str) -> int:
    """Entries the topic stores, markers included (0 while it does not exist in that cluster)."""
    return (internal_stats(broker, topic) or {}).get("numberOfEntries", 0)


def metric(broker, name: str) -> float:
    samples = metric_samples(broker, name)
    assert len(samples) == 1, f"{name}: {samples}"
    return samples[0][1]


def status(broker, topic: str, subscription: str) -> dict[str, bool]:
    return admin(broker, "GET", f"{topic_path(topic)}/subscription/{subscription}/{STATUS}").json()


def set_status(broker, topic: str, subscription: str, enabled: bool) -> None:
    admin(broker, "POST", f"{topic_path(topic)}/subscription/{subscription}/{STATUS}", enabled, expect=(204,))


def settle(geo: Geo, topics: list[str]) -> dict[tuple[str, str], int]:
    """Wait until no cluster writes anything to `topics` for QUIET_S; returns the entry counts then."""

    def counts() -> dict[tuple[str, str], int]:
        return {(cluster, t): entries(broker, t) for cluster, broker in geo.brokers.items() for t in topics}

    last = counts()
    quiet_since = time.monotonic()
    deadline = quiet_since + 20
    while time.monotonic() - quiet_since < QUIET_S:
        assert time.monotonic() < deadline, f"markers still written to {topics}: {last}"
        time.sleep(FREQUENCY_MS / 1000)
        now = counts()
        if now != last:
            last, quiet_since = now, time.monotonic()
    return last


# ------------------------------------------------------------------------------------------ clients


def receive(consumer: pulsar.Consumer, count: int) -> list[str]:
    """`count` messages, each acknowledged."""
    got = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=10_000)
        got.append(message.data().decode())
        consumer.acknowledge(message)
    return got


def drain(consumer: pulsar.Consumer) -> list[str]:
    """Everything the consumer receives until nothing came for DRAIN_QUIET_MS, each acknowledged."""
    got = []
    while True:
        try:
            message = consumer.receive(timeout_millis=DRAIN_QUIET_MS)
        except pulsar.Timeout:
            return got
        got.append(message.data().decode())
        consumer.acknowledge(message)


def send(producer: pulsar.Producer, payloads: list[str]) -> None:
    for payload in payloads:
        producer.send(payload.encode())


def replicated_subscription(client: pulsar.Client, topic: str, name: str, **options) -> None:
    """Create the subscription replicated, as Pulsar's tests' createReplicatedSubscription: subscribe with
    the flag and close."""
    client.subscribe(topic, name, replicate_subscription_state_enabled=True, **options).close()


def subscription_name() -> str:
    return f"sub-{uuid.uuid4().hex[:6]}"


# ---------------------------------------------------------------------------- ReplicatedSubscriptionTest


def test_a_consumer_failing_over_resumes_at_the_last_snapshot_it_acknowledged(pair, client_factory) -> None:
    """Pulsar's testReplicatedSubscriptionAcrossTwoRegions with a snapshot between the halves: 3 messages in
    r1, a snapshot, 3 more; the first 3 consumed in r1. r2's subscription moves to the snapshot, so r2's
    consumer receives exactly the last 3: the snapshot's position is the acknowledged one (Pulsar's rule
    gives no duplicates when no traffic came between the snapshot and the acknowledgement)."""
    topic = new_topic("rs", "failover")
    name = subscription_name()
    r1, r2 = client_factory(pair["r1"].url), client_factory(pair["r2"].url)
    for client in (r1, r2):
        replicated_subscription(client, topic, name)
    producer = r1.create_producer(topic)
    sent = [f"m{i}" for i in range(6)]
    send(producer, sent[:3])
    settle(pair, [topic])
    send(producer, sent[3:])
    consumer = r1.subscribe(topic, name, replicate_subscription_state_enabled=True)
    assert receive(consumer, 3) == sent[:3]
    wait_until(
        lambda: moved(pair["r2"], topic, name),
        "r2's subscription moved",
        lambda: f"r1 {mark_delete(pair['r1'], topic, name)}, r2 {mark_delete(pair['r2'], topic, name)}",
    )
    consumer.close()
    assert drain(r2.subscribe(topic, name, replicate_subscription_state_enabled=True)) == sent[3:]


def across_two_regions(pair: Geo, client_factory, topic: str) -> list[str]:
    """Pulsar's testReplicatedSubscriptionAcrossTwoRegions: 6 messages in r1, 3 consumed there, 2 × the
    frequency, the rest consumed in r2. Returns what was sent."""
    name = subscription_name()
    r1, r2 = client_factory(pair["r1"].url), client_factory(pair["r2"].url)
    for client in (r1, r2):
        replicated_subscription(client, topic, name)
    sent = [f"m{i}" for i in range(6)]
    send(r1.create_producer(topic), sent)
    consumer = r1.subscribe(topic, name, replicate_subscription_state_enabled=True)
    in_r1 = receive(consumer, 3)
    assert in_r1 == sent[:3]
    time.sleep(2 * FREQUENCY_MS / 1000)
    consumer.close()
    in_r2 = drain(r2.subscribe(topic, name, replicate_subscription_state_enabled=True))
    # Duplicates allowed, as in Pulsar's test (#10054): the 6 went out before any snapshot, so r2 may
    # start from the beginning; nothing may be missing, and r2's share comes in order.
    assert set(in_r1) | set(in_r2) == set(sent)
    assert in_r2 == sorted(in_r2) and set(sent[3:]) <= set(in_r2)
    return sent


def test_replicated_subscription_across_two_regions(pair, client_factory) -> None:
    across_two_regions(pair, client_factory, new_topic("rs", "two-regions"))


def test_across_two_regions_then_a_reader_reads_exactly_what_was_sent(pair, client_factory) -> None:
    """Pulsar's testReplicatedSubscriptionAcrossTwoRegionsGetLastMessage: after the scenario a reader from
    the earliest message loops on has_message_available() and gets exactly the 6 messages, in each
    cluster, though the topic ends with markers (Pulsar #22571: the loop never ended)."""
    topic = new_topic("rs", "last-message")
    sent = across_two_regions(pair, client_factory, topic)
    counts = settle(pair, [topic])
    assert counts[("r1", topic)] > len(sent) and counts[("r2", topic)] > len(sent), f"no markers: {counts}"
    for cluster in ("r1", "r2"):
        reader = client_factory(pair[cluster].url).create_reader(topic, pulsar.MessageId.earliest)
        read = []
        while reader.has_message_available():
            read.append(reader.read_next(timeout_millis=10_000).data().decode())
        assert read == sent, cluster


def test_subscribe_and_switch_to_standby_cluster(pair, client_factory) -> None:
    """Pulsar's testReplicatedSubscribeAndSwitchToStandbyCluster: a replicated subscription created by the
    admin API at the earliest message in r1 only; 10 messages; once a snapshot completed (and r2 answered:
    its controller runs), 10 more; 10 consumed in r1. The UPDATE creates the subscription in r2, where a
    consumer receives the other 10: all 20 received overall (here exactly, no message twice, since nothing
    was published between the snapshot and the acknowledged position)."""
    topic = new_topic("rs", "standby")
    name = subscription_name()
    r1_broker, r2_broker = pair["r1"], pair["r2"]
    admin(
        r1_broker,
        "PUT",
        f"{topic_path(topic)}/subscription/{name}?replicated=true",
        {"ledgerId": -1, "entryId": -1},
        expect=(204,),
    )
    assert status(r1_broker, topic, name) == {topic: True}
    snapshots_before = metric(r1_broker, SNAPSHOT_COUNT)
    r1 = client_factory(r1_broker.url)
    producer = r1.create_producer(topic)
    sent = [f"m{i}" for i in range(20)]
    send(producer, sent[:10])
    wait_until(lambda: metric(r1_broker, SNAPSHOT_COUNT) > snapshots_before, "a snapshot completed in r1")
    settle(pair, [topic])
    assert entries(r2_broker, topic) > 10, "r2 wrote no RESPONSE"
    assert subscription_stats(r2_broker, topic, name) is None
    send(producer, sent[10:])
    consumer = r1.subscribe(topic, name, replicate_subscription_state_enabled=True)
    in_r1 = receive(consumer, 10)
    wait_until(lambda: moved(r2_broker, topic, name), "the UPDATE created and moved the subscription in r2")
    consumer.close()
    assert status(r2_broker, topic, name) == {topic: True}
    r2 = client_factory(r2_broker.url)
    in_r2 = drain(r2.subscribe(topic, name))
    assert in_r1 == sent[:10]
    assert in_r2 == sent[10:]


def test_replication_snapshots_stop_when_there_is_no_traffic(pair, client_factory) -> None:
    """Pulsar's testReplicationSnapshotStopWhenNoTraffic: no snapshot before anything is published; 10
    messages in r1 make snapshots, which then stop (no entry added in either cluster across 10 × the
    frequency); 10 messages in r2 make new ones in both clusters."""
    topic = new_topic("rs", "no-traffic")
    name = subscription_name()
    r1, r2 = client_factory(pair["r1"].url), client_factory(pair["r2"].url)
    for client in (r1, r2):
        replicated_subscription(client, topic, name)
    time.sleep(5 * FREQUENCY_MS / 1000)
    assert (entries(pair["r1"], topic), entries(pair["r2"], topic)) == (0, 0)
    send(r1.create_producer(topic), [f"a{i}" for i in range(10)])
    first = settle(pair, [topic])
    assert first[("r1", topic)] > 10 and first[("r2", topic)] > 10, f"no snapshot taken: {first}"
    time.sleep(10 * FREQUENCY_MS / 1000)
    last_confirmed = {c: internal_stats(pair[c], topic)["lastConfirmedEntry"] for c in ("r1", "r2")}
    assert settle(pair, [topic]) == first
    assert {c: internal_stats(pair[c], topic)["lastConfirmedEntry"] for c in ("r1", "r2")} == last_confirmed
    send(r2.create_producer(topic), [f"b{i}" for i in range(10)])
    second = settle(pair, [topic])
    for cluster in ("r1", "r2"):
        assert second[(cluster, topic)] > first[(cluster, topic)] + 10, f"no new snapshot in {cluster}: {second}"


@pytest.mark.parametrize("partitions", [0, 2], ids=["RestApi1", "RestApi2-partitioned"])
def test_replicated_subscription_rest_api(pair, client_factory, partitions) -> None:
    """Pulsar's testReplicatedSubscriptionRestApi1 (one topic) and RestApi2 (2 partitions): the status is
    switched per cluster; with it off in both, each cluster's consumer receives all 20 messages; with it
    back on, what r1 consumed is not consumed again in r2."""
    topic = new_topic("rs", "rest-api")
    name = subscription_name()
    r1_broker, r2_broker = pair["r1"], pair["r2"]
    if partitions:
        admin(r1_broker, "PUT", f"{topic_path(topic)}/partitions", partitions, expect=(204,))
        wait_until(
            lambda: admin(r2_broker, "GET", f"{topic_path(topic)}/partitions").json()["partitions"] == 2,
            "r2 has the partitioned topic",
        )
    names = [f"{topic}-partition-{i}" for i in range(partitions)] or [topic]
    r1, r2 = client_factory(r1_broker.url), client_factory(r2_broker.url)
    for client in (r1, r2):
        replicated_subscription(client, topic, name)
    for broker in (r1_broker, r2_broker):
        assert status(broker, topic, name) == dict.fromkeys(names, True)

    set_status(r1_broker, topic, name, False)
    assert status(r1_broker, topic, name) == dict.fromkeys(names, False)
    assert status(r2_broker, topic, name) == dict.fromkeys(names, True)
    for partition in names:
        stats = subscription_stats(r1_broker, partition, name)
        assert (stats["isReplicated"], stats["replicated"]) == (False, False)
        assert subscription_stats(r2_broker, partition, name)["isReplicated"] is True
    set_status(r2_broker, topic, name, False)
    assert status(r2_broker, topic, name) == dict.fromkeys(names, False)
    admin(r1_broker, "PUT", f"{topic_path(topic)}/unload", expect=(204,))
    assert status(r1_broker, topic, name) == dict.fromkeys(names, False)

    producer = r1.create_producer(topic, batching_enabled=False)
    off = [f"off{i:02d}" for i in range(20)]
    send(producer, off)
    for client in (r1, r2):
        consumer = client.subscribe(topic, name)
        assert sorted(drain(consumer)) == off
        consumer.close()

    for broker in (r1_broker, r2_broker):
        set_status(broker, topic, name, True)
        assert status(broker, topic, name) == dict.fromkeys(names, True)
    on = [f"on{i:02d}" for i in range(20)]
    send(producer, on[:10])
    settle(pair, names)
    consumer = r1.subscribe(topic, name, replicate_subscription_state_enabled=True)
    in_r1 = drain(consumer)
    send(producer, on[10:])
    settle(pair, names)
    consumer.close()
    in_r2 = drain(r2.subscribe(topic, name, replicate_subscription_state_enabled=True))
    assert sorted(in_r1) == on[:10]
    assert sorted(set(in_r1) | set(in_r2)) == on and len(in_r2) < 20
    assert sorted(in_r2) == on[10:]


def test_get_replicated_subscription_status(pair, client_factory) -> None:
    """Pulsar's testGetReplicatedSubscriptionStatus: the status by topic, and by partition of a partitioned
    topic, where one partition can be switched alone; the cursor property that keeps it, and Pulsar's
    answers for a missing subscription or a non-persistent topic."""
    broker = pair["r1"]
    client = client_factory(broker.url)
    name = subscription_name()
    topic = new_topic("rs", "status")
    replicated_subscription(client, topic, name)
    assert status(broker, topic, name) == {topic: True}
    cursor = internal_stats(broker, topic)["cursors"][name]
    assert cursor["properties"] == {"pulsar.replicated.subscription": 1}
    stats = subscription_stats(broker, topic, name)
    assert (stats["isReplicated"], stats["replicated"]) == (True, True)

    partitioned = new_topic("rs", "status-partitioned")
    admin(broker, "PUT", f"{topic_path(partitioned)}/partitions", 2, expect=(204,))
    replicated_subscription(client, partitioned, name)
    first, second = f"{partitioned}-partition-0", f"{partitioned}-partition-1"
    assert status(broker, partitioned, name) == {first: True, second: True}
    set_status(broker, second, name, False)
    assert status(broker, partitioned, name) == {first: True, second: False}
    assert status(broker, second, name) == {second: False}
    assert internal_stats(broker, second)["cursors"][name]["properties"] == {}

    path = f"{topic_path(topic)}/subscription/nobody/{STATUS}"
    assert "not found" in admin(broker, "GET", path, expect=(404,)).json()["reason"]
    admin(broker, "POST", path, True, expect=(404,))
    admin(broker, "POST", f"{topic_path(topic)}/subscription/{name}/{STATUS}", "yes", expect=(400,))
    non_persistent = f"/admin/v2/non-persistent/{topic[len('persistent://') :]}/subscription/{name}/{STATUS}"
    assert admin(broker, "GET", non_persistent, expect=(405,)).json() == {
        "reason": "Cannot get replicated subscriptions on non-persistent topics"
    }


def test_subscription_comes_back_when_the_replicator_producer_was_closed(pair, client_factory) -> None:
    """Pulsar's testReplicatedSubscriptionWhenReplicatorProducerIsClosed, black-box: the subscription is
    deleted in r2 and r2's topic unloaded (its replicator producer closed). New traffic in r1 loads it
    again, the next snapshot goes through, and r1's consumer acknowledging everything brings the
    subscription back in r2, where it has nothing left to consume."""
    topic = new_topic("rs", "producer-closed")
    name = subscription_name()
    r1, r2 = client_factory(pair["r1"].url), client_factory(pair["r2"].url)
    for client in (r1, r2):
        replicated_subscription(client, topic, name)
    producer = r1.create_producer(topic)
    sent = [f"m{i}" for i in range(10)]
    send(producer, sent[:5])
    settle(pair, [topic])
    admin(pair["r2"], "DELETE", f"{topic_path(topic)}/subscription/{name}?force=true", expect=(204,))
    admin(pair["r2"], "PUT", f"{topic_path(topic)}/unload", expect=(204,))
    send(producer, sent[5:])
    settle(pair, [topic])
    assert drain(r1.subscribe(topic, name, replicate_subscription_state_enabled=True)) == sent
    wait_until(lambda: moved(pair["r2"], topic, name), "the subscription is back in r2")
    assert drain(r2.subscribe(topic, name, replicate_subscription_state_enabled=True)) == []


# ---------------------------------------------------------------------------- failover of consumer groups


@pytest.mark.parametrize("consumer_type", ["Exclusive", "Failover", "Key_Shared"])
def test_a_consumer_group_fails_over_without_loss(pair, client_factory, consumer_type) -> None:
    """Two bursts of 10 keyed messages in r1 with a snapshot after each; the group (2 consumers for
    Failover and Key_Shared) acknowledges exactly the first 15, then fails over to r2. r2 delivers every
    message not acknowledged (loss 0), and again at most those acknowledged after the last snapshot before
    the acknowledged position: the 5 of the second burst (Pulsar's rule)."""
    topic = new_topic("rs", f"group-{consumer_type.lower()}")
    name = subscription_name()
    kind = getattr(pulsar.ConsumerType, consumer_type.replace("_", ""))
    r1, r2 = client_factory(pair["r1"].url), client_factory(pair["r2"].url)
    replicated_subscription(r2, topic, name, consumer_type=kind)
    before = mark_delete(pair["r2"], topic, name)
    group = [
        r1.subscribe(topic, name, consumer_type=kind, replicate_subscription_state_enabled=True, consumer_name=f"c{i}")
        for i in range(1 if consumer_type == "Exclusive" else 2)
    ]
    producer = r1.create_producer(topic, batching_enabled=False)
    first = publish(producer, "s", 10)
    settle(pair, [topic])
    second = publish(producer, "s", 10, start=10)
    settle(pair, [topic])
    sent = [s.payload for s in first + second]
    acknowledged: list[str] = []
    deadline = time.monotonic() + 20
    while len(acknowledged) < 15:
        assert time.monotonic() < deadline, f"acknowledged only {sorted(acknowledged)}"
        for consumer in group:
            try:
                message = consumer.receive(timeout_millis=50)
            except pulsar.Timeout:
                continue
            payload = message.data().decode()
            if payload in sent[:15]:
                consumer.acknowledge(message)
                acknowledged.append(payload)
    assert sorted(acknowledged) == sent[:15]
    wait_until(lambda: mark_delete(pair["r2"], topic, name) != before, "r2's subscription moved")
    settle(pair, [topic])
    for consumer in group:
        consumer.close()
    in_r2 = drain(r2.subscribe(topic, name, consumer_type=kind, replicate_subscription_state_enabled=True))
    assert set(sent[15:]) <= set(in_r2), f"lost: {sorted(set(sent[15:]) - set(in_r2))}"
    duplicates = set(in_r2) & set(acknowledged)
    assert duplicates <= set(sent[10:15]), f"duplicates beyond Pulsar's rule: {sorted(duplicates)}"
    assert len(in_r2) == len(set(in_r2))


def test_no_markers_when_the_topic_does_not_replicate(pair, client_factory) -> None:
    """A replicated subscription on a topic that replicates nowhere is accepted (Pulsar #24090), but no
    snapshot is taken and no UPDATE written: the topic holds only its 10 messages (Pulsar #21495)."""
    topic = new_topic("local", "alone")
    name = subscription_name()
    client = client_factory(pair["r1"].url)
    consumer = client.subscribe(topic, name, replicate_subscription_state_enabled=True)
    send(client.create_producer(topic), [f"m{i}" for i in range(10)])
    time.sleep(5 * FREQUENCY_MS / 1000)
    assert len(drain(consumer)) == 10
    time.sleep(5 * FREQUENCY_MS / 1000)
    assert entries(pair["r1"], topic) == 10
    assert status(pair["r1"], topic, name) == {topic: True}


# ------------------------------------------------------------------------------------ their own clusters


def test_one_way_peer_gets_one_request_per_timeout(geo_factory, client_factory) -> None:
    """Pulsar's testReplicatedSubscriptionOneWay (#23839): r2 has the feature off and never answers, so r1
    keeps exactly one snapshot pending and r2 receives exactly one REQUEST, then a second once the first
    timed out (2 s), not one per tick. On r2 (Pulsar's testReplicatedSubscriptionRestApi3 and #9523)
    enabling the status is refused, and a consumer's flag is ignored."""
    geo = geo_factory(
        {
            "r1": {**SETTINGS, "replicatedSubscriptionsSnapshotTimeoutSeconds": "2"},
            "r2": {**SETTINGS, "enableReplicatedSubscriptions": "false"},
        },
        {"oneway": ["r1", "r2"]},
    )
    topic = new_topic("oneway", "oneway")
    name = subscription_name()
    r1, r2 = client_factory(geo["r1"].url), client_factory(geo["r2"].url)
    for client in (r1, r2):
        replicated_subscription(client, topic, name)
    assert status(geo["r1"], topic, name) == {topic: True}
    assert status(geo["r2"], topic, name) == {topic: False}
    refused = admin(geo["r2"], "POST", f"{topic_path(topic)}/subscription/{name}/{STATUS}", True, expect=(500,))
    assert refused.json() == {"reason": "Failed to update cursor properties"}
    set_status(geo["r2"], topic, name, False)
    assert status(geo["r2"], topic, name) == {topic: False}

    send(r1.create_producer(topic), ["m0"])
    wait_until(
        lambda: entries(geo["r2"], topic) == 2,
        "r2 stored the message and one REQUEST",
        lambda: f"r2 entries {entries(geo['r2'], topic)}",
    )
    time.sleep(5 * FREQUENCY_MS / 1000)  # 5 ticks: a REQUEST per tick would show; well before the timeout
    assert entries(geo["r2"], topic) == 2
    assert (metric(geo["r1"], PENDING), metric(geo["r1"], TIMED_OUT)) == (1, 0)
    wait_until(
        lambda: entries(geo["r2"], topic) == 3,
        "a second REQUEST after the timeout",
        lambda: f"r2 entries {entries(geo['r2'], topic)}",
    )
    assert (metric(geo["r1"], PENDING), metric(geo["r1"], TIMED_OUT)) == (1, 1)
    assert metric(geo["r1"], SNAPSHOT_COUNT) == 0


def test_three_clusters_a_cluster_down_and_a_restart(geo_factory, client_factory) -> None:
    """Three clusters (two rounds per snapshot): r1's consumer acknowledging moves r2 and r3. With r3
    stopped no snapshot is taken (r1 and r2 store only the data) while r1 and r2 keep serving. r3 comes
    back with its subscription still replicated (the cursor property), snapshots resume, and r3's
    subscription moves past everything r1 consumed."""
    clusters = ("r1", "r2", "r3")
    geo = geo_factory({c: dict(SETTINGS) for c in clusters}, {"three": list(clusters)})
    topic = new_topic("three", "down")
    name = subscription_name()
    clients = {c: client_factory(geo[c].url) for c in clusters}
    for client in clients.values():
        replicated_subscription(client, topic, name)
    producer = clients["r1"].create_producer(topic)
    sent = [f"m{i:02d}" for i in range(20)]
    send(producer, sent[:10])
    settle(geo, [topic])
    consumer = clients["r1"].subscribe(topic, name, replicate_subscription_state_enabled=True)
    assert receive(consumer, 10) == sent[:10]
    for cluster in ("r2", "r3"):
        wait_until(lambda cluster=cluster: moved(geo[cluster], topic, name), f"{cluster}'s subscription moved")

    geo["r3"].stop()
    wait_until(
        lambda: not admin(geo["r1"], "GET", topic_path(topic) + "/stats").json()["replication"]["r3"]["connected"],
        "r1's replicator to r3 disconnected",
    )
    before = {c: entries(geo[c], topic) for c in ("r1", "r2")}
    snapshots = metric(geo["r1"], SNAPSHOT_COUNT)
    send(producer, sent[10:])
    served = [consumer.receive(timeout_millis=10_000) for _ in sent[10:]]
    reader = clients["r2"].create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(timeout_millis=10_000).data().decode() for _ in sent] == sent
    time.sleep(10 * FREQUENCY_MS / 1000)
    # Counted before r1's consumer acknowledges: what an acknowledgement writes is not a snapshot.
    assert {c: entries(geo[c], topic) for c in ("r1", "r2")} == {c: n + 10 for c, n in before.items()}
    assert (metric(geo["r1"], SNAPSHOT_COUNT), metric(geo["r1"], PENDING)) == (snapshots, 0)
    assert [message.data().decode() for message in served] == sent[10:]
    for message in served:
        consumer.acknowledge(message)

    start_again(geo["r3"])
    assert status(geo["r3"], topic, name) == {topic: True}
    wait_until(lambda: metric(geo["r1"], SNAPSHOT_COUNT) > snapshots, "snapshots resumed in r1")
    settle(geo, [topic])
    consumer.close()
    assert drain(clients["r3"].subscribe(topic, name, replicate_subscription_state_enabled=True)) == []


def test_auto_cluster_failover_moves_a_consumer_to_where_it_left_off(geo_factory, client_factory) -> None:
    """The client's AutoClusterFailover: a consumer on r1 acknowledged the first 10 of 20 messages; r1 is
    killed; the client switches to r2, where the consumer receives the other 10 and none of the first."""
    geo = geo_factory({c: dict(SETTINGS) for c in ("r1", "r2")}, {"acf": ["r1", "r2"]})
    topic = new_topic("acf", "auto-failover")
    name = subscription_name()
    replicated_subscription(client_factory(geo["r2"].url), topic, name)
    failover = pulsar.AutoClusterFailover(
        primary=pulsar.ServiceInfo(geo["r1"].url), secondary=[pulsar.ServiceInfo(geo["r2"].url)], check_interval_ms=200
    )
    consumer = client_factory(failover).subscribe(topic, name, replicate_subscription_state_enabled=True)
    producer = client_factory(geo["r1"].url).create_producer(topic)
    sent = [f"m{i:02d}" for i in range(20)]
    send(producer, sent[:10])
    settle(geo, [topic])
    send(producer, sent[10:])
    assert receive(consumer, 10) == sent[:10]
    wait_until(lambda: moved(geo["r2"], topic, name), "r2's subscription moved")
    settle(geo, [topic])
    geo["r1"].kill()
    after: list[str] = []
    deadline = time.monotonic() + 30
    while not set(sent[10:]) <= set(after):
        assert time.monotonic() < deadline, f"received after the kill: {after}"
        try:
            message = consumer.receive(timeout_millis=500)
        except pulsar.Timeout:
            continue
        after.append(message.data().decode())
        consumer.acknowledge(message)
    assert not set(after) & set(sent[:10]), f"acknowledged messages again: {after}"
