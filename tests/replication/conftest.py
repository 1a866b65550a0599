"""Two or three broker processes, one per cluster (`clusterName` r1, r2, r3), each with its own data
directory, wired into one geo-replication mesh as an operator would: every cluster registered with its
URLs on every broker, tenant `geo` allowed on all of them, namespaces replicating to a chosen set.

`mesh` is shared by a module's tests (each uses its own topics, or its own namespace when it changes a
policy); `geo_factory` starts fresh brokers for a test that stops or kills one. Brokers come from the
root conftest's `module_broker_factory` / `broker_factory`, so they are always stopped.
On a failure the last lines of every broker's log are attached to the report.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from geo_helpers import Geo, wire

CLUSTERS = ("r1", "r2", "r3")
# Namespaces of the shared mesh: `ns` replicates everywhere, `pair` only r1<->r2 (one-way tests publish in
# r1), `policy` is the one the policy test changes (nobody else uses it).
MESH_NAMESPACES = {"ns": ["r1", "r2", "r3"], "pair": ["r1", "r2"], "policy": ["r1", "r2"]}


@pytest.fixture(scope="module")
def mesh(module_broker_factory) -> Geo:
    """Three clusters for the whole module."""
    return wire({name: module_broker_factory(clusterName=name) for name in CLUSTERS}, MESH_NAMESPACES)


class GeoFactory:
    """`geo_factory({"r1": {}, "r2": {"brokerDeduplicationEnabled": "true"}}, {"ns": ["r1", "r2"]})`:
    fresh brokers with those extra settings, stopped at the end of the test."""

    def __init__(self, broker_factory: Callable[..., Any]) -> None:
        self.broker_factory = broker_factory
        self.created: list[Geo] = []

    def __call__(self, clusters: dict[str, dict[str, str]], namespaces: dict[str, list[str]]) -> Geo:
        brokers = {name: self.broker_factory(clusterName=name, **settings) for name, settings in clusters.items()}
        geo = wire(brokers, namespaces)
        self.created.append(geo)
        return geo


@pytest.fixture
def geo_factory(broker_factory) -> GeoFactory:
    return GeoFactory(broker_factory)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    geos: list[Geo] = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Geo):
            geos.append(value)
        elif isinstance(value, GeoFactory):
            geos.extend(value.created)
    for index, geo in enumerate(geos):
        report.sections.append((f"broker logs (tail) {index}", geo.log_tails()))
