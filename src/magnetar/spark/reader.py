"""The readers Spark calls: batch (`spark.read`) and streaming (`spark.readStream`), and the task body.

Owns: the DataSourceReader and DataSourceStreamReader of the source: partitions from planning.py as
Spark InputPartitions, the offsets of micro-batches (admission control with maxEntriesPerTrigger and
maxRecordsPerTrigger, Trigger.AvailableNow), moving the durable subscription on commit, and
`read_task`, which runs on executors and turns one task's entries into Arrow record batches.
Must not touch: broker internals (everything goes over the network), or decoding details (rows.py).

Where each method runs (seen from the process ids in a trace, pyspark 4.3.0): `partitions`, `initialOffset`,
`latestOffset`, `commit` in a planner process (one long-lived process per streaming query); `read` in
executor worker processes, with the reader object pickled to them, so it holds options and never a
connection.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from magnetar.client.wire import FULL_HASH_RANGE, Connection, ConnectionLost, SubscriptionCursor, read_range
from magnetar.spark import rest
from magnetar.spark.offsets import Offset, TopicState, decode_offsets, encode_offsets, share_budget
from magnetar.spark.options import OptionError, SourceOptions
from magnetar.spark.planning import (
    DataLossError,
    ReadTask,
    log,
    offsets_from_spec,
    partition_index,
    plan_tasks,
    resolve_topics,
    start_after_loss,
    topic_states,
)
from magnetar.spark.rows import RowBuilder
from magnetar.spark.schema import arrow_schema

__all__ = ["MagnetarBatchReader", "MagnetarStreamReader", "TaskPartition", "read_task"]

# Rows per Arrow record batch handed to Spark: large enough that the per-batch cost vanishes, small
# enough that a task holds a few MB.
ROWS_PER_BATCH = 32_768


@dataclass(frozen=True)
class TaskPartition(InputPartition):
    task: ReadTask


def read_task(options: SourceOptions, schema: object, task: ReadTask) -> Iterator[object]:
    """Executor side: the task's entries as Arrow record batches of `schema`."""
    builder = RowBuilder(arrow_schema(schema), task.topic, task.partition_index)
    entries = read_range(
        options.service_url,
        task.topic,
        task.start,
        task.end,
        task.hash_ranges,
        options.poll_timeout_ms / 1000,
        security=options.security,
    )
    for received in entries:
        builder.add(received.position, received.entry)
        if builder.rows >= ROWS_PER_BATCH:
            yield builder.take()
    if builder.rows:
        yield builder.take()


class MagnetarBatchReader(DataSourceReader):
    """spark.read: the entries between startingOffsets (default earliest) and endingOffsets (default
    latest, fixed when the query is planned)."""

    def __init__(self, options: SourceOptions, schema: object) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[TaskPartition]:
        options = self.options
        topics = resolve_topics(options)
        if not topics:
            raise OptionError(f"{options.subscribed}: matches no topic")
        states = topic_states(options, topics)
        starts = offsets_from_spec("startingOffsets", options.starting, states)
        ends = offsets_from_spec("endingOffsets", options.ending, states)
        for topic, end in ends.items():
            if end.position < starts[topic].position:
                raise OptionError(
                    f"endingOffsets: {topic} ends at {end.ledger_id}:{end.entry_id}, before its start "
                    f"{starts[topic].ledger_id}:{starts[topic].entry_id}"
                )
            starts[topic] = start_after_loss(options, topic, states[topic], starts[topic])
        return [TaskPartition(task) for task in plan_tasks(options, starts, ends)]

    def read(self, partition: InputPartition) -> Iterator[object]:
        assert isinstance(partition, TaskPartition), "partitions are the ones partitions() planned"
        return read_task(self.options, self.schema, partition.task)


class MagnetarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches of what arrived, offsets checkpointed by Spark.

    The instance lives in the query's planner process for the whole query, so it keeps the
    subscription connection and the AvailableNow target between calls.
    """

    def __init__(self, options: SourceOptions, schema: object) -> None:
        self.options = options
        self.schema = schema
        self._available_now: dict[str, Offset] | None = None
        self._cursors: dict[str, SubscriptionCursor] = {}
        self._reported: dict[str, dict[str, int]] = {}
        self._connection: Connection | None = None

    def _topics(self) -> list[str]:
        """The topic partitions now, over a connection kept between micro-batches (opened again if it
        broke), since the partitions of a topic and the topics of a pattern may change while it runs."""
        if self._connection is None or self._connection.closed:
            self._connection = Connection(self.options.service_url, security=self.options.security)
        try:
            return resolve_topics(self.options, self._connection)
        except ConnectionLost:
            # The broker restarted since the last micro-batch: once more, on a new connection.
            self._connection = Connection(self.options.service_url, security=self.options.security)
            return resolve_topics(self.options, self._connection)

    # ------------------------------------------------------------------------------ offsets

    def _states(self, topics: list[str], read: dict[str, Offset]) -> dict[str, TopicState]:
        """The topics' ledger layouts; a topic the query has read from (in `read`) and that is gone
        now was deleted, which is data loss. A partition never written to is simply not there yet."""
        options = self.options
        states = {}
        for topic in topics:
            try:
                states[topic] = TopicState.from_internal_stats(
                    rest.internal_stats(options.admin_url, topic, security=options.admin_security)
                )
            except rest.TopicMissing:
                if topic not in read and partition_index(topic) >= 0:
                    continue
                if options.fail_on_data_loss:
                    raise DataLossError(
                        f"failOnDataLoss: topic {topic} was deleted while the query read it. "
                        f"Set failOnDataLoss=false to go on without it."
                    ) from None
                log.warning("failOnDataLoss=false: topic %s was deleted; the query goes on without it", topic)
        return states

    def initialOffset(self) -> dict:
        options = self.options
        topics = self._topics()
        if not topics and options.topics_pattern is None:
            raise OptionError(f"{options.subscribed}: names no topic")
        states = topic_states(options, topics)
        starts = offsets_from_spec("startingOffsets", options.starting, states)
        if options.subscription_name is not None:
            for topic, start in starts.items():
                self._commit_topic(topic, start)
        return encode_offsets(starts)

    def getDefaultReadLimit(self) -> ReadLimit:
        options = self.options
        if options.max_entries_per_trigger is not None:
            return ReadMaxRows(options.max_entries_per_trigger)
        if options.max_records_per_trigger is not None:
            return ReadMaxRows(options.max_records_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what is stored now, in as many micro-batches as the limits make."""
        states = self._states(self._topics(), {})
        self._available_now = {topic: state.latest for topic, state in states.items()}

    def latestOffset(self, start: dict, limit: object) -> dict:
        options = self.options
        starts = decode_offsets(start)
        topics = sorted(set(self._topics()) | set(starts))
        states = self._states(topics, starts)
        for topic in states:
            if topic not in starts:
                # A partition or a topic matching the pattern appeared: read it from its beginning.
                starts[topic] = states[topic].earliest
        targets = {}
        for topic, state in states.items():
            target = state.latest
            if self._available_now is not None:
                target = min(target, self._available_now.get(topic, starts[topic]), key=lambda o: o.position)
            begin = start_after_loss(options, topic, state, starts[topic])
            targets[topic] = max(target, begin, key=lambda o: o.position)
            starts[topic] = begin
        self._reported = encode_offsets({topic: state.latest for topic, state in states.items()})
        if isinstance(limit, ReadMaxRows):
            targets = self._limit(starts, targets, states, limit.max_rows)
        return encode_offsets(targets)

    def _limit(
        self, starts: dict[str, Offset], targets: dict[str, Offset], states: dict[str, TopicState], budget: int
    ) -> dict[str, Offset]:
        options = self.options
        available = {topic: states[topic].count_after(starts[topic], targets[topic].position) for topic in targets}
        if options.max_entries_per_trigger is not None:
            shares = share_budget(available, budget)
            return {topic: states[topic].advance(starts[topic], shares[topic]) for topic in targets}
        # maxRecordsPerTrigger: messages, which only the entries' metadata count. The planner reads the
        # entries' headers from the start until the share is used up; an entry larger than the whole
        # share is taken whole, so that every micro-batch moves.
        total = sum(available.values())
        # The records budget split in proportion to the entries each topic has waiting.
        shares = {topic: max(1, budget * count // total) if count else 0 for topic, count in available.items()}
        limited = {}
        for topic, target in targets.items():
            records = 0
            end = starts[topic]
            if shares[topic] > 0:
                for received in read_range(
                    options.service_url,
                    topic,
                    starts[topic].position,
                    target.position,
                    FULL_HASH_RANGE,
                    options.poll_timeout_ms / 1000,
                    security=options.security,
                ):
                    count = received.entry.num_messages
                    if records and records + count > shares[topic]:
                        break
                    records += count
                    end = Offset(*received.position, states[topic].index_of(received.position))
                    if records >= shares[topic]:
                        break
            limited[topic] = end
        return limited

    def reportLatestOffset(self) -> dict:
        return self._reported

    # ------------------------------------------------------------------------------ batches

    def partitions(self, start: dict, end: dict) -> list[TaskPartition]:
        starts, ends = decode_offsets(start), decode_offsets(end)
        for topic in ends:
            starts.setdefault(topic, ends[topic])
        return [TaskPartition(task) for task in plan_tasks(self.options, starts, ends)]

    def read(self, partition: InputPartition) -> Iterator[object]:
        assert isinstance(partition, TaskPartition), "partitions are the ones partitions() planned"
        return read_task(self.options, self.schema, partition.task)

    def commit(self, end: dict) -> None:
        """The batch ending at `end` is in the sink: move the durable subscription there, if any."""
        if self.options.subscription_name is None:
            return
        for topic, offset in decode_offsets(end).items():
            self._commit_topic(topic, offset)

    def _commit_topic(self, topic: str, offset: Offset) -> None:
        cursor = self._cursors.get(topic)
        if cursor is None:
            subscription_name = self.options.subscription_name
            assert subscription_name is not None, "only a source with a subscription commits"
            cursor = self._cursors[topic] = SubscriptionCursor(
                self.options.service_url, topic, subscription_name, security=self.options.security
            )
        # (L, -1) acks everything before ledger L, as a cumulative ack of entry -1 means in Pulsar.
        cursor.ack(offset.position)

    def stop(self) -> None:
        for cursor in self._cursors.values():
            cursor.close()
        self._cursors.clear()
        if self._connection is not None:
            self._connection.close()
            self._connection = None
