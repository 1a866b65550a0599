"""The schema registry over HTTP, at Pulsar's `/admin/v2/schemas/...` paths, with its JSON shapes and
status codes (404 without a schema, 409 for an incompatible upload, 422 for an invalid definition)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest


def avro(*fields: dict) -> str:
    return json.dumps({"type": "record", "name": "User", "fields": list(fields)})


V1 = avro({"name": "name", "type": "string"})
V2 = avro({"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"], "default": None})
NO_DEFAULT = avro({"name": "name", "type": "string"}, {"name": "age", "type": "int"})


@pytest.fixture
def admin(module_broker):
    with httpx.Client(base_url=f"{module_broker.http_url}/admin/v2", timeout=10) as http:
        yield http


@pytest.fixture
def path() -> str:
    return f"/schemas/public/default/s-{uuid.uuid4().hex[:10]}"


def upload(admin: httpx.Client, path: str, definition: str, type_: str = "AVRO", **properties: str) -> httpx.Response:
    return admin.post(f"{path}/schema", json={"type": type_, "schema": definition, "properties": properties})


def test_upload_get_versions_and_match(admin, path) -> None:
    assert admin.get(f"{path}/schema").status_code == 404
    assert admin.get(f"{path}/schema").json() == {"reason": "Schema not found"}
    first = upload(admin, path, V1, owner="ops")
    assert (first.status_code, first.json()) == (202, {"version": {"version": 0}})
    assert upload(admin, path, V1).json() == {"version": {"version": 0}}  # identical: the same version
    assert upload(admin, path, V2).json() == {"version": {"version": 1}}
    latest = admin.get(f"{path}/schema").json()
    assert (latest["version"], latest["type"], json.loads(latest["data"])) == (1, "AVRO", json.loads(V2))
    assert isinstance(latest["timestamp"], int) and latest["properties"] == {}
    assert admin.get(f"{path}/schema/0").json()["properties"] == {"owner": "ops"}
    assert admin.get(f"{path}/schema/7").status_code == 404
    versions = admin.get(f"{path}/schemas").json()["getSchemaResponses"]
    assert [v["version"] for v in versions] == [0, 1]
    payload = {"type": "AVRO", "schema": V1, "properties": {}}
    assert admin.post(f"{path}/version", json=payload).json() == {"version": 0}
    assert admin.post(f"{path}/version", json={**payload, "schema": NO_DEFAULT}).json() == {"version": -1}


def test_incompatible_upload_conflicts_and_compatibility_is_tested(admin, path) -> None:
    upload(admin, path, V1)
    refused = upload(admin, path, NO_DEFAULT)
    assert refused.status_code == 409
    assert "Unable to read schema" in refused.json()["reason"]
    assert upload(admin, path, "", "STRING").status_code == 409
    test = admin.post(f"{path}/compatibility", json={"type": "AVRO", "schema": V2, "properties": {}})
    assert (test.status_code, test.json()) == (202, {"compatibility": True, "schemaCompatibilityStrategy": "FULL"})
    test = admin.post(f"{path}/compatibility", json={"type": "AVRO", "schema": NO_DEFAULT, "properties": {}})
    assert test.json() == {"compatibility": False, "schemaCompatibilityStrategy": "FULL"}
    invalid = upload(admin, path, '{"type": "record"}')
    assert invalid.status_code == 422


def test_delete_marks_then_force_removes(admin, path) -> None:
    upload(admin, path, V1)
    assert admin.delete(f"{path}/schema").json() == {"version": 1}
    # Pulsar's answer when the newest version is the deletion marker (PulsarAdmin's NotFoundException
    # carries it: tests/compat/test_java_schemas.py).
    deleted = admin.get(f"{path}/schema")
    assert (deleted.status_code, deleted.json()) == (404, {"reason": "Schema is deleted"})
    assert admin.get(f"{path}/schemas").json() == {"getSchemaResponses": []}
    # After a deletion nothing older counts: an incompatible schema is the next version.
    assert upload(admin, path, NO_DEFAULT).json() == {"version": {"version": 2}}
    assert admin.get(f"{path}/schema/0").status_code == 404
    assert admin.delete(f"{path}/schema", params={"force": "true"}).json() == {"version": 2}
    assert admin.get(f"{path}/schema").json() == {"reason": "Schema not found"}
    assert upload(admin, path, V1).json() == {"version": {"version": 0}}


def test_key_value_definitions_travel_as_key_and_value(admin, path) -> None:
    definition = json.dumps({"key": json.loads(V1), "value": json.loads(V1)})
    properties = {"key.schema.type": "AVRO", "value.schema.type": "AVRO", "kv.encoding.type": "SEPARATED"}
    assert upload(admin, path, definition, "KEY_VALUE", **properties).status_code == 202
    stored = admin.get(f"{path}/schema").json()
    assert stored["type"] == "KEY_VALUE" and json.loads(stored["data"]) == json.loads(definition)
    evolved = json.dumps({"key": json.loads(V1), "value": json.loads(NO_DEFAULT)})
    assert upload(admin, path, evolved, "KEY_VALUE", **properties).status_code == 409


def test_namespace_strategy_and_missing_namespace(admin, path) -> None:
    namespace = f"public/ns-{uuid.uuid4().hex[:6]}"
    assert admin.put(f"/namespaces/{namespace}").status_code == 204
    assert admin.put(f"/namespaces/{namespace}/schemaCompatibilityStrategy", json="BACKWARD").status_code == 204
    assert admin.get(f"/namespaces/{namespace}/schemaCompatibilityStrategy").json() == "BACKWARD"
    assert admin.put(f"/namespaces/{namespace}/schemaCompatibilityStrategy", json="SOMETIMES").status_code == 400
    topic = f"/schemas/{namespace}/t"
    upload(admin, topic, V2)
    # BACKWARD: the new schema reads the old data; removing a field with a default qualifies.
    assert upload(admin, topic, V1).status_code == 202
    test = admin.post(f"{topic}/compatibility", json={"type": "AVRO", "schema": V2, "properties": {}})
    assert test.json()["schemaCompatibilityStrategy"] == "BACKWARD"
    assert admin.get(f"/namespaces/{namespace}/schemaValidationEnforced").json() is False
    assert admin.post(f"/namespaces/{namespace}/schemaValidationEnforced", json=True).status_code == 204
    assert admin.get(f"/namespaces/{namespace}/schemaValidationEnforced").json() is True
    # Unset, the broker's isAllowAutoUpdateSchemaEnabled (true), as a Pulsar 4.0.7 standalone answers.
    assert admin.get(f"/namespaces/{namespace}/isAllowAutoUpdateSchema").json() is True
    assert admin.get("/schemas/public/nowhere/t/schema").status_code == 404
    assert admin.get("/namespaces/public/nowhere/schemaCompatibilityStrategy").status_code == 404
