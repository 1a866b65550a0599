"""BookKeeper's v2 wire protocol, sans-IO: requests to bytes, bytes to typed responses (and the reverse,
for a bookie). It is the protocol Pulsar speaks to bookies (`bookkeeperUseV2WireProtocol=true`).

Owns: the frame layout (`BookieProtocol`, `BookieProtoEncoding.RequestEnDeCoderPreV3` and
`ResponseEnDeCoderPreV3`), the op codes, flags and return codes, `ResponseDecoder` and `RequestDecoder`
(a byte stream in, whole frames out), `WireProtocolError`. Must not touch: sockets, asyncio, clocks,
digests (the entry body arrives here already packed by digest.py).

Every frame is a 4-byte big-endian size, then (all integers big-endian, signed):

    header:4 = version(2) << 24 | opCode << 16 | flags
    add request         header | masterKey:20 | entry body
    read request        header | ledgerId:8 | entryId:8 | masterKey:20 (only with DO_FENCING)
    add response        header | rc:4 | ledgerId:8 | entryId:8
    read response       header | rc:4 | ledgerId:8 | entryId:8 | entry body (when rc is EOK)

A read of entry -1 (`LAST_ADD_CONFIRMED`) answers the bookie's last entry of the ledger; with DO_FENCING
it first fences the ledger on that bookie. The v2 decoder of a 4.18 bookie knows ADDENTRY, READENTRY,
BATCH_READ_ENTRY and AUTH only: READ_LAC is a v3 operation, and the last add confirmed comes from the
entry -1 read, as the Java client's `ReadLastConfirmedOp` gets it.

A v2 response carries no request id: the client matches it to its request by (op, ledgerId, entryId).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "ADDENTRY",
    "EBADREQ",
    "EFENCED",
    "EIO",
    "ENOENTRY",
    "ENOLEDGER",
    "EOK",
    "EUA",
    "FLAG_DO_FENCING",
    "FLAG_HIGH_PRIORITY",
    "FLAG_NONE",
    "FLAG_RECOVERY_ADD",
    "LAST_ADD_CONFIRMED",
    "MASTER_KEY_LENGTH",
    "MAX_FRAME_SIZE",
    "READENTRY",
    "AddRequest",
    "AddResponse",
    "ReadRequest",
    "ReadResponse",
    "RequestDecoder",
    "ResponseDecoder",
    "WireProtocolError",
    "encode_add_request",
    "encode_add_response",
    "encode_read_request",
    "encode_read_response",
]

CURRENT_PROTOCOL_VERSION = 2
ADDENTRY = 1
READENTRY = 2

FLAG_NONE = 0x0
FLAG_DO_FENCING = 0x1
FLAG_RECOVERY_ADD = 0x2
FLAG_HIGH_PRIORITY = 0x4

EOK = 0
ENOLEDGER = 1
ENOENTRY = 2
EBADREQ = 100
EIO = 101
EUA = 102
EBADVERSION = 103
EFENCED = 104
EREADONLY = 105
ETOOMANYREQUESTS = 106
EUNKNOWNLEDGERSTATE = 107

LAST_ADD_CONFIRMED = -1
MASTER_KEY_LENGTH = 20

# A bookie's and the Java client's `nettyMaxFrameSizeBytes` default (5 MiB): neither side sends or accepts
# a larger frame, so a larger announced size can only be a corrupt stream.
MAX_FRAME_SIZE = 5 * 1024 * 1024

_SIZE = struct.Struct(">I")
_HEADER = struct.Struct(">I")
_RESPONSE_SIGNED = struct.Struct(">Iiqq")
_READ = struct.Struct(">Iqq")
_ADD_PREFIX = struct.Struct(">II")
_IDS = struct.Struct(">qq")
# header + rc + ledgerId + entryId (ResponseEnDeCoderPreV3.RESPONSE_HEADERS_SIZE).
_RESPONSE_HEADERS_SIZE = 24
_READ_SIZE = _READ.size
# The entry body starts with ledgerId and entryId: an add request shorter than this names no entry.
_ADD_MIN_SIZE = 4 + MASTER_KEY_LENGTH + 16


class WireProtocolError(Exception):
    """The peer broke BookKeeper's v2 protocol; the only safe answer is to close this connection."""


def _packet_header(op_code: int, flags: int) -> int:
    return (CURRENT_PROTOCOL_VERSION << 24) | (op_code << 16) | (flags & 0xFFFF)


def _split_header(header: int) -> tuple[int, int, int]:
    return header >> 24, (header >> 16) & 0xFF, header & 0xFFFF


class AddRequest(NamedTuple):
    ledger_id: int
    entry_id: int
    flags: int
    master_key: bytes
    body: bytes


class ReadRequest(NamedTuple):
    ledger_id: int
    entry_id: int
    flags: int
    master_key: bytes | None


class AddResponse(NamedTuple):
    rc: int
    ledger_id: int
    entry_id: int


class ReadResponse(NamedTuple):
    rc: int
    ledger_id: int
    entry_id: int
    body: bytes


def encode_add_request(master_key: bytes, body: bytes, flags: int = FLAG_NONE) -> bytes:
    """An ADDENTRY frame for the entry `body` (digest.py's package: its first 16 bytes name the entry)."""
    if len(master_key) != MASTER_KEY_LENGTH:
        raise ValueError(f"master key must be {MASTER_KEY_LENGTH} bytes, got {len(master_key)}")
    size = 4 + MASTER_KEY_LENGTH + len(body)
    return b"".join((_ADD_PREFIX.pack(size, _packet_header(ADDENTRY, flags)), master_key, body))


