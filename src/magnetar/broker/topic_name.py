"""Pulsar topic names: `persistent://tenant/namespace/local` and the short forms clients normalise.

Owns: parsing and validating names, and the `-partition-N` suffix of partitioned topics.
Must not touch: anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TopicName", "InvalidTopicName", "PARTITION_SUFFIX"]

PARTITION_SUFFIX = "-partition-"
_PART = re.compile(r"^[A-Za-z0-9_=:.\-]+$")
_LOCAL = re.compile(r"^[^/\s]+$")


class InvalidTopicName(ValueError):
    """The name cannot name a topic; the broker answers InvalidTopicName."""


@dataclass(frozen=True)
class TopicName:
    domain: str
    tenant: str
    namespace: str
    local: str

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """Parse a full or short name: `t` and `tenant/ns/t` are normalised as the clients do."""
        if not name:
            raise InvalidTopicName("empty topic name")
        if "://" not in name:
            parts = name.split("/")
            if len(parts) == 1:
                name = f"persistent://public/default/{name}"
            elif len(parts) == 3:
                name = f"persistent://{name}"
            else:
                raise InvalidTopicName(f"invalid short topic name {name!r}")
        domain, _, rest = name.partition("://")
        if domain not in ("persistent", "non-persistent"):
            raise InvalidTopicName(f"invalid topic domain {domain!r} in {name!r}")
        parts = rest.split("/", 2)
        if len(parts) != 3 or not all(parts):
            raise InvalidTopicName(f"topic name {name!r} is not domain://tenant/namespace/topic")
        tenant, namespace, local = parts
        if not _PART.match(tenant) or not _PART.match(namespace) or not _LOCAL.match(local):
            raise InvalidTopicName(f"invalid characters in topic name {name!r}")
        return cls(domain, tenant, namespace, local)

    def __str__(self) -> str:
        return f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}"

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """N for `...-partition-N`, else -1."""
        base, sep, index = self.local.rpartition(PARTITION_SUFFIX)
        if sep and base and index.isdigit():
            return int(index)
        return -1

    @property
    def partitioned_base(self) -> TopicName:
        """The partitioned topic this partition belongs to (itself when not a partition)."""
        if self.partition_index < 0:
            return self
        return TopicName(self.domain, self.tenant, self.namespace, self.local.rpartition(PARTITION_SUFFIX)[0])

    def partition(self, index: int) -> TopicName:
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}")
