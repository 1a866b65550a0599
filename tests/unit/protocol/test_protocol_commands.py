"""Every frame the broker sends parses back into what was asked for; MESSAGE by hand equals protobuf's."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import commands
from magnetar.protocol.framing import Frame, FrameDecoder, encode_frame
from magnetar.protocol.messages import encode_entry
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandLookupTopicResponse,
    CommandPartitionedTopicMetadataResponse,
    MessageMetadata,
    Schema,
    ServerError,
)

U64_MAX = 2**64 - 1
INT64_MAX = 2**63 - 1


def _decode(data: bytes) -> Frame:
    [frame] = FrameDecoder().receive_data(data)
    return frame


def test_signed_id_conversions() -> None:
    assert commands.signed_id(U64_MAX) == -1
    assert commands.signed_id(INT64_MAX) == INT64_MAX
    assert commands.signed_id(7) == 7
    assert commands.wire_id(-1) == U64_MAX
    assert commands.wire_id(INT64_MAX) == INT64_MAX
    for value in (-1, 0, 1, INT64_MAX, -(2**63)):
        assert commands.signed_id(commands.wire_id(value)) == value


def test_connected() -> None:
    frame = _decode(commands.connected("magnetar-0.1.0", 20, 5 * 1024 * 1024))
    assert frame.type == BaseCommand.CONNECTED
    assert (frame.body.server_version, frame.body.protocol_version, frame.body.max_message_size) == (
        "magnetar-0.1.0",
        20,
        5242880,
    )


@pytest.mark.parametrize(
    ("data", "command_type"), [(commands.ping(), BaseCommand.PING), (commands.pong(), BaseCommand.PONG)]
)
def test_ping_pong_carry_their_empty_sub_message(data: bytes, command_type: int) -> None:
    frame = _decode(data)
    assert frame.type == command_type
    assert frame.command.HasField("ping" if command_type == BaseCommand.PING else "pong")


def test_send_receipt_and_send_error() -> None:
    receipt = _decode(commands.send_receipt(0, 5, 7, 0)).body
    assert (receipt.producer_id, receipt.sequence_id, receipt.message_id.ledgerId, receipt.message_id.entryId) == (
        0,
        5,
        7,
        0,
    )
    assert not receipt.HasField("highest_sequence_id")
    assert _decode(commands.send_receipt(0, 5, 7, 0, highest_sequence_id=9)).body.highest_sequence_id == 9
    error = _decode(commands.send_error(1, 2, "ChecksumError", "bad crc")).body
    assert (error.producer_id, error.sequence_id, error.error, error.message) == (
        1,
        2,
        ServerError.Value("ChecksumError"),
        "bad crc",
    )


def test_success_and_error() -> None:
    assert _decode(commands.success(3)).body.request_id == 3
    schema = Schema(name="STRING", schema_data=b"null", type=Schema.String)
    assert _decode(commands.success(3, schema)).body.schema == schema
    error = _decode(commands.error(-1, ServerError.Value("NotAllowedError"), "no"))
    assert error.type == BaseCommand.ERROR
    assert (error.body.request_id, error.body.error, error.body.message) == (U64_MAX, 22, "no")


def test_partitioned_metadata_response() -> None:
    body = _decode(commands.partitioned_metadata_response(1, 3)).body
    assert (body.request_id, body.partitions, body.response) == (1, 3, CommandPartitionedTopicMetadataResponse.Success)
    body = _decode(commands.partitioned_metadata_response(1, 0)).body
    assert body.HasField("response") and body.HasField("partitions")
    body = _decode(commands.partitioned_metadata_response(2, error_code="TopicNotFound", message="gone")).body
    assert (body.response, body.error, body.message) == (CommandPartitionedTopicMetadataResponse.Failed, 11, "gone")


def test_lookup_response() -> None:
    body = _decode(commands.lookup_response(2, "pulsar://127.0.0.1:6650")).body
    assert (body.request_id, body.brokerServiceUrl, body.response, body.authoritative) == (
        2,
        "pulsar://127.0.0.1:6650",
        CommandLookupTopicResponse.Connect,
        True,
    )
    assert not body.proxy_through_service_url
    body = _decode(
        commands.lookup_response(
            2, "pulsar://b:1", redirect=True, proxy_through_service_url=True, broker_service_url_tls="pulsar+ssl://b:2"
        )
    ).body
    assert (body.response, body.proxy_through_service_url, body.brokerServiceUrlTls) == (
        CommandLookupTopicResponse.Redirect,
        True,
        "pulsar+ssl://b:2",
    )
    body = _decode(commands.lookup_response(4, error_code="ServiceNotReady", message="later")).body
    assert (body.response, body.error, body.message) == (CommandLookupTopicResponse.Failed, 6, "later")
    with pytest.raises(ValueError, match="needs broker_service_url"):
        commands.lookup_response(2)


def test_producer_success() -> None:
    body = _decode(commands.producer_success(0, "fake-1")).body
    assert (body.request_id, body.producer_name, body.last_sequence_id, body.producer_ready) == (0, "fake-1", -1, True)
    assert body.HasField("last_sequence_id")
    body = _decode(
        commands.producer_success(0, "p", 41, schema_version=b"\x00", topic_epoch=2, producer_ready=False)
    ).body
    assert (body.last_sequence_id, body.schema_version, body.topic_epoch, body.producer_ready) == (
        41,
        b"\x00",
        2,
        False,
    )


def test_close_producer_and_consumer_default_to_the_broker_request_id() -> None:
    producer = _decode(commands.close_producer(4)).body
    assert (producer.producer_id, producer.request_id) == (4, U64_MAX)
    consumer = _decode(commands.close_consumer(5, 9, "pulsar://other:6650")).body
    assert (consumer.consumer_id, consumer.request_id, consumer.assignedBrokerServiceUrl) == (
        5,
        9,
        "pulsar://other:6650",
    )
    assert commands.signed_id(_decode(commands.close_consumer(5)).body.request_id) == commands.BROKER_REQUEST_ID


def test_active_consumer_change() -> None:
    body = _decode(commands.active_consumer_change(3, True)).body
    assert (body.consumer_id, body.is_active) == (3, True)


def test_get_last_message_id_response() -> None:
    body = _decode(commands.get_last_message_id_response(6, 7, -1)).body
    assert (body.request_id, body.last_message_id.ledgerId, body.last_message_id.entryId) == (6, 7, U64_MAX)
    assert not body.HasField("consumer_mark_delete_position")
    body = _decode(
        commands.get_last_message_id_response(6, 7, 3, batch_index=2, partition=1, mark_delete_position=(7, 1))
    ).body
    assert (body.last_message_id.batch_index, body.last_message_id.partition) == (2, 1)
    assert (body.consumer_mark_delete_position.ledgerId, body.consumer_mark_delete_position.entryId) == (7, 1)


def test_get_topics_of_namespace_response() -> None:
    topics = ["persistent://public/default/a", "persistent://public/default/pt-partition-0"]
    body = _decode(commands.get_topics_of_namespace_response(1, iter(topics))).body
    assert (list(body.topics), body.filtered, body.changed, body.HasField("topics_hash")) == (
        topics,
        False,
        True,
        False,
    )
    body = _decode(commands.get_topics_of_namespace_response(1, [], filtered=True, topics_hash="h", changed=False)).body
    assert (body.filtered, body.topics_hash, body.changed) == (True, "h", False)


def test_get_schema_response() -> None:
    schema = Schema(name="STRING", schema_data=b"null", type=Schema.String)
    body = _decode(commands.get_schema_response(1, schema, b"\x00\x01")).body
    assert (body.schema, body.schema_version, body.HasField("error_code")) == (schema, b"\x00\x01", False)
    body = _decode(commands.get_schema_response(1, error_code="TopicNotFound", message="no schema")).body
    assert (body.error_code, body.error_message, body.HasField("schema")) == (11, "no schema", False)


def test_ack_response() -> None:
    body = _decode(commands.ack_response(2, 8)).body
    assert (body.consumer_id, body.request_id, body.HasField("error")) == (2, 8, False)
    body = _decode(commands.ack_response(2, 8, "TransactionConflict", "x")).body
    assert (body.error, body.message) == (23, "x")


def test_consumer_stats_response() -> None:
    body = _decode(
        commands.consumer_stats_response(1, {"msgRateOut": 1.5, "availablePermits": 10, "consumerName": "c"})
    ).body
    assert (body.request_id, body.msgRateOut, body.availablePermits, body.consumerName) == (1, 1.5, 10, "c")
    body = _decode(commands.consumer_stats_response(1, error_code="ConsumerNotFound", message="?")).body
    assert (body.error_code, body.error_message) == (13, "?")


# --- MESSAGE


def _protobuf_message(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    payload: bytes,
    redelivery_count: int = 0,
    ack_set: list[int] | None = None,
    partition: int = -1,
    epoch: int | None = None,
) -> bytes:
    """MESSAGE through protobuf objects: the reference the hand encoder must equal byte for byte."""
    command = BaseCommand(type=BaseCommand.MESSAGE)
    message = command.message
    message.consumer_id = consumer_id
    message.message_id.ledgerId = commands.wire_id(ledger_id)
    message.message_id.entryId = commands.wire_id(entry_id)
    if partition != -1:
        message.message_id.partition = partition
    if redelivery_count:
        message.redelivery_count = redelivery_count
    if ack_set:
        message.ack_set.extend(ack_set)
    if epoch is not None:
        message.consumer_epoch = epoch
    return encode_frame(command, payload)


def test_message_frame_carries_the_payload_verbatim() -> None:
    section = encode_entry(MessageMetadata(producer_name="p", sequence_id=0, publish_time=1), b"hello-1")
    frame = _decode(commands.message_frame(0, 7, 0, section, redelivery_count=1, ack_set=[13], partition=2))
    assert frame.type == BaseCommand.MESSAGE
    assert frame.payload == section
    body = frame.body
    assert (body.consumer_id, body.message_id.ledgerId, body.message_id.entryId, body.message_id.partition) == (
        0,
        7,
        0,
        2,
    )
    assert (body.redelivery_count, list(body.ack_set)) == (1, [13])


@given(
    consumer_id=st.integers(0, U64_MAX),
    ledger_id=st.integers(-1, INT64_MAX),
    entry_id=st.integers(-1, INT64_MAX),
    payload=st.binary(min_size=1, max_size=64),
    redelivery_count=st.integers(0, 2**32 - 1),
    ack_set=st.none() | st.lists(st.integers(-(2**63), INT64_MAX), max_size=4),
    partition=st.integers(-(2**31), 2**31 - 1),
    epoch=st.none() | st.integers(0, U64_MAX),
)
def test_message_frame_equals_protobuf_encoding(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    payload: bytes,
    redelivery_count: int,
    ack_set: list[int] | None,
    partition: int,
    epoch: int | None,
) -> None:
    args = (consumer_id, ledger_id, entry_id, payload, redelivery_count, ack_set, partition, epoch)
    by_hand = commands.message_frame(*args)
    assert by_hand == _protobuf_message(*args)
    frame = _decode(by_hand)
    assert commands.signed_id(frame.body.message_id.entryId) == entry_id
    assert frame.body.message_id.partition == partition


@given(
    producer_id=st.integers(0, U64_MAX),
    sequence_id=st.integers(0, U64_MAX),
    ledger_id=st.integers(-1, INT64_MAX),
    entry_id=st.integers(-1, INT64_MAX),
    highest_sequence_id=st.none() | st.integers(0, U64_MAX),
)
def test_send_receipt_equals_protobuf_encoding(
    producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, highest_sequence_id: int | None
) -> None:
    command = BaseCommand(type=BaseCommand.SEND_RECEIPT)
    receipt = command.send_receipt
    receipt.producer_id = producer_id
    receipt.sequence_id = sequence_id
    receipt.message_id.ledgerId = commands.wire_id(ledger_id)
    receipt.message_id.entryId = commands.wire_id(entry_id)
    if highest_sequence_id is not None:
        receipt.highest_sequence_id = highest_sequence_id
    by_hand = commands.send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest_sequence_id)
    assert by_hand == encode_frame(command)
    frame = _decode(by_hand)
    assert commands.signed_id(frame.body.message_id.ledgerId) == ledger_id


@given(
    producer_id=st.integers(0, U64_MAX),
    receipts=st.lists(
        st.tuples(
            st.integers(0, U64_MAX), st.integers(0, U64_MAX), st.integers(-1, INT64_MAX), st.integers(-1, INT64_MAX)
        ),
        max_size=5,
    ),
)
def test_send_receipts_join_single_receipts(producer_id: int, receipts: list[tuple[int, int, int, int]]) -> None:
    sends = [(sequence_id, highest) for sequence_id, highest, _, _ in receipts]
    positions = [(ledger_id, entry_id) for _, _, ledger_id, entry_id in receipts]
    joined = b"".join(
        commands.send_receipt(producer_id, sequence_id, ledger_id, entry_id, highest)
        for sequence_id, highest, ledger_id, entry_id in receipts
    )
    assert commands.send_receipts(producer_id, sends, positions) == joined


@given(
    consumer_id=st.integers(0, U64_MAX),
    entries=st.lists(
        st.tuples(
            st.integers(-1, INT64_MAX),
            st.integers(-1, INT64_MAX),
            st.binary(min_size=1, max_size=8),
            st.sampled_from([0, 0, 1, 300]),
            st.none() | st.lists(st.integers(-(2**63), INT64_MAX), max_size=2),
        ),
        max_size=6,
    ),
    partition=st.sampled_from([-1, 0, 3, -2]),
    epoch=st.sampled_from([None, 0, 1, 300]),
)
def test_message_frames_join_single_frames(consumer_id: int, entries: list, partition: int, epoch: int | None) -> None:
    positions = [(ledger_id, entry_id) for ledger_id, entry_id, _, _, _ in entries]
    payloads = [payload for _, _, payload, _, _ in entries]
    counts = [count for _, _, _, count, _ in entries]
    ack_sets = {index: entry[4] for index, entry in enumerate(entries) if entry[4] is not None}
    joined = b"".join(commands.message_frame(consumer_id, *entry, partition, epoch) for entry in entries)
    assert commands.message_frames(consumer_id, positions, payloads, counts, ack_sets, partition, epoch) == joined
    first_time = [(ledger_id, entry_id, payload) for ledger_id, entry_id, payload, _, _ in entries]
    assert commands.message_frames(consumer_id, positions, payloads, partition=partition, epoch=epoch) == b"".join(
        commands.message_frame(consumer_id, *entry, partition=partition, epoch=epoch) for entry in first_time
    )


@given(
    producer_id=st.integers(0, U64_MAX),
    sequence_id=st.integers(0, U64_MAX),
    highest_sequence_id=st.none() | st.integers(0, U64_MAX),
    num_messages=st.integers(-(2**31), 2**31 - 1),
    section=st.binary(max_size=20),
    marker=st.booleans(),
)
def test_send_equals_protobuf_encoding(
    producer_id: int, sequence_id: int, highest_sequence_id: int | None, num_messages: int, section: bytes, marker: bool
) -> None:
    fields: dict[str, int] = {"producer_id": producer_id, "sequence_id": sequence_id}
    if num_messages != 1:
        fields["num_messages"] = num_messages
    if highest_sequence_id is not None:
        fields["highest_sequence_id"] = highest_sequence_id
    if marker:
        fields["marker"] = True
    expected = encode_frame(BaseCommand(type=BaseCommand.SEND, send=fields), section)
    assert commands.send(producer_id, sequence_id, highest_sequence_id, num_messages, section, marker) == expected
