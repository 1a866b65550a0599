"""Namespace bundles: a namespace's 32-bit hash range cut into ranges, and which range a topic falls in.

Owns: the boundaries of a namespace's bundles (Pulsar's `defaultNumberOfNamespaceBundles` equal ranges),
their names (`0x00000000_0x40000000`), a topic's hash (Pulsar's broker builds its NamespaceBundleFactory
with Guava's `Hashing.crc32()` and hashes the full topic name's UTF-8 bytes, `padToLong`: zlib's CRC-32),
and the boundaries kept in `/admin/local-policies/{tenant}/{namespace}` as Pulsar's LocalPolicies JSON.
A namespace first used takes the bundles of its policies in the configuration store when they name
some (`initialize-cluster-metadata` writes them), as Pulsar's NamespaceBundleFactory does. A split
(Pulsar's `range_equally_divide`) replaces the boundaries by compare-and-set; every broker reads them
again when the store notifies it of the change (`refresh`).
Must not touch: ownership (ownership.py) or topics.
"""

from __future__ import annotations

import bisect
import json
import zlib
from dataclasses import dataclass

from magnetar.broker.topic_name import TopicName
from magnetar.metadata.store import BadVersionError, MetadataStore

__all__ = [
    "Bundle",
    "BundleDirectory",
    "NamespaceBundles",
    "default_boundaries",
    "local_policies_path",
    "namespace_of_local_policies",
    "range_equally_divide",
    "topic_hash",
]

FULL_UPPER_BOUND = 0xFFFFFFFF


def topic_hash(name: str) -> int:
    """Pulsar's `NamespaceBundleFactory.getLongHashCode`: CRC-32 of the name's UTF-8 bytes, unsigned."""
    return zlib.crc32(name.encode())


def default_boundaries(count: int) -> list[int]:
    """Pulsar's `getBundles(numBundles)` of a new namespace: equal steps of 2^32 / count, the last
    boundary 0xffffffff."""
    if count < 1:
        raise ValueError(f"a namespace needs at least one bundle, not {count}")
    step = (1 << 32) // count
    return [i * step for i in range(count)] + [FULL_UPPER_BOUND]


LOCAL_POLICIES_ROOT = "/admin/local-policies"


def local_policies_path(namespace: str) -> str:
    return f"{LOCAL_POLICIES_ROOT}/{namespace}"


def namespace_of_local_policies(path: str) -> str | None:
    """The namespace whose local policies `path` holds, None for any other path."""
    prefix = f"{LOCAL_POLICIES_ROOT}/"
    if not path.startswith(prefix) or path[len(prefix) :].count("/") != 1:
        return None
    return path[len(prefix) :]


@dataclass(frozen=True, slots=True, order=True)
class Bundle:
    """One hash range of a namespace: [lower, upper), the last one [lower, 0xffffffff]."""

    namespace: str
    lower: int
    upper: int

    @property
    def range(self) -> str:
        return f"0x{self.lower:08x}_0x{self.upper:08x}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range}"

    @classmethod
    def parse(cls, namespace: str, bundle_range: str) -> Bundle:
        """`0x40000000_0x80000000` of `namespace`; ValueError for anything else."""
        lower, sep, upper = bundle_range.partition("_")
        if not sep:
            raise ValueError(f"Invalid bundle range {bundle_range}")
        return cls(namespace, int(lower, 16), int(upper, 16))

    @classmethod
    def from_name(cls, name: str) -> Bundle:
        """`public/default/0x40000000_0x80000000`, a bundle's full name; ValueError for anything else."""
        namespace, _, bundle_range = name.rpartition("/")
        return cls.parse(namespace, bundle_range)


