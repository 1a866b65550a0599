"""The load manager at work in brokers sharing one in-memory store, on the simulator's virtual loop (its
minutes pass at once) with the CPU time and the topics' counters the test sets: the load report written
as Pulsar decides, the leader shedding an overloaded broker's busiest bundle to a broker that gets it at
its next lookup, and splitting a hot bundle, whose boundaries every broker then sees."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.cluster.load_manager import MIB
from magnetar.broker.cluster.ownership import BundleNotOwnedError
from magnetar.broker.figures import TopicCounters
from magnetar.broker.topic_name import TopicName
from magnetar.metadata.memory import MemoryMetadataServer

from .cluster_helpers import EPOCH_MS, Member, run_virtual, start

# Topics of three different bundles of public/default (test_bundles.py has their hashes).
FIRST, SECOND, THIRD = (TopicName.parse(t) for t in ("my-topic", "t-3", "t-1"))
# Topics of the first bundle, 0x00000000_0x40000000: t-2 and t-6 hash below 0x20000000, my-topic and
# t-21 above it.
LOW, LOW_TOO, HIGH, HIGH_TOO = (TopicName.parse(t) for t in ("t-2", "t-6", "my-topic", "t-21"))
REPORT_S = 5  # loadBalancerReportUpdateMinIntervalMillis
PATH = "/loadbalance/brokers/127.0.0.1:{port}"


def report(server: MemoryMetadataServer, port: int = 8080) -> dict:
    return json.loads(server.value(PATH.format(port=port)) or b"")


async def settle(*members: Member) -> None:
    for _ in range(3):
        for each in members:
            await each.settle()


def test_a_broker_reports_each_bundles_rates_and_its_cpu() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, _b = await start(server, 2)
        await a.service.lookup(FIRST, False)
        a.topics.loaded.add(FIRST)
        # In the first 5 s: 500 messages (50 kB) in, 1,000 (100 kB) out, and 1 s of CPU time.
        a.topics.counters[FIRST] = TopicCounters(500, 50_000, 1000, 100_000, producers=1, consumers=2)
        a.cpu.use(0.2)
        await asyncio.sleep(REPORT_S + 0.5)
        await settle(a)
        data = report(server)
        assert data["cpu"] == {"usage": 20.0, "limit": 100.0}
        assert (data["msgRateIn"], data["msgRateOut"]) == (100.0, 200.0)
        assert (data["msgThroughputIn"], data["msgThroughputOut"]) == (10_000.0, 20_000.0)
        assert (data["numTopics"], data["numProducers"], data["numConsumers"]) == (1, 1, 2)
        assert data["lastStats"] == {
            "public/default/0x00000000_0x40000000": {
                "msgRateIn": 100.0,
                "msgThroughputIn": 10_000.0,
                "msgRateOut": 200.0,
                "msgThroughputOut": 20_000.0,
                "consumerCount": 2,
                "producerCount": 1,
                "topics": 1,
                "cacheSize": 0,
            }
        }
        assert data["lastUpdate"] == EPOCH_MS + REPORT_S * 1000

    run_virtual(scenario)


def test_a_report_is_written_on_a_change_over_the_threshold_or_after_the_max_interval() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, _b = await start(server, 2)
        # 5% of a core: 5 points from the 0% written, not more than loadBalancerReportUpdateThresholdPercentage.
        a.cpu.use(0.05)
        await asyncio.sleep(15 * 60)
        assert (report(server)["lastUpdate"], report(server)["cpu"]["usage"]) == (EPOCH_MS, 0.0)
        # Past loadBalancerReportUpdateMaxIntervalMinutes (15) since the last write: written at the next
        # measure, whatever changed.
        await asyncio.sleep(REPORT_S)
        await settle(a)
        assert report(server)["lastUpdate"] == EPOCH_MS + (15 * 60 + REPORT_S) * 1000
        assert report(server)["cpu"]["usage"] == 5.0
        # 30%: 25 points from the report written: at the next measure.
        a.cpu.use(0.3)
        await asyncio.sleep(REPORT_S)
        await settle(a)
        assert report(server)["cpu"]["usage"] == 30.0

    run_virtual(scenario)


def test_without_the_load_balancer_no_report_is_written_but_on_ownership_changes() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, _b = await start(server, 2, loadBalancerEnabled="false")
        a.cpu.use(0.9)
        await asyncio.sleep(20 * 60)
        assert report(server)["lastUpdate"] == EPOCH_MS
        await a.service.lookup(FIRST, False)
        await settle(a)
        assert report(server)["bundles"] == ["public/default/0x00000000_0x40000000"]

    run_virtual(scenario)


async def _overloaded(each: dict[int, dict[str, str]] | None = None) -> tuple[MemoryMetadataServer, list[Member]]:
    """Three brokers; b (not the leader) owns three bundles and uses 90% of its core, moving 1, 8 and 2
    MB/s through them; a and c are idle. Their reports are written 5 s in."""
    server = MemoryMetadataServer()
    members = await start(server, 3, each, loadBalancerBundleUnloadMinThroughputThreshold="1")
    _a, b, _c = members
    for topic, mb_per_s in ((FIRST, 1), (SECOND, 8), (THIRD, 2)):
        await b.service.lookup(topic, True)
        b.topics.loaded.add(topic)
        b.topics.flow(topic, TopicCounters(100, mb_per_s * MIB, 0, 0, 1, 0))
    b.cpu.use(0.9)
    await asyncio.sleep(REPORT_S + 0.5)
    await settle(*members)
    return server, members


def test_the_leader_sheds_the_busiest_bundle_of_an_overloaded_broker_and_places_it_elsewhere() -> None:
    async def scenario() -> None:
        server, (a, b, c) = await _overloaded()
        assert report(server, 8081)["cpu"]["usage"] == 90.0
        second = await a.service.bundles.bundle_of(SECOND)
        # The first shedding, a minute in (loadBalancerSheddingIntervalMinutes): b is at 90% against an
        # average of 30%; 55% of its 11 MB/s to offload: SECOND's bundle (8 MB/s) alone is enough.
        await asyncio.sleep(60)
        await settle(a, b, c)
        assert b.topics.unloaded == [SECOND]
        assert b.service.ownership.owned == sorted(
            [await b.service.bundles.bundle_of(FIRST), await b.service.bundles.bundle_of(THIRD)]
        )
        assert str(second) in a.service.load_manager.load.recently_unloaded
        # Its clients look it up again: at c, sent to the leader; the leader sends it where it chose when
        # shedding (a, which owns no bundle of the namespace), not back to b.
        to_leader = await c.service.lookup(SECOND, False)
        assert (to_leader.http_url, to_leader.authoritative) == ("http://127.0.0.1:8080", False)
        placed = await a.service.lookup(SECOND, False)
        assert (placed.broker_url, placed.redirect) == ("pulsar://127.0.0.1:6650", False)
        assert a.service.ownership.owns(second)

    run_virtual(scenario)


def test_only_the_leader_sheds() -> None:
    async def scenario() -> None:
        # The leader has shedding off; b and c, which do not lead, have it on: nothing is shed.
        _server, (a, b, c) = await _overloaded({0: {"loadBalancerSheddingEnabled": "false"}})
        await asyncio.sleep(3 * 60)
        await settle(a, b, c)
        assert b.topics.unloaded == []
        assert len(b.service.ownership.owned) == 3

    run_virtual(scenario)


async def _hot_bundle(**settings: str) -> tuple[MemoryMetadataServer, Member, Member, Bundle]:
    """Two brokers; b owns the first bundle, with four topics (more than loadBalancerNamespaceBundleMaxTopics
    of 3) and some traffic, so that its report is written 5 s in."""
    server = MemoryMetadataServer()
    a, b = await start(server, 2, loadBalancerNamespaceBundleMaxTopics="3", **settings)
    for topic in (LOW, LOW_TOO, HIGH, HIGH_TOO):
        await b.service.lookup(topic, True)
        b.topics.loaded.add(topic)
        b.topics.flow(topic, TopicCounters(20, 2_000, 0, 0, 1, 0))
    bundle = await b.service.bundles.bundle_of(LOW)
    await asyncio.sleep(REPORT_S + 0.5)
    await settle(a, b)
    return server, a, b, bundle


def test_the_leader_splits_a_hot_bundle_at_its_owner_and_every_broker_sees_the_halves() -> None:
    async def scenario() -> None:
        server, a, b, parent = await _hot_bundle(loadBalancerAutoUnloadSplitBundlesEnabled="false")
        low, high = Bundle(parent.namespace, 0, 0x20000000), Bundle(parent.namespace, 0x20000000, 0x40000000)
        # The boundaries written by compare-and-set, at b, which the leader asked.
        policies = json.loads(server.value("/admin/local-policies/public/default") or b"")
        assert policies["bundles"] == {
            "boundaries": ["0x00000000", "0x20000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
            "numBundles": 5,
        }
        # b owns both halves and no longer the parent, whose node is gone; its topics stay loaded.
        assert b.service.ownership.owned[:2] == [low, high]
        assert server.value(f"/namespace/public/default/{parent.range}") is None
        assert b.topics.unloaded == []
        # The leader learnt the new boundaries from the store's notification.
        assert a.service.bundles.known_bundle_of(HIGH) == high
        # A topic of the old bundle is looked up in its half, at its owner, and still served there.
        found = await a.service.lookup(HIGH, False)
        assert (found.broker_url, found.redirect) == ("pulsar://127.0.0.1:6651", False)
        await b.service.check_serving(HIGH)
        await b.service.check_serving(LOW)
        assert (await b.service.ownership_check(HIGH)).path == f"/namespace/public/default/{high.range}"
        assert report(server, 8081)["bundles"][:2] == [str(low), str(high)]

    run_virtual(scenario)


def test_the_halves_of_a_split_bundle_are_unloaded_to_be_placed_again() -> None:
    async def scenario() -> None:
        server, a, b, parent = await _hot_bundle()
        await settle(a, b)
        assert (
            len(json.loads(server.value("/admin/local-policies/public/default") or b"")["bundles"]["boundaries"]) == 6
        )
        assert sorted(b.topics.unloaded, key=str) == sorted([LOW, LOW_TOO, HIGH, HIGH_TOO], key=str)
        assert b.service.ownership.owned == []
        # Looked up again, the halves are placed afresh: a owns no bundle of the namespace.
        placed = await a.service.lookup(LOW, False)
        assert placed.broker_url == "pulsar://127.0.0.1:6650"
        assert a.service.ownership.owns(Bundle(parent.namespace, 0, 0x20000000))

    run_virtual(scenario)


def test_no_bundle_of_a_namespace_with_the_maximum_of_bundles_is_split() -> None:
    async def scenario() -> None:
        server, a, b, parent = await _hot_bundle(loadBalancerNamespaceMaximumBundles="4")
        await asyncio.sleep(60)
        await settle(a, b)
        assert (
            len(json.loads(server.value("/admin/local-policies/public/default") or b"")["bundles"]["boundaries"]) == 5
        )
        assert b.service.ownership.owned == [parent]

    run_virtual(scenario)


def test_a_broker_that_missed_a_split_takes_no_bundle_overlapping_the_halves() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, b = await start(server, 2)
        await b.service.lookup(HIGH, True)
        parent = await a.service.bundles.bundle_of(HIGH)
        stale = await a.service.bundles.bundles(parent.namespace)
        with pytest.raises(BundleNotOwnedError):
            await a.service.split_bundle(parent, unload=False)
        await b.service.split_bundle(parent, unload=True)
        await settle(a, b)
        # As if the store's notice of the new boundaries had not reached the leader yet.
        a.service.bundles._known[parent.namespace] = stale
        with pytest.raises(BundleNotOwnedError, match="was split"):
            await a.service.lookup(HIGH, False)
        # Read again: HIGH is in the upper half, which nobody owns since it was unloaded; a takes it.
        found = await a.service.lookup(HIGH, False)
        assert found.broker_url == "pulsar://127.0.0.1:6650"
        assert a.service.ownership.owned == [Bundle(parent.namespace, 0x20000000, 0x40000000)]
        assert server.value(f"/namespace/public/default/{parent.range}") is None

    run_virtual(scenario)
