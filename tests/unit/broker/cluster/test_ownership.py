"""Bundle ownership as Pulsar's OwnershipCache: one winner when two brokers acquire a bundle, the owner
learnt from the node, the Check of a write, release, and the session's loss."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.cluster.ownership import BundleNotOwnedError, OwnerData, OwnershipCache, ownership_path
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.metadata.store import Check, NotFoundError, Put

BUNDLE = Bundle("public/default", 0x40000000, 0x80000000)


def _owner(port: int) -> OwnerData:
    return OwnerData(
        f"pulsar://h:{port}", None, f"http://h:{port + 1000}", None, False, {"ext": (f"pulsar://e:{port}", None)}
    )


def test_two_brokers_acquiring_one_bundle_one_wins_and_both_know_it() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        a, b = OwnershipCache(server.connect(), _owner(6650)), OwnershipCache(server.connect(), _owner(6651))
        won_a, won_b = await asyncio.gather(a.try_acquire(BUNDLE), b.try_acquire(BUNDLE))
        assert won_a == won_b == _owner(6650)
        assert a.owns(BUNDLE) and not b.owns(BUNDLE)
        assert await b.owner(BUNDLE) == _owner(6650)
        stored = json.loads(server.value(ownership_path(BUNDLE)) or b"")
        assert stored == {
            "nativeUrl": "pulsar://h:6650",
            "nativeUrlTls": None,
            "httpUrl": "http://h:7650",
            "httpUrlTls": None,
            "disabled": False,
            "advertisedListeners": {"ext": {"brokerServiceUrl": "pulsar://e:6650", "brokerServiceUrlTls": None}},
        }
        assert ownership_path(BUNDLE) == "/namespace/public/default/0x40000000_0x80000000"

    asyncio.run(scenario())


def test_the_check_of_ownership_fails_a_write_once_the_bundle_moved() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        store_a = server.connect()
        a, b = OwnershipCache(store_a, _owner(6650)), OwnershipCache(server.connect(), _owner(6651))
        await a.try_acquire(BUNDLE)
        check = a.check(BUNDLE)
        assert check == Check(ownership_path(BUNDLE), 0)
        await store_a.multi([check, Put("/managed-ledgers/x", b"1")])
        with pytest.raises(BundleNotOwnedError):
            b.check(BUNDLE)
        await a.release(BUNDLE)
        with pytest.raises(BundleNotOwnedError):
            a.check(BUNDLE)
        # A write still carrying the check of the released bundle is refused, and writes nothing.
        with pytest.raises(NotFoundError):
            await store_a.multi([check, Put("/managed-ledgers/x", b"2")])
        assert server.value("/managed-ledgers/x") == b"1"
        assert await b.owner(BUNDLE) is None
        await b.try_acquire(BUNDLE)
        assert await a.owner(BUNDLE) == _owner(6651)

    asyncio.run(scenario())


def test_an_expired_session_loses_every_bundle_to_the_next_broker() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        store_a = server.connect()
        a, b = OwnershipCache(store_a, _owner(6650)), OwnershipCache(server.connect(), _owner(6651))
        await a.try_acquire(BUNDLE)
        store_a.expire_session()
        assert a.forget_all() == [BUNDLE]
        assert not a.owns(BUNDLE)
        assert await b.try_acquire(BUNDLE) == _owner(6651)

    asyncio.run(scenario())
