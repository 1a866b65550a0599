"""The official Java client 4.0.x with schemas: JSON and AVRO POJOs, evolution under the default
strategy, incompatible producers and consumers refused (and accepted once the namespace's strategy allows),
AUTO_CONSUME and AUTO_PRODUCE_BYTES, records shared with the official Python client, and the schema admin
API through PulsarAdmin.

The scenarios' POJOs (compat/java Schemas.java) are one record, "User", in three versions: V1 {age, name},
V2 adding `email`, V3 with `age` a string. The Java client's AVRO and JSON definitions allow null, so every
field is a union with null and has the default null: V2 is FULL-compatible with V1, V3 with neither.
"""

from __future__ import annotations

import uuid

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

KINDS = ["JSON", "AVRO"]


class User(Record):
    """The Python client's record of the same name and fields as the Java scenarios' V1.User."""

    name = String()
    age = Integer()


def users(seen: list[dict]) -> list[tuple]:
    return [(m["name"], m["age"], m["version"]) for m in seen]


@pytest.mark.parametrize("kind", KINDS)
def test_pojo_producer_and_consumer(java, topic, kind):
    seen = java("schema_produce_consume", topic=topic, type=kind)
    assert users(seen["received"]) == [("user-0", 20, 0), ("user-1", 21, 0), ("user-2", 22, 0), (None, None, 0)]
    assert seen["registeredType"] == kind
    assert '"name":"User"' in seen["registeredDefinition"]
    # AUTO_CONSUME (subscribed before the topic had a schema): GenericRecords with the values written,
    # nulls only where the producer wrote null.
    records = [(r["fields"], r["schemaType"], r["version"]) for r in seen["autoConsumed"]]
    assert records == [
        ({"age": "20", "name": "user-0"}, kind, 0),
        ({"age": "21", "name": "user-1"}, kind, 0),
        ({"age": "22", "name": "user-2"}, kind, 0),
        ({"age": None, "name": None}, kind, 0),
    ]


def test_pojo_producer_and_consumer_on_a_non_persistent_topic(java, topic):
    seen = java("schema_produce_consume", topic=topic.replace("persistent://", "non-persistent://"), type="AVRO")
    assert users(seen["received"]) == [("user-0", 20, 0), ("user-1", 21, 0), ("user-2", 22, 0), (None, None, 0)]
    assert [r["fields"]["name"] for r in seen["autoConsumed"]] == ["user-0", "user-1", "user-2", None]
    assert seen["registeredType"] == "AVRO"


def test_pojo_producer_and_consumer_on_a_partitioned_topic(java, topic):
    # The partitions share their topic's schema (one schema id), so both partitions' producers get
    # version 0 and AUTO_CONSUME fetches it by the partition's name.
    seen = java("schema_produce_consume", topic=topic, type="AVRO", partitions=2)
    assert sorted(users(seen["received"]), key=str) == sorted(
        [("user-0", 20, 0), ("user-1", 21, 0), ("user-2", 22, 0), (None, None, 0)], key=str
    )
    assert sorted(str(r["fields"]) for r in seen["autoConsumed"]) == sorted(
        str(f)
        for f in [
            {"age": "20", "name": "user-0"},
            {"age": "21", "name": "user-1"},
            {"age": "22", "name": "user-2"},
            {"age": None, "name": None},
        ]
    )


