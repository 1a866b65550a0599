"""BookKeeper's v2 frames and entry digests: golden bytes, whole, byte by byte, with trailing bytes, and
malformed input refused with one error."""

from __future__ import annotations

import pytest

from magnetar.bookkeeper import wire
from magnetar.bookkeeper.digest import DigestManager, DigestType, master_key
from magnetar.bookkeeper.errors import DigestMatchError

# SHA-1("ledger"), the master key of an empty password (MacDigestManager.EMPTY_LEDGER_KEY).
EMPTY_PASSWORD_KEY = bytes.fromhex("850bf1071c5e3d8c24235676f8816ae0cbe2f14f")
# Ledger 900001, entry 0, LAC -1, length 5, CRC32C, password "pw", payload "hello": the frame
# tests/bookkeeper/test_conformance.py sends to real bookies, which store it and BookieShell reads it back.
GOLDEN_ADD = bytes.fromhex(
    "00000041"  # frame size 65
    "02010000"  # version 2, ADDENTRY, no flags
    "2aa226ba095b6969a64871977693b14671710d76"  # master key SHA-1("ledger" + "pw")
    "00000000000dbba1"  # ledger 900001
    "0000000000000000"  # entry 0
    "ffffffffffffffff"  # LAC -1
    "0000000000000005"  # length 5
    "fedd8dc3"  # CRC32C of the 32 header bytes and the payload
    "68656c6c6f"  # "hello"
)


def golden_body() -> bytes:
    return DigestManager(900001, DigestType.CRC32C, b"pw").package(0, -1, 5, b"hello")


def test_master_keys() -> None:
    assert master_key(b"") == EMPTY_PASSWORD_KEY
    assert master_key(b"pw") == GOLDEN_ADD[8:28]


def test_golden_add_frame() -> None:
    assert wire.encode_add_request(master_key(b"pw"), golden_body()) == GOLDEN_ADD


def test_read_request_frames() -> None:
    assert wire.encode_read_request(7, 3) == bytes.fromhex("000000140202000000000000000000070000000000000003")
    fencing = wire.encode_read_request(7, -1, wire.FLAG_DO_FENCING, EMPTY_PASSWORD_KEY)
    assert fencing == bytes.fromhex("00000028020200010000000000000007ffffffffffffffff") + EMPTY_PASSWORD_KEY
    with pytest.raises(ValueError, match="master key"):
        wire.encode_read_request(7, -1, wire.FLAG_DO_FENCING)


def requests_of(chunks: list[bytes]) -> list[object]:
    decoder = wire.RequestDecoder()
    found: list[object] = []
    for chunk in chunks:
        found += decoder.receive_data(chunk)
    return found


def test_requests_whole_byte_by_byte_and_with_trailing_bytes() -> None:
    read = wire.encode_read_request(7, -1, wire.FLAG_DO_FENCING, EMPTY_PASSWORD_KEY)
    stream = GOLDEN_ADD + read
    expected = [
        wire.AddRequest(900001, 0, wire.FLAG_NONE, master_key(b"pw"), golden_body()),
        wire.ReadRequest(7, -1, wire.FLAG_DO_FENCING, EMPTY_PASSWORD_KEY),
    ]
    assert requests_of([stream]) == expected
    assert requests_of([stream[i : i + 1] for i in range(len(stream))]) == expected
    decoder = wire.RequestDecoder()
    assert decoder.receive_data(stream + read[:7]) == expected
    assert decoder.receive_data(read[7:]) == expected[1:]


def test_responses_whole_byte_by_byte_and_with_trailing_bytes() -> None:
    read = wire.encode_read_response(wire.EOK, 5, -1, b"body")
    stream = wire.encode_add_response(wire.EFENCED, 5, 9) + read
    expected = [wire.AddResponse(wire.EFENCED, 5, 9), wire.ReadResponse(wire.EOK, 5, -1, b"body")]
    assert wire.ResponseDecoder().receive_data(stream) == expected
    decoder = wire.ResponseDecoder()
    assert [response for byte in stream for response in decoder.receive_data(bytes([byte]))] == expected
    decoder = wire.ResponseDecoder()
    assert decoder.receive_data(stream + read[:30]) == expected
    assert decoder.receive_data(read[30:]) == expected[1:]
    assert stream[:28] == bytes.fromhex("00000018020100000000006800000000000000050000000000000009")


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (bytes.fromhex("0000000402010000"), "frame size 4"),
        (bytes.fromhex("7fffffff"), "frame size"),
        (bytes.fromhex("0000001803010000") + bytes(20), "version 3"),
        (bytes.fromhex("0000001802040000") + bytes(20), "op code 4"),
        (bytes.fromhex("0000001902010000") + bytes(21), "add response of 25 bytes"),
    ],
)
def test_malformed_responses_raise_one_error(frame: bytes, message: str) -> None:
    with pytest.raises(wire.WireProtocolError, match=message):
        wire.ResponseDecoder().receive_data(frame)


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (bytes.fromhex("000000080201000000000000"), "shorter than"),
        (bytes.fromhex("0000001402020001") + bytes(16), "expected 40"),
        (bytes.fromhex("0000000402070000"), "op code 7"),
    ],
)
def test_malformed_requests_raise_one_error(frame: bytes, message: str) -> None:
    with pytest.raises(wire.WireProtocolError, match=message):
        wire.RequestDecoder().receive_data(frame)


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda kind: kind.name)
def test_every_digest_round_trips_and_catches_corruption(digest_type: DigestType) -> None:
    digest = DigestManager(3, digest_type, b"secret")
    body = digest.package(4, 3, 100, b"payload")
    assert len(body) == 32 + digest.digest_length + 7
    header, payload = digest.verify(4, body)
    assert (header.ledger_id, header.entry_id, header.last_add_confirmed, header.length, payload) == (
        3,
        4,
        3,
        100,
        b"payload",
    )
    with pytest.raises(DigestMatchError):
        digest.verify(5, body)
    with pytest.raises(DigestMatchError):
        DigestManager(8, digest_type, b"secret").verify(4, body)
    if digest_type is not DigestType.DUMMY:
        with pytest.raises(DigestMatchError, match="digest mismatch"):
            digest.verify(4, body[:-1] + b"!")


def test_digest_lengths_and_hmac_key() -> None:
    body = {kind: DigestManager(1, kind, b"a").package(0, -1, 1, b"x") for kind in DigestType}
    assert {kind: len(value) - 33 for kind, value in body.items()} == {
        DigestType.CRC32C: 4,
        DigestType.CRC32: 8,
        DigestType.HMAC: 20,
        DigestType.DUMMY: 0,
    }
    # HMAC is keyed by the password: another password's manager refuses the entry.
    with pytest.raises(DigestMatchError):
        DigestManager(1, DigestType.HMAC, b"b").verify(0, body[DigestType.HMAC])
