"""Compaction's pure decisions (broker/compaction.py): which messages survive, given entries in order."""

from __future__ import annotations

import zlib

from magnetar.broker.compaction import compact, compact_entry, compacted_out_indexes, latest_for_keys
from magnetar.positions import Position
from magnetar.protocol.messages import encode_batch, encode_entry, parse_entry, split_batch
from magnetar.protocol.pulsar_api_pb2 import CompressionType, MessageMetadata, SingleMessageMetadata


def single(value: bytes | None, key: str | None = None, sequence_id: int = 0) -> bytes:
    metadata = MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    if key is not None:
        metadata.partition_key = key
    if value is None:
        metadata.null_value = True
    return encode_entry(metadata, value or b"")


def batch(messages: list[tuple[str | None, bytes | None]], compression: int = CompressionType.NONE) -> bytes:
    singles = []
    for key, value in messages:
        metadata = SingleMessageMetadata(payload_size=0)
        if key is not None:
            metadata.partition_key = key
        if value is None:
            metadata.null_value = True
        singles.append((metadata, value or b""))
    payload = encode_batch(singles)
    metadata = MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        num_messages_in_batch=len(messages),
        compression=compression,
        uncompressed_size=len(payload),
    )
    return encode_entry(metadata, zlib.compress(payload) if compression == CompressionType.ZLIB else payload)


def batch_messages(data: bytes) -> list[tuple[str | None, bytes, bool]]:
    parsed = parse_entry(data)
    payload = parsed.payload
    if parsed.metadata.compression == CompressionType.ZLIB:
        payload = zlib.decompress(payload)
    return [
        (
            m.metadata.partition_key if m.metadata.HasField("partition_key") else None,
            m.payload,
            m.metadata.compacted_out,
        )
        for m in split_batch(payload, parsed.metadata.num_messages_in_batch)
    ]


def at(entry_id: int) -> Position:
    return Position(3, entry_id)


def test_the_latest_value_of_each_key_survives_with_its_bytes() -> None:
    entries = [(at(0), single(b"a", "k1")), (at(1), single(b"b", "k2")), (at(2), single(b"c", "k1"))]

    assert compact(entries) == [(at(1), entries[1][1]), (at(2), entries[2][1])]


def test_a_null_value_deletes_its_key_and_goes_too() -> None:
    entries = [(at(0), single(b"a", "k1")), (at(1), single(b"b", "k2")), (at(2), single(None, "k1"))]

    assert latest_for_keys(entries) == {"k2": (at(1), -1)}
    assert [position for position, _ in compact(entries)] == [at(1)]


def test_a_key_written_again_after_its_tombstone_comes_back() -> None:
    entries = [(at(0), single(b"a", "k1")), (at(1), single(None, "k1")), (at(2), single(b"c", "k1"))]

    assert [position for position, _ in compact(entries)] == [at(2)]


def test_messages_without_a_key_are_dropped_unless_retained() -> None:
    entries = [(at(0), single(b"a")), (at(1), single(b"b", "k1"))]

    assert [position for position, _ in compact(entries)] == [at(1)]
    assert [position for position, _ in compact(entries, retain_null_key=True)] == [at(0), at(1)]


def test_a_batch_keeps_its_slots_and_compacts_out_the_others() -> None:
    data = batch([("k1", b"a"), ("k2", b"b"), ("k1", b"c"), (None, b"x"), ("k3", None)])

    [(position, compacted)] = compact([(at(0), data)])

    assert position == at(0)
    assert batch_messages(compacted) == [
        (None, b"", True),
        ("k2", b"b", False),
        ("k1", b"c", False),
        (None, b"", True),
        (None, b"", True),
    ]
    assert compacted_out_indexes(compacted) == [0, 3, 4]
    metadata = parse_entry(compacted).metadata
    assert metadata.num_messages_in_batch == 5
    assert metadata.uncompressed_size == len(parse_entry(compacted).payload)


def test_a_batch_overwritten_by_later_entries_is_dropped() -> None:
    entries = [(at(0), batch([("k1", b"a"), ("k2", b"b")])), (at(1), single(b"c", "k1")), (at(2), single(None, "k2"))]

    assert [position for position, _ in compact(entries)] == [at(1)]


def test_a_batch_that_survives_whole_keeps_its_bytes() -> None:
    data = batch([("k1", b"a"), ("k2", b"b")])

    assert compact([(at(0), data)]) == [(at(0), data)]


def test_a_later_batch_message_overwrites_an_earlier_single_one() -> None:
    entries = [(at(0), single(b"a", "k1")), (at(1), batch([("k1", b"b"), ("k2", b"c")]))]

    assert latest_for_keys(entries) == {"k1": (at(1), 0), "k2": (at(1), 1)}
    assert [position for position, _ in compact(entries)] == [at(1)]


def test_a_zlib_batch_is_rewritten_compressed() -> None:
    data = batch([("k1", b"a" * 50), ("k1", b"b" * 50)], CompressionType.ZLIB)

    [(_, compacted)] = compact([(at(0), data)])

    assert parse_entry(compacted).metadata.compression == CompressionType.ZLIB
    assert batch_messages(compacted) == [(None, b"", True), ("k1", b"b" * 50, False)]


def test_a_batch_this_broker_cannot_decode_is_kept_whole() -> None:
    data = batch([("k1", b"a"), ("k1", b"b")], CompressionType.LZ4)

    assert latest_for_keys([(at(0), data)]) == {}
    assert compact_entry(at(0), data, {}) == data


def test_compacting_a_compacted_view_again_changes_nothing() -> None:
    entries = [
        (at(0), batch([("k1", b"a"), ("k2", b"b"), ("k1", b"c")])),
        (at(1), single(b"d", "k3")),
        (at(2), single(b"e", "k2")),
    ]
    view = compact(entries)

    assert compact(view) == view
    assert batch_messages(view[0][1]) == [(None, b"", True), (None, b"", True), ("k1", b"c", False)]
