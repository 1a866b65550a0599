"""The pure parts of the source: options, offsets and entry arithmetic, the data-loss decision, and
the rows built from entries. No Spark session, no broker."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol.messages import encode_batch, encode_entry, parse_entry
from magnetar.protocol.pulsar_api_pb2 import CompressionType, KeyValue, MessageMetadata, SingleMessageMetadata
from magnetar.spark.offsets import (
    Offset,
    TopicState,
    check_ranges,
    decode_offsets,
    encode_offsets,
    even_ranges,
    share_budget,
)
from magnetar.spark.options import OptionError, parse_sink_options, parse_source_options
from magnetar.spark.planning import DataLossError, offsets_from_spec, plan_tasks, start_after_loss
from magnetar.spark.rows import RowBuilder
from magnetar.spark.schema import COLUMNS

SERVICE = {"serviceUrl": "pulsar://127.0.0.1:6650", "topic": "orders"}
# Ledgers 3 (5 entries), 4 (empty), 5 (3 entries); 10 entries were deleted before ledger 3.
STATE = TopicState(((3, 5), (4, 0), (5, 3)), (5, 2), 10)


# --------------------------------------------------------------------------------------------- options


def test_defaults_follow_kafka_batch_and_stream() -> None:
    batch = parse_source_options(SERVICE, streaming=False)
    stream = parse_source_options(SERVICE, streaming=True)
    assert (batch.starting, batch.ending, stream.starting) == ("earliest", "latest", "latest")
    assert batch.topics == ("persistent://public/default/orders",)
    assert batch.admin_url == "http://127.0.0.1:8080" and batch.hash_ranges == ((0, 65535),)
    assert batch.fail_on_data_loss and stream.max_entries_per_trigger is None


def test_message_ids_and_ranges_parse() -> None:
    options = parse_source_options(
        SERVICE
        | {
            "startingOffsets": json.dumps({"orders": {"ledgerId": 3, "entryId": 4}, "tenant/ns/b": "latest"}),
            "keyHashRanges": "[[32768, 65535], [0, 32767]]",
            "service.url": "ignored when serviceUrl is set",
        },
        streaming=True,
    )
    assert options.starting == {"persistent://public/default/orders": (3, 4), "persistent://tenant/ns/b": "latest"}
    assert options.hash_ranges == ((0, 32767), (32768, 65535))
    assert parse_source_options(SERVICE | {"keyHashRanges": "3"}, False).hash_ranges == even_ranges(3)


@pytest.mark.parametrize(
    ("extra", "option", "fragment"),
    [
        ({"topic": None}, "topic", "exactly one of"),
        ({"topics": "a,b"}, "topic", "exactly one of"),
        ({"serviceUrl": None}, "serviceUrl", "required"),
        ({"adminUrl": "ftp://x"}, "adminUrl", "http://host:port"),
        ({"startingOffsets": "[1, 2]"}, "startingOffsets", "the JSON must be an object"),
        ({"startingOffsets": '{"t": {"ledgerId": 1}}'}, "startingOffsets", "the message id of 't'"),
        ({"startingOffsets": '{"t": {"ledgerId": true, "entryId": 1}}'}, "startingOffsets", "the message id of 't'"),
        ({"endingOffsets": "latest"}, "endingOffsets", "only for batch reads"),
        ({"keyHashRanges": "0-40000,30000-65535"}, "keyHashRanges", "overlaps"),
        ({"keyHashRanges": "0-70000"}, "keyHashRanges", "not within 0-65535"),
        ({"keyHashRanges": "5000"}, "keyHashRanges", "between 1 and 1024"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss", "must be true or false"),
        ({"maxRecordsPerTrigger": "0"}, "maxRecordsPerTrigger", "must be a positive integer"),
        ({"topicsPattern": "([", "topic": None}, "topicsPattern", "not a regular expression"),
        ({"subscriptionName": "a/b"}, "subscriptionName", "letters, digits"),
    ],
)
def test_bad_options_name_themselves(extra: dict, option: str, fragment: str) -> None:
    options = {k: v for k, v in (SERVICE | extra).items() if v is not None}
    with pytest.raises(OptionError) as refused:
        parse_source_options(options, streaming=True)
    assert str(refused.value).startswith(f"{option}: ") and fragment in str(refused.value)


def test_sink_options() -> None:
    options = parse_sink_options({"serviceUrl": "pulsar://h:6650", "topic": "out", "batchingMaxMessages": "10"})
    assert (options.topic, options.batching_max_messages, options.admin_url) == (
        "persistent://public/default/out",
        10,
        "http://h:8080",
    )


# --------------------------------------------------------------------------------------------- offsets


def test_positions_and_indexes_across_ledgers() -> None:
    assert STATE.earliest == Offset(3, -1, 9)
    assert STATE.latest == Offset(5, 2, 17)
    assert STATE.first_position == (3, 0)
    assert STATE.advance(STATE.earliest, 5) == Offset(3, 4, 14)
    assert STATE.advance(STATE.earliest, 6) == Offset(5, 0, 15)  # the empty ledger is skipped
    assert STATE.advance(Offset(3, 4, 14), 100) == STATE.latest
    assert STATE.count_after(Offset(3, 2, 12), (5, 1)) == 4
    assert decode_offsets(json.loads(json.dumps(encode_offsets({"t": STATE.latest})))) == {"t": STATE.latest}


@given(st.lists(st.integers(0, 6), min_size=1, max_size=6), st.integers(0, 40), st.integers(0, 40))
def test_advancing_counts_every_stored_entry_once(sizes: list[int], skip: int, step: int) -> None:
    ledgers = tuple((10 + i, size) for i, size in enumerate(sizes))
    stored = [(ledger, entry) for ledger, size in ledgers for entry in range(size)]
    last = stored[-1] if stored else (ledgers[-1][0], -1)
    state = TopicState(ledgers, last, 7)
    start = state.advance(state.earliest, skip)
    end = state.advance(start, step)
    assert state.count_after(start, end.position) == min(step, len(stored) - min(skip, len(stored)))
    if stored and end.entry_id >= 0:
        assert end.index == 7 + stored.index(end.position)


def test_data_loss_is_counted_from_the_index_of_the_first_stored_entry() -> None:
    assert STATE.lost_after(Offset(3, -1, 9)) == 0
    assert STATE.lost_after(Offset(2, 3, 6)) == 3  # entries 7, 8 and 9 are gone
    assert STATE.lost_after(Offset(2, 3, None)) is None


def test_skipping_ahead_says_how_many_entries(caplog: pytest.LogCaptureFixture) -> None:
    strict = parse_source_options(SERVICE, streaming=True)
    lenient = parse_source_options(SERVICE | {"failOnDataLoss": "false"}, streaming=True)
    with pytest.raises(DataLossError, match=r"failOnDataLoss: t: 3 entries after 2:3 were deleted by retention"):
        start_after_loss(strict, "t", STATE, Offset(2, 3, 6))
    with caplog.at_level(logging.WARNING, logger="magnetar.spark"):
        assert start_after_loss(lenient, "t", STATE, Offset(2, 3, 6)) == STATE.earliest
    assert "skipping ahead: t: 3 entries after 2:3 were deleted by retention" in caplog.text
    assert start_after_loss(strict, "t", STATE, Offset(3, 1, 11)) == Offset(3, 1, 11)


def test_json_message_ids_and_tasks() -> None:
    states = {"a": STATE, "b": TopicState(((7, 4),), (7, 3), 0)}
    with pytest.raises(OptionError, match="startingOffsets: no message id for b"):
        offsets_from_spec("startingOffsets", {"a": "earliest"}, states)
    with pytest.raises(OptionError, match="startingOffsets: names topics that are not read: c"):
        offsets_from_spec("startingOffsets", {"a": "earliest", "b": "latest", "c": "latest"}, states)
    starts = offsets_from_spec("startingOffsets", {"a": (3, 1), "b": "latest"}, states)
    assert starts == {"a": Offset(3, 1, 11), "b": Offset(7, 3, 3)}
    ends = offsets_from_spec("endingOffsets", "latest", states)
    options = parse_source_options(SERVICE | {"keyHashRanges": "2"}, streaming=False)
    tasks = plan_tasks(options, starts, ends)
    assert [(t.topic, t.start, t.end, t.hash_ranges) for t in tasks] == [
        ("a", (3, 1), (5, 2), ((0, 32767),)),
        ("a", (3, 1), (5, 2), ((32768, 65535),)),
    ]


def test_ranges_and_budgets() -> None:
    assert even_ranges(4) == ((0, 16383), (16384, 32767), (32768, 49151), (49152, 65535))
    assert check_ranges(even_ranges(7)) is None
    assert check_ranges(((0, 10), (12, 65535))) == "hashes 11-11 are in no range"
    assert share_budget({"a": 10, "b": 30}, 100) == {"a": 10, "b": 30}
    assert share_budget({"a": 10, "b": 30}, 8) == {"a": 2, "b": 6}
    assert sum(share_budget({"a": 1, "b": 1, "c": 1}, 2).values()) == 2


# ------------------------------------------------------------------------------------------------ rows


def arrow_schema() -> pa.Schema:
    from magnetar.spark.schema import arrow_schema as to_arrow
    from magnetar.spark.schema import spark_schema

    return to_arrow(spark_schema())


def test_rows_of_single_and_batch_entries() -> None:
    builder = RowBuilder(arrow_schema(), "persistent://public/default/t-partition-2", 2)
    single = MessageMetadata(
        producer_name="p",
        sequence_id=7,
        publish_time=1000,
        partition_key="k",
        event_time=5,
        properties=[KeyValue(key="a", value="b")],
    )
    builder.add((4, 0), parse_entry(encode_entry(single, b"one")))
    singles = [
        (SingleMessageMetadata(partition_key="k2", sequence_id=20), b"x"),
        (SingleMessageMetadata(ordering_key=b"o", properties=[KeyValue(key="c", value="d")]), b"y"),
        (SingleMessageMetadata(partition_key=""), b"z"),
    ]
    batch = MessageMetadata(
        producer_name="q", sequence_id=20, publish_time=2000, num_messages_in_batch=3, partition_key="k2"
    )
    builder.add((4, 1), parse_entry(encode_entry(batch, encode_batch(singles))))
    rows = builder.take().to_pylist()
    assert [r["messageId"] for r in rows] == ["4:0:2:-1", "4:1:2:0", "4:1:2:1", "4:1:2:2"]
    assert [r["key"] for r in rows] == ["k", "k2", None, ""]
    assert [r["value"] for r in rows] == [b"one", b"x", b"y", b"z"]
    assert [r["sequenceId"] for r in rows] == [7, 20, 21, 22]
    assert [r["orderingKey"] for r in rows] == [None, None, b"o", None]
    assert [dict(r["properties"]) for r in rows] == [{"a": "b"}, {}, {"c": "d"}, {}]
    assert rows[0]["eventTime"].timestamp() == 0.005 and rows[1]["eventTime"] is None
    assert [r["producerName"] for r in rows] == ["p", "q", "q", "q"]
    assert builder.rows == 0 and [name for name, _kind, _doc in COLUMNS] == list(rows[0])


def test_compressed_batches_are_unpacked() -> None:
    import zlib

    payload = encode_batch([(SingleMessageMetadata(), b"a" * 50), (SingleMessageMetadata(), b"b" * 50)])
    for codec, compressed in [
        (CompressionType.ZLIB, zlib.compress(payload)),
        (CompressionType.LZ4, pa.Codec("lz4_raw").compress(payload, asbytes=True)),
        (CompressionType.ZSTD, pa.Codec("zstd").compress(payload, asbytes=True)),
    ]:
        metadata = MessageMetadata(
            producer_name="p",
            sequence_id=0,
            publish_time=1,
            num_messages_in_batch=2,
            compression=codec,
            uncompressed_size=len(payload),
        )
        builder = RowBuilder(arrow_schema(), "t", -1)
        builder.add((1, 0), parse_entry(encode_entry(metadata, compressed)))
        assert [r["value"] for r in builder.take().to_pylist()] == [b"a" * 50, b"b" * 50]
