"""The compatibility checker against Pulsar's own cases (BaseAvroSchemaCompatibilityTest) and Avro's
resolution rules, plus the registry-level rules of SchemaRegistryServiceImpl.checkCompatible."""

from __future__ import annotations

import json

import pytest

from magnetar.broker.schema_compatibility import (
    IncompatibleSchemaError,
    SchemaData,
    can_read,
    check_compatible,
    check_with_strategy,
    decode_key_value,
    encode_key_value,
    parse_avro,
    same_definition,
)

NAMESPACE = "org.apache.pulsar.broker.service.schema.AvroSchemaCompatibilityCheckTest$"


def record(*fields: dict, name: str = "DefaultTest", namespace: str | None = NAMESPACE) -> dict:
    schema = {"type": "record", "name": name, "fields": list(fields)}
    if namespace:
        schema["namespace"] = namespace
    return schema


def avro(definition: object, type_: str = "AVRO") -> SchemaData:
    return SchemaData(type_, json.dumps(definition).encode())


# Pulsar's BaseAvroSchemaCompatibilityTest schemas 1..8.
S1 = avro(record({"name": "field1", "type": "string"}))
S2 = avro(record({"name": "field1", "type": "string"}, {"name": "field2", "type": "string", "default": "foo"}))
S3 = avro(record({"name": "field1", "type": "string"}, {"name": "field2", "type": "string"}))
S4 = avro(record({"name": "field1_v2", "type": "string", "aliases": ["field1"]}))
S5 = avro(record({"name": "field1", "type": ["null", "string"]}))
S6 = avro(record({"name": "field1", "type": ["null", "string", "int"]}))
S7 = avro(
    record(
        {"name": "field1", "type": "string"},
        {"name": "field2", "type": "string", "default": "foo"},
        {"name": "field3", "type": "string", "default": "bar"},
    )
)
S8 = avro(record({"name": "field1", "type": "string"}, {"name": "field2", "type": "string"}))


def compatible(existing: list[SchemaData], new: SchemaData, strategy: str) -> bool:
    try:
        check_with_strategy(existing, new, strategy)
    except IncompatibleSchemaError:
        return False
    return True


@pytest.mark.parametrize(
    ("old", "new", "expected", "why"),
    [
        (S1, S2, True, "adding a field with default is backwards compatible"),
        (S1, S3, False, "adding a field without default is NOT backwards compatible"),
        (S1, S4, True, "a renamed field with the old name as alias reads the old data"),
        (S1, S5, True, "evolving field to a union is backwards compatible"),
        (S5, S1, False, "removing a field from a union is NOT backwards compatible"),
        (S5, S6, True, "adding a field to a union is backwards compatible"),
        (S6, S5, False, "removing a field a union is NOT backwards compatible"),
    ],
)
def test_backward(old: SchemaData, new: SchemaData, expected: bool, why: str) -> None:
    assert compatible([old], new, "BACKWARD") is expected, why


@pytest.mark.parametrize(("old", "new"), [(S1, S2), (S1, S3), (S2, S3), (S3, S2), (S2, S7), (S2, S1)])
def test_forward(old: SchemaData, new: SchemaData) -> None:
    assert compatible([old], new, "FORWARD")


def test_full() -> None:
    assert compatible([S1], S2, "FULL")
    assert not compatible([S1], S3, "FULL")
    assert not compatible([S3], S1, "FULL")


def test_backward_transitive() -> None:
    assert compatible([S1, S2], S5, "BACKWARD_TRANSITIVE")
    assert compatible([S1, S2, S5], S6, "BACKWARD_TRANSITIVE")
    assert compatible([S2], S8, "BACKWARD_TRANSITIVE")
    assert compatible([S1, S2], S8, "BACKWARD")
    assert not compatible([S1, S2], S8, "BACKWARD_TRANSITIVE")
    assert not compatible([S1, S2, S5], S8, "BACKWARD_TRANSITIVE")


