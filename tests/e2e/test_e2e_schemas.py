"""The schema registry with the official client (`pulsar.schema`): versions in PRODUCER_SUCCESS and
in every message, evolution, incompatible producers and consumers refused with IncompatibleSchema,
writer-schema decoding by version (GET_SCHEMA), policies, and durability across a restart."""

from __future__ import annotations

import uuid

import httpx
import pulsar
import pytest
from pulsar.exceptions import IncompatibleSchema
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

RECEIVE_TIMEOUT_MS = 5000


def version(message: pulsar.Message) -> int:
    """LongSchemaVersion: 8 bytes, big-endian, which the client hands over as a str (each byte a
    character, so small versions decode as UTF-8)."""
    return int.from_bytes(message.schema_version().encode(), "big")


def schema_path(broker, topic: str) -> str:
    return f"{broker.http_url}/admin/v2/schemas/public/default/{topic.rsplit('/', 1)[-1]}/schema"


def user_v1() -> type[Record]:
    class User(Record):
        name = String()

    return User


def user_v2() -> type[Record]:
    """User with a field added with a default (null): FULL-compatible with user_v1 (the client writes a
    default only with required_default)."""

    class User(Record):
        name = String()
        age = Integer(required_default=True)

    return User


def user_v2_without_default() -> type[Record]:
    class User(Record):
        name = String()
        age = Integer()

    return User


@pytest.fixture
def admin(module_broker):
    with httpx.Client(base_url=f"{module_broker.http_url}/admin/v2", timeout=10) as http:
        yield http


@pytest.fixture
def mclient(module_broker, client_factory) -> pulsar.Client:
    return client_factory(module_broker.url)


def test_json_schema_messages_carry_the_registered_version(mclient, topic, module_broker) -> None:
    User = user_v1()
    consumer = mclient.subscribe(topic, "sub", schema=JsonSchema(User))
    producer = mclient.create_producer(topic, schema=JsonSchema(User))
    producer.send(User(name="ada"))
    message = consumer.receive(RECEIVE_TIMEOUT_MS)
    assert message.value().name == "ada"
    assert version(message) == 0
    stored = httpx.get(schema_path(module_broker, topic)).json()
    assert (stored["version"], stored["type"]) == (0, "JSON")


def test_avro_evolution_registers_a_version_and_readers_decode_by_writer_version(mclient, topic) -> None:
    V1, V2 = user_v1(), user_v2()
    first = mclient.create_producer(topic, schema=AvroSchema(V1))
    consumer = mclient.subscribe(topic, "sub", schema=AvroSchema(V2), initial_position=pulsar.InitialPosition.Earliest)
    first.send(V1(name="v1"))
    second = mclient.create_producer(topic, schema=AvroSchema(V2))
    second.send(V2(name="v2", age=36))
    messages = [consumer.receive(RECEIVE_TIMEOUT_MS) for _ in range(2)]
    assert [version(m) for m in messages] == [0, 1]
    # Each message is decoded with the schema it was written with, fetched by version (GET_SCHEMA).
    assert [(m.value().name, m.value().age) for m in messages] == [("v1", None), ("v2", 36)]
    # The first schema again matches version 0 instead of registering a third.
    again = mclient.create_producer(topic, schema=AvroSchema(V1))
    again.send(V1(name="again"))
    assert version(consumer.receive(RECEIVE_TIMEOUT_MS)) == 0


def test_incompatible_producers_are_refused(mclient, topic) -> None:
    mclient.create_producer(topic, schema=AvroSchema(user_v1()))
    with pytest.raises(IncompatibleSchema):
        # A field added without a default cannot read the older data: not FULL (the default).
        mclient.create_producer(topic, schema=AvroSchema(user_v2_without_default()))
    with pytest.raises(IncompatibleSchema):
        mclient.create_producer(topic, schema=StringSchema())


def test_incompatible_consumer_is_refused_and_first_consumer_registers(mclient, topic, module_broker) -> None:
    V1 = user_v1()
    # On an idle topic the first consumer's schema becomes version 0.
    mclient.subscribe(topic, "first", schema=AvroSchema(V1))
    assert httpx.get(schema_path(module_broker, topic)).json()["version"] == 0
    with pytest.raises(IncompatibleSchema):
        mclient.subscribe(topic, "strings", schema=StringSchema())
    with pytest.raises(IncompatibleSchema):
        mclient.subscribe(topic, "newer", schema=AvroSchema(user_v2_without_default()))
    mclient.subscribe(topic, "evolved", schema=AvroSchema(user_v2()))


def test_consumer_with_schema_on_active_topic_without_one_is_refused(mclient, topic) -> None:
    mclient.create_producer(topic).send(b"raw bytes")
    with pytest.raises(IncompatibleSchema):
        mclient.subscribe(topic, "sub", schema=StringSchema())


