"""Schemathesis against the OpenAPI document a broker process serves: every operation, generated inputs.

No input may get a 500, and every response must be one the document declares, in the declared content
type and shape; invalid inputs must be refused with a 4xx. Each operation runs three ways: valid inputs,
invalid inputs, and valid inputs aimed at resources that exist (path parameters pinned to a seeded
tenant, namespace, topic with messages and subscription), so that success paths are fuzzed as well as
the 404s that random names reach. The broker is a real process with its own data directory, so
destructive operations are fair game; the resources are seeded again before each operation.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pulsar
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from magnetar.admin.app import create_app

if TYPE_CHECKING:
    from conftest import BrokerProcess

# Enough to reach each operation's error paths and successes; the module takes a minute or two.
EXAMPLES_PER_OPERATION = 15
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
TOPIC = "fuzzed"
SUBSCRIPTION = "sub"
# Values for the path parameters of every router (helper routers name the subscription differently).
EXISTING = {
    "cluster": "standalone",
    "tenant": "public",
    "namespace": "default",
    "topic": TOPIC,
    "subName": SUBSCRIPTION,
    "subscription": SUBSCRIPTION,
}
SCENARIOS = ("positive", "negative", "existing")


@pytest.fixture(scope="module")
def fuzzed_broker(module_broker_factory) -> BrokerProcess:
    return module_broker_factory()


@pytest.fixture(scope="module")
def admin_schema(fuzzed_broker: BrokerProcess):
    return schemathesis.openapi.from_url(f"{fuzzed_broker.http_url}/openapi.json")


@pytest.fixture(scope="module")
def seed(fuzzed_broker: BrokerProcess) -> Iterator:
    """Make the resources of EXISTING exist again, with a backlog of messages on the subscription."""
    client = pulsar.Client(fuzzed_broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    http = httpx.Client(base_url=f"{fuzzed_broker.http_url}/admin/v2", timeout=30)

    def again() -> None:
        http.put("/clusters/standalone", json={})  # DELETE /clusters/{cluster} may have removed it
        http.put("/tenants/public", json={"adminRoles": [], "allowedClusters": ["standalone"]})
        http.put("/namespaces/public/default")
        earliest = {"ledgerId": -1, "entryId": -1}
        http.put(f"/persistent/public/default/{TOPIC}/subscription/{SUBSCRIPTION}", json=earliest)
        if http.get(f"/persistent/public/default/{TOPIC}/subscription/{SUBSCRIPTION}/position/3").status_code != 200:
            producer = client.create_producer(f"persistent://public/default/{TOPIC}")
            for i in range(5):
                producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}")
            producer.close()

    yield again
    http.close()
    client.close()


def _can_be_invalid(operation: dict) -> bool:
    """Whether some input violates the operation's schema: a body, or a parameter that is not a bare
    string (an integer, a boolean, an enum, a pattern). With only bare strings every input is valid."""
    if "requestBody" in operation:
        return True
    schemas = [parameter.get("schema", {}) for parameter in operation.get("parameters", [])]
    return any(schema.get("type") != "string" or set(schema) - {"type", "title"} for schema in schemas)


# A policy that was never set is 200 with an empty body, as Pulsar 4.0.7 answers: on the operations marked
# so (magnetar.admin.errors.UNSET_POLICY), that answer is checked for its status only, since the document
# declares the policy's JSON for a 200.
EMPTY_WHEN_UNSET = "x-magnetar-empty-when-unset"
STATUS_CHECKS = [not_a_server_error, status_code_conformance, negative_data_rejection]
PATHS = create_app(None).openapi()["paths"]


def _cases() -> list[tuple[str, str, str]]:
    """Every (method, path, scenario) worth running, named at collection time from the same application
    the broker serves (the document itself is fetched from the broker): the negative scenario only
    where an invalid input exists."""
    return [
        (method.upper(), path, scenario)
        for path, methods in PATHS.items()
        for method, operation in methods.items()
        for scenario in SCENARIOS
        if scenario != "negative" or _can_be_invalid(operation)
    ]


@pytest.mark.parametrize(("method", "path", "scenario"), _cases(), ids=lambda value: value)
def test_admin_api_conforms_to_its_openapi_document(
    admin_schema, fuzzed_broker: BrokerProcess, seed, method: str, path: str, scenario: str
) -> None:
    operation = admin_schema[path][method]
    empty_when_unset = PATHS[path][method.lower()].get(EMPTY_WHEN_UNSET, False)
    if scenario == "existing":
        seed()
        pinned = {name: value for name, value in EXISTING.items() if f"{{{name}}}" in path}
        strategy = operation.as_strategy(GenerationMode.POSITIVE, path_parameters=pinned)
    else:
        strategy = operation.as_strategy(GenerationMode(scenario))

    @given(strategy)
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def call(case) -> None:
        transport = {"base_url": fuzzed_broker.http_url, "timeout": 30}
        if not empty_when_unset:
            case.call_and_validate(checks=CHECKS, **transport)
            return
        response = case.call(**transport)
        unset = response.status_code == 200 and not response.content
        case.validate_response(response, checks=STATUS_CHECKS if unset else CHECKS, transport_kwargs=transport)

    call()