def test_forward_transitive() -> None:
    assert compatible([S1, S2], S3, "FORWARD_TRANSITIVE")
    assert compatible([S1, S2, S3], S7, "FORWARD_TRANSITIVE")
    assert compatible([S3, S2], S1, "FORWARD")
    assert not compatible([S3, S2], S1, "FORWARD_TRANSITIVE")


def test_full_transitive() -> None:
    assert compatible([S1, S2], S3, "FULL")
    assert not compatible([S1, S2], S3, "FULL_TRANSITIVE")


def test_always_strategies() -> None:
    assert compatible([S1], S3, "ALWAYS_COMPATIBLE")
    assert not compatible([S1], S2, "ALWAYS_INCOMPATIBLE")


@pytest.mark.parametrize(
    ("reader", "writer", "expected"),
    [
        ("long", "int", True),
        ("float", "long", True),
        ("double", "float", True),
        ("int", "long", False),
        ("string", "bytes", True),
        ("bytes", "string", True),
        ("boolean", "int", False),
        (["null", "long"], "int", True),
        ("long", ["int", "long"], True),
        ("int", ["int", "string"], False),
        ({"type": "array", "items": "long"}, {"type": "array", "items": "int"}, True),
        ({"type": "map", "values": "int"}, {"type": "map", "values": "long"}, False),
        ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 4}, True),
        ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
        ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "G", "size": 4}, False),
        ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, {"type": "enum", "name": "E", "symbols": ["A"]}, True),
        # A symbol the reader lacks is an adjustment, not an error, in the validator's grammar.
        ({"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "enum", "name": "E", "symbols": ["A", "B"]}, True),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, {"type": "enum", "name": "G", "symbols": ["A"]}, False),
        (
            {"type": "enum", "name": "E2", "aliases": ["E"], "symbols": ["A"]},
            {"type": "enum", "name": "E", "symbols": ["A"]},
            True,
        ),
        (
            {"type": "enum", "name": "E", "symbols": ["A", "U"], "default": "U"},
            {"type": "enum", "name": "E", "symbols": ["A", "B"]},
            True,
        ),
        # Record names do not count: the validator resolves records field by field (Avro 1.11.4 agrees
        # on every case of this table).
        (
            record({"name": "x", "type": "int"}, name="R", namespace="a"),
            record({"name": "x", "type": "int"}, name="R", namespace="b"),
            True,
        ),
        (
            record({"name": "x", "type": "int"}, name="S", namespace=None),
            record({"name": "x", "type": "int"}, name="R", namespace=None),
            True,
        ),
        (
            record({"name": "x", "type": "int"}, name="S", namespace=None),
            record({"name": "x", "type": "string"}, name="R", namespace=None),
            False,
        ),
        (
            ["null", record({"name": "x", "type": "int"}, name="A", namespace=None)],
            record({"name": "x", "type": "int"}, name="B", namespace=None),
            True,
        ),
        (
            {**record({"name": "x", "type": "int"}, name="S", namespace=None), "aliases": ["R"]},
            record({"name": "x", "type": "int"}, name="R", namespace=None),
            True,
        ),
    ],
)
def test_avro_resolution(reader: object, writer: object, expected: bool) -> None:
    assert can_read(parse_avro(json.dumps(reader)), parse_avro(json.dumps(writer))) is expected