def test_partitioned_topic_shares_one_schema(mclient, module_broker, admin) -> None:
    name = f"pt-{uuid.uuid4().hex[:8]}"
    assert admin.put(f"/persistent/public/default/{name}/partitions", json=3).status_code == 204
    User = user_v1()
    producer = mclient.create_producer(f"persistent://public/default/{name}", schema=AvroSchema(User))
    for i in range(6):
        producer.send(User(name=str(i)), partition_key=str(i))
    versions = admin.get(f"/schemas/public/default/{name}/schemas").json()["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0]
    assert admin.get(f"/schemas/public/default/{name}-partition-2/schema").json()["version"] == 0


def test_auto_update_disabled_only_matches_existing_versions(mclient, topic, admin) -> None:
    namespace = f"public/schemas-{uuid.uuid4().hex[:6]}"
    assert admin.put(f"/namespaces/{namespace}").status_code == 204
    local = f"persistent://{namespace}/{topic.rsplit('/', 1)[-1]}"
    V1 = user_v1()
    mclient.create_producer(local, schema=AvroSchema(V1))
    assert admin.post(f"/namespaces/{namespace}/isAllowAutoUpdateSchema", json=False).status_code == 204
    assert admin.get(f"/namespaces/{namespace}/isAllowAutoUpdateSchema").json() is False
    mclient.create_producer(local, schema=AvroSchema(V1))
    with pytest.raises(IncompatibleSchema):
        mclient.create_producer(local, schema=AvroSchema(user_v2()))


def test_namespace_strategy_overrides_the_brokers(mclient, topic, admin) -> None:
    namespace = f"public/schemas-{uuid.uuid4().hex[:6]}"
    assert admin.put(f"/namespaces/{namespace}").status_code == 204
    assert admin.get(f"/namespaces/{namespace}/schemaCompatibilityStrategy").json() == "UNDEFINED"
    assert (
        admin.put(f"/namespaces/{namespace}/schemaCompatibilityStrategy", json="ALWAYS_COMPATIBLE").status_code == 204
    )
    assert admin.get(f"/namespaces/{namespace}").json()["schema_compatibility_strategy"] == "ALWAYS_COMPATIBLE"
    local = f"persistent://{namespace}/{topic.rsplit('/', 1)[-1]}"
    mclient.create_producer(local, schema=AvroSchema(user_v1()))
    mclient.create_producer(local, schema=AvroSchema(user_v2_without_default()))
    versions = admin.get(f"/schemas/{namespace}/{local.rsplit('/', 1)[-1]}/schemas").json()["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1]


def test_validation_enforced_refuses_producers_without_schema(broker_factory, client_factory, topic) -> None:
    broker = broker_factory(isSchemaValidationEnforced="true")
    client = client_factory(broker.url)
    client.create_producer(topic, schema=StringSchema())
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic)


def test_schemas_survive_a_restart_and_go_with_their_topic(broker, client_factory, topic) -> None:
    client = client_factory(broker.url)
    V1, V2 = user_v1(), user_v2()
    client.create_producer(topic, schema=AvroSchema(V1))
    client.create_producer(topic, schema=AvroSchema(V2))
    client.close()
    broker.restart()
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(V2))
    client.create_producer(topic, schema=AvroSchema(V2)).send(V2(name="after", age=1))
    assert version(consumer.receive(RECEIVE_TIMEOUT_MS)) == 1
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=StringSchema())
    client.close()
    path = schema_path(broker, topic)
    assert [v["version"] for v in httpx.get(f"{path}s").json()["getSchemaResponses"]] == [0, 1]
    admin_topic = f"{broker.http_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[-1]}"
    assert httpx.delete(admin_topic, params={"force": "true"}).status_code == 204
    assert httpx.get(path).status_code == 404


def record_named(record_name: str, **fields: object) -> type[Record]:
    """A pulsar.schema Record class called `record_name` (the Avro record's name) with the given fields."""
    return type(record_name, (Record,), dict(fields))


@pytest.mark.parametrize("strategy", ["FULL", "FORWARD", "BACKWARD"])
def test_avro_record_names_do_not_count(mclient, admin, strategy: str) -> None:
    """Pulsar's Avro validator (Avro's SchemaValidatorBuilder) resolves records field by field, whatever
    their names: one-field records A and B with the same field are compatible, and a different field
    type is still refused."""
    namespace = f"public/names-{uuid.uuid4().hex[:6]}"
    assert admin.put(f"/namespaces/{namespace}").status_code == 204
    assert admin.put(f"/namespaces/{namespace}/schemaCompatibilityStrategy", json=strategy).status_code == 204
    topic = f"persistent://{namespace}/t"
    first = mclient.create_producer(topic, schema=AvroSchema(record_named("A", name=String())))
    B = record_named("B", name=String())
    second = mclient.create_producer(topic, schema=AvroSchema(B))
    versions = admin.get(f"/schemas/{namespace}/t/schemas").json()["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1]
    with pytest.raises(IncompatibleSchema):
        mclient.create_producer(topic, schema=AvroSchema(record_named("C", name=Integer())))
    consumer = mclient.subscribe(topic, "sub", schema=AvroSchema(B), initial_position=pulsar.InitialPosition.Earliest)
    second.send(B(name="carol"))
    assert consumer.receive(RECEIVE_TIMEOUT_MS).value().name == "carol"
    first.close()
