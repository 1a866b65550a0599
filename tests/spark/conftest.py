"""One local SparkSession (local[2]) for the whole run: a cold session and the first Python data source
job cost 12-15 s on this machine (reference §1), so every Spark test shares them."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    # Workers must run this venv's Python (pyarrow and magnetar installed), on loopback only.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from magnetar.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("magnetar-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
