"""Pulsar frames: how one command and its optional payload sit on the wire, and the limits a peer must keep.

Owns: the frame layout, the frame-size bound, `ProtocolError`, `Frame`, `FrameDecoder` (a byte stream in,
whole frames out; a SEND or a SEND_RECEIPT of the usual shape read byte by byte into a `SendFrame` or a
`SendReceipt` instead of parsed by protobuf, for whoever asks), `encode_frame` and `command_field_name`.
Must not touch: connection state (connection.py), the inside of a SEND/MESSAGE payload section
(messages.py), sockets, asyncio or clocks.

Layout (Pulsar's binary protocol specification; every integer big-endian):

    [u32 total_size][u32 command_size][BaseCommand][payload section, SEND and MESSAGE only]

`total_size` counts everything after itself. The payload section is kept as raw bytes: the broker stores it
verbatim and replays it behind MESSAGE, so the client's CRC-32C stays valid.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError, Message

from magnetar.protocol.pulsar_api_pb2 import BaseCommand

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MESSAGE_SIZE_FRAME_PADDING",
    "Frame",
    "FrameDecoder",
    "ProtocolError",
    "SendFrame",
    "SendReceipt",
    "command_field_name",
    "encode_frame",
    "missing_fields",
]

# Pulsar's `maxMessageSize` default (5 MiB). The client assumes it until CONNECTED.max_message_size says
# otherwise, so a broker that keeps the default never sees a larger payload from a well-behaved client.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

# Pulsar's `Commands.MESSAGE_SIZE_FRAME_PADDING`: room for the command and the message metadata around a
# payload of exactly max_message_size. A frame (size prefix included) may be this much larger.
MESSAGE_SIZE_FRAME_PADDING = 10 * 1024

_SIZE = struct.Struct(">I")
_HEADER = struct.Struct(">II")
_SIZE_BYTES = _SIZE.size
_HEADER_BYTES = _HEADER.size
# Only these two commands carry a payload section; any other command with bytes after it is malformed.
_SEND = BaseCommand.SEND
_MESSAGE = BaseCommand.MESSAGE
_SEND_RECEIPT = BaseCommand.SEND_RECEIPT

# Each Type value names the BaseCommand field of the same number, as in Pulsar's PulsarApi.proto; built from
# the schema so a new command needs no edit here.
_FIELD_NAME_BY_TYPE: dict[int, str] = {
    value.number: BaseCommand.DESCRIPTOR.fields_by_number[value.number].name
    for value in BaseCommand.DESCRIPTOR.enum_types_by_name["Type"].values
}


class ProtocolError(Exception):
    """The peer broke the Pulsar protocol; the only safe answer is to close this connection."""


class Frame(NamedTuple):
    """One decoded frame: the command, and for SEND/MESSAGE the raw payload section that followed it.

    `payload` starts at the optional 0x0e02 broker-entry-metadata magic or at the 0x0e01 checksum magic
    (see messages.py); it is `b""` for every other command.
    """

    command: BaseCommand
    payload: bytes

    @property
    def type(self) -> int:
        """The `BaseCommand.Type` value, e.g. `BaseCommand.SEND`."""
        command_type: int = self.command.type
        return command_type

    @property
    def body(self) -> Message:
        """The sub-message the type names, e.g. the `CommandSend` of a SEND."""
        body: Message = getattr(self.command, _FIELD_NAME_BY_TYPE[self.command.type])
        return body


class SendReceipt(NamedTuple):
    """A SEND_RECEIPT read without protobuf (`FrameDecoder.receive_frames_and_receipts`): the ids as the
    wire carries them (uint64; `commands.signed_id` turns a ledger or entry id into Pulsar's int64)."""

    producer_id: int
    sequence_id: int
    ledger_id: int
    entry_id: int


class SendFrame(NamedTuple):
    """A SEND as the broker takes it (`FrameDecoder.receive_frames_and_sends`): of its CommandSend, the
    fields the broker reads, as the wire carries them (uint64; `highest_sequence_id` is 0 when absent, as
    protobuf reads it), and the payload section as it came (see `Frame`)."""

    producer_id: int
    sequence_id: int
    highest_sequence_id: int
    payload: bytes


# Frame(command, payload) without the Python-level __new__ NamedTuple generates: one per frame. Measured
# with bench/e2e_throughput.py (the event loop's CPU µs per message, commit c201da2); kept for that.
_new_frame = partial(tuple.__new__, Frame)
_new_receipt = partial(tuple.__new__, SendReceipt)
_new_send_frame = partial(tuple.__new__, SendFrame)
# A SEND_RECEIPT's command starts with these bytes: `type` (field 1) = SEND_RECEIPT, then the tag of
# `send_receipt` (field 7, length-delimited). Pulsar's brokers and magnetar's write fields in number order.
_RECEIPT_START = bytes((0x08, _SEND_RECEIPT, 0x3A))
# A SEND's command: `type` = SEND, then the tag of `send` (field 6, length-delimited). Every Pulsar
# client writes `type` first (protobuf writes fields in number order).
_SEND_START = bytes((0x08, _SEND, 0x32))
# The CommandSend fields a SEND read by hand may carry, all varints: producer_id (1), sequence_id (2),
# num_messages (3), highest_sequence_id (6), is_chunk (7), marker (8). Anything else (a transaction's
# ids, a message id) sends the frame through protobuf.
_SEND_TAGS = frozenset((0x08, 0x10, 0x18, 0x30, 0x38, 0x40))


def command_field_name(command_type: int) -> str:
    """The BaseCommand field that carries a command of this type (`LOOKUP` -> "lookupTopic")."""
    return _FIELD_NAME_BY_TYPE[command_type]


def encode_frame(command: BaseCommand, payload: bytes = b"") -> bytes:
    """The bytes of one frame. Raises protobuf's EncodeError if a required field is unset (a broker bug)."""
    body: bytes = command.SerializeToString()
    return _HEADER.pack(_SIZE_BYTES + len(body) + len(payload), len(body)) + body + payload


class FrameDecoder:
    """Splits a byte stream into frames, holding back a partial frame until the rest arrives.

    Invariants: the buffer never holds a whole frame after `receive_data` returns, and never more than
    one frame's worth of bytes (`max_frame_size`), because a header announcing more is refused as soon as
    its first four bytes arrive. After a ProtocolError the decoder refuses all further input.
    """

    __slots__ = ("_buffer", "_failure", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + MESSAGE_SIZE_FRAME_PADDING) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._failure: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes of a partial frame waiting for the rest."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> list[Frame]:
        """Every frame completed by `data`, in order. Raises ProtocolError on the first malformed frame."""
        frames: list[Frame] = self._receive(data, None)
        return frames

    def receive_frames_and_receipts(self, data: bytes) -> list[Frame | SendReceipt]:
        """As `receive_data`, but a SEND_RECEIPT of the usual shape comes as a `SendReceipt`, read byte by
        byte instead of parsed into a BaseCommand, in a little more than half the time: a producer that
        keeps thousands of SENDs in flight (a replicator's) reads as many receipts a second. Any other
        receipt (a field this reading does not know, a malformed one) comes as a Frame, as from
        `receive_data`, and is checked the same way."""
        frames: list[Frame | SendReceipt] = self._receive(data, _RECEIPTS_BY_HAND)
        return frames

    def receive_frames_and_sends(self, data: bytes) -> list[Frame | SendFrame]:
        """As `receive_data`, but every SEND comes as a `SendFrame`: one of the usual shape read byte by
        byte instead of parsed into a BaseCommand (1.3 µs a SEND instead of 2.1, the frame's split and
        the fields' reading together), any other through protobuf and checked as `receive_data` checks
        it. The broker reads every frame of its connections this way: most of them are SENDs."""
        frames: list[Frame | SendFrame] = self._receive(data, _SENDS_BY_HAND)
        return frames

    def _receive(self, data: bytes, by_hand: _ByHand | None) -> list[Any]:
        if self._failure is not None:
            raise ProtocolError(f"connection already failed: {self._failure}")
        buffer = self._buffer
        if buffer:
            buffer += data
            if len(buffer) >= _SIZE_BYTES and _SIZE.unpack_from(buffer)[0] + _SIZE_BYTES > len(buffer):
                # Its first frame is still incomplete (a large message arriving read by read): keep waiting
                # without copying, after refusing a frame that could never fit.
                try:
                    _check_sizes(_SIZE.unpack_from(buffer)[0], None, self.max_frame_size)
                except ProtocolError as error:
                    self._failure = error
                    self._buffer = bytearray()
                    raise
                return []
            # Payloads are cut out of the stream by slicing, so it must be bytes: one copy per read that
            # completes a frame, instead of one conversion per frame.
            stream = bytes(buffer)
        else:
            # Common case: nothing pending, so frames are cut straight out of `data`.
            stream = data
        try:
            frames, consumed = self._split(stream, by_hand)
        except ProtocolError as error:
            self._failure = error
            self._buffer = bytearray()
            raise
        self._buffer = bytearray(stream[consumed:]) if consumed < len(stream) else bytearray()
        return frames

    def _split(self, stream: bytes | bytearray, by_hand: _ByHand | None) -> tuple[list[Any], int]:  # noqa: C901 - every frame of a socket read goes through it: left whole until a split is measured
        """The whole frames of `stream` and the bytes they take, one kind of command read `by_hand`."""
        frames: list[Any] = []
        offset = 0
        end = len(stream)
        max_frame_size = self.max_frame_size
        # Locals: looked up once per read, not once per frame.
        hand_start, hand_read, sends_as_frames = (None, None, False) if by_hand is None else by_hand
        with memoryview(stream) as view:
            while end - offset >= _HEADER_BYTES:
                total_size, command_size = _HEADER.unpack_from(stream, offset)
                if not (total_size > _SIZE_BYTES and total_size + _SIZE_BYTES <= max_frame_size) or not (
                    0 < command_size <= total_size - _SIZE_BYTES
                ):
                    _check_sizes(total_size, command_size, max_frame_size)
                frame_end = offset + _SIZE_BYTES + total_size
                if frame_end > end:
                    break
                command_end = offset + _HEADER_BYTES + command_size
                if hand_start is not None and stream.startswith(hand_start, offset + _HEADER_BYTES):
                    read = hand_read(stream, offset + _HEADER_BYTES + 3, command_end, frame_end)  # type: ignore[misc]
                    if read is not None:
                        frames.append(read)
                        offset = frame_end
                        continue
                command = BaseCommand()
                try:
                    # upb parses any buffer: the memoryview saves a copy (the stub says bytes).
                    command.ParseFromString(view[offset + _HEADER_BYTES : command_end])  # type: ignore[arg-type]
                except DecodeError as error:
                    raise ProtocolError(f"unparsable BaseCommand: {error}") from error
                if command.type == _SEND:
                    # Most frames are SENDs: their two required fields are checked directly, which costs
                    # a fraction of the whole-message check every other command gets.
                    send = command.send
                    if not (send.HasField("producer_id") and send.HasField("sequence_id")):
                        _check_command(command)
                    if command_end == frame_end:
                        raise ProtocolError("SEND frame carries no payload section")
                    if sends_as_frames:
                        frames.append(
                            _new_send_frame(
                                (
                                    send.producer_id,
                                    send.sequence_id,
                                    send.highest_sequence_id,
                                    stream[command_end:frame_end],
                                )
                            )
                        )
                    else:
                        frames.append(_new_frame((command, stream[command_end:frame_end])))
                elif command.type == _SEND_RECEIPT and command_end == frame_end:
                    # A producer's answers, one per SEND: checked the same cheap way.
                    receipt = command.send_receipt
                    if not (
                        receipt.HasField("producer_id")
                        and receipt.HasField("sequence_id")
                        and receipt.message_id.IsInitialized()
                    ):
                        _check_command(command)
                    frames.append(_new_frame((command, b"")))
                else:
                    _check_command(command)
                    if command.type == _MESSAGE:
                        if command_end == frame_end:
                            raise ProtocolError("MESSAGE frame carries no payload section")
                        frames.append(_new_frame((command, stream[command_end:frame_end])))
                    elif command_end != frame_end:
                        raise ProtocolError(
                            f"{_type_name(command.type)} frame carries {frame_end - command_end} bytes after its command"
                        )
                    else:
                        frames.append(_new_frame((command, b"")))
                offset = frame_end
            if _SIZE_BYTES <= end - offset < _HEADER_BYTES:
                # Only the size has arrived: an oversized frame is refused before its bytes are buffered.
                _check_sizes(_SIZE.unpack_from(stream, offset)[0], None, max_frame_size)
        return frames, offset


def _receipt_by_hand(stream: bytes | bytearray, start: int, end: int, frame_end: int) -> SendReceipt | None:  # noqa: C901 - a SEND_RECEIPT read without protobuf, per receipt: left whole until a split is measured
    """The CommandSendReceipt whose length prefix is at `start` and which ends at `end`, the frame's end:
    producer id, sequence id, a message id of ledger id and entry id alone, and optionally the highest
    sequence id, in that order. None for anything else, which the caller parses with protobuf instead.

    Its four varints are read by loops written out in place: a helper function called four times made a
    receipt cost 2.1 µs instead of 1.8 (protobuf: 2.7), half of what reading it by hand saves."""
    if end != frame_end:
        return None  # bytes after the command: protobuf's path refuses them
    try:
        if stream[start] != end - start - 1 or stream[start + 1] != 0x08:
            return None  # a body of 128 bytes or more has a longer length prefix: not a usual receipt
        at = start + 2
        byte = stream[at]
        at += 1
        producer_id = byte & 0x7F
        shift = 7
        while byte & 0x80 and shift < 70:
            byte = stream[at]
            at += 1
            producer_id |= (byte & 0x7F) << shift
            shift += 7
        if byte & 0x80:
            return None  # longer than protobuf's ten bytes: its path refuses it
        if stream[at] != 0x10:
            return None
        byte = stream[at + 1]
        at += 2
        sequence_id = byte & 0x7F
        shift = 7
        while byte & 0x80 and shift < 70:
            byte = stream[at]
            at += 1
            sequence_id |= (byte & 0x7F) << shift
            shift += 7
        if byte & 0x80:
            return None  # longer than protobuf's ten bytes: its path refuses it
        # message_id (field 3): ledgerId (1), then entryId (2), and nothing else.
        if stream[at] != 0x1A or stream[at + 2] != 0x08:
            return None
        message_id_end = at + 2 + stream[at + 1]
        byte = stream[at + 3]
        at += 4
        ledger_id = byte & 0x7F
        shift = 7
        while byte & 0x80 and shift < 70:
            byte = stream[at]
            at += 1
            ledger_id |= (byte & 0x7F) << shift
            shift += 7
        if byte & 0x80:
            return None  # longer than protobuf's ten bytes: its path refuses it
        if stream[at] != 0x10:
            return None
        byte = stream[at + 1]
        at += 2
        entry_id = byte & 0x7F
        shift = 7
        while byte & 0x80 and shift < 70:
            byte = stream[at]
            at += 1
            entry_id |= (byte & 0x7F) << shift
            shift += 7
        if byte & 0x80:
            return None  # longer than protobuf's ten bytes: its path refuses it
        if at != message_id_end:
            return None
        if at < end:
            # highest_sequence_id (field 4): skipped, as the protobuf path's callers do.
            if stream[at] != 0x20:
                return None
            at += 1
            last = at + 9  # ten bytes at most, as for the ids
            while stream[at] & 0x80 and at < last:
                at += 1
            if stream[at] & 0x80:
                return None
            at += 1
    except IndexError:
        return None
    if at != end or sequence_id >> 64 or producer_id >> 64 or ledger_id >> 64 or entry_id >> 64:
        return None
    return _new_receipt((producer_id, sequence_id, ledger_id, entry_id))


def _send_by_hand(stream: bytes | bytearray, start: int, end: int, frame_end: int) -> SendFrame | None:  # noqa: C901 - a SEND read without protobuf, per SEND: a split cost 50-67 ns a SEND (docs/performance.md)
    """The SEND whose CommandSend has its length prefix at `start` and ends at `end`, the command's end,
    with its payload section up to `frame_end`: varint fields of `_SEND_TAGS` alone, in any order (the
    last of a repeated field counts, as in protobuf), producer id and sequence id among them. None for
    anything else, which the caller parses with protobuf instead."""
    if end == frame_end:
        return None  # no payload section: protobuf's path refuses it
    producer_id = sequence_id = -1
    highest_sequence_id = 0
    try:
        if stream[start] != end - start - 1:
            return None  # a body of 128 bytes or more has a longer length prefix: not a usual SEND
        at = start + 1
        while at < end:
            tag = stream[at]
            if tag not in _SEND_TAGS:
                return None
            byte = stream[at + 1]
            at += 2
            value = byte & 0x7F
            shift = 7
            # At most ten bytes, as protobuf reads: a varint left open would run on into the payload.
            while byte & 0x80 and shift < 70:
                byte = stream[at]
                at += 1
                value |= (byte & 0x7F) << shift
                shift += 7
            if byte & 0x80:
                return None  # longer than protobuf's ten bytes: its path refuses it
            if tag == 0x10:
                sequence_id = value
            elif tag == 0x08:
                producer_id = value
            elif tag == 0x30:
                highest_sequence_id = value
    except IndexError:
        return None
    if at != end or producer_id < 0 or sequence_id < 0 or (producer_id | sequence_id | highest_sequence_id) >> 64:
        return None
    return _new_send_frame((producer_id, sequence_id, highest_sequence_id, stream[end:frame_end]))


class _ByHand(NamedTuple):
    """How `FrameDecoder._split` reads one kind of command without protobuf: the bytes such a command
    starts with (`type`, then the tag of its field), the reader, which answers None for a shape it does
    not know (protobuf then parses and checks the frame), and whether SENDs that protobuf parses come as
    SendFrames too, so that the caller gets every SEND in one shape."""

    start: bytes
    read: Callable[[Any, int, int, int], Any]
    sends_as_frames: bool


_RECEIPTS_BY_HAND = _ByHand(_RECEIPT_START, _receipt_by_hand, False)
_SENDS_BY_HAND = _ByHand(_SEND_START, _send_by_hand, True)


def _check_sizes(total_size: int, command_size: int | None, max_frame_size: int) -> None:
    if total_size + _SIZE_BYTES > max_frame_size:
        raise ProtocolError(
            f"frame of {total_size + _SIZE_BYTES} bytes exceeds the limit of {max_frame_size} "
            f"(max message size plus {MESSAGE_SIZE_FRAME_PADDING} bytes of padding)"
        )
    if total_size < _SIZE_BYTES + 1:
        raise ProtocolError(f"frame total size {total_size} cannot hold a command")
    if command_size is not None and (command_size == 0 or command_size > total_size - _SIZE_BYTES):
        raise ProtocolError(f"command size {command_size} does not fit frame total size {total_size}")


def missing_fields(message: Message) -> str:
    """The required fields `message` lacks, comma-separated (upb's parser does not enforce proto2
    `required`: a message found not IsInitialized() after parsing is named with this)."""
    errors: list[str] = []
    # The runtime fills the list it is given; types-protobuf's stub of IsInitialized takes none.
    message.IsInitialized(errors)  # type: ignore[call-arg]
    return ", ".join(errors)


def _check_command(command: BaseCommand) -> None:
    # upb's parser does not enforce proto2 `required`; a missing field would surface later as a default
    # value the client never sent, so it is checked here, once, for the whole command.
    if not command.IsInitialized():
        raise ProtocolError(f"BaseCommand lacks required fields: {missing_fields(command)}")
    if not command.HasField(_FIELD_NAME_BY_TYPE[command.type]):  # type: ignore[arg-type]  # a field name by type
        raise ProtocolError(
            f"BaseCommand of type {_type_name(command.type)} lacks its `{_FIELD_NAME_BY_TYPE[command.type]}` field"
        )


def _type_name(command_type: int) -> str:
    name: str = BaseCommand.Type.Name(BaseCommand.Type.ValueType(command_type))
    return name
