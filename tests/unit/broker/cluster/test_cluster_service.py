"""The cluster service's decisions, three brokers sharing one in-memory store: the leader and its
re-election, each case of a lookup (Pulsar's findBrokerServiceUrl and searchForCandidateBroker, with the
flags of TopicLookupBase), serving only owned bundles, unloading, and the session's loss."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.broker.cluster.brokers import LocalBrokerData
from magnetar.broker.cluster.ownership import BundleNotOwnedError
from magnetar.broker.config import UnknownListener
from magnetar.broker.topic_name import TopicName
from magnetar.metadata.memory import MemoryMetadataServer

from .cluster_helpers import Member, start

# Topics of four different bundles of public/default (test_bundles.py has their hashes).
FIRST, SECOND, THIRD, FOURTH = (TopicName.parse(t) for t in ("my-topic", "t-3", "t-1", "t-0"))


def test_the_first_broker_leads_and_the_next_one_leads_when_it_resigns_or_expires() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, b, c = await start(server, 3)
        assert [m.service.leader.is_leader for m in (a, b, c)] == [True, False, False]
        assert json.loads(server.value("/loadbalance/leader") or b"") == {
            "brokerId": "127.0.0.1:8080",
            "serviceUrl": "http://127.0.0.1:8080",
        }
        assert b.service.leader.leader == {"brokerId": "127.0.0.1:8080", "serviceUrl": "http://127.0.0.1:8080"}
        await a.service.leader.stop()
        await b.settle()
        await c.settle()
        leaders = [m for m in (b, c) if m.service.leader.is_leader]
        assert len(leaders) == 1
        new_leader = leaders[0]
        other = c if new_leader is b else b
        assert other.service.leader.leader == new_leader.service.leader.leader
        # The new leader's session expires: its node goes and an election runs again; whoever wins
        # (the other broker, or the expired one under its new session), all agree on one leader.
        new_leader.service.store.expire_session()  # type: ignore[attr-defined]
        for each in (new_leader, other, new_leader, other):
            await each.settle()
        _assert_one_leader(new_leader, other)

    asyncio.run(scenario())


def _assert_one_leader(*members: Member) -> None:
    leaders = [m for m in members if m.service.leader.is_leader]
    assert len(leaders) == 1
    elected = leaders[0].service.leader.leader
    assert all(m.service.leader.leader == elected for m in members)


def test_brokers_register_their_local_broker_data() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, _b, _c = await start(server, 3)
        assert server.children("/loadbalance/brokers") == ["127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8082"]
        data = json.loads(server.value("/loadbalance/brokers/127.0.0.1:8081") or b"")
        assert data["webServiceUrl"] == "http://127.0.0.1:8081"
        assert data["pulsarServiceUrl"] == "pulsar://127.0.0.1:6651"
        assert data["numBundles"] == 0
        await a.service.lookup(FIRST, False)
        await a.settle()
        data = json.loads(server.value("/loadbalance/brokers/127.0.0.1:8080") or b"")
        assert (data["numBundles"], data["bundles"]) == (1, ["public/default/0x00000000_0x40000000"])

    asyncio.run(scenario())


def test_lookups_connect_to_the_owner_redirect_to_the_chosen_broker_or_to_the_leader() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        leader, b, c = await start(server, 3)
        # Nobody owns it, the leader is the least loaded (a tie broken by broker id): it takes it.
        first = await leader.service.lookup(FIRST, False)
        await leader.settle()
        assert (first.broker_url, first.redirect, first.authoritative) == ("pulsar://127.0.0.1:6650", False, True)
        # Owned by the leader: any broker answers Connect to it, authoritative, as Pulsar does.
        seen_from_c = await c.service.lookup(FIRST, False)
        assert (seen_from_c.broker_url, seen_from_c.redirect, seen_from_c.authoritative) == (
            "pulsar://127.0.0.1:6650",
            False,
            True,
        )
        # Not owned, asked of a broker that does not lead: Redirect to the leader, not authoritative.
        to_leader = await c.service.lookup(SECOND, False)
        assert (to_leader.broker_url, to_leader.http_url, to_leader.redirect, to_leader.authoritative) == (
            "pulsar://127.0.0.1:6650",
            "http://127.0.0.1:8080",
            True,
            False,
        )
        # The leader now owns one bundle: the least loaded is b; Redirect there, authoritative.
        assigned = await leader.service.lookup(SECOND, False)
        assert (assigned.broker_url, assigned.redirect, assigned.authoritative) == (
            "pulsar://127.0.0.1:6651",
            True,
            True,
        )
        # b, asked authoritatively, takes the bundle itself.
        taken = await b.service.lookup(SECOND, True)
        assert (taken.broker_url, taken.redirect) == ("pulsar://127.0.0.1:6651", False)
        assert b.service.ownership.owned == [await b.service.bundles.bundle_of(SECOND)]

    asyncio.run(scenario())


def test_without_a_live_leader_a_broker_decides_itself() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        leader, b = await start(server, 2)
        # The leader's registration is gone (it is leaving) but its leader node is still there.
        await leader.service.registry.unregister()
        answer = await b.service.lookup(FIRST, False)
        assert (answer.broker_url, answer.redirect) == ("pulsar://127.0.0.1:6651", False)
        assert b.service.ownership.owns(await b.service.bundles.bundle_of(FIRST))

    asyncio.run(scenario())


def test_a_named_listener_gets_the_owners_urls_of_that_listener() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        listeners = {
            0: "internal:pulsar://127.0.0.1:6650,external:pulsar://ext-a:16650",
            1: "internal:pulsar://127.0.0.1:6651,external:pulsar://ext-b:16651",
        }
        from .cluster_helpers import member

        a = member(server, 0, advertisedListeners=listeners[0], internalListenerName="internal")
        b = member(server, 1, advertisedListeners=listeners[1], internalListenerName="internal")
        await a.service.start()
        await b.service.start()
        assert (await a.service.lookup(FIRST, False, "external")).broker_url == "pulsar://ext-a:16650"
        assert (await b.service.lookup(FIRST, False, "external")).broker_url == "pulsar://ext-a:16650"
        # Unowned, from b to the leader a: a's external URL.
        assert (await b.service.lookup(SECOND, False, "external")).broker_url == "pulsar://ext-a:16650"
        assert (await b.service.lookup(FIRST, False)).broker_url == "pulsar://127.0.0.1:6650"
        with pytest.raises(UnknownListener, match="the broker do not have nope listener"):
            await b.service.lookup(FIRST, False, "nope")

    asyncio.run(scenario())


def test_a_broker_serves_only_the_topics_of_its_bundles() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, b = await start(server, 2)
        await a.service.lookup(FIRST, False)
        await a.service.check_serving(FIRST)
        with pytest.raises(BundleNotOwnedError, match="not served by this instance") as refused:
            await b.service.check_serving(FIRST)
        assert refused.value.server_error == "ServiceNotReady"
        check = await a.service.ownership_check(FIRST)
        assert check.path == "/namespace/public/default/0x00000000_0x40000000"
        with pytest.raises(BundleNotOwnedError):
            await b.service.ownership_check(FIRST)

    asyncio.run(scenario())


def test_unloading_a_bundle_closes_its_topics_and_the_next_lookup_finds_a_new_owner() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, _b = await start(server, 2)
        await a.service.lookup(FIRST, False)
        await a.service.lookup(SECOND, True)
        await a.settle()
        a.topics.loaded.update({FIRST, SECOND})
        bundle = await a.service.bundles.bundle_of(FIRST)
        await a.service.unload_bundle(bundle)
        await a.settle()
        assert a.topics.unloaded == [FIRST]
        assert a.topics.loaded == {SECOND}
        assert server.value(f"/namespace/public/default/{bundle.range}") is None
        # a still owns one bundle, b none: the leader a sends FIRST's bundle to b.
        answer = await a.service.lookup(FIRST, False)
        assert (answer.broker_url, answer.redirect, answer.authoritative) == ("pulsar://127.0.0.1:6651", True, True)
        with pytest.raises(BundleNotOwnedError):
            await a.service.unload_bundle(bundle)

    asyncio.run(scenario())


def test_a_lost_session_stops_serving_at_once_and_the_broker_registers_again() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, b = await start(server, 2)
        await a.service.lookup(FIRST, False)
        a.topics.loaded.add(FIRST)
        a.service.store.expire_session()  # type: ignore[attr-defined]
        await a.settle()
        await b.settle()
        assert a.topics.unloaded == [FIRST]
        assert a.service.ownership.owned == []
        with pytest.raises(BundleNotOwnedError):
            await a.service.check_serving(FIRST)
        # Registered again under its new session; b, the leader now, assigns the bundle anew.
        assert server.children("/loadbalance/brokers") == ["127.0.0.1:8080", "127.0.0.1:8081"]
        _assert_one_leader(a, b)
        # Nobody owns the bundle now: the next lookup assigns it again.
        assert await b.service.ownership.owner(await b.service.bundles.bundle_of(FIRST)) is None
        # a's new registration owns nothing either, or the load manager would take it for loaded with
        # bundles it lost (the chaos suite's kill -STOP: the continued broker never got a bundle again).
        registered = LocalBrokerData.from_json(server.value("/loadbalance/brokers/127.0.0.1:8080") or b"")
        assert (registered.bundles, registered.num_bundles) == ([], 0)

    asyncio.run(scenario())


def test_a_broker_leaves_without_its_metadata_store_and_still_closes_its_topics(caplog) -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        (a,) = await start(server, 1)
        await a.service.lookup(FIRST, authoritative=False)
        a.topics.loaded.add(FIRST)
        a.service.store.lose_connection()  # type: ignore[attr-defined]
        await a.service.stop()
        assert a.topics.unloaded == [FIRST]
        assert any("Leaving the cluster without its metadata store" in r.getMessage() for r in caplog.records)

    asyncio.run(scenario())
