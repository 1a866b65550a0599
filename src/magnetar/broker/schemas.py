"""The schema registry: versions per topic, the compatibility policy that applies, and what producers,
consumers and the admin API may register, as Pulsar 4.0's SchemaRegistryServiceImpl and
AbstractTopic / PersistentTopic decide it.

Owns: the schema id of a topic (`tenant/namespace/topic`, a partition's being its partitioned
topic's), the effective strategy (the namespace's `schema_compatibility_strategy` unless UNDEFINED,
else the broker's `schemaCompatibilityStrategy`), auto-update and validation (`is_allow_auto_update_schema`
/ `isAllowAutoUpdateSchemaEnabled`, `schema_validation_enforced` / `isSchemaValidationEnforced`),
registering or matching a producer's schema, checking a consumer's, deleting, and converting between
the wire's Schema and the registry's SchemaData. Must not touch: how versions are stored
(storage/schemas.py), the compatibility rules themselves (schema_compatibility.py), sockets.
"""

from __future__ import annotations

import base64
import logging
from typing import TYPE_CHECKING, Any

from magnetar.broker.schema_compatibility import (
    AvroParseError,
    IncompatibleSchemaError,
    SchemaData,
    check_compatible,
    legacy_json_schema,
    parse_avro,
    same_definition,
)
from magnetar.broker.topic_name import TopicName
from magnetar.protocol.pulsar_api_pb2 import KeyValue, Schema
from magnetar.storage.metadata import BadVersionError
from magnetar.storage.schemas import SchemaStorage, StoredSchema

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.policies import PolicyStore
    from magnetar.clock import Clock
    from magnetar.storage.metadata import MetadataStore

__all__ = [
    "EMPTY_VERSION",
    "InvalidSchemaDataError",
    "SchemaRegistry",
    "from_wire",
    "schema_id",
    "to_wire",
    "version_bytes",
    "version_from_bytes",
]

log = logging.getLogger(__name__)

# Pulsar's SchemaVersion.Empty: what PRODUCER_SUCCESS says of a producer without a schema.
EMPTY_VERSION = b""
# Schema.Type on the wire -> Pulsar's SchemaType name (Commands.getSchemaType).
WIRE_TYPES = {
    0: "NONE",
    1: "STRING",
    2: "JSON",
    3: "PROTOBUF",
    4: "AVRO",
    5: "BOOLEAN",
    6: "INT8",
    7: "INT16",
    8: "INT32",
    9: "INT64",
    10: "FLOAT",
    11: "DOUBLE",
    12: "DATE",
    13: "TIME",
    14: "TIMESTAMP",
    15: "KEY_VALUE",
    16: "INSTANT",
    17: "LOCAL_DATE",
    18: "LOCAL_TIME",
    19: "LOCAL_DATE_TIME",
    20: "PROTOBUF_NATIVE",
    21: "AUTO_CONSUME",
    22: "EXTERNAL",
}
SCHEMA_TYPES = {name: number for number, name in WIRE_TYPES.items()}
# The types an operator may upload (Pulsar's SchemaType names that describe stored data).
UPLOADABLE_TYPES = frozenset(SCHEMA_TYPES) - {"NONE", "AUTO_CONSUME", "EXTERNAL"} | {"BYTES"}


class InvalidSchemaDataError(IncompatibleSchemaError):
    """Pulsar's InvalidSchemaDataException: a definition its type cannot have (the admin API answers
    422; the binary protocol IncompatibleSchema, as BrokerServiceException.getClientErrorCode does)."""


def schema_id(name: TopicName) -> str:
    """Pulsar's TopicName.getSchemaName of the partitioned topic: no domain, no partition suffix."""
    base = name.partitioned_base
    return f"{base.tenant}/{base.namespace}/{base.local}"


def version_bytes(version: int) -> bytes:
    """LongSchemaVersion on the wire: 8 bytes, big-endian."""
    return version.to_bytes(8, "big", signed=True)


def version_from_bytes(data: bytes) -> int:
    return int.from_bytes(data, "big", signed=True)


def from_wire(schema: Schema) -> SchemaData:
    return SchemaData(
        WIRE_TYPES.get(schema.type, "NONE"), bytes(schema.schema_data), {p.key: p.value for p in schema.properties}
    )


def to_wire(name: str, stored: StoredSchema) -> Schema:
    """The wire's Schema of a version; BYTES, which the wire has no number for, travels as None."""
    return Schema(
        name=name,
        schema_data=stored.data,
        type=Schema.Type.ValueType(SCHEMA_TYPES.get(stored.type, 0)),
        properties=[KeyValue(key=k, value=v) for k, v in sorted(stored.properties.items())],
    )


