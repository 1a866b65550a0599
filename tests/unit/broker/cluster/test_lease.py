"""The session's lease (broker/cluster/lease.py): a broker whose event loop was frozen past its session
timeout (as by `kill -STOP`) stops serving the moment it runs again, before any event could tell it the
session is gone; a store whose session never expires needs no lease."""

from __future__ import annotations

import asyncio
import time

from magnetar.broker.cluster.lease import LEASE_SHARE
from magnetar.broker.topic_name import TopicName
from magnetar.metadata.memory import MemoryMetadataServer

from .cluster_helpers import member

TOPIC = TopicName.parse("my-topic")
TIMEOUT_MS = 300


def test_a_broker_frozen_past_its_session_timeout_gives_its_bundles_up_when_it_runs_again() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a = member(server, 0, session_timeout_ms=TIMEOUT_MS)
        await a.service.start()
        await a.service.lookup(TOPIC, authoritative=False)
        a.topics.loaded.add(TOPIC)
        await a.service.check_serving(TOPIC)
        assert a.service.serving()
        # The whole process stops: no timer, no renewal, no event runs meanwhile.
        time.sleep(TIMEOUT_MS * LEASE_SHARE / 1000 + 0.05)
        assert not a.service.serving()
        assert a.service.ownership.owned == []
        await a.settle()
        assert a.topics.unloaded == [TOPIC]
        # The session lived on here (nobody expired it): once renewed, the next lookup takes the bundle
        # back from its node, which is still this session's.
        assert await a.service.lease.renew()
        result = await a.service.lookup(TOPIC, authoritative=False)
        assert result.broker_url == "pulsar://127.0.0.1:6650"
        await a.service.check_serving(TOPIC)

    asyncio.run(scenario())


def test_the_lease_is_renewed_while_the_loop_runs() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a = member(server, 0, session_timeout_ms=TIMEOUT_MS)
        await a.service.start()
        await a.service.lookup(TOPIC, authoritative=False)
        # Three session timeouts of a running loop: the renewals keep it.
        for _ in range(9):
            await asyncio.sleep(TIMEOUT_MS / 1000 / 3)
            assert a.service.serving()
        assert a.service.ownership.owned != []
        await a.service.stop()

    asyncio.run(scenario())


def test_a_session_that_never_expires_needs_no_lease() -> None:
    async def scenario() -> None:
        a = member(MemoryMetadataServer(), 0)
        await a.service.start()
        await a.service.lookup(TOPIC, authoritative=False)
        time.sleep(0.05)
        assert a.service.serving()
        assert a.service.ownership.owned != []

    asyncio.run(scenario())


def test_nothing_is_served_while_the_topics_given_up_are_closing_even_once_the_lease_is_renewed() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a = member(server, 0, session_timeout_ms=TIMEOUT_MS)
        closing = asyncio.Event()
        closed = a.topics.unload_topic

        async def slow_unload(name: TopicName) -> None:
            await closing.wait()
            await closed(name)

        a.topics.unload_topic = slow_unload  # type: ignore[method-assign]
        await a.service.start()
        await a.service.lookup(TOPIC, authoritative=False)
        a.topics.loaded.add(TOPIC)
        time.sleep(TIMEOUT_MS * LEASE_SHARE / 1000 + 0.05)
        assert not a.service.serving()
        # A renewal answered (on a new session, in the chaos suite) before the lost topics are closed.
        assert await a.service.lease.renew()
        assert a.service.lease.valid()
        assert not a.service.serving()
        closing.set()
        await a.settle()
        assert a.topics.unloaded == [TOPIC]
        assert a.service.serving()

    asyncio.run(scenario())