def encode_read_request(
    ledger_id: int, entry_id: int, flags: int = FLAG_NONE, master_key: bytes | None = None
) -> bytes:
    """A READENTRY frame; a fencing read (FLAG_DO_FENCING) must carry the ledger's master key."""
    header = _packet_header(READENTRY, flags)
    if flags & FLAG_DO_FENCING:
        if master_key is None or len(master_key) != MASTER_KEY_LENGTH:
            raise ValueError("a fencing read needs the ledger's 20-byte master key")
        return _SIZE.pack(_READ_SIZE + MASTER_KEY_LENGTH) + _READ.pack(header, ledger_id, entry_id) + master_key
    return _SIZE.pack(_READ_SIZE) + _READ.pack(header, ledger_id, entry_id)


def encode_add_response(rc: int, ledger_id: int, entry_id: int) -> bytes:
    return _SIZE.pack(_RESPONSE_HEADERS_SIZE) + _RESPONSE_SIGNED.pack(
        _packet_header(ADDENTRY, 0), rc, ledger_id, entry_id
    )


def encode_read_response(rc: int, ledger_id: int, entry_id: int, body: bytes = b"") -> bytes:
    size = _RESPONSE_HEADERS_SIZE + len(body)
    head = _SIZE.pack(size) + _RESPONSE_SIGNED.pack(_packet_header(READENTRY, 0), rc, ledger_id, entry_id)
    return head + body if body else head


class _FrameSplitter:
    """Cuts a byte stream into frames (the 4-byte size prefix removed), refusing absurd sizes."""

    __slots__ = ("_buffer", "_min_size")

    def __init__(self, min_size: int) -> None:
        self._buffer = bytearray()
        self._min_size = min_size

    def frames(self, data: bytes) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        offset = 0
        available = len(buffer)
        while available - offset >= 4:
            (size,) = _SIZE.unpack_from(buffer, offset)
            if size < self._min_size or size > MAX_FRAME_SIZE:
                raise WireProtocolError(f"frame size {size} outside [{self._min_size}, {MAX_FRAME_SIZE}]")
            end = offset + 4 + size
            if end > available:
                break
            frames.append(bytes(buffer[offset + 4 : end]))
            offset = end
        if offset:
            del buffer[:offset]
        return frames


class ResponseDecoder:
    """A client's side: bytes from a bookie in, `AddResponse`/`ReadResponse` out, in arrival order.

    A malformed frame raises WireProtocolError and leaves the decoder unusable: close the connection.
    """

    __slots__ = ("_splitter",)

    def __init__(self) -> None:
        self._splitter = _FrameSplitter(_RESPONSE_HEADERS_SIZE)

    def receive_data(self, data: bytes) -> list[AddResponse | ReadResponse]:
        responses: list[AddResponse | ReadResponse] = []
        for frame in self._splitter.frames(data):
            header, rc, ledger_id, entry_id = _RESPONSE_SIGNED.unpack_from(frame, 0)
            version, op_code, _ = _split_header(header)
            if version != CURRENT_PROTOCOL_VERSION:
                raise WireProtocolError(f"response of protocol version {version}, expected 2")
            if op_code == ADDENTRY:
                if len(frame) != _RESPONSE_HEADERS_SIZE:
                    raise WireProtocolError(f"add response of {len(frame)} bytes, expected 24")
                responses.append(AddResponse(rc, ledger_id, entry_id))
            elif op_code == READENTRY:
                responses.append(ReadResponse(rc, ledger_id, entry_id, frame[_RESPONSE_HEADERS_SIZE:]))
            else:
                raise WireProtocolError(f"response with op code {op_code}, expected ADDENTRY or READENTRY")
        return responses


class RequestDecoder:
    """A bookie's side: bytes from a client in, `AddRequest`/`ReadRequest` out (for fake bookies in tests
    and the simulator). A malformed frame raises WireProtocolError."""

    __slots__ = ("_splitter",)

    def __init__(self) -> None:
        self._splitter = _FrameSplitter(4)

    def receive_data(self, data: bytes) -> list[AddRequest | ReadRequest]:
        requests: list[AddRequest | ReadRequest] = []
        for frame in self._splitter.frames(data):
            (header,) = _HEADER.unpack_from(frame, 0)
            version, op_code, flags = _split_header(header)
            if version != CURRENT_PROTOCOL_VERSION:
                raise WireProtocolError(f"request of protocol version {version}, expected 2")
            if op_code == ADDENTRY:
                if len(frame) < _ADD_MIN_SIZE:
                    raise WireProtocolError(f"add request of {len(frame)} bytes, shorter than {_ADD_MIN_SIZE}")
                key = frame[4 : 4 + MASTER_KEY_LENGTH]
                body = frame[4 + MASTER_KEY_LENGTH :]
                ledger_id, entry_id = _IDS.unpack_from(body, 0)
                requests.append(AddRequest(ledger_id, entry_id, flags, key, body))
            elif op_code == READENTRY:
                fencing = bool(flags & FLAG_DO_FENCING)
                expected = _READ_SIZE + (MASTER_KEY_LENGTH if fencing else 0)
                if len(frame) != expected:
                    raise WireProtocolError(f"read request of {len(frame)} bytes, expected {expected}")
                _, ledger_id, entry_id = _READ.unpack_from(frame, 0)
                key_or_none = frame[_READ_SIZE:] if fencing else None
                requests.append(ReadRequest(ledger_id, entry_id, flags, key_or_none))
            else:
                raise WireProtocolError(f"request with op code {op_code}, expected ADDENTRY or READENTRY")
        return requests