def validate_schema_data(schema: SchemaData) -> None:
    """SchemaDataValidator: an AVRO definition must be an Avro schema, a JSON one an Avro schema or a
    legacy JSON schema. Raises InvalidSchemaDataError."""
    if schema.type not in ("AVRO", "JSON"):
        return
    try:
        parse_avro(schema.data)
    except AvroParseError as error:
        if schema.type == "JSON" and legacy_json_schema(schema.data) is not None:
            return
        raise InvalidSchemaDataError(f"Invalid schema definition data for {schema.type} schema: {error}") from error


def _trimmed(versions: list[StoredSchema]) -> list[StoredSchema]:
    """The versions since the last deletion marker (none when the newest is one)."""
    for index in range(len(versions) - 1, -1, -1):
        if versions[index].deleted:
            return versions[index + 1 :]
    return versions


def _data(stored: StoredSchema) -> SchemaData:
    return SchemaData(stored.type, stored.data, stored.properties)


class SchemaRegistry:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore, policies: PolicyStore, clock: Clock) -> None:
        self._config = config
        self._metadata = metadata
        self._policies = policies
        self._clock = clock

    @property
    def _storage(self) -> SchemaStorage:
        return SchemaStorage(self._metadata)

    # ------------------------------------------------------------------------------ policies

    def _namespace_policy(self, name: TopicName, key: str) -> Any:
        return self._policies.namespace_policy(name.namespace_name, key)

    def strategy(self, name: TopicName) -> str:
        """The namespace's strategy unless UNDEFINED, else the broker's (AbstractTopic's hierarchy)."""
        strategy = self._namespace_policy(name, "schema_compatibility_strategy")
        if strategy in (None, "UNDEFINED"):
            strategy = self._config["schemaCompatibilityStrategy"]
        return str(strategy)

    def allow_auto_update(self, name: TopicName) -> bool:
        allowed = self._namespace_policy(name, "is_allow_auto_update_schema")
        if allowed is None:
            allowed = self._config["isAllowAutoUpdateSchemaEnabled"]
        return bool(allowed)

    def validation_enforced(self, name: TopicName) -> bool:
        """A producer without a schema is refused on a topic with one (ServerCnx.tryAddSchema)."""
        return bool(self._config["isSchemaValidationEnforced"]) or bool(
            self._namespace_policy(name, "schema_validation_enforced")
        )

    # -------------------------------------------------------------------------------- reading

    def versions(self, name: TopicName) -> list[StoredSchema]:
        """The versions since the last deletion, oldest first (trimDeletedSchemaAndGetList)."""
        return _trimmed(self._storage.get_all(schema_id(name))[0])

    def latest(self, name: TopicName) -> StoredSchema | None:
        versions = self._storage.get_all(schema_id(name))[0]
        return versions[-1] if versions and not versions[-1].deleted else None

    def deleted(self, name: TopicName) -> bool:
        """Whether the newest version is a deletion marker (the admin API's "Schema is deleted")."""
        versions = self._storage.get_all(schema_id(name))[0]
        return bool(versions) and versions[-1].deleted

    def get(self, name: TopicName, version: int | None) -> StoredSchema | None:
        """A version (None: the newest), unless deleted or from before the last deletion."""
        if version is None:
            return self.latest(name)
        return next((v for v in self.versions(name) if v.version == version), None)

    def find_version(self, name: TopicName, schema: SchemaData) -> int:
        """The version with this definition, -1 for none (findSchemaVersion)."""
        return next((v.version for v in self.versions(name) if same_definition(_data(v), schema)), -1)

    def check(self, name: TopicName, schema: SchemaData, strategy: str) -> None:
        """Whether `schema` may be added under `strategy` (isCompatible). Raises IncompatibleSchemaError."""
        validate_schema_data(schema)
        check_compatible([_data(v) for v in self.versions(name)], schema, strategy)

    # -------------------------------------------------------------------------------- writing

    async def put_if_absent(self, name: TopicName, schema: SchemaData, strategy: str, user: str = "") -> int:
        """The version of an identical schema, else a new version once compatible (putSchemaIfAbsent)."""
        validate_schema_data(schema)
        key = schema_id(name)
        while True:
            stored, record_version = self._storage.get_all(key)
            current = _trimmed(stored)
            match = next((v for v in current if same_definition(_data(v), schema)), None)
            if match is not None:
                return match.version
            check_compatible([_data(v) for v in current], schema, strategy)
            try:
                added = await self._storage.append(
                    key,
                    schema.type,
                    schema.data,
                    schema.properties,
                    self._clock.time_ms(),
                    user,
                    expected=record_version,
                )
            except BadVersionError:
                continue  # another registration landed first: decide again against it
            log.info("[%s] Added schema version %d (%s, strategy %s)", key, added.version, schema.type, strategy)
            return added.version

    async def add_schema(self, name: TopicName, schema: SchemaData) -> int:
        """A producer's schema (AbstractTopic.addSchema): registered or matched when auto-update is
        allowed, else only matched."""
        if self.allow_auto_update(name):
            return await self.put_if_absent(name, schema, self.strategy(name))
        version = self.find_version(name, schema)
        if version < 0:
            raise IncompatibleSchemaError("Schema not found and schema auto updating is disabled.")
        return version

    async def producer_schema_version(self, name: TopicName, schema: SchemaData | None) -> bytes:
        """What PRODUCER_SUCCESS (or GET_OR_CREATE_SCHEMA_RESPONSE) says of a producer's schema
        (ServerCnx.tryAddSchema): its version, or empty for a producer without one unless the topic has
        a schema and validation is enforced."""
        if schema is None:
            if self.latest(name) is not None and self.validation_enforced(name):
                raise IncompatibleSchemaError(
                    "Producers cannot connect or send message without a schema to topics with a schema"
                    " if SchemaValidationEnforced is enabled"
                )
            return EMPTY_VERSION
        return version_bytes(await self.add_schema(name, schema))

    def check_consumer(self, name: TopicName, schema: SchemaData) -> None:
        """checkConsumerCompatibility: a consumer reads the newest version (BACKWARD) under the plain
        strategies and FORWARD_TRANSITIVE, every version under the other transitive ones."""
        strategy = self.strategy(name)
        if strategy == "ALWAYS_COMPATIBLE":
            return
        versions = [_data(v) for v in self.versions(name)]
        if not versions:
            raise IncompatibleSchemaError(
                f"Failed to add schema to an active topic with empty(BYTES) schema: new schema type {schema.type}"
            )
        if strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
            check_compatible(versions[-1:], schema, "BACKWARD")
        else:
            check_compatible(versions, schema, strategy)

    async def add_schema_if_idle_or_check_compatible(self, name: TopicName, idle: bool, schema: SchemaData) -> None:
        """A consumer's schema (PersistentTopic.addSchemaIfIdleOrCheckCompatible): registered on a
        topic that has no schema and is `idle` (PersistentTopic.idle_for_schema), else checked against
        the versions."""
        if self.latest(name) is not None or not idle:
            self.check_consumer(name, schema)
        else:
            await self.add_schema(name, schema)

    async def delete(self, name: TopicName, force: bool, user: str = "") -> int:
        """Delete the schema: a deletion marker (the next version), or with `force` every version."""
        key = schema_id(name)
        if force:
            return await self._storage.delete(key)
        while True:
            _, record_version = self._storage.get_all(key)
            try:
                marker = await self._storage.append(
                    key, "NONE", b"", {}, self._clock.time_ms(), user, deleted=True, expected=record_version
                )
            except BadVersionError:
                continue
            log.info("[%s] Deleted schema (marker version %d)", key, marker.version)
            return marker.version

    async def delete_storage(self, name: TopicName) -> None:
        """A topic is deleted: so is its schema, every version (BrokerService.deleteSchema)."""
        if await self._storage.delete(schema_id(name)) >= 0:
            log.info("[%s] Deleted schema with its topic", schema_id(name))

    async def import_legacy_records(self) -> None:
        """Schemas kept by magnetar before the registry (one Schema per topic under
        `/schemas/{tenant}/{namespace}/{domain}/{topic}`) become version 0 of their schema id."""
        metadata = self._metadata
        for tenant in metadata.children("/schemas"):
            for namespace in metadata.children(f"/schemas/{tenant}"):
                for domain in ("persistent", "non-persistent"):
                    for local in metadata.children(f"/schemas/{tenant}/{namespace}/{domain}"):
                        path = f"/schemas/{tenant}/{namespace}/{domain}/{local}"
                        record = metadata.get(path)
                        if record is None or "schema" not in record[0]:
                            continue
                        name = TopicName(domain, tenant, namespace, local)
                        schema = from_wire(Schema.FromString(base64.b64decode(record[0]["schema"])))
                        if not self._storage.get_all(schema_id(name))[0]:
                            await self._storage.append(
                                schema_id(name),
                                schema.type,
                                schema.data,
                                schema.properties,
                                self._clock.time_ms(),
                                expected=-1,
                            )
                        await metadata.delete(path)
                        log.info("[%s] Imported the schema kept before the registry as version 0", schema_id(name))
