"""Framing and the connection handshake: each frame whole, byte by byte, with trailing bytes; every way a
peer can break the framing raises ProtocolError and nothing else."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import commands
from magnetar.protocol.connection import PROTOCOL_VERSION_MAX, ConnectionState, ServerProtocol
from magnetar.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MESSAGE_SIZE_FRAME_PADDING,
    Frame,
    FrameDecoder,
    ProtocolError,
    SendFrame,
    SendReceipt,
    _send_by_hand,
    command_field_name,
    encode_frame,
)
from magnetar.protocol.messages import encode_entry
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, MessageMetadata

# pulsar-client 3.13 (C++ 4.2.0): the first bytes it ever sends, recorded from a raw TCP listener.
CLIENT_CONNECT = bytes.fromhex(
    "0000002900000025080212210a1150756c7361722d4350502d76342e322e3020142a046e6f6e65520408011001"
)


def _send_frame(sequence_id: int = 0, body: bytes = b"hello-1") -> bytes:
    metadata = MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1)
    command = BaseCommand(type=BaseCommand.SEND, send={"producer_id": 0, "sequence_id": sequence_id})
    return encode_frame(command, encode_entry(metadata, body))


FLOW = encode_frame(BaseCommand(type=BaseCommand.FLOW, flow={"consumer_id": 0, "messagePermits": 1000}))
PING = commands.ping()
SAMPLES = [CLIENT_CONNECT, FLOW, PING, _send_frame()]


def _header(total_size: int, command_size: int) -> bytes:
    return struct.pack(">II", total_size, command_size)


def test_client_first_bytes_decode_to_connect() -> None:
    [frame] = FrameDecoder().receive_data(CLIENT_CONNECT)
    assert frame.type == BaseCommand.CONNECT
    assert frame.payload == b""
    connect = frame.body
    assert connect.client_version == "Pulsar-CPP-v4.2.0"
    assert connect.protocol_version == 20
    assert connect.auth_method_name == "none"
    assert connect.feature_flags.supports_auth_refresh
    assert connect.feature_flags.supports_broker_entry_metadata
    assert not connect.HasField("auth_data")


@pytest.mark.parametrize("data", SAMPLES, ids=["connect", "flow", "ping", "send"])
def test_frame_whole_byte_by_byte_and_with_trailing_bytes(data: bytes) -> None:
    [whole] = FrameDecoder().receive_data(data)

    decoder = FrameDecoder()
    frames: list[Frame] = []
    for index in range(len(data)):
        frames += decoder.receive_data(data[index : index + 1])
        assert decoder.buffered_bytes == (0 if index == len(data) - 1 else index + 1)
    assert frames == [whole]

    decoder = FrameDecoder()
    trailing = data + data[:5]
    assert decoder.receive_data(trailing) == [whole]
    assert decoder.buffered_bytes == 5
    assert decoder.receive_data(data[5:]) == [whole]
    assert decoder.buffered_bytes == 0


def test_send_frame_keeps_payload_section_verbatim() -> None:
    data = _send_frame(7, b"body")
    [frame] = FrameDecoder().receive_data(data)
    assert frame.body.sequence_id == 7
    metadata = MessageMetadata(producer_name="p", sequence_id=7, publish_time=1)
    assert frame.payload == encode_entry(metadata, b"body")


def test_many_frames_in_one_chunk_and_split_anywhere() -> None:
    stream = b"".join(SAMPLES * 3)
    expected = FrameDecoder().receive_data(stream)
    assert [frame.type for frame in expected] == [
        frame.type for frame in FrameDecoder().receive_data(b"".join(SAMPLES))
    ] * 3
    for cut in range(len(stream)):
        decoder = FrameDecoder()
        assert decoder.receive_data(stream[:cut]) + decoder.receive_data(stream[cut:]) == expected


def test_frame_at_the_limit_passes_and_one_byte_more_fails() -> None:
    limit = 64
    decoder = FrameDecoder(max_frame_size=limit)
    command = BaseCommand(type=BaseCommand.SEND, send={"producer_id": 0, "sequence_id": 0})
    head = encode_frame(command)
    payload = b"x" * (limit - len(head))
    assert len(decoder.receive_data(encode_frame(command, payload))) == 1
    with pytest.raises(ProtocolError, match="exceeds the limit of 64"):
        FrameDecoder(max_frame_size=limit).receive_data(encode_frame(command, payload + b"x"))


def test_oversized_frame_is_refused_from_its_size_alone() -> None:
    too_big = DEFAULT_MAX_MESSAGE_SIZE + MESSAGE_SIZE_FRAME_PADDING - 4 + 1
    with pytest.raises(ProtocolError, match="max message size plus 10240 bytes of padding"):
        FrameDecoder().receive_data(struct.pack(">I", too_big))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_header(0, 0), "cannot hold a command"),
        (_header(4, 0), "cannot hold a command"),
        (_header(10, 0), "command size 0"),
        (_header(10, 7), "command size 7 does not fit"),
        (_header(10, 6) + b"\xff" * 6, "unparsable BaseCommand"),
        (_header(6, 2) + b"\x08\x45", "lacks required fields"),  # type 69 is no command
        (_header(6, 2) + b"\x10\x01", "lacks required fields"),  # no type at all
        (_header(6, 2) + b"\x08\x0b", "lacks its `flow` field"),
        (_header(8, 4) + b"\x08\x0b\x5a\x00", "lacks required fields"),  # FLOW {} without consumer_id
        (_header(4 + len(PING[8:]) + 2, len(PING[8:])) + PING[8:] + b"\x00\x00", "PING frame carries 2 bytes"),
        (encode_frame(BaseCommand(type=BaseCommand.SEND, send={"producer_id": 0, "sequence_id": 0})), "no payload"),
        # SEND_RECEIPT {producer_id: 0}, then {producer_id: 0, sequence_id: 1, message_id: {}}.
        (_header(10, 6) + b"\x08\x07\x3a\x02\x08\x00", "lacks required fields"),
        (_header(14, 10) + b"\x08\x07\x3a\x06\x08\x00\x10\x01\x1a\x00", "lacks required fields"),
    ],
)
def test_malformed_frames_raise_protocol_error(data: bytes, message: str) -> None:
    decoder = FrameDecoder()
    with pytest.raises(ProtocolError, match=message):
        decoder.receive_data(data)
    with pytest.raises(ProtocolError, match="already failed"):
        decoder.receive_data(PING)


def test_truncated_frame_waits_instead_of_failing() -> None:
    decoder = FrameDecoder()
    assert decoder.receive_data(CLIENT_CONNECT[:-1]) == []
    assert decoder.buffered_bytes == len(CLIENT_CONNECT) - 1


def test_command_field_name_follows_the_schema() -> None:
    assert command_field_name(BaseCommand.LOOKUP) == "lookupTopic"
    assert command_field_name(BaseCommand.ACTIVE_CONSUMER_CHANGE) == "active_consumer_change"


# --- connection handshake


def test_connection_requires_connect_first_and_negotiates_the_version() -> None:
    protocol = ServerProtocol()
    assert protocol.state is ConnectionState.AWAITING_CONNECT
    frames = protocol.receive_data(CLIENT_CONNECT + PING + FLOW)
    assert [frame.type for frame in frames] == [BaseCommand.CONNECT, BaseCommand.PING, BaseCommand.FLOW]
    assert protocol.state is ConnectionState.CONNECTED
    assert protocol.client_version == "Pulsar-CPP-v4.2.0"
    assert protocol.protocol_version == 20


def test_newer_client_gets_our_max_version() -> None:
    connect = BaseCommand(type=BaseCommand.CONNECT, connect={"client_version": "future", "protocol_version": 21})
    protocol = ServerProtocol()
    protocol.receive_data(encode_frame(connect))
    assert protocol.protocol_version == PROTOCOL_VERSION_MAX == 20


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (PING, "expected CONNECT as the first command, got PING"),
        (CLIENT_CONNECT + CLIENT_CONNECT, "already connected"),
        (CLIENT_CONNECT + commands.message_frame(0, 1, 2, b"\x00\x00\x00\x00"), "does not send MESSAGE"),
        (CLIENT_CONNECT + commands.success(1), "does not send SUCCESS"),
    ],
)
def test_connection_state_violations(data: bytes, message: str) -> None:
    protocol = ServerProtocol()
    with pytest.raises(ProtocolError, match=message):
        protocol.receive_data(data)
    assert protocol.state is ConnectionState.FAILED
    with pytest.raises(ProtocolError, match="already failed"):
        protocol.receive_data(PING)


def test_connection_limit_follows_max_message_size() -> None:
    protocol = ServerProtocol(max_message_size=100)
    protocol.receive_data(CLIENT_CONNECT)
    with pytest.raises(ProtocolError, match="exceeds the limit of 10340"):
        protocol.receive_data(struct.pack(">I", 100 + MESSAGE_SIZE_FRAME_PADDING))


# --- fuzz: whatever arrives, the codec returns frames or raises ProtocolError


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.integers(min_value=1, max_value=8))
def test_random_bytes_parse_or_raise_protocol_error(data: bytes, chunk: int) -> None:
    protocol = ServerProtocol()
    try:
        for start in range(0, len(data), chunk):
            protocol.receive_data(data[start : start + chunk])
    except ProtocolError:
        assert protocol.state is ConnectionState.FAILED


@settings(max_examples=1000, deadline=None)
@given(st.binary(min_size=1, max_size=120), st.binary(max_size=40), st.booleans())
def test_random_commands_in_valid_frames_parse_or_raise_protocol_error(
    command: bytes, payload: bytes, after_connect: bool
) -> None:
    frame = struct.pack(">II", 4 + len(command) + len(payload), len(command)) + command + payload
    protocol = ServerProtocol()
    if after_connect:
        protocol.receive_data(CLIENT_CONNECT)
    try:
        frames = protocol.receive_data(frame)
    except ProtocolError:
        return
    [decoded] = frames
    if isinstance(decoded, SendFrame):
        # Read by hand or not, a SEND says what protobuf reads in the same bytes.
        send = BaseCommand.FromString(command).send
        assert tuple(decoded) == (send.producer_id, send.sequence_id, send.highest_sequence_id, payload)
        return
    assert decoded.command.IsInitialized()
    assert decoded.command.HasField(command_field_name(decoded.type))


# --- SEND_RECEIPTs read by hand (receive_frames_and_receipts), against protobuf's reading of the same bytes

_IDS = st.one_of(st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=(1 << 64) - 1))


def _receipt_frame(producer_id: int, sequence_id: int, ledger_id: int, entry_id: int, **more: object) -> bytes:
    """A SEND_RECEIPT as protobuf writes it; `more` sets other fields of the receipt or of its message id."""
    message_id = {"ledgerId": ledger_id, "entryId": entry_id, **more.pop("message_id", {})}  # type: ignore[dict-item]
    receipt = {"producer_id": producer_id, "sequence_id": sequence_id, "message_id": message_id, **more}
    return encode_frame(BaseCommand(type=BaseCommand.SEND_RECEIPT, send_receipt=receipt))


def _as_protobuf_reads(data: bytes) -> list[tuple[int, int, int, int]]:
    receipts = []
    for frame in FrameDecoder().receive_data(data):
        receipt = frame.command.send_receipt
        message_id = receipt.message_id
        receipts.append((receipt.producer_id, receipt.sequence_id, message_id.ledgerId, message_id.entryId))
    return receipts


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_IDS, _IDS, _IDS, _IDS, st.one_of(st.none(), _IDS)), min_size=1, max_size=20))
def test_receipts_read_by_hand_equal_protobufs_reading(receipts: list) -> None:
    data = b"".join(
        _receipt_frame(p, s, ledger, entry, **({} if highest is None else {"highest_sequence_id": highest}))
        for p, s, ledger, entry, highest in receipts
    )
    read = FrameDecoder().receive_frames_and_receipts(data)
    assert all(isinstance(item, SendReceipt) for item in read)
    assert [tuple(item) for item in read] == _as_protobuf_reads(data)


def test_receipts_of_the_brokers_hand_encoder_are_read_by_hand() -> None:
    sends = [(sequence_id, sequence_id + 5) for sequence_id in (0, 1, 127, 128, 16_384, (1 << 64) - 1)]
    data = commands.send_receipts(
        3, sends, [(12, 0), (12, 1), (12, 200), (12, 1 << 40), (12, 5), (-1 & ((1 << 64) - 1), -1 & ((1 << 64) - 1))]
    )
    read = FrameDecoder().receive_frames_and_receipts(data)
    assert [type(item) for item in read] == [SendReceipt] * len(sends)
    assert [tuple(item) for item in read] == _as_protobuf_reads(data)


@pytest.mark.parametrize(
    "more",
    [
        {"message_id": {"partition": 2}},
        {"message_id": {"batch_index": 0}},
        {"message_id": {"batch_size": 3, "partition": -1}},
    ],
    ids=["partition", "batch_index", "batch_size"],
)
def test_a_receipt_of_another_shape_comes_as_a_frame(more: dict) -> None:
    """What the hand reading does not know goes through protobuf, with every check receive_data makes."""
    data = _receipt_frame(0, 9, 4, 5, **more)
    [frame] = FrameDecoder().receive_frames_and_receipts(data)
    assert isinstance(frame, Frame) and frame.command.send_receipt.sequence_id == 9
    assert frame.command.send_receipt.message_id.entryId == 5


@pytest.mark.parametrize(
    "body",
    [
        bytes.fromhex("08073a06080010011a00"),  # message id without its required fields
        bytes.fromhex("08073a0608001a020801"),  # no sequence id
        bytes.fromhex("08073a08080010011a0408011080"),  # a varint cut by the end of its field
        bytes.fromhex("08073a1408001080808080808080808080001a0408011002"),  # an eleven-byte sequence id
        bytes.fromhex("08073a160800100a1a040801100220808080808080808080800a"),  # an eleven-byte highest id
        bytes.fromhex("08073a1308001080808080808080808080" + "1a0408011002"),  # its eleventh byte reads as a tag
    ],
    ids=[
        "empty-message-id",
        "no-sequence-id",
        "cut-varint",
        "long-sequence-id",
        "long-highest-id",
        "long-sequence-id-then-a-tag",
    ],
)
def test_a_malformed_receipt_raises_as_receive_data_does(body: bytes) -> None:
    frame = _header(4 + len(body), len(body)) + body
    with pytest.raises(ProtocolError):
        FrameDecoder().receive_data(frame)
    with pytest.raises(ProtocolError):
        FrameDecoder().receive_frames_and_receipts(frame)


def test_receipts_between_other_frames_keep_their_order_split_anywhere() -> None:
    data = _receipt_frame(0, 1, 7, 1) + PING + _receipt_frame(0, 2, 7, 2, message_id={"partition": 1}) + FLOW
    data += _receipt_frame(0, 3, 7, 3)
    whole = FrameDecoder().receive_frames_and_receipts(data)
    assert [type(item).__name__ for item in whole] == ["SendReceipt", "Frame", "Frame", "Frame", "SendReceipt"]
    for cut in range(1, len(data)):
        decoder = FrameDecoder()
        split = decoder.receive_frames_and_receipts(data[:cut]) + decoder.receive_frames_and_receipts(data[cut:])
        assert split == whole, cut


# --- SENDs read by hand (receive_frames_and_sends, the broker's reading), against protobuf's reading

_SEND_FIELDS = st.fixed_dictionaries(
    {"producer_id": _IDS, "sequence_id": _IDS},
    optional={
        "num_messages": st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1),
        "highest_sequence_id": _IDS,
        "is_chunk": st.booleans(),
        "marker": st.booleans(),
    },
)


def _send_with(fields: dict, payload: bytes = b"\x0e\x01section") -> bytes:
    """A SEND as protobuf writes it, with these CommandSend fields, carrying `payload`."""
    return encode_frame(BaseCommand(type=BaseCommand.SEND, send=fields), payload)


def _sends_as_protobuf_reads(data: bytes) -> list[tuple[int, int, int, bytes]]:
    return [
        (
            frame.command.send.producer_id,
            frame.command.send.sequence_id,
            frame.command.send.highest_sequence_id,
            frame.payload,
        )
        for frame in FrameDecoder().receive_data(data)
    ]


def _by_hand(frame: bytes) -> SendFrame | None:
    """What the hand reading makes of the one SEND in `frame` (None: it leaves it to protobuf)."""
    _total, command_size = struct.unpack_from(">II", frame)
    return _send_by_hand(frame, 11, 8 + command_size, len(frame))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_SEND_FIELDS, st.binary(min_size=1, max_size=30)), min_size=1, max_size=20))
def test_sends_read_by_hand_equal_protobufs_reading(sends: list) -> None:
    frames = [_send_with(fields, payload) for fields, payload in sends]
    assert all(_by_hand(frame) is not None for frame in frames)
    data = b"".join(frames)
    read = FrameDecoder().receive_frames_and_sends(data)
    assert all(isinstance(item, SendFrame) for item in read)
    assert [tuple(item) for item in read] == _sends_as_protobuf_reads(data)


def test_sends_of_the_replicators_hand_encoder_are_read_by_hand() -> None:
    frames = [
        commands.send(1, 0, None, 1, b"\x0e\x01a"),
        commands.send(1, 1 << 40, (1 << 40) + 9, 10, b"\x0e\x01b"),
        commands.send(7, (1 << 64) - 1, None, 1, b"\x0e\x01c", marker=True),
    ]
    assert all(_by_hand(frame) is not None for frame in frames)
    data = b"".join(frames)
    assert [tuple(item) for item in FrameDecoder().receive_frames_and_sends(data)] == _sends_as_protobuf_reads(data)


@pytest.mark.parametrize(
    "more",
    [{"txnid_least_bits": 5, "txnid_most_bits": 1}, {"message_id": {"ledgerId": 3, "entryId": 4}}],
    ids=["transaction", "message-id"],
)
def test_a_send_of_another_shape_goes_through_protobuf(more: dict) -> None:
    """Fields the hand reading does not know: protobuf reads the SEND, which still comes as a SendFrame."""
    frame = _send_with({"producer_id": 2, "sequence_id": 9, "highest_sequence_id": 11, **more})
    assert _by_hand(frame) is None
    [read] = FrameDecoder().receive_frames_and_sends(frame)
    assert read == SendFrame(2, 9, 11, b"\x0e\x01section")


@pytest.mark.parametrize(
    "body",
    [
        bytes.fromhex("0806320208 01"),  # no sequence id
        bytes.fromhex("080632020801 10"),  # a field after the CommandSend's end
        bytes.fromhex("08063204080110 80"),  # a varint cut by the end of its field
        bytes.fromhex("0806320f0801 10" + "80" * 11 + "00"),  # a varint longer than ten bytes
        bytes.fromhex("0806320f0801 10" + "80" * 10 + "1005"),  # its eleventh byte reads as a valid field
    ],
    ids=["no-sequence-id", "after-the-end", "cut-varint", "long-varint", "long-varint-then-a-field"],
)
def test_a_malformed_send_raises_as_receive_data_does(body: bytes) -> None:
    frame = _header(4 + len(body) + 3, len(body)) + body + b"\x0e\x01x"
    with pytest.raises(ProtocolError):
        FrameDecoder().receive_data(frame)
    with pytest.raises(ProtocolError):
        FrameDecoder().receive_frames_and_sends(frame)


class _CountedBytes(bytes):
    """Bytes that count how many of them are read one at a time."""

    reads = 0

    def __getitem__(self, index: int) -> int:  # the reader indexes single bytes only
        type(self).reads += 1
        return super().__getitem__(index)


def test_a_varint_left_open_does_not_run_on_into_the_payload() -> None:
    """The last field of the CommandSend leaves its varint open, and the payload is 100 KB of 0xFF: read on,
    that would build an integer of 700,000 bits a byte at a time. The hand reading stops at ten bytes."""
    body = bytes.fromhex("08063204080110ff")
    frame = _header(4 + len(body) + 100_000, len(body)) + body + b"\xff" * 100_000
    counted = _CountedBytes(frame)
    _total, command_size = struct.unpack_from(">II", frame)
    assert _send_by_hand(counted, 11, 8 + command_size, len(frame)) is None
    assert _CountedBytes.reads <= 16
    with pytest.raises(ProtocolError):
        FrameDecoder().receive_frames_and_sends(frame)


def test_a_send_without_payload_raises_as_receive_data_does() -> None:
    frame = encode_frame(BaseCommand(type=BaseCommand.SEND, send={"producer_id": 0, "sequence_id": 1}))
    for read in (FrameDecoder().receive_data, FrameDecoder().receive_frames_and_sends):
        with pytest.raises(ProtocolError, match="SEND frame carries no payload section"):
            read(frame)


def test_sends_between_other_frames_keep_their_order_split_anywhere() -> None:
    data = _send_frame(1) + PING + _send_with({"producer_id": 0, "sequence_id": 2, "txnid_least_bits": 1}) + FLOW
    data += _send_frame(3)
    whole = FrameDecoder().receive_frames_and_sends(data)
    assert [type(item).__name__ for item in whole] == ["SendFrame", "Frame", "SendFrame", "Frame", "SendFrame"]
    assert [item.sequence_id for item in whole if isinstance(item, SendFrame)] == [1, 2, 3]
    for cut in range(1, len(data)):
        decoder = FrameDecoder()
        split = decoder.receive_frames_and_sends(data[:cut]) + decoder.receive_frames_and_sends(data[cut:])
        assert split == whole, cut


def test_connection_gives_sends_as_send_frames_and_refuses_one_before_connect() -> None:
    protocol = ServerProtocol()
    connect, send, flow = protocol.receive_data(CLIENT_CONNECT + _send_frame(4) + FLOW)
    assert connect.type == BaseCommand.CONNECT and flow.type == BaseCommand.FLOW
    assert isinstance(send, SendFrame) and send.sequence_id == 4
    assert protocol.receive_data(_send_frame(5)) == [SendFrame(0, 5, 0, _send_frame(5)[-len(send.payload) :])]
    early = ServerProtocol()
    with pytest.raises(ProtocolError, match="expected CONNECT as the first command, got SEND"):
        early.receive_data(_send_frame(1))
    assert early.state is ConnectionState.FAILED
