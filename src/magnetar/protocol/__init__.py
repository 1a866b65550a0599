"""The Pulsar binary protocol, sans-IO: bytes in, typed commands out; values in, bytes out.

Owns the wire format: our own proto2 schema (`pulsar_api.proto`, generated into `pulsar_api_pb2`),
framing and its size bounds (`framing`), the per-connection handshake state (`connection`), payload
sections with CRC-32C, batches and ack sets (`messages`), and the frames the broker sends (`commands`).
Must not do I/O, read clocks, or know about topics, subscriptions or storage.
"""

from magnetar.protocol.connection import PROTOCOL_VERSION_MAX, ConnectionState, ServerProtocol
from magnetar.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MESSAGE_SIZE_FRAME_PADDING,
    Frame,
    FrameDecoder,
    ProtocolError,
    encode_frame,
)
from magnetar.protocol.messages import ChecksumError, ParsedEntry, SingleMessage, parse_entry, split_batch

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MESSAGE_SIZE_FRAME_PADDING",
    "PROTOCOL_VERSION_MAX",
    "ChecksumError",
    "ConnectionState",
    "Frame",
    "FrameDecoder",
    "ParsedEntry",
    "ProtocolError",
    "ServerProtocol",
    "SingleMessage",
    "encode_frame",
    "parse_entry",
    "split_batch",
]
