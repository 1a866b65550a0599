"""Fixtures of the compatibility suites with the official Java and Go clients (tests/compat)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from java_compat import JavaCompat


@pytest.fixture(scope="session")
def java_compat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JavaCompat]:
    """One JVM running compat/java for the whole test run."""
    program = JavaCompat(tmp_path_factory.mktemp("java-compat") / "jvm.log")
    yield program
    program.close()


@pytest.fixture(scope="module")
def java(java_compat: JavaCompat, module_broker) -> Callable[..., dict[str, Any]]:
    """`java(scenario, **args)`: a scenario of compat/java against this module's broker."""

    def run(scenario: str, **args: Any) -> dict[str, Any]:
        return java_compat.run(scenario, serviceUrl=module_broker.url, httpUrl=module_broker.http_url, **args)

    return run
