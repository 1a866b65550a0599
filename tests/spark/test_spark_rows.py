"""Batch entries to rows (magnetar.spark.rows): the runs of look-alike messages it reads from their
bytes without parsing must give the rows that parsing every message gives, whatever the batch holds;
a malformed batch fails naming the entry. No Spark session, no broker."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol.messages import encode_batch, encode_entry, parse_entry, split_batch
from magnetar.protocol.pulsar_api_pb2 import KeyValue, MessageMetadata, SingleMessageMetadata
from magnetar.spark.rows import RowBuilder, UnsupportedEntry, _Run, _split_batch
from magnetar.spark.schema import arrow_schema, spark_schema

SCHEMA = arrow_schema(spark_schema())
FIRST_SEQUENCE_ID = 1000


def batch_entry(messages: list[tuple[SingleMessageMetadata, bytes]]) -> object:
    metadata = MessageMetadata(
        producer_name="p", sequence_id=FIRST_SEQUENCE_ID, publish_time=1, num_messages_in_batch=len(messages)
    )
    return parse_entry(encode_entry(metadata, encode_batch(messages)))


def rows_of(entry: object) -> list[dict]:
    builder = RowBuilder(SCHEMA, "t", -1)
    builder.add((7, 3), entry)
    return builder.take().to_pylist()


def expected_rows(entry: object) -> list[dict]:
    """What each message says, read from its own parsed metadata (messages.split_batch)."""
    rows = []
    for index, message in enumerate(split_batch(entry.payload, entry.num_messages)):
        single = message.metadata
        rows.append(
            {
                "key": single.partition_key if single.HasField("partition_key") else None,
                "value": message.payload,
                "orderingKey": single.ordering_key if single.HasField("ordering_key") else None,
                "eventTime": single.event_time or None,
                "sequenceId": single.sequence_id if single.HasField("sequence_id") else FIRST_SEQUENCE_ID + index,
                "properties": [(pair.key, pair.value) for pair in single.properties],
                "messageId": f"7:3:-1:{index}",
            }
        )
    return rows


def comparable(rows: list[dict]) -> list[dict]:
    for row in rows:
        event = row["eventTime"]
        row["eventTime"] = None if event is None else round(event.timestamp() * 1000)
    names = ("key", "value", "orderingKey", "eventTime", "sequenceId", "properties", "messageId")
    return [{name: row[name] for name in names} for row in rows]


def message(
    key: str | None = "k",
    size: int = 10,
    sequence_id: int | None = None,
    event_time: int | None = None,
    ordering_key: bytes | None = None,
    properties: dict[str, str] | None = None,
    fill: bytes = b"x",
) -> tuple[SingleMessageMetadata, bytes]:
    single = SingleMessageMetadata(payload_size=size)
    if key is not None:
        single.partition_key = key
    if sequence_id is not None:
        single.sequence_id = sequence_id
    if event_time is not None:
        single.event_time = event_time
    if ordering_key is not None:
        single.ordering_key = ordering_key
    for name, value in (properties or {}).items():
        single.properties.append(KeyValue(key=name, value=value))
    return single, (fill * size)[:size]


def test_a_run_of_like_messages_whose_sequence_ids_and_event_times_grow_past_a_varint_byte() -> None:
    # Sequence ids cross 128 and 16384 (their varints grow a byte): three runs, each read from bytes.
    messages = [message(key="key-5", size=100, sequence_id=5 + 64 * i, event_time=120 + i) for i in range(400)]
    entry = batch_entry(messages)
    assert comparable(rows_of(entry)) == expected_rows(entry)
    segments, _values = _split_batch((7, 3), entry.payload, 400)
    assert sum(segment.messages for segment in segments if isinstance(segment, _Run)) >= 390


def test_messages_with_properties_keys_ordering_keys_and_without_sequence_ids() -> None:
    messages = (
        [message(key=None, size=3, ordering_key=b"o", properties={"a": "b"}) for _ in range(20)]
        + [message(key="", size=3, event_time=0) for _ in range(20)]
        + [message(key="k", size=3, sequence_id=0, ordering_key=b"") for _ in range(20)]
        + [message(key="k", size=size, sequence_id=size) for size in range(20)]
    )
    entry = batch_entry(messages)
    rows = comparable(rows_of(entry))
    assert rows == expected_rows(entry)
    assert rows[0]["properties"] == [("a", "b")] and rows[0]["orderingKey"] == b"o" and rows[0]["key"] is None
    assert rows[20]["key"] == "" and rows[20]["eventTime"] is None and rows[20]["sequenceId"] == FIRST_SEQUENCE_ID + 20
    assert rows[40]["sequenceId"] == 0 and rows[40]["orderingKey"] == b""


messages_strategy = st.lists(
    st.builds(
        message,
        key=st.sampled_from([None, "", "k", "key-1", "ü" * 70]),
        size=st.sampled_from([0, 1, 4, 100, 200]),
        sequence_id=st.one_of(st.none(), st.integers(0, 2**63 - 1), st.sampled_from([127, 128, 16383, 16384])),
        event_time=st.one_of(st.none(), st.integers(0, 2**40)),
        ordering_key=st.sampled_from([None, b"", b"o"]),
        properties=st.sampled_from([None, {}, {"a": "b"}]),
        fill=st.sampled_from([b"x", b"\x00", b"\x00\x00\x00\x0b\x12", b"\x80"]),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(messages_strategy.map(lambda ms: ms[0]), st.integers(1, 40)), min_size=1, max_size=5))
def test_rows_equal_a_parse_of_every_message(groups: list) -> None:
    # Repeats of one message (as producers send) alternating with others, in any mix.
    messages = [item for template, repeat in groups for item in [template] * repeat]
    entry = batch_entry(messages)
    assert comparable(rows_of(entry)) == expected_rows(entry)


@settings(max_examples=100, deadline=None)
@given(messages_strategy)
def test_rows_of_unlike_messages_equal_a_parse_of_every_message(messages: list) -> None:
    entry = batch_entry(messages)
    assert comparable(rows_of(entry)) == expected_rows(entry)


def malformed(payload: bytes, count: int) -> object:
    metadata = MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=count)
    return parse_entry(encode_entry(metadata, payload))


GOOD = encode_batch([message(size=10)] * 30)


@pytest.mark.parametrize(
    ("payload", "count", "says"),
    [
        (GOOD[:-3], 30, "declares 10 payload bytes, 7 remain"),
        (GOOD + b"\x00", 30, "its 30 messages span"),
        (GOOD, 31, "message 30 of 31"),
        (GOOD[:6] + b"\xff\xff" + GOOD[8:], 30, "does not parse"),
        (struct.pack(">I", 1 << 20) + GOOD[4:], 30, "message 0 of 30"),
        (encode_batch([message(size=10)]).replace(b"\x18\x0a", b"\x18\x7f"), 1, "declares 127 payload bytes"),
    ],
)
def test_a_malformed_batch_names_its_entry_and_what_is_wrong(payload: bytes, count: int, says: str) -> None:
    with pytest.raises(UnsupportedEntry, match=r"batch entry 7:3 is malformed") as error:
        rows_of(malformed(payload, count))
    assert says in str(error.value)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([0, 1, 100, 127, 128, 16_000, 16_383, 2**21 - 300, 2**35 - 5, 2**62]),
    st.integers(0, 300),
    st.sampled_from([1, 2, 64, 1000]),
    st.integers(2, 700),
    st.sampled_from([0, 1, 100]),
)
def test_runs_of_numbered_messages_across_varint_widths(first: int, offset: int, step: int, count: int, size: int):
    # What producers send: messages numbered one after another (one apart, or as many apart as a
    # KeyBased batch's key has company), sequence ids and event times crossing varint byte widths.
    messages = [
        message(key="key-3", size=size, sequence_id=first + offset + step * i, event_time=first % 2**40 + i)
        for i in range(count)
    ]
    entry = batch_entry(messages)
    assert comparable(rows_of(entry)) == expected_rows(entry)
    segments, _values = _split_batch((7, 3), entry.payload, count)
    runs = [segment for segment in segments if isinstance(segment, _Run)]
    if count > 200 and step == 1 and first < 2**35:
        assert sum(run.messages for run in runs) > count // 2
