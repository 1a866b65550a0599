"""The sink: `df.write` and `df.writeStream` into topics, exactly once through broker deduplication.

Owns: checking at planning time that the target has deduplication in force, turning Arrow record
batches of rows (`value` required; `key`, `orderingKey`, `properties`, `eventTime`, `topic` optional)
into batch entries grouped by sticky key, and the producer names and sequence ids that make a retried
task or a replayed micro-batch write nothing twice.
Must not touch: broker internals (it produces over the network) or the source's reading.

Exactly once: every task writes with producer name `spark-<query id>-<partition id>` (a batch write
uses an id drawn when it is planned instead of the query id) and gives its messages the sequence ids
`batch id << 32 | n`, n counting the task's messages in the order it sends them. The grouping into
entries depends on the rows alone (counts and sizes, never time), so a second attempt of the same task
on the same rows sends the same entries with the same sequence ids, and the broker, which drops a
SEND whose sequence id is not above the highest it stored for that producer, stores nothing twice.
This needs the rows of a (batch, partition) to be the same on every attempt: true for this source and
any deterministic transformation; a nondeterministic shuffle upstream breaks it, as for any sink.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from magnetar.client.batch import (
    EVENT_TIME_TAG,
    KEY_TAG,
    ORDERING_KEY_TAG,
    PAYLOAD_SIZE_TAG,
    PROPERTY_TAG,
    bytes_field,
    entry_section,
    size_prefix,
    varint,
)
from magnetar.spark.options import SinkOptions

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from magnetar.client.wire import Producer

__all__ = ["MagnetarBatchWriter", "MagnetarStreamWriter", "SinkError", "WriteReport", "check_target"]

# The sequence id of message n of micro-batch b is b << 32 | n: a task writes fewer than 2^32 messages.
_BATCH_SHIFT = 32
# How long a new attempt of a task waits for the broker to let go of its previous attempt's producer
# (same name) before giving up: the old connection closes with its process, which can take a moment.
_PRODUCER_BUSY_WAIT_S = 30.0
# Open key groups a task holds before it sends them all: bounds memory with many distinct keys.
_OPEN_GROUPS_MAX = 4096
_OPEN_BYTES_MAX = 32 * 1024 * 1024
_ACCEPTED_COLUMNS = {"value", "key", "orderingKey", "properties", "eventTime", "topic"}


class SinkError(Exception):
    """The sink cannot write exactly once to its target."""


@dataclass
class WriteReport(WriterCommitMessage):
    """What one task wrote: messages, entries stored, entries the broker dropped as duplicates."""

    partition_id: int
    messages: int = 0
    entries: int = 0
    duplicates: int = 0
    topics: list[str] = field(default_factory=list)


def check_columns(schema: StructType, options: SinkOptions) -> None:
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise SinkError("the magnetar sink needs a value column (binary or string)")
    if options.topic is None and "topic" not in names:
        raise SinkError("the magnetar sink needs the option topic, or a topic column")
    unknown = names - _ACCEPTED_COLUMNS
    if unknown:
        raise SinkError(
            f"the magnetar sink writes the columns {sorted(_ACCEPTED_COLUMNS)}; drop or fold into properties: "
            f"{sorted(unknown)}"
        )


def check_target(options: SinkOptions, topic: str) -> None:
    """Refuse a target without deduplication in force: without it the sink would not be exactly once."""
    from magnetar.client.wire import Connection, Producer
    from magnetar.spark import rest

    try:
        in_force = rest.deduplication_in_force(options.admin_url, topic, security=options.admin_security)
    except rest.TopicMissing:
        # The write would create it; create it now (a producer does) so that its policy can be asked.
        with Connection(options.service_url, security=options.security) as connection:
            if not connection.partitions(topic):
                Producer(connection, topic, f"spark-check-{os.urandom(4).hex()}").close()
        in_force = rest.deduplication_in_force(options.admin_url, topic, security=options.admin_security)
    if not in_force:
        raise SinkError(
            f"topic: deduplication is off for {topic}, and the magnetar sink is exactly-once only through "
            f"it. Turn it on for the namespace (magnetar admin namespaces set-deduplication <tenant/ns> "
            f"--enable), the topic, or the broker (brokerDeduplicationEnabled=true)."
        )


# Entries in the per-task caches of encoded keys and payload sizes; cleared when full.
_CACHE_MAX = 65_536


class _Group:
    """Messages of one sticky key waiting to become one batch entry, as the batch payload's parts."""

    __slots__ = ("parts", "messages", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.messages = 0
        self.size = 0


class _TopicWriter:
    """One target topic (or one partition of it) of one task: key groups waiting to become entries, and
    the producer that sends them."""

    def __init__(self, sink: _TaskWriter, topic: str) -> None:
        self.sink = sink
        self.topic = topic
        self.groups: dict[str | bytes | None, _Group] = {}
        self.producer = sink.open_producer(topic)
        self.messages_max = sink.options.batching_max_messages
        self.bytes_max = sink.options.batching_max_bytes

    def add(self, sticky: str | bytes | None, metadata: bytes, value: bytes) -> None:
        group = self.groups.get(sticky)
        if group is None:
            group = self.groups[sticky] = _Group()
            self.sink.open_groups += 1
        group.parts += (size_prefix(len(metadata)), metadata, value)
        size = len(metadata) + len(value) + 4
        group.messages += 1
        group.size += size
        self.sink.open_bytes += size
        if group.messages >= self.messages_max or group.size >= self.bytes_max:
            self.send(sticky)

    def send(self, sticky: str | bytes | None) -> None:
        group = self.groups.pop(sticky)
        sink = self.sink
        sink.open_groups -= 1
        sink.open_bytes -= group.size
        count = group.messages
        first = sink.next_sequence
        sink.next_sequence += count
        section = entry_section(
            self.producer.name,
            first,
            b"".join(group.parts),
            int(time.time() * 1000),
            batch_count=count,
            key=sticky,
        )
        self.producer.send(first, first + count - 1, count, section)
        sink.report.messages += count

    def send_all(self) -> None:
        for sticky in list(self.groups):
            self.send(sticky)

    def flush(self) -> None:
        self.send_all()
        for receipt in self.producer.flush():
            if receipt.duplicate:
                self.sink.report.duplicates += 1
            else:
                self.sink.report.entries += 1


class _TaskWriter:
    """The rows of one task, to one or more topics, under one producer name and one sequence."""

    def __init__(self, options: SinkOptions, producer_name: str, first_sequence: int, partition_id: int) -> None:
        from magnetar.client.wire import Connection

        self.options = options
        self.producer_name = producer_name
        self.next_sequence = first_sequence
        self.connection = Connection(options.service_url, security=options.security)
        self.topics: dict[str, _TopicWriter] = {}
        self.partitions: dict[str, int] = {}
        self.checked: set[str] = set()
        self.open_groups = 0
        self.open_bytes = 0
        self.partition_id = partition_id
        self.report = WriteReport(partition_id)
        # key -> (writer, encoded key field) for rows with only a key and a value, and payload length ->
        # encoded payload_size field: what most rows need, computed once per distinct value.
        self._routes: dict[object, tuple[_TopicWriter, bytes]] = {}
        self._sizes: dict[int, bytes] = {}

    def open_producer(self, topic: str) -> Producer:
        from magnetar.client.wire import BrokerError, Producer

        deadline = time.monotonic() + _PRODUCER_BUSY_WAIT_S
        while True:
            try:
                return Producer(self.connection, topic, self.producer_name)
            except BrokerError as error:
                if error.code != "ProducerBusy" or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def writer_for(self, topic: str, sticky: str | bytes | None) -> _TopicWriter:
        partitions = self.partitions.get(topic)
        if partitions is None:
            if topic != self.options.topic and topic not in self.checked:
                # Per-row topics are known only now; the topic option's was checked when planned.
                check_target(self.options, topic)
                self.checked.add(topic)
            partitions = self.partitions[topic] = self.connection.partitions(topic)
            self.report.topics.append(topic)
        if partitions:
            from magnetar.core.sticky_key import key_hash

            # A partitioned topic: route by the sticky key's hash, keyless rows by the task's partition.
            if sticky is None:
                index = self.partition_id % partitions
            else:
                index = key_hash(sticky if isinstance(sticky, bytes) else sticky.encode()) % partitions
            topic = f"{topic}-partition-{index}"
        writer = self.topics.get(topic)
        if writer is None:
            writer = self.topics[topic] = _TopicWriter(self, topic)
        return writer

    def _size_field(self, length: int) -> bytes:
        field = self._sizes.get(length)
        if field is None:
            if len(self._sizes) >= _CACHE_MAX:
                self._sizes.clear()
            field = self._sizes[length] = PAYLOAD_SIZE_TAG + varint(length)
        return field

    def _bound_open(self) -> None:
        if self.open_bytes > _OPEN_BYTES_MAX or self.open_groups > _OPEN_GROUPS_MAX:
            for writer in self.topics.values():
                writer.send_all()

    def write(self, batches: Iterator[Any]) -> WriteReport:
        import pyarrow as pa

        try:
            for batch in batches:
                value_column = batch.column("value")
                if not pa.types.is_binary(value_column.type):
                    value_column = value_column.cast(pa.binary())
                values = value_column.to_pylist()
                count = len(values)
                names = batch.schema.names
                keys = batch.column("key").to_pylist() if "key" in names else [None] * count
                extras = [n for n in ("orderingKey", "properties", "eventTime", "topic") if n in names]
                if any(batch.column(n).null_count < count for n in extras):
                    self._write_rows(batch, keys, values)
                else:
                    self._write_keyed(keys, values)
            for writer in self.topics.values():
                writer.flush()
            for writer in self.topics.values():
                writer.producer.close()
            return self.report
        finally:
            self.connection.close()

    def _write_keyed(self, keys: list, values: list) -> None:
        """Rows of a key and a value to the topic option: the common case, with the least per row."""
        if self.options.topic is None:
            raise SinkError("a row has no topic and the option topic is not set")
        routes, size_field = self._routes, self._size_field
        for key, value in zip(keys, values):
            if value is None:
                raise SinkError("the magnetar sink cannot write a null value")
            route = routes.get(key)
            if route is None:
                if len(routes) >= _CACHE_MAX:
                    routes.clear()
                route = routes[key] = (
                    self.writer_for(self.options.topic, key),
                    b"" if key is None else bytes_field(KEY_TAG, key.encode()),
                )
            writer, key_field = route
            writer.add(key, key_field + size_field(len(value)), value)
            if self.open_groups > _OPEN_GROUPS_MAX or self.open_bytes > _OPEN_BYTES_MAX:
                self._bound_open()

    def _write_rows(self, batch: Any, keys: list, values: list) -> None:
        """Rows with properties, ordering keys, event times or their own topic."""
        names = batch.schema.names
        count = len(values)
        orderings = batch.column("orderingKey").to_pylist() if "orderingKey" in names else [None] * count
        properties = batch.column("properties").to_pylist() if "properties" in names else [None] * count
        events = batch.column("eventTime").to_pylist() if "eventTime" in names else [None] * count
        topics = batch.column("topic").to_pylist() if "topic" in names else [None] * count
        for key, value, ordering, pairs, event, topic in zip(keys, values, orderings, properties, events, topics):
            if value is None:
                raise SinkError("the magnetar sink cannot write a null value")
            parts = []
            if pairs:
                for name, text in pairs:
                    pair = bytes_field(b"\x0a", name.encode()) + bytes_field(b"\x12", (text or "").encode())
                    parts.append(bytes_field(PROPERTY_TAG, pair))
            if key is not None:
                parts.append(bytes_field(KEY_TAG, key.encode()))
            parts.append(self._size_field(len(value)))
            if event is not None:
                parts += (EVENT_TIME_TAG, varint(int(event.timestamp() * 1000)))
            if ordering is not None:
                parts.append(bytes_field(ORDERING_KEY_TAG, ordering))
            sticky = ordering if ordering is not None else key
            topic = topic or self.options.topic
            if topic is None:
                raise SinkError("a row has no topic and the option topic is not set")
            self.writer_for(topic, sticky).add(sticky, b"".join(parts), value)
            self._bound_open()


def _task_context() -> tuple[str | None, int | None, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise SinkError("the magnetar sink writes only from a Spark task")
    query_id = context.getLocalProperty("sql.streaming.queryId")
    batch_id = context.getLocalProperty("streaming.sql.batchId")
    return query_id, None if batch_id is None else int(batch_id), context.partitionId()


class MagnetarBatchWriter(DataSourceArrowWriter):
    """df.write: one write id per planned write, so retried tasks of this write are deduplicated."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options
        self.write_id = os.urandom(6).hex()

    def write(self, iterator: Iterator[object]) -> WriteReport:
        _query, _batch, partition_id = _task_context()
        name = f"spark-{self.write_id}-{partition_id}"
        return _TaskWriter(self.options, name, 0, partition_id).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every message is stored when write() returns: nothing is left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """What succeeded stays; running the same write again writes new copies (it is a new write)."""


class MagnetarStreamWriter(DataSourceStreamArrowWriter):
    """df.writeStream: producer name per (query, partition), sequence ids per micro-batch."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[object]) -> WriteReport:
        query_id, batch_id, partition_id = _task_context()
        if query_id is None or batch_id is None:
            raise SinkError("the streaming sink runs without a query id or batch id in its task context")
        name = f"spark-{query_id}-{partition_id}"
        return _TaskWriter(self.options, name, batch_id << _BATCH_SHIFT, partition_id).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every message is stored when write() returns: nothing is left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """A replay of the batch sends the same sequence ids; the broker drops what is stored already."""
