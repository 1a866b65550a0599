"""Pulsar frames: how one command and its optional payload sit on the wire, and the limits a peer must keep.

Owns: the frame layout, the frame-size bound, `ProtocolError`, `Frame`, `FrameDecoder` (a byte stream in,
whole frames out) and `encode_frame`. Must not touch: connection state (connection.py), the inside of a
SEND/MESSAGE payload section (messages.py), sockets, asyncio or clocks.

Layout (reference §4; every integer big-endian):

    [u32 total_size][u32 command_size][BaseCommand][payload section, SEND and MESSAGE only]

`total_size` counts everything after itself. The payload section is kept as raw bytes: the broker stores it
verbatim and replays it behind MESSAGE, so the client's CRC-32C stays valid.
"""

from __future__ import annotations

import struct
from functools import partial
from typing import NamedTuple

from google.protobuf.message import DecodeError, Message

from magnetar.protocol.pulsar_api_pb2 import BaseCommand

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MESSAGE_SIZE_FRAME_PADDING",
    "Frame",
    "FrameDecoder",
    "ProtocolError",
    "command_field_name",
    "encode_frame",
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

# Each Type value names the BaseCommand field of the same number (reference §5); built from the schema so a
# new command needs no edit here.
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
        return getattr(self.command, _FIELD_NAME_BY_TYPE[self.command.type])


# Frame(command, payload) without the Python-level __new__ NamedTuple generates: one per frame. Measured
# with bench/e2e_throughput.py (the event loop's CPU µs per message, commit c201da2); kept for that.
_new_frame = partial(tuple.__new__, Frame)


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
            frames, consumed = self._split(stream)
        except ProtocolError as error:
            self._failure = error
            self._buffer = bytearray()
            raise
        self._buffer = bytearray(stream[consumed:]) if consumed < len(stream) else bytearray()
        return frames

    def _split(self, stream: bytes | bytearray) -> tuple[list[Frame], int]:
        frames: list[Frame] = []
        offset = 0
        end = len(stream)
        max_frame_size = self.max_frame_size
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
                command = BaseCommand()
                try:
                    command.ParseFromString(view[offset + _HEADER_BYTES : command_end])
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


def _check_command(command: BaseCommand) -> None:
    # upb's parser does not enforce proto2 `required`; a missing field would surface later as a default
    # value the client never sent, so it is checked here, once, for the whole command.
    if not command.IsInitialized():
        missing = ", ".join(command.FindInitializationErrors())
        raise ProtocolError(f"BaseCommand lacks required fields: {missing}")
    if not command.HasField(_FIELD_NAME_BY_TYPE[command.type]):
        raise ProtocolError(
            f"BaseCommand of type {_type_name(command.type)} lacks its `{_FIELD_NAME_BY_TYPE[command.type]}` field"
        )


def _type_name(command_type: int) -> str:
    name: str = BaseCommand.Type.Name(command_type)
    return name
