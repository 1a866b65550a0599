"""magnetar's PySpark data source, format "magnetar": batch and streaming reads and writes of topics.

Owns: the Spark connector, laid out like Spark's Kafka connector: `source` (the DataSource Spark
registers), `options`, `schema`, `offsets` and `planning` (pure planning), `reader` (driver-side and
executor-side reading), `rows` (entries to Arrow rows), `writer` (the exactly-once sink), and the
network clients it needs: `wire` (the binary protocol) and `rest` (the admin API).
Must not touch: broker internals or the broker's files; it reaches the broker over the network only.
"""

__all__ = ["register"]


def register(spark: object) -> None:
    """Make `format("magnetar")` known to this SparkSession (registration is per session)."""
    from magnetar.spark.source import register as register_source

    register_source(spark)