def test_recursive_schemas_are_compared_once_per_pair() -> None:
    linked = record(
        {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"]}, name="Node", namespace=None
    )
    widened = record(
        {"name": "value", "type": "long"}, {"name": "next", "type": ["null", "Node"]}, name="Node", namespace=None
    )
    assert can_read(parse_avro(json.dumps(widened)), parse_avro(json.dumps(linked)))
    assert not can_read(parse_avro(json.dumps(linked)), parse_avro(json.dumps(widened)))


def test_named_types_are_referenced_by_name_in_their_namespace() -> None:
    schema = {
        "type": "record",
        "name": "Outer",
        "namespace": "n",
        "fields": [
            {"name": "a", "type": {"type": "fixed", "name": "Hash", "size": 16}},
            {"name": "b", "type": "Hash"},
            {"name": "c", "type": "n.Hash"},
        ],
    }
    parse_avro(json.dumps(schema))


@pytest.mark.parametrize(
    "text",
    [
        '{"type": "record", "name": "R"}',
        '{"type": "nope"}',
        "not json",
        '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "Missing"}]}',
    ],
)
def test_unparseable_definitions_are_incompatible(text: str) -> None:
    with pytest.raises(IncompatibleSchemaError, match="SchemaParseException"):
        check_with_strategy([S1], SchemaData("AVRO", text.encode()), "FULL")


def test_registry_rules_type_change_identity_and_latest_only() -> None:
    string = SchemaData("STRING", b"")
    with pytest.raises(IncompatibleSchemaError, match="exists schema type AVRO, new schema type STRING"):
        check_compatible([S1], string, "FULL")
    # Primitive types: same type is compatible, except under ALWAYS_INCOMPATIBLE.
    check_compatible([string], SchemaData("STRING", b"x"), "FULL")
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        check_compatible([string], SchemaData("STRING", b"x"), "ALWAYS_INCOMPATIBLE")
    # The newest definition itself is always compatible, even under ALWAYS_INCOMPATIBLE.
    check_compatible([S1], S1, "ALWAYS_INCOMPATIBLE")
    # Non-transitive strategies look at the newest version only.
    check_compatible([S1, S2], S3, "FULL")
    with pytest.raises(IncompatibleSchemaError, match="FULL_TRANSITIVE"):
        check_compatible([S1, S2], S3, "FULL_TRANSITIVE")
    check_compatible([string], S1, "ALWAYS_COMPATIBLE")
    check_compatible([], S1, "ALWAYS_INCOMPATIBLE")


def test_json_schemas_are_checked_as_avro_and_legacy_ones_by_id() -> None:
    assert not compatible(
        [avro(record({"name": "a", "type": "int"}), "JSON")],
        avro(record({"name": "a", "type": "string"}), "JSON"),
        "FULL",
    )
    legacy = SchemaData("JSON", b'{"type": "object", "id": "urn:a", "properties": {}}')
    other = SchemaData("JSON", b'{"type": "object", "id": "urn:b", "properties": {}}')
    assert compatible([legacy], SchemaData("JSON", S1.data), "FULL")  # an Avro-shaped definition replaces a legacy one
    assert compatible([legacy], legacy, "FULL")
    assert not compatible([legacy], other, "FULL")


def key_value(key: SchemaData, value: SchemaData) -> SchemaData:
    return SchemaData(
        "KEY_VALUE",
        encode_key_value(key.data, value.data),
        {"key.schema.type": key.type, "value.schema.type": value.type, "kv.encoding.type": "INLINE"},
    )


def test_key_value_schemas_are_checked_by_their_parts() -> None:
    string = SchemaData("STRING", b"")
    kv = key_value(string, S1)
    key, value = decode_key_value(kv)
    assert (key.type, key.data, value.type, value.data) == ("STRING", b"", "AVRO", S1.data)
    assert compatible([kv], key_value(string, S2), "FULL")
    assert not compatible([kv], key_value(string, S3), "FULL")
    with pytest.raises(IncompatibleSchemaError, match="different schema type"):
        check_with_strategy([kv], key_value(SchemaData("INT32", b""), S1), "FULL")
    assert compatible([kv], key_value(SchemaData("INT32", b""), S3), "ALWAYS_COMPATIBLE")


def test_same_definition_compares_parsed_avro_schemas() -> None:
    compact = SchemaData("AVRO", json.dumps(json.loads(S2.data), separators=(",", ":")).encode())
    documented = json.loads(S2.data)
    documented["doc"] = "a comment does not make another version"
    assert same_definition(S2, compact)
    assert same_definition(S2, avro(documented))
    assert not same_definition(S2, S7)
    assert not same_definition(S2, SchemaData("JSON", S2.data))
    assert same_definition(SchemaData("STRING", b""), SchemaData("STRING", b""))
