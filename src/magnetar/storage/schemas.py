"""Schema versions, durable in the metadata store: Pulsar's schema storage.

Owns: the list of versions of each schema id (`tenant/namespace/topic`, one per base topic: the
partitions of a partitioned topic share their topic's), each with its type, definition, properties,
time and whether it is a deletion marker, under `/schemas/{tenant}/{namespace}/{topic}`. Versions are
Pulsar's LongSchemaVersion: 0, 1, 2, … in order, a deletion marker taking one too; removing the
storage altogether starts again at 0. Must not touch: the wire, compatibility (the broker's registry
decides what may be appended) or other records.

Appends are compare-and-set on the record's version, so two registrations decided on the same list
cannot both land: the loser reads the list again and decides again.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.storage.metadata import MetadataStore

__all__ = ["SchemaStorage", "StoredSchema"]


@dataclass(frozen=True)
class StoredSchema:
    version: int
    type: str  # Pulsar's SchemaType name: AVRO, JSON, STRING, KEY_VALUE, …; NONE for a deletion marker
    data: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    timestamp: int = 0  # epoch milliseconds
    user: str = ""
    deleted: bool = False

    def to_record(self) -> dict:
        return {
            "version": self.version,
            "type": self.type,
            "data": base64.b64encode(self.data).decode(),
            "properties": dict(self.properties),
            "timestamp": self.timestamp,
            "user": self.user,
            "deleted": self.deleted,
        }

    @classmethod
    def from_record(cls, record: Mapping) -> StoredSchema:
        return cls(
            int(record["version"]),
            str(record["type"]),
            base64.b64decode(record["data"]),
            dict(record.get("properties", {})),
            int(record.get("timestamp", 0)),
            str(record.get("user", "")),
            bool(record.get("deleted", False)),
        )


class SchemaStorage:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata

    @staticmethod
    def path(schema_id: str) -> str:
        return f"/schemas/{schema_id}"

    def get_all(self, schema_id: str) -> tuple[list[StoredSchema], int]:
        """Every version, oldest first (deletion markers included), and the record's version for
        `append` (-1 when the schema id has none)."""
        record = self._metadata.get(self.path(schema_id))
        if record is None:
            return [], -1
        return [StoredSchema.from_record(entry) for entry in record[0]["versions"]], record[1]

    async def append(
        self,
        schema_id: str,
        type_: str,
        data: bytes,
        properties: Mapping[str, str],
        timestamp: int,
        user: str = "",
        deleted: bool = False,
        *,
        expected: int,
    ) -> StoredSchema:
        """Add the next version if the record is still at `expected` (from `get_all`); raises the
        metadata store's BadVersionError otherwise."""
        versions, _ = self.get_all(schema_id)
        stored = StoredSchema(
            versions[-1].version + 1 if versions else 0, type_, data, dict(properties), timestamp, user, deleted
        )
        entries = [entry.to_record() for entry in versions] + [stored.to_record()]
        await self._metadata.put(self.path(schema_id), {"versions": entries}, expected_version=expected)
        return stored

    async def delete(self, schema_id: str) -> int:
        """Remove every version of the schema id (Pulsar's forced deletion of the schema storage);
        returns the last version there was, -1 for none."""
        versions, _ = self.get_all(schema_id)
        if not versions:
            return -1
        await self._metadata.delete(self.path(schema_id))
        return versions[-1].version
