"""magnetar's PySpark data source, format "magnetar": batch and streaming reads and writes of topics.

Owns: the Spark connector, laid out like Spark's Kafka connector: `source` (the DataSource Spark
registers), `options`, `schema`, `offsets` and `planning` (pure planning), `reader` (driver-side and
executor-side reading), `rows` (entries to Arrow rows), `writer` (the exactly-once sink), and the
admin API's client `rest`; it speaks the binary protocol through `magnetar.client.wire`.
Must not touch: broker internals or the broker's files; it reaches the broker over the network only.
"""

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["local_session", "register"]


def register(spark: "SparkSession") -> None:
    """Make `format("magnetar")` known to this SparkSession (registration is per session)."""
    from magnetar.spark.source import register as register_source

    register_source(spark)


def local_session(app_name: str, master: str = "local[2]") -> Any:
    """A local SparkSession on loopback with `format("magnetar")` registered: what the examples, tests and
    benchmarks run on. Its Python workers run this interpreter, which has pyarrow and magnetar (Spark
    would otherwise start the system `python3`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
