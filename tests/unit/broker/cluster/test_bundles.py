"""Bundles: boundaries as Pulsar cuts a namespace, a topic's bundle by Pulsar's hash (golden vectors
computed with Guava's Hashing.crc32().hashString(name, UTF_8).padToLong(), the function Pulsar's
NamespaceService builds its NamespaceBundleFactory with), and the boundaries kept in local policies."""

from __future__ import annotations

import asyncio
import json

import pytest

from magnetar.broker.cluster.bundles import (
    Bundle,
    BundleDirectory,
    NamespaceBundles,
    default_boundaries,
    namespace_of_local_policies,
    topic_hash,
)
from magnetar.broker.topic_name import TopicName
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.metadata.store import BadVersionError

# (name, Guava's crc32 of it), printed by Guava 32.1.2 itself.
GOLDEN = [
    ("persistent://public/default/my-topic", 0x2BAD45F7),
    ("persistent://public/default/t-0", 0xFC630F1B),
    ("persistent://public/default/t-1", 0x8B643F8D),
    ("persistent://public/default/t-2", 0x126D6E37),
    ("persistent://public/default/t-3", 0x656A5EA1),
    ("persistent://tenant/ns/données", 0x8F7A9899),
    ("non-persistent://public/default/x", 0xC0A1D362),
    ("persistent://public/default/orders-partition-3", 0xC3FF996F),
]


@pytest.mark.parametrize(("name", "expected"), GOLDEN)
def test_a_topic_hashes_as_pulsars_bundle_factory(name: str, expected: int) -> None:
    assert topic_hash(name) == expected


def test_four_bundles_are_pulsars_default_boundaries() -> None:
    assert default_boundaries(4) == [0, 0x40000000, 0x80000000, 0xC0000000, 0xFFFFFFFF]
    ranges = [b.range for b in NamespaceBundles("public/default", tuple(default_boundaries(4))).bundles]
    assert ranges == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]
    assert default_boundaries(1) == [0, 0xFFFFFFFF]
    with pytest.raises(ValueError):
        default_boundaries(0)


def test_a_topic_falls_in_the_range_of_its_hash() -> None:
    bundles = NamespaceBundles("public/default", tuple(default_boundaries(4)))
    # 0x2bad45f7 < 0x40000000; 0xfc630f1b in the last; 0x8b643f8d in the third; 0x656a5ea1 in the second.
    assert bundles.find(TopicName.parse("my-topic")).range == "0x00000000_0x40000000"
    assert bundles.find(TopicName.parse("t-0")).range == "0xc0000000_0xffffffff"
    assert bundles.find(TopicName.parse("t-1")).range == "0x80000000_0xc0000000"
    assert bundles.find(TopicName.parse("t-3")).range == "0x40000000_0x80000000"
    # A boundary belongs to the bundle it opens; the top of the range to the last one.
    assert bundles.bundle_of_hash(0x40000000).range == "0x40000000_0x80000000"
    assert bundles.bundle_of_hash(0x3FFFFFFF).range == "0x00000000_0x40000000"
    assert bundles.bundle_of_hash(0xFFFFFFFF).range == "0xc0000000_0xffffffff"


def test_a_bundle_name_parses_back() -> None:
    bundle = Bundle.parse("public/default", "0x40000000_0x80000000")
    assert (bundle.lower, bundle.upper, str(bundle)) == (0x40000000, 0x80000000, "public/default/0x40000000_0x80000000")
    with pytest.raises(ValueError):
        Bundle.parse("public/default", "0x40000000")


def test_boundaries_are_written_once_as_local_policies_and_read_by_every_broker() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        first, second = BundleDirectory(server.connect(), 4), BundleDirectory(server.connect(), 8)
        assert len((await first.bundles("public/default")).bundles) == 4
        # The second broker has another default, but the namespace's boundaries are already written.
        assert (await second.bundles("public/default")).boundaries == tuple(default_boundaries(4))
        stored = json.loads(server.value("/admin/local-policies/public/default") or b"")
        assert stored["bundles"] == {
            "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
            "numBundles": 4,
        }

    asyncio.run(scenario())


def test_a_namespace_first_used_takes_the_bundles_of_its_policies() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        store = server.connect()
        policies = {"bundles": {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"], "numBundles": 2}}
        await store.put("/admin/policies/public/default", json.dumps(policies).encode())
        bundles = await BundleDirectory(store, 4).bundles("public/default")
        assert [b.range for b in bundles.bundles] == ["0x00000000_0x80000000", "0x80000000_0xffffffff"]

    asyncio.run(scenario())


def test_new_boundaries_are_written_by_compare_and_set_and_read_again_on_notice() -> None:
    async def scenario() -> None:
        server = MemoryMetadataServer()
        owner, other = BundleDirectory(server.connect(), 4), BundleDirectory(server.connect(), 4)
        assert len((await other.bundles("public/default")).bundles) == 4
        current, version = await owner.read("public/default")
        split = current.split(Bundle("public/default", 0, 0x40000000), 0x20000000)
        await owner.replace(split, version)
        assert await owner.bundles("public/default") == split
        # A write from the version read before loses.
        with pytest.raises(BadVersionError):
            await owner.replace(current, version)
        # The other broker keeps the boundaries it knew until it reads them again.
        assert (await other.bundles("public/default")).boundaries == tuple(default_boundaries(4))
        await other.refresh("public/default")
        assert await other.bundles("public/default") == split
        assert namespace_of_local_policies("/admin/local-policies/public/default") == "public/default"
        assert namespace_of_local_policies("/admin/policies/public/default") is None

    asyncio.run(scenario())
