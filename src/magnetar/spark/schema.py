"""The source's schema: one row per message, Kafka-style unprefixed column names.

Owns: the column list, its Spark StructType and Arrow schema, and checking a user-given schema against
it (a subset of these columns with these types is allowed, and makes the reader build only those).
Must not touch: decoding (rows.py) or options.

The StructType is built from type objects, not parsed from DDL: parsing DDL needs a SparkContext, and
the planner and worker processes that call the data source have none.
"""

from __future__ import annotations

from typing import Any

__all__ = ["COLUMNS", "SchemaError", "arrow_schema", "check_read_schema", "spark_schema"]

# (name, Spark SQL type, meaning) in schema order.
COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("key", "string", "the message key (partition key); null when the message has none"),
    ("value", "binary", "the payload"),
    ("topic", "string", "the topic (a partition's own name for a partitioned topic)"),
    ("messageId", "string", "ledgerId:entryId:partitionIndex:batchIndex, as Java's MessageId prints it"),
    ("ledgerId", "bigint", "the entry's ledger"),
    ("entryId", "bigint", "the entry in its ledger"),
    ("batchIndex", "int", "the message's index in its batch entry; -1 for an entry of one message"),
    ("publishTime", "timestamp", "when the producer published it"),
    ("eventTime", "timestamp", "the event time the producer set; null when unset"),
    ("properties", "map<string,string>", "the message's properties"),
    ("orderingKey", "binary", "the ordering key; null when unset"),
    ("keyHash", "int", "the sticky key hash slot (0..65535) the entry was routed by: Key_Shared's"),
    ("producerName", "string", "the producer that published it"),
    ("sequenceId", "bigint", "the producer's sequence id of the message"),
)


class SchemaError(ValueError):
    """A user-given schema the source cannot fill."""


def _spark_type(name: str) -> Any:
    from pyspark.sql import types

    simple = {
        "string": types.StringType(),
        "binary": types.BinaryType(),
        "bigint": types.LongType(),
        "int": types.IntegerType(),
        "timestamp": types.TimestampType(),
        "map<string,string>": types.MapType(types.StringType(), types.StringType()),
    }
    return simple[name]


def spark_schema() -> Any:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(name, _spark_type(kind)) for name, kind, _doc in COLUMNS])


def arrow_schema(schema: Any) -> Any:
    """The Arrow schema Spark expects record batches of `schema` (a StructType) to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def check_read_schema(schema: Any) -> None:
    """A user-given StructType must be a subset of COLUMNS with the same types (any order)."""
    expected = {name: _spark_type(kind) for name, kind, _doc in COLUMNS}
    for field in schema.fields:
        if field.name not in expected:
            raise SchemaError(f"schema: the magnetar source has no column {field.name!r}; it has {list(expected)}")
        if field.dataType != expected[field.name]:
            raise SchemaError(
                f"schema: column {field.name!r} is {expected[field.name].simpleString()}, "
                f"not {field.dataType.simpleString()}"
            )
