"""Planning a read: which topics, where each starts and ends, what retention took, and the read tasks.

Owns: expanding `topic` / `topics` / `topicsPattern` into topic partitions (over the binary protocol:
PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE), each topic's ledger layout (the admin API's
internalStats), turning startingOffsets / endingOffsets into offsets, the failOnDataLoss check, and
cutting a batch into one task per (topic partition, sticky-hash range).
Must not touch: Spark's classes (reader.py wraps these results) or row decoding.

Runs in Spark's planner processes, never on executors.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from magnetar.client.wire import Connection, normalize_topic
from magnetar.spark import rest
from magnetar.spark.offsets import Offset, TopicState
from magnetar.spark.options import OptionError, PositionSpec, SourceOptions

__all__ = [
    "DataLossError",
    "ReadTask",
    "plan_tasks",
    "resolve_topics",
    "topic_states",
    "offsets_from_spec",
    "start_after_loss",
]

log = logging.getLogger("magnetar.spark")
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")


class DataLossError(Exception):
    """Retention deleted entries a query had not read yet, and failOnDataLoss is true."""


@dataclass(frozen=True)
class ReadTask:
    """One Spark partition: the entries of one topic partition after `start` up to and including `end`
    whose sticky key hash falls in `hash_ranges`."""

    topic: str
    partition_index: int
    start: tuple[int, int]
    end: tuple[int, int]
    hash_ranges: tuple[tuple[int, int], ...]
    range_index: int


def partition_index(topic: str) -> int:
    match = _PARTITION.match(topic)
    return int(match.group(2)) if match else -1


def _base(topic: str) -> str:
    match = _PARTITION.match(topic)
    return match.group(1) if match else topic


def resolve_topics(options: SourceOptions, connection: Connection | None = None) -> list[str]:
    """The topic partitions the options name: partitioned topics expand to their partitions. A
    streaming query passes the connection it keeps between micro-batches."""
    if connection is None:
        with Connection(options.service_url, security=options.security) as own:
            return resolve_topics(options, own)
    if options.topics_pattern is not None:
        pattern = re.compile(options.topics_pattern)
        names = connection.topics_of_namespace(_pattern_namespace(options.topics_pattern))
        return sorted(t for t in names if pattern.fullmatch(_base(t)) or pattern.fullmatch(t))
    found: list[str] = []
    for topic in options.topics:
        partitions = connection.partitions(topic)
        found += [f"{topic}-partition-{i}" for i in range(partitions)] if partitions else [topic]
    return sorted(set(found))


def _pattern_namespace(pattern: str) -> str:
    """The namespace a pattern lists topics from, as Pulsar's pattern consumer takes it: the tenant and
    namespace of `persistent://tenant/ns/<regex>`, public/default for a short pattern."""
    if "://" not in pattern:
        pattern = normalize_topic(pattern) if pattern.count("/") in (0, 2) else pattern
    _domain, _, rest_ = pattern.partition("://")
    parts = rest_.split("/", 2)
    if len(parts) < 3:
        raise OptionError(f"topicsPattern: must look like persistent://tenant/namespace/<regex>, not {pattern!r}")
    return f"{parts[0]}/{parts[1]}"


def topic_states(options: SourceOptions, topics: Iterable[str]) -> dict[str, TopicState]:
    """The ledger layout of each topic that exists. A partition of a partitioned topic that nobody
    has written to yet does not exist as a topic: it has nothing to read, and is left out."""
    states = {}
    for topic in topics:
        try:
            states[topic] = TopicState.from_internal_stats(
                rest.internal_stats(options.admin_url, topic, security=options.admin_security)
            )
        except rest.TopicMissing:
            if partition_index(topic) < 0:
                raise OptionError(f"{options.subscribed}: topic {topic} does not exist") from None
    return states


def offsets_from_spec(
    option: str, spec: str | Mapping[str, PositionSpec], states: Mapping[str, TopicState]
) -> dict[str, Offset]:
    """startingOffsets or endingOffsets as offsets, for every topic in `states`."""
    offsets = {}
    for topic, state in states.items():
        given: PositionSpec
        if isinstance(spec, str):
            given = spec
        elif topic in spec:
            given = spec[topic]
        else:
            raise OptionError(
                f"{option}: no message id for {topic}; the JSON must name every topic partition read "
                f"({', '.join(sorted(states))})"
            )
        if given == "earliest":
            offsets[topic] = state.earliest
        elif given == "latest":
            offsets[topic] = state.latest
        elif isinstance(given, str):
            raise OptionError(f"{option}: {given!r} for {topic} is neither earliest, latest nor a message id")
        else:
            offsets[topic] = state.offset_at(given)
    if not isinstance(spec, str):
        unknown = sorted(set(spec) - set(states))
        if unknown:
            raise OptionError(f"{option}: names topics that are not read: {', '.join(unknown)}")
    return offsets


def start_after_loss(options: SourceOptions, topic: str, state: TopicState, start: Offset) -> Offset:
    """Where reading after `start` really begins: `start` itself, or, when retention deleted entries
    after it, the first stored entry (failOnDataLoss=false) or an error (true)."""
    lost = state.lost_after(start)
    if lost == 0:
        return start
    first = state.first_position
    assert first is not None, "entries were lost before the first stored one, so there is one"
    count = "an unknown number of" if lost is None else str(lost)
    what = (
        f"{topic}: {count} entries after {start.ledger_id}:{start.entry_id} were deleted by retention "
        f"before they were read; the first stored entry is {first[0]}:{first[1]}"
    )
    if options.fail_on_data_loss:
        raise DataLossError(
            f"failOnDataLoss: {what}. Set failOnDataLoss=false to skip them (a durable subscription, "
            f"option subscriptionName, keeps retention from deleting what the query has not read)."
        )
    log.warning("failOnDataLoss=false: skipping ahead: %s", what)
    return state.earliest


def plan_tasks(
    options: SourceOptions,
    starts: Mapping[str, Offset],
    ends: Mapping[str, Offset],
) -> list[ReadTask]:
    """One task per topic partition with entries to read and per hash range, in a stable order."""
    tasks = []
    for topic in sorted(ends):
        start, end = starts[topic], ends[topic]
        if end.position <= start.position:
            continue
        for index, hash_range in enumerate(options.hash_ranges):
            tasks.append(ReadTask(topic, partition_index(topic), start.position, end.position, (hash_range,), index))
    return tasks
