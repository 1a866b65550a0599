"""Geo-replication between three running clusters, as Pulsar's ReplicatorTest / OneWayReplicatorTest
check it, with the official client and the admin API only.

All tests share one mesh of three broker processes (r1, r2, r3); each uses its own topic, and the one that
changes a namespace policy has a namespace of its own (`geo/policy`). Namespaces: `geo/ns` replicates to
r1, r2, r3; `geo/pair` to r1, r2.
"""

from __future__ import annotations

import re
import threading
import time
import uuid

import pulsar
import pytest

from geo_helpers import (
    Collector,
    admin,
    check_exactly_once,
    check_metadata,
    check_order,
    check_sent_metadata,
    collect,
    dump,
    entry_groups,
    explained,
    message,
    metric_samples,
    new_topic,
    publish,
    publisher_names,
    replication_details,
    replication_stats,
    topic_path,
    topic_stats,
    wait_until,
)

CLUSTERS = ("r1", "r2", "r3")
# ReplicatorStats as a Pulsar 4.0.7 standalone answers it, in its order, when both connections are up.
REPLICATOR_STATS_FIELDS = [
    "msgRateIn",
    "msgInCount",
    "msgThroughputIn",
    "bytesInCount",
    "msgRateOut",
    "msgOutCount",
    "msgThroughputOut",
    "bytesOutCount",
    "msgRateExpired",
    "replicationBacklog",
    "connected",
    "replicationDelayInSeconds",
    "inboundConnection",
    "inboundConnectedSince",
    "outboundConnection",
    "outboundConnectedSince",
    "msgExpiredCount",
]
# Netty's channel text, as Pulsar's outboundConnection shows it.
NETTY_CHANNEL = re.compile(r"\[id: 0x[0-9a-f]{8}, L:/127\.0\.0\.1:\d+ - R:[^/\s]+/127\.0\.0\.1:\d+\]")
# Pulsar's DateFormatter in UTC: 2026-11-27T02:28:04.915Z
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,3})?Z")


@pytest.fixture
def clients(mesh, client_factory) -> dict[str, pulsar.Client]:
    """One official client per cluster, closed at the end of the test."""
    return {cluster: client_factory(mesh[cluster].url) for cluster in CLUSTERS}