@pytest.mark.parametrize("kind", KINDS)
def test_evolved_schema_registers_a_version_and_both_versions_read_each_other(java, topic, kind):
    # A regression: a message from an evolved AVRO schema could not be decoded.
    seen = java("schema_evolution", topic=topic, type=kind)
    assert seen["v2Consumer"] == [
        {"name": "ada", "age": 36, "email": None, "version": 0},
        {"name": "grace", "age": 45, "email": "grace@example.com", "version": 1},
    ]
    # Under FULL a V1 consumer may subscribe after V2 registered, and reads V2's message without `email`.
    assert seen["v1ConsumerSubscribe"] == "ok"
    assert users(seen["v1Consumer"]) == [("ada", 36, 0), ("grace", 45, 1)]
    # AUTO_CONSUME decodes each message with the version it was written with.
    assert [(r["fields"], r["version"]) for r in seen["autoConsumer"]] == [
        ({"age": "36", "name": "ada"}, 0),
        ({"age": "45", "email": "grace@example.com", "name": "grace"}, 1),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_incompatible_schema_refused_until_the_namespace_strategy_allows_it(java, topic, kind):
    # Issue 18: an incompatible consumer schema was accepted; Pulsar refuses it.
    seen = java("schema_incompatible", topic=topic, type=kind, namespace=f"schemas-{uuid.uuid4().hex[:8]}")
    assert seen["strategy"] == "UNDEFINED"
    assert seen["producer"]["error"] == "IncompatibleSchemaException"
    assert "Error during schema compatibility check with strategy FULL" in seen["producer"]["message"]
    assert seen["consumer"]["error"] == "IncompatibleSchemaException"
    assert "Error during schema compatibility check with strategy BACKWARD" in seen["consumer"]["message"]
    assert seen["strategyAfter"] == "ALWAYS_COMPATIBLE"
    assert seen["producerAfter"] == "created"
    assert seen["consumerAfter"] == "subscribed"
    assert seen["lastAfter"] == {"name": "grace", "age": "forty-five"}
    assert seen["lastVersion"] == 1
    assert seen["versions"] == 2


@pytest.mark.parametrize("kind", KINDS)
def test_auto_consume_and_auto_produce_bytes(java, topic, kind):
    # A regression: AUTO_CONSUME decoded nulls. The AUTO_CONSUME consumer subscribes before the topic has
    # a schema; it learns it from the messages' versions.
    seen = java("schema_auto", topic=topic, type=kind)
    assert [(r["fields"], r["schemaType"], r["version"]) for r in seen["autoConsumed"]] == [
        ({"age": "36", "name": "ada"}, kind, 0),
        ({"age": "45", "name": "grace"}, kind, 0),
    ]
    # AUTO_PRODUCE_BYTES checks its bytes against the topic's schema: valid ones are sent with the
    # topic's version, others refused by the client.
    assert users(seen["typed"]) == [("ada", 36, 0), ("grace", 45, 0)]
    assert seen["autoProduceInvalid"] == "SchemaSerializationException"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batched", [False, True])
def test_java_consumers_read_records_the_python_client_produced(
    java, topic, kind, batched, module_broker, client_factory
):
    # A regression: a Java AVRO consumer of Python-produced messages threw. The Python client's
    # definition has no namespace and no defaults; the Java consumer's is checked against it (BACKWARD).
    schema = AvroSchema(User) if kind == "AVRO" else JsonSchema(User)
    producer = client_factory(module_broker.url).create_producer(
        topic, schema=schema, batching_enabled=batched, batching_max_publish_delay_ms=50
    )
    for i in range(3):
        producer.send_async(User(name=f"py-{i}", age=i), None)
    producer.send_async(User(), None)
    producer.flush()
    typed = java("schema_consume_users", topic=topic, type=kind, count=4)["received"]
    assert users(typed) == [("py-0", 0, 0), ("py-1", 1, 0), ("py-2", 2, 0), (None, None, 0)]
    auto = java("schema_auto_consume", topic=topic, count=4)["received"]
    assert [r["fields"] for r in auto] == [
        {"name": "py-0", "age": "0"},
        {"name": "py-1", "age": "1"},
        {"name": "py-2", "age": "2"},
        {"name": None, "age": None},
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_python_consumer_reads_records_the_java_client_produced(java, topic, kind, module_broker, client_factory):
    assert java("schema_produce_users", topic=topic, type=kind, count=3) == {"sent": 3}
    schema = AvroSchema(User) if kind == "AVRO" else JsonSchema(User)
    consumer = client_factory(module_broker.url).subscribe(
        topic, "python", schema=schema, initial_position=pulsar.InitialPosition.Earliest
    )
    values = [consumer.receive(timeout_millis=5000).value() for _ in range(3)]
    assert [(v.name, v.age) for v in values] == [("java-0", 0), ("java-1", 1), ("java-2", 2)]


def test_schema_admin_api(java, topic):
    seen = java("schema_admin", topic=topic)
    assert seen["missing"] == "ERROR NotFoundException: Schema not found"
    assert seen["create"] == "ok"
    assert seen["get"]["type"] == "AVRO"
    assert seen["get"]["properties"] == {"owner": "compat"}
    assert '"namespace":"dev.magnetar.compat.Schemas.V1"' in seen["get"]["schema"]
    assert seen["getWithVersion"] == 0
    assert seen["compatibleV2"] == {"compatibility": True, "strategy": "FULL"}
    # Pulsar's broker answers an incompatible schema here with a 500 (the compatibility check's
    # exception); magnetar answers `false`, which is what the API describes (docs/schemas.md).
    assert seen["compatibleV3"] == {"compatibility": False, "strategy": "FULL"}
    assert seen["createV2"] == "ok"
    assert seen["createV3"].startswith("ERROR ConflictException: Error during schema compatibility check")
    assert [s["schema"] for s in seen["all"]] == [seen["get"]["schema"], seen["all"][1]["schema"]]
    assert '"name":"email"' in seen["all"][1]["schema"]
    assert seen["version0"] == seen["get"]
    assert seen["versionOf"] == 1
    assert seen["delete"] == "ok"
    assert seen["afterDelete"] == "ERROR NotFoundException: Schema is deleted"
    assert seen["allAfterDelete"] == 0
    # The deletion marker is version 2: the next schema is version 3.
    assert seen["createAfterDelete"] == 3


def test_namespace_schema_policies(java, topic):
    seen = java("schema_policies", topic=topic, namespace=f"schemas-{uuid.uuid4().hex[:8]}")
    # Another type on an AVRO topic is refused under the default strategy.
    assert seen["stringProducerOnAvro"]["error"] == "IncompatibleSchemaException"
    # isAllowAutoUpdateSchema off: a new schema is refused, the registered one still matches.
    assert seen["autoUpdate"] is False
    assert seen["newSchemaWithoutAutoUpdate"]["error"] == "IncompatibleSchemaException"
    assert "Schema not found and schema auto updating is disabled." in seen["newSchemaWithoutAutoUpdate"]["message"]
    assert seen["knownSchemaWithoutAutoUpdate"] == {"error": "none"}
    # A producer without a schema is let onto a topic with one unless validation is enforced.
    assert seen["bytesProducer"] == {"error": "none"}
    assert seen["validationEnforced"] is True
    assert seen["bytesProducerEnforced"]["error"] == "IncompatibleSchemaException"
    assert "without a schema to topics with a schema" in seen["bytesProducerEnforced"]["message"]
    # A consumer with a schema on a topic that has data but no schema.
    assert seen["consumerOnDataWithoutSchema"]["error"] == "IncompatibleSchemaException"
    assert "active topic with empty(BYTES) schema" in seen["consumerOnDataWithoutSchema"]["message"]


@pytest.mark.parametrize("encoding", ["SEPARATED", "INLINE"])
def test_key_value_schema(java, topic, encoding):
    seen = java("schema_key_value", topic=topic, encoding=encoding)
    assert seen["typed"] == [
        {"name": "ada", "age": 36, "key": "k-1", "version": 0},
        {"name": "grace", "age": 45, "key": "k-2", "version": 0},
    ]
    assert seen["autoConsumed"] == [
        {"age": "36", "name": "ada", "key": "k-1", "schemaType": "KEY_VALUE"},
        {"age": "45", "name": "grace", "key": "k-2", "schemaType": "KEY_VALUE"},
    ]
    registered = seen["registered"]
    assert registered["type"] == "KEY_VALUE"
    assert (registered["properties"]["kv.encoding.type"], registered["properties"]["value.schema.type"]) == (
        encoding,
        "AVRO",
    )


def test_one_producer_sends_messages_of_several_schemas(java, topic):
    # newMessage(schema) registers each schema with GET_OR_CREATE_SCHEMA (batched sends). The V2
    # consumer subscribed first, on an idle topic, so V2 is version 0 and V1 (compatible under FULL)
    # version 1, as Pulsar's addSchemaIfIdleOrCheckCompatible registers them.
    seen = java("schema_multi", topic=topic)
    assert seen["v3Send"] == "IncompatibleSchemaException"
    expected = [
        {"name": "ada", "age": 36, "email": None, "version": 1},
        {"name": "grace", "age": 45, "email": "grace@example.com", "version": 0},
        {"name": "alan", "age": 41, "email": None, "version": 1},
    ]
    assert seen["v2Consumer"] == expected
    assert seen["v2Reader"] == expected
    assert [(r["fields"], r["version"]) for r in seen["autoConsumer"]] == [
        ({"age": "36", "name": "ada"}, 1),
        ({"age": "45", "email": "grace@example.com", "name": "grace"}, 0),
        ({"age": "41", "name": "alan"}, 1),
    ]
