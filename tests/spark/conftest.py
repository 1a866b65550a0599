"""One local SparkSession (local[2]) for the whole run: a cold session and the first Python data source
job cost 12-15 s on this machine (pyspark 4.3.0), so every Spark test shares them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar.spark import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    session = local_session("magnetar-tests")
    yield session
    session.stop()
