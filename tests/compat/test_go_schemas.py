"""The official Go client v0.19.0 with schemas: JSON and AVRO producers and consumers, whose
first send asks for the schema's version with GET_OR_CREATE_SCHEMA; a message with an evolved schema
decoded by its version; an incompatible schema refused on send, on subscribe and on producer creation;
pulsaradmin's Schemas(); records the Python client produced.

The scenarios' record (compat/go schemas.go) is "User" in three versions: v1 {name, age}, v2 adding
`email` (default null), v3 with `age` a string.
"""

from __future__ import annotations

import uuid

import pytest
from go_compat import run_scenario
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String


class User(Record):
    name = String()
    age = Integer()


@pytest.fixture(scope="module")
def go(module_broker):
    def run(scenario: str, name: str | None = None) -> dict:
        return run_scenario(scenario, module_broker.url, module_broker.http_url, name or f"go-{uuid.uuid4().hex[:8]}")

    return run


@pytest.mark.parametrize("scenario", ["schema-json", "schema-avro", "schema-partitioned", "schema-non-persistent"])
def test_producer_and_consumer_with_a_schema(go, scenario):
    # A regression: the Go client's first send with a schema failed (GET_OR_CREATE_SCHEMA); the
    # scenario exits with an error if a send does. On a partitioned topic it names a partition.
    seen = go(scenario)
    if scenario == "schema-partitioned":
        seen["received"].sort(key=lambda m: m["value"]["name"])
    assert seen["received"] == [{"value": {"name": f"user-{i}", "age": 20 + i}, "version": 0} for i in range(3)]


def test_evolved_schema_decoded_and_incompatible_schema_refused(go):
    seen = go("schema-evolution")
    # The v2 message's schema was registered by GET_OR_CREATE_SCHEMA as version 1; the consumers
    # decode each message with the version it was written with.
    assert seen["v2_consumer"] == [
        {"value": {"name": "ada", "age": 36, "email": None}, "version": 0},
        {"value": {"name": "grace", "age": 45, "email": "grace@example.com"}, "version": 1},
    ]
    assert seen["v2_consumer_more"] == 0
    # A v1 consumer may subscribe (v1 reads v2 under FULL) and reads the v2 message without `email`.
    assert seen["v1_consumer"] == [
        {"value": {"name": "ada", "age": 36}, "version": 0},
        {"value": {"name": "grace", "age": 45}, "version": 1},
    ]
    prefix = "Error during schema compatibility check with strategy"
    assert f"get schema version fail, err: {prefix} FULL" in seen["v3_send_error"]
    assert seen["v3_producer_error"].startswith(f"server error: IncompatibleSchema: {prefix} FULL")
    assert seen["v3_subscribe_error"].startswith(f"server error: IncompatibleSchema: {prefix} BACKWARD")


def test_schema_admin_api(go):
    seen = go("schema-admin")
    assert seen["missing_status"] == 404
    assert seen["create_error"] == ""
    assert seen["get"]["type"] == "AVRO"
    assert seen["get"]["properties"] == {"owner": "go"}
    assert '"namespace":"compat"' in seen["get"]["schema"]
    assert seen["get_version"] == 0
    assert (seen["compatible_v2"], seen["strategy"]) == (True, "FULL")
    assert seen["compatible_v3"] is False
    assert seen["create_v2_error"] == ""
    assert seen["create_v3_status"] == 409
    assert seen["all_versions"] == [0, 1]
    assert seen["version_0"] == seen["get"]["schema"]
    assert (seen["version_of_v2"], seen["version_of_v2_error"]) == (1, "")
    assert seen["delete_error"] == ""
    assert seen["after_delete_status"] == 404


def test_go_consumers_read_records_the_python_client_produced(go, module_broker, client_factory):
    name = f"go-{uuid.uuid4().hex[:8]}"
    client = client_factory(module_broker.url)
    for kind, schema in (("json", JsonSchema(User)), ("avro", AvroSchema(User))):
        producer = client.create_producer(f"persistent://public/default/{name}-python-{kind}", schema=schema)
        for i in range(3):
            producer.send(User(name=f"py-{i}", age=i))
    seen = go("schema-read-python", name)
    expected = [{"value": {"name": f"py-{i}", "age": i}, "version": 0} for i in range(3)]
    assert seen == {"json": expected, "avro": expected}
