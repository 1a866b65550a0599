"""The DataSource Spark registers under the name "magnetar": what Spark asks first, answered here.

Owns: the format name, the default schema, and handing parsed options to the readers and writers.
Must not touch: planning, reading or writing themselves (planning.py, reader.py, writer.py).

Usage:

    from magnetar.spark import register
    register(spark)
    spark.readStream.format("magnetar").option("serviceUrl", "pulsar://127.0.0.1:6650") \\
        .option("topic", "orders").load()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource

from magnetar.spark.options import parse_sink_options, parse_source_options
from magnetar.spark.schema import check_read_schema, spark_schema

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType

__all__ = ["MagnetarDataSource", "register"]


class MagnetarDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "magnetar"

    def schema(self) -> StructType:
        return spark_schema()

    def reader(self, schema: StructType) -> DataSourceReader:
        from magnetar.spark.reader import MagnetarBatchReader

        check_read_schema(schema)
        return MagnetarBatchReader(parse_source_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from magnetar.spark.reader import MagnetarStreamReader

        check_read_schema(schema)
        return MagnetarStreamReader(parse_source_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from magnetar.spark.writer import MagnetarBatchWriter, SinkError, check_columns, check_target

        options = parse_sink_options(self.options)
        if overwrite:
            raise SinkError("the magnetar sink appends to topics: use mode('append')")
        check_columns(schema, options)
        if options.topic is not None:
            check_target(options, options.topic)
        return MagnetarBatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from magnetar.spark.writer import MagnetarStreamWriter, check_columns, check_target

        options = parse_sink_options(self.options)
        check_columns(schema, options)
        if options.topic is not None:
            check_target(options, options.topic)
        return MagnetarStreamWriter(options)


def register(spark: SparkSession) -> None:
    """Make `format("magnetar")` known to this SparkSession (registration is per session)."""
    spark.dataSource.register(MagnetarDataSource)
