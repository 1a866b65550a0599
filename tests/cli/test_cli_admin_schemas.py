"""`magnetar admin schemas get|upload|delete|compatibility` as subprocesses against a broker process, with
pulsar-admin's schema definition files ({"type", "schema", "properties"})."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from cli_runner import fails, magnetar, ok, ok_json


def avro(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "User", "fields": list(fields)})


NAME = {"name": "name", "type": "string"}
V1 = avro(NAME)
V2 = avro(NAME, {"name": "age", "type": ["null", "int"], "default": None})
# `name` an int: neither V1 nor V2 data can be read with it, nor it with them.
INCOMPATIBLE = avro({"name": "name", "type": "int"})


@pytest.fixture
def definition(tmp_path: Path):
    """A pulsar-admin schema definition file of an AVRO definition."""

    def write(schema: str, **properties: str) -> str:
        path = tmp_path / f"schema-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps({"type": "AVRO", "schema": schema, "properties": properties}))
        return str(path)

    return write


def test_upload_get_compatibility_and_delete(module_broker, definition) -> None:
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:10]}"
    schemas = ["admin", "--admin-url", module_broker.http_url, "schemas"]
    assert "Schema not found" in fails(*schemas, "get", topic)

    assert ok_json(*schemas, "upload", topic, "--filename", definition(V1, owner="ops")) == {"version": 0}
    assert ok_json(*schemas, "compatibility", topic, "-f", definition(INCOMPATIBLE)) == {
        "compatibility": False,
        "schemaCompatibilityStrategy": "FULL",
    }
    assert ok_json(*schemas, "upload", topic, "-f", definition(V2)) == {"version": 1}
    assert "Error during schema compatibility check" in fails(*schemas, "upload", topic, "-f", definition(INCOMPATIBLE))

    assert [v["version"] for v in ok_json(*schemas, "get", topic, "--all-version")] == [0, 1]
    first = ok_json(*schemas, "get", topic, "--version", "0")
    assert (first["type"], json.loads(first["data"]), first["properties"]) == ("AVRO", json.loads(V1), {"owner": "ops"})

    ok(*schemas, "delete", topic)
    assert "Schema is deleted" in fails(*schemas, "get", topic)
    # --force removes every version (the marker too), so the next schema is version 0 again.
    ok(*schemas, "delete", topic, "--force")
    assert ok_json(*schemas, "upload", topic, "-f", definition(INCOMPATIBLE)) == {"version": 0}


def test_bad_definition_files_are_refused(module_broker, definition, tmp_path: Path) -> None:
    topic = f"persistent://public/default/cli-{uuid.uuid4().hex[:10]}"
    schemas = ["admin", "--admin-url", module_broker.http_url, "schemas"]
    not_json = tmp_path / "not.json"
    not_json.write_text("type: AVRO")
    assert "cannot read a schema definition" in fails(*schemas, "upload", topic, "-f", str(not_json))
    # The broker judges the definition: not an Avro schema is 422, Pulsar's InvalidSchemaDataException.
    assert "Invalid schema definition data for AVRO schema" in fails(
        *schemas, "upload", topic, "-f", definition('{"type": "record"}')
    )
    assert magnetar(*schemas, "get", topic, "--version", "0", "--all-version").returncode == 2