def replicates_to(entry: dict | None) -> bool:
    """A stats.replication entry of an outbound replicator that is there (connected, or holding a
    connection or a backlog); False for no entry, or for one with only the inbound figures of a remote's
    replicator producer."""
    if not entry:
        return False
    return (
        entry.get("connected") is True or bool(entry.get("outboundConnection")) or bool(entry.get("replicationBacklog"))
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


# ----------------------------------------------------------------------------------- one way


def test_one_way_r1_to_r2_every_message_once_in_order_with_its_metadata(mesh, clients) -> None:
    """OneWayReplicatorTest: 200 keyed messages published in r1 reach r2 exactly once, in publish order,
    with key, ordering key, properties, event time, publish time and producer name of the original; and
    nothing comes back to r1 (replicated_from: a replicated message is never forwarded again)."""
    topic = new_topic("pair", "oneway")
    producer = clients["r1"].create_producer(topic, producer_name=unique("oneway"))
    sent = publish(producer, "r1", 200)
    expected = [s.payload for s in sent]

    with explained(replication_details(mesh, topic)):
        in_r2 = collect(clients["r2"], topic, "r2", len(expected))
        check_exactly_once(in_r2, expected, "r2 (replicated from r1)")
        check_order(in_r2, "r2")
        check_sent_metadata(in_r2, sent, "r2")
        in_r1 = collect(clients["r1"], topic, "r1", len(expected))
        check_exactly_once(in_r1, expected, "r1 (nothing may come back from r2)")
        check_metadata(in_r2, {r.payload: r for r in in_r1}, "r2 against r1")


# ---------------------------------------------------------------------------------- full mesh


def test_full_mesh_every_cluster_receives_every_message_once_in_per_origin_order(mesh, clients) -> None:
    """ReplicatorTest.testReplication: produce in each of the three clusters (two rounds of 50 each,
    interleaved); every cluster's consumer gets all 300 exactly once, each origin's in its publish order."""
    topic = new_topic("ns", "mesh")
    producers = {c: clients[c].create_producer(topic, producer_name=unique(f"mesh-{c}")) for c in CLUSTERS}
    sent = []
    for round_ in range(2):
        for cluster in CLUSTERS:
            sent += publish(producers[cluster], cluster, 50, start=50 * round_)
    expected = [s.payload for s in sent]

    with explained(replication_details(mesh, topic)):
        for cluster in CLUSTERS:
            received = collect(clients[cluster], topic, cluster, len(expected))
            check_exactly_once(received, expected, f"cluster {cluster}")
            check_order(received, f"cluster {cluster}")
            check_sent_metadata(received, sent, f"cluster {cluster}")


# ---------------------------------------------------------------------------------- overrides


def test_producer_overrides_disable_replication_and_replication_clusters(mesh, clients) -> None:
    """ReplicatorTest.testReplicationOverrides: from r1, `disable_replication=True` stays in r1;
    `replication_clusters=[r1, r3]` reaches r3 and never r2; the default reaches every cluster."""
    topic = new_topic("ns", "overrides")
    producer = clients["r1"].create_producer(topic, producer_name=unique("overrides"))
    kinds = ("local", "r1r3", "all")

    def kind(seq: int) -> str:
        return kinds[seq % 3]

    def overrides(seq: int) -> dict[str, object]:
        return {"local": {"disable_replication": True}, "r1r3": {"replication_clusters": ["r1", "r3"]}, "all": {}}[
            kind(seq)
        ]

    # 60 interleaved; the last one is a default one, so once r2 has it every earlier one had its chance.
    sent = publish(producer, "ovr", 60, send_kwargs=overrides)
    expected = {
        "r1": [s.payload for s in sent],
        "r3": [s.payload for s in sent if kind(int(s.payload.split(":")[1])) in ("r1r3", "all")],
        "r2": [s.payload for s in sent if kind(int(s.payload.split(":")[1])) == "all"],
    }
    with explained(replication_details(mesh, topic)):
        for cluster in ("r3", "r2", "r1"):
            received = collect(clients[cluster], topic, cluster, len(expected[cluster]))
            if cluster == "r2":
                leaked = [r.payload for r in received if kind(r.seq) != "all"]
                kinds_of = [(p, kind(int(p[-5:]))) for p in leaked[:10]]
                assert not leaked, f"r2 received {len(leaked)} messages not meant for it: {kinds_of}"
            if cluster == "r3":
                leaked = [r.payload for r in received if kind(r.seq) == "local"]
                assert not leaked, f"r3 received disable_replication messages: {leaked[:10]}"
            check_exactly_once(received, expected[cluster], f"cluster {cluster}")
            check_order(received, f"cluster {cluster}")


# ------------------------------------------------------------------------------------ batches


def test_batches_travel_as_entries_and_arrive_whole_everywhere(mesh, clients) -> None:
    """ReplicatorTest.testReplicationForBatchMessages: batches of 10 from r1 (default batching) and from r2
    (KeyBased batching) are received, every message exactly once, in all three clusters; a batch is one
    entry, so each cluster sees the same grouping of messages into entries as the origin."""
    topic = new_topic("ns", "batches")
    batching = {"batching_enabled": True, "batching_max_messages": 10, "batching_max_publish_delay_ms": 1000}
    p1 = clients["r1"].create_producer(topic, producer_name=unique("batch-r1"), **batching)
    p2 = clients["r2"].create_producer(
        topic, producer_name=unique("batch-r2"), batching_type=pulsar.BatchingType.KeyBased, **batching
    )
    sent = publish(p1, "r1-default", 100, keys=5) + publish(p2, "r2-keybased", 100, keys=5)
    expected = [s.payload for s in sent]
    origin_of = {"r1-default": "r1", "r2-keybased": "r2"}

    with explained(replication_details(mesh, topic)):
        received = {c: collect(clients[c], topic, c, len(expected)) for c in CLUSTERS}
        for cluster in CLUSTERS:
            check_exactly_once(received[cluster], expected, f"cluster {cluster}")
            check_order([r for r in received[cluster] if r.stream == "r1-default"], f"{cluster}, r1's batches")
            # KeyBased batching groups by key: only per-key order is the producer's.
            check_order(
                [r for r in received[cluster] if r.stream == "r2-keybased"], f"{cluster}, r2's batches", per_key=True
            )
        for stream, origin in origin_of.items():
            groups = entry_groups(received[origin], stream)
            assert max(len(g) for g in groups) > 1, f"{stream} was not batched in {origin}: {sorted(groups)[:5]}"
            for cluster in CLUSTERS:
                if cluster == origin:
                    continue
                there = entry_groups(received[cluster], stream)
                assert there == groups, (
                    f"{stream}: {cluster} groups messages into entries differently from {origin}: "
                    f"sizes there {sorted(len(g) for g in there)}, in {origin} {sorted(len(g) for g in groups)}; "
                    f"only there: {sorted(there - groups)[:3]}; only in {origin}: {sorted(groups - there)[:3]}"
                )


# ---------------------------------------------------------------------------- topic policy


def test_topic_level_replication_clusters_override_the_namespace(mesh, clients) -> None:
    """Topic policy `/persistent/.../replication` beats the namespace's: [r1, r3] on the topic (in r1)
    replicates to r3 only; after DELETE the namespace's [r1, r2, r3] applies again and r2 gets what is
    published from then on."""
    topic = new_topic("ns", "topicpolicy")
    path = topic_path(topic)
    r1 = mesh["r1"]
    details = replication_details(mesh, topic)
    admin(r1, "PUT", path, expect=(204,))
    # Pulsar 4.0.7 refuses a topic policy that leaves out the cluster it is set in.
    refused = admin(r1, "POST", f"{path}/replication", ["r2", "r3"], expect=(412,))
    assert refused.json() == {
        "reason": "Can not remove local cluster from the local topic-level replication clusters policy"
    }, refused.text
    admin(r1, "POST", f"{path}/replication", ["r1", "r3"], expect=(204,))
    got = admin(r1, "GET", f"{path}/replication").json()
    assert sorted(got) == ["r1", "r3"], f"topic-level replication clusters read back as {got}"
    wait_until(
        lambda: (lambda s: not replicates_to(s.get("r2")) and replicates_to(s.get("r3")))(replication_stats(r1, topic)),
        "r1's topic replicates to r3 only (stats.replication: r3 connected, no outbound r2)",
        details,
    )
    # Checked at the end, so that what replication does is reported first.
    listed_under_topic_policy = replication_stats(r1, topic)

    producer = clients["r1"].create_producer(topic, producer_name=unique("topicpolicy"))
    first = publish(producer, "tp", 30)
    with explained(details):
        in_r3 = collect(clients["r3"], topic, "r3", len(first))
        check_exactly_once(in_r3, [s.payload for s in first], "r3 while the topic policy is [r1, r3]")
        in_r2 = collect(clients["r2"], topic, "r2", 0, linger_s=1.5)
        assert not in_r2, (
            f"r2 received {len(in_r2)} messages while the topic policy excludes it: {[r.payload for r in in_r2[:10]]}"
        )

    admin(r1, "DELETE", f"{path}/replication", expect=(204,))
    wait_until(
        lambda: (
            set(replication_stats(r1, topic)) == {"r2", "r3"}
            and replication_stats(r1, topic)["r2"].get("connected") is True
        ),
        "r1's topic replicates to r2 and r3 again after the topic policy was removed",
        details,
    )
    second = publish(producer, "tp", 30, start=30)
    with explained(details):
        in_r2 = collect(clients["r2"], topic, "r2", len(second))
        check_exactly_once(in_r2, [s.payload for s in second], "r2 after the topic policy was removed")
        in_r3 = collect(clients["r3"], topic, "r3", len(first) + len(second))
        check_exactly_once(in_r3, [s.payload for s in first + second], "r3")
        check_order(in_r3, "r3")
    # Pulsar's stats.replication has one entry per replicator of the topic (PersistentTopic.getStats walks
    # `replicators`, adding the inbound figures of the matching remote producer): a cluster that only
    # replicates *into* this topic has no entry.
    assert set(listed_under_topic_policy) == {"r3"}, (
        f"under topic policy [r1, r3], r1's stats.replication lists {sorted(listed_under_topic_policy)}; "
        f"Pulsar lists only the clusters the topic replicates to: {dump(listed_under_topic_policy)}"
    )


# ---------------------------------------------------------------------- namespace policy


def test_namespace_policy_removed_then_readded_stops_then_resumes(mesh, clients) -> None:
    """geo/policy replicates r1 -> r2; set back to [r1] in r1, replication stops (the replicator and its
    cursor go away, so what is published meanwhile is never sent); set to [r1, r2] again, it resumes for
    what is published from then on."""
    topic = new_topic("policy", "readd")
    r1 = mesh["r1"]
    details = replication_details(mesh, topic)
    producer = clients["r1"].create_producer(topic, producer_name=unique("policy"))
    in_r2 = Collector(clients["r2"], topic, "r2")
    try:
        with explained(details):
            before = publish(producer, "pol", 30)
            in_r2.until(30)
            check_exactly_once(in_r2.records, [s.payload for s in before], "r2 while geo/policy is [r1, r2]")

            mesh.set_namespace_replication("r1", "policy", ["r1"])
            wait_until(
                lambda: not replicates_to(replication_stats(r1, topic).get("r2")),
                "r1 removed its replicator to r2 (no outbound r2 in stats.replication)",
                details,
            )
            during = publish(producer, "pol", 30, start=30)
            in_r2.linger(2.0)
            stray = [r.payload for r in in_r2.records if r.seq >= 30]
            assert not stray, (
                f"r2 received {len(stray)} messages published while r2 was not a replication "
                f"cluster of geo/policy: {stray[:10]}"
            )

            mesh.set_namespace_replication("r1", "policy", ["r1", "r2"])
            wait_until(
                lambda: replication_stats(r1, topic).get("r2", {}).get("connected") is True,
                "r1 replicates to r2 again (stats.replication.r2.connected)",
                details,
            )
            after = publish(producer, "pol", 30, start=60)
            in_r2.until(60)
            # The re-created replicator starts at the end of the topic, as Pulsar's new cursor does.
            check_exactly_once(
                in_r2.records,
                [s.payload for s in before + after],
                f"r2 after re-adding (the {len(during)} published meanwhile must not come)",
            )
            check_order(in_r2.records, "r2")
    finally:
        in_r2.close()
        mesh.set_namespace_replication("r1", "policy", ["r1", "r2"])


# ---------------------------------------------------------------------------- reserved names


@pytest.mark.parametrize("name", ["pulsar.repl.r2", "pulsar.repl.r3", "pulsar.dedup"])
def test_reserved_subscription_names_are_refused(mesh, clients, name: str) -> None:
    """ReplicatorTest.testFailures: a subscription named like the replicator's cursor (`pulsar.repl.<c>`),
    or the dedup cursor, cannot be subscribed to; the topic keeps working and lists no such subscription.
    Pulsar 4.0.7 answers ProducerBusy (its NamingException's code), which the Python client reports as
    InvalidConfiguration, as it did against a Pulsar 4.0.7 standalone."""
    topic = new_topic("ns", "reserved")
    producer = clients["r1"].create_producer(topic, producer_name=unique("reserved"))
    publish(producer, "res", 3)
    with pytest.raises(pulsar.InvalidConfiguration):
        consumer = clients["r1"].subscribe(topic, name, initial_position=pulsar.InitialPosition.Earliest)
        consumer.close()
        pytest.fail(f"subscribing as {name!r} was accepted")
    subscriptions = admin(mesh["r1"], "GET", f"{topic_path(topic)}/subscriptions").json()
    assert name not in subscriptions, f"{name} listed as a subscription of {topic}: {subscriptions}"
    received = collect(clients["r1"], topic, "r1", 3, linger_s=0.2)
    assert len(received) == 3, f"an ordinary subscription received {len(received)} of 3"


# -------------------------------------------------------------------------------- partitions


def partitions_of(broker: object, topic: str) -> int:
    response = admin(broker, "GET", f"{topic_path(topic)}/partitions", expect=(200, 404))
    return response.json().get("partitions", 0) if response.status_code == 200 else 0


def test_partitioned_topic_created_everywhere_and_each_partition_replicates(mesh, clients) -> None:
    """ReplicatorTest.testReplicatorWithPartitionedTopic / createPartitionedTopicTest: a partitioned topic of
    3 partitions created in r1 exists with 3 partitions in r2 and r3; keyed messages on every partition
    reach the same partition in r2 and r3 exactly once, per key in order."""
    topic = new_topic("ns", "partitioned")
    details = replication_details(mesh, topic)
    admin(mesh["r1"], "PUT", f"{topic_path(topic)}/partitions", 3, expect=(204,))
    for cluster in ("r2", "r3"):
        wait_until(
            lambda cluster=cluster: partitions_of(mesh[cluster], topic) == 3,
            f"{cluster} has {topic} as a partitioned topic of 3 partitions",
            lambda cluster=cluster: f"GET partitions on {cluster}: {partitions_of(mesh[cluster], topic)}",
        )

    producer = clients["r1"].create_producer(topic, producer_name=unique("partitioned"))
    sent = publish(producer, "part", 150, keys=10)
    spread = {s.partition for s in sent}
    assert spread == {0, 1, 2}, f"harness: the keys landed on partitions {spread} only"
    expected = [s.payload for s in sent]
    with explained(details):
        in_r1 = collect(clients["r1"], topic, "r1", len(expected))
        check_exactly_once(in_r1, expected, "r1")
        partition_in_r1 = {r.payload: r.topic_name for r in in_r1}
        for cluster in ("r2", "r3"):
            received = collect(clients[cluster], topic, cluster, len(expected))
            check_exactly_once(received, expected, f"cluster {cluster}")
            check_order(received, f"cluster {cluster}", per_key=True)
            moved = [
                (r.payload, partition_in_r1[r.payload], r.topic_name)
                for r in received
                if r.topic_name != partition_in_r1.get(r.payload, r.topic_name)
            ]
            assert not moved, f"{cluster}: messages on another partition than in r1 (payload, r1, there): {moved[:10]}"
        for index in range(3):
            partition = f"{topic}-partition-{index}"
            remotes = set(replication_stats(mesh["r1"], partition))
            assert remotes == {"r2", "r3"}, f"r1's {partition} replicates to {remotes}, expected r2 and r3"

    def partitioned_replication() -> dict:
        path = f"{topic_path(topic)}/partitioned-stats?perPartition=true"
        return admin(mesh["r1"], "GET", path, expect=(200,)).json()["replication"]

    # PartitionedTopicStats adds the partitions' ReplicatorStats per cluster; each partition's connection
    # stays its own, so the sum has none.
    summed = {"msgOutCount": len(expected), "replicationBacklog": 0, "connected": True}
    wait_until(
        lambda: all({k: partitioned_replication().get(c, {}).get(k) for k in summed} == summed for c in ("r2", "r3")),
        f"r1's partitioned-stats replication.r2 and .r3 sum to {summed}",
        lambda: dump(partitioned_replication()),
    )
    for remote, entry in partitioned_replication().items():
        connections = [k for k in entry if k.endswith(("Connection", "ConnectedSince"))]
        assert not connections, f"r1's partitioned-stats replication.{remote} has {connections}: {dump(entry)}"


def test_partition_count_updated_in_one_cluster_is_updated_in_the_others(mesh, clients) -> None:
    """ReplicatorTest.testUpdateGlobalTopicPartition: a partitioned topic of 2 partitions created in r1 and
    updated there to 4 has 4 partitions in r2 and r3 too, and a message published on a new partition in r1
    reaches that partition in r2 and r3."""
    topic = new_topic("ns", "grown")
    details = replication_details(mesh, topic)
    admin(mesh["r1"], "PUT", f"{topic_path(topic)}/partitions", 2, expect=(204,))
    for cluster in ("r2", "r3"):
        wait_until(
            lambda cluster=cluster: partitions_of(mesh[cluster], topic) == 2,
            f"{cluster} has {topic} with 2 partitions",
            lambda cluster=cluster: f"GET partitions on {cluster}: {partitions_of(mesh[cluster], topic)}",
        )
    admin(mesh["r1"], "POST", f"{topic_path(topic)}/partitions", 4, expect=(204,))
    for cluster in ("r2", "r3"):
        wait_until(
            lambda cluster=cluster: partitions_of(mesh[cluster], topic) == 4,
            f"{cluster} has {topic} updated to 4 partitions",
            lambda cluster=cluster: f"GET partitions on {cluster}: {partitions_of(mesh[cluster], topic)}",
        )

    newest = f"{topic}-partition-3"
    producer = clients["r1"].create_producer(newest, producer_name=unique("grown"))
    sent = publish(producer, "grown", 20)
    with explained(details):
        for cluster in ("r2", "r3"):
            received = collect(clients[cluster], newest, cluster, len(sent))
            check_exactly_once(received, [s.payload for s in sent], f"{newest} in {cluster}")
            check_order(received, f"{newest} in {cluster}")


# ----------------------------------------------------------------------------- stats, metrics


def test_replication_stats_and_metrics(mesh, clients) -> None:
    """OneWayReplicatorTest / testReplicatorProducerName: while r1 publishes, r1's stats.replication.r2 and
    .r3 are connected with outbound rates, the remotes show r1's producer `pulsar.repl.r1--><remote>` among
    their publishers and inbound rates and connection in stats.replication.r1; after the traffic the backlog
    drains to 0, in the stats and in r1's `pulsar_replication_backlog` metric."""
    topic = new_topic("ns", "stats")
    r1, r2, r3 = mesh["r1"], mesh["r2"], mesh["r3"]
    details = replication_details(mesh, topic)
    producer = clients["r1"].create_producer(topic, producer_name=unique("stats"))
    sent: list[str] = []
    stop = threading.Event()

    def keep_publishing() -> None:  # ~100 messages a second, so rates over a 1 s window are > 0
        for seq in range(1000):
            if stop.is_set():
                return
            record, kwargs = message("st", seq)
            producer.send(record.payload.encode(), **kwargs)
            sent.append(record.payload)
            time.sleep(0.01)

    publisher = threading.Thread(target=keep_publishing, daemon=True)
    publisher.start()
    try:
        for remote, broker in (("r2", r2), ("r3", r3)):
            wait_until(
                lambda remote=remote: (
                    lambda s: (
                        s.get("connected") is True and s.get("msgRateOut", 0) > 0 and s.get("msgThroughputOut", 0) > 0
                    )
                )(replication_stats(r1, topic).get(remote, {})),
                f"r1's stats.replication.{remote} is connected with msgRateOut > 0 and msgThroughputOut > 0",
                details,
            )
            wait_until(
                lambda broker=broker: (
                    lambda s: (
                        s.get("msgRateIn", 0) > 0
                        and s.get("msgThroughputIn", 0) > 0
                        and bool(s.get("inboundConnection"))
                    )
                )(replication_stats(broker, topic).get("r1", {})),
                f"{remote}'s stats.replication.r1 has msgRateIn > 0, msgThroughputIn > 0 and an inboundConnection",
                details,
            )
            name = f"pulsar.repl.r1-->{remote}"
            wait_until(
                lambda name=name, broker=broker: name in publisher_names(broker, topic),
                f"{remote}'s publishers include the replicator producer {name}",
                details,
            )
    finally:
        stop.set()
        publisher.join(timeout=30)

    def drained() -> bool:
        stats = replication_stats(r1, topic)
        return all(
            stats.get(c, {}).get("replicationBacklog") == 0
            and stats.get(c, {}).get("connected") is True
            and "inboundConnection" in stats.get(c, {})  # r2's and r3's replicators to r1 are up too
            for c in ("r2", "r3")
        )

    wait_until(drained, "r1's replicationBacklog to r2 and r3 is 0, and their replicators are connected to r1", details)
    with explained(details):
        stats = topic_stats(r1, topic)
        assert set(stats["replication"]) == {"r2", "r3"}, f"r1 replicates to {sorted(stats['replication'])}"
        payload_bytes = sum(len(payload.encode()) for payload in sent)
        for remote, entry in stats["replication"].items():
            assert list(entry) == REPLICATOR_STATS_FIELDS, f"r1 stats.replication.{remote}: {dump(entry)}"
            assert isinstance(entry["connected"], bool) and isinstance(entry["replicationBacklog"], int)
            assert entry["replicationDelayInSeconds"] >= 0, dump(entry)
            assert NETTY_CHANNEL.fullmatch(entry["outboundConnection"]), dump(entry)
            assert ISO_UTC.fullmatch(entry["outboundConnectedSince"]), dump(entry)
            # Unbatched: one entry per message; bytes are the payloads', without metadata, as Pulsar counts.
            assert (entry["msgOutCount"], entry["bytesOutCount"]) == (len(sent), payload_bytes), dump(entry)
            assert not any(s.startswith("pulsar.repl") for s in stats["subscriptions"]), (
                f"the replicator's cursor shows as a subscription: {sorted(stats['subscriptions'])}"
            )
        for remote, broker in (("r2", r2), ("r3", r3)):
            inbound = replication_stats(broker, topic).get("r1", {})
            assert list(inbound) == REPLICATOR_STATS_FIELDS, f"{remote} stats.replication.r1: {dump(inbound)}"
            assert inbound["msgInCount"] == len(sent), dump(inbound)
            assert inbound["bytesInCount"] > payload_bytes, dump(inbound)  # as published: metadata included
            assert ISO_UTC.fullmatch(inbound["inboundConnectedSince"]), dump(inbound)

        # The caught-up replicator's cursor waits for the next entry, as Pulsar's internalStats shows it.
        internal = f"{topic_path(topic)}/internalStats"
        wait_until(
            lambda: all(
                admin(r1, "GET", internal, expect=(200,)).json()["cursors"][f"pulsar.repl.{c}"]["waitingReadOp"]
                for c in ("r2", "r3")
            ),
            "r1's internalStats shows the cursors pulsar.repl.r2 and pulsar.repl.r3 waiting for entries",
            lambda: dump(admin(r1, "GET", internal, expect=(200,)).json()["cursors"]),
        )

        samples = [
            (labels, value)
            for labels, value in metric_samples(r1, "pulsar_replication_backlog")
            if labels.get("topic") == topic
        ]
        by_remote = {labels.get("remote_cluster"): value for labels, value in samples}
        assert by_remote == {"r2": 0.0, "r3": 0.0}, (
            f"r1's pulsar_replication_backlog for {topic} by remote_cluster: {by_remote} "
            f"(all samples: {metric_samples(r1, 'pulsar_replication_backlog')[:10]})"
        )
        for cluster in ("r2", "r3"):
            received = collect(clients[cluster], topic, cluster, len(sent))
            check_exactly_once(received, sent, f"cluster {cluster}")
