"""The broker registry (broker/cluster/brokers.py): a broker started again before its killed run's
session expired waits for that registration to go instead of exiting on NodeExists; a registration that
never goes is a live broker with the same id, said in one line."""

from __future__ import annotations

import asyncio
import logging

import pytest

from magnetar.broker.cluster import brokers
from magnetar.broker.cluster.brokers import BROKERS_ROOT, BrokerIdInUseError, BrokerRegistry, LocalBrokerData
from magnetar.metadata.memory import MemoryMetadataServer

BROKER_ID = "127.0.0.1:8080"


def registry(store) -> BrokerRegistry:
    return BrokerRegistry(
        store, BROKER_ID, LocalBrokerData("http://127.0.0.1:8080", None, "pulsar://127.0.0.1:6650", None)
    )


def test_a_restarted_broker_waits_for_its_killed_runs_registration_to_expire(caplog) -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        killed = server.connect()
        await registry(killed).register()
        restarted = registry(server.connect())
        waiting = asyncio.ensure_future(restarted.register())
        await asyncio.sleep(0.6)
        assert not waiting.done()
        killed.expire_session()
        await asyncio.wait_for(waiting, 2)
        found = await restarted._store.exists(f"{BROKERS_ROOT}/{BROKER_ID}")
        assert found is not None and found.created_by_self

    with caplog.at_level(logging.INFO, logger="magnetar.broker.cluster"):
        asyncio.run(scenario())
    assert "registered by another metadata session" in caplog.text
    assert "expired after" in caplog.text


def test_a_registration_that_outlives_the_session_timeout_is_another_live_brokers(monkeypatch) -> None:
    monkeypatch.setattr(brokers, "PREDECESSOR_MARGIN_S", 0.5)

    async def scenario() -> None:
        server = MemoryMetadataServer()
        await registry(server.connect()).register()
        with pytest.raises(BrokerIdInUseError, match=r"another live broker advertises 127\.0\.0\.1:8080"):
            await asyncio.wait_for(registry(server.connect()).register(), 5)

    asyncio.run(scenario())


def test_registering_again_in_the_same_session_writes_over_its_own_node() -> None:
    async def scenario() -> None:
        store = MemoryMetadataServer().connect()
        first = registry(store)
        await first.register()
        await asyncio.wait_for(registry(store).register(), 1)

    asyncio.run(scenario())