def range_equally_divide(bundle: Bundle) -> int | None:
    """Pulsar's RangeEquallyDivideBundleSplitAlgorithm: the boundary halving the bundle's hash range; None
    when the range is too narrow to split (NamespaceBundleFactory's `canSplitBundle`)."""
    if bundle.upper - bundle.lower <= 1:
        return None
    return bundle.lower + (bundle.upper - bundle.lower) // 2


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    namespace: str
    boundaries: tuple[int, ...]

    @property
    def bundles(self) -> list[Bundle]:
        pairs = zip(self.boundaries, self.boundaries[1:], strict=False)
        return [Bundle(self.namespace, lower, upper) for lower, upper in pairs]

    def find(self, name: TopicName) -> Bundle:
        """The bundle of a topic of this namespace: the range its hash falls in (Pulsar's `findBundle`)."""
        return self.bundle_of_hash(topic_hash(str(name)))

    def bundle_of_hash(self, value: int) -> Bundle:
        index = min(bisect.bisect_right(self.boundaries, value) - 1, len(self.boundaries) - 2)
        return Bundle(self.namespace, self.boundaries[index], self.boundaries[index + 1])

    def split(self, bundle: Bundle, boundary: int) -> NamespaceBundles:
        """These bundles with `bundle` cut in two at `boundary`."""
        if bundle not in self.bundles or not bundle.lower < boundary < bundle.upper:
            raise ValueError(f"{bundle} cannot be split at 0x{boundary:08x}")
        return NamespaceBundles(self.namespace, tuple(sorted((*self.boundaries, boundary))))

    def bundles_data(self) -> dict[str, list[str] | int]:
        """Pulsar's BundlesData of these boundaries."""
        return {"boundaries": [f"0x{b:08x}" for b in self.boundaries], "numBundles": len(self.boundaries) - 1}

    def local_policies(self) -> bytes:
        """Pulsar's LocalPolicies JSON holding these boundaries."""
        return json.dumps(
            {
                "bundles": self.bundles_data(),
                "bookieAffinityGroup": None,
                "namespaceAntiAffinityGroup": None,
                "migrated": False,
            }
        ).encode()

    @classmethod
    def from_local_policies(cls, namespace: str, value: bytes) -> NamespaceBundles:
        boundaries = json.loads(value)["bundles"]["boundaries"]
        return cls(namespace, tuple(int(b, 16) for b in boundaries))


class BundleDirectory:
    """The bundles of each namespace, read from the metadata store and written there on first use."""

    def __init__(self, store: MetadataStore, default_count: int, configuration: MetadataStore | None = None) -> None:
        self._store = store
        self._configuration = configuration or store
        self._default_count = default_count
        self._known: dict[str, NamespaceBundles] = {}

    async def bundles(self, namespace: str) -> NamespaceBundles:
        known = self._known.get(namespace)
        if known is not None:
            return known
        path = local_policies_path(namespace)
        found = await self._store.get(path)
        if found is None:
            created = await self._initial_bundles(namespace)
            try:
                await self._store.put(path, created.local_policies(), -1)
                found_bundles = created
            except BadVersionError:
                # Another broker wrote them first: theirs count.
                return await self.bundles(namespace)
        else:
            found_bundles = NamespaceBundles.from_local_policies(namespace, found.value)
        self._known[namespace] = found_bundles
        return found_bundles

    async def read(self, namespace: str) -> tuple[NamespaceBundles, int]:
        """The namespace's bundles as the store has them now, with the version of their node, for a
        compare-and-set (`replace`)."""
        found = await self._store.get(local_policies_path(namespace))
        if found is None:
            await self.bundles(namespace)
            return await self.read(namespace)
        bundles = NamespaceBundles.from_local_policies(namespace, found.value)
        self._known[namespace] = bundles
        return bundles, found.stat.version

    async def replace(self, bundles: NamespaceBundles, version: int) -> None:
        """Write new boundaries of a namespace if its node is still at `version` (Pulsar's
        `updateNamespaceBundles`, `setLocalPoliciesWithVersion`), keeping its other local policies;
        BadVersionError when another write came first."""
        path = local_policies_path(bundles.namespace)
        found = await self._store.get(path)
        if found is None:
            raise BadVersionError(f"{path}: deleted")
        policies = json.loads(found.value)
        policies["bundles"] = bundles.bundles_data()
        await self._store.put(path, json.dumps(policies).encode(), version)
        self._known[bundles.namespace] = bundles

    async def refresh(self, namespace: str) -> None:
        """Read a known namespace's boundaries again: the store notified a change of them (a split). The
        old ones serve until the new ones are read, so a loaded topic's bundle is always known."""
        if namespace not in self._known:
            return
        found = await self._store.get(local_policies_path(namespace))
        if found is None:
            self._known.pop(namespace, None)
            return
        self._known[namespace] = NamespaceBundles.from_local_policies(namespace, found.value)

    async def _initial_bundles(self, namespace: str) -> NamespaceBundles:
        """The bundles the namespace's policies were created with (`/admin/policies/{namespace}`), else
        defaultNumberOfNamespaceBundles equal ones, as Pulsar's NamespaceBundleFactory starts."""
        policies = await self._configuration.get(f"/admin/policies/{namespace}")
        if policies is not None:
            bundles = json.loads(policies.value).get("bundles") or {}
            if bundles.get("boundaries"):
                return NamespaceBundles(namespace, tuple(int(b, 16) for b in bundles["boundaries"]))
        return NamespaceBundles(namespace, tuple(default_boundaries(self._default_count)))

    async def bundle_of(self, name: TopicName) -> Bundle:
        return (await self.bundles(name.namespace_name)).find(name)

    def known_bundle_of(self, name: TopicName) -> Bundle | None:
        """The topic's bundle when its namespace's bundles were read already (a loaded topic's were: its
        load asked whether this broker serves it), else None."""
        known = self._known.get(name.namespace_name)
        return None if known is None else known.find(name)
