"""Entry digests and the ledger's master key, as BookKeeper's `DigestManager` computes them.

Owns: `DigestType`, `master_key`, `DigestManager` (the entry body a writer sends and the check a reader
makes). Must not touch: frames, sockets or metadata storage.

An entry's body, on the wire and on the bookie (`DigestManager.computeDigestAndPackageForSendingV2`):

    ledgerId:8 | entryId:8 | lastAddConfirmed:8 | length:8 | digest | payload

every integer big-endian and signed; `length` is the ledger's length in bytes up to and including this
entry's payload; the digest covers the 32-byte header and the payload:

    CRC32C  4 bytes, the Castagnoli CRC (CRC32CDigestManager; Pulsar's `managedLedgerDigestType` default)
    CRC32   8 bytes, the zlib CRC-32 as a long (CRC32DigestManager)
    HMAC   20 bytes, HMAC-SHA1 keyed by SHA-1("mac" + password) (MacDigestManager)
    DUMMY   0 bytes (DummyDigestManager)
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from typing import NamedTuple

import crc32c

from magnetar.bookkeeper.errors import DigestMatchError

__all__ = ["METADATA_LENGTH", "DigestManager", "DigestType", "EntryHeader", "master_key"]

# ledgerId, entryId, lastAddConfirmed, length (DigestManager.METADATA_LENGTH).
METADATA_LENGTH = 32
_HEADER = struct.Struct(">qqqq")
_CRC32C = struct.Struct(">I")
_CRC32 = struct.Struct(">Q")


class DigestType(enum.IntEnum):
    """`LedgerMetadataFormat.DigestType`: the numbers are the ones stored in the ledger's metadata."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


_DIGEST_LENGTH = {DigestType.CRC32C: 4, DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.DUMMY: 0}


def master_key(password: bytes) -> bytes:
    """SHA-1("ledger" + password), 20 bytes: what adds and fencing reads carry (`generateMasterKey`).

    A bookie keeps the first master key it saw for a ledger and refuses (EUA) adds and fences with another.
    """
    return hashlib.sha1(b"ledger" + password).digest()


class EntryHeader(NamedTuple):
    """The 32-byte header a writer put in front of an entry's payload."""

    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int


class DigestManager:
    """Packs and checks the entries of one ledger with one digest type (and, for HMAC, its password)."""

    __slots__ = ("_mac_key", "digest_length", "digest_type", "ledger_id")

    def __init__(self, ledger_id: int, digest_type: DigestType, password: bytes) -> None:
        self.ledger_id = ledger_id
        self.digest_type = digest_type
        self.digest_length = _DIGEST_LENGTH[digest_type]
        self._mac_key = hashlib.sha1(b"mac" + password).digest()

    def _digest(self, header: bytes, payload: bytes) -> bytes:
        kind = self.digest_type
        if kind is DigestType.CRC32C:
            return _CRC32C.pack(crc32c.crc32c(payload, crc32c.crc32c(header)))
        if kind is DigestType.CRC32:
            return _CRC32.pack(zlib.crc32(payload, zlib.crc32(header)))
        if kind is DigestType.HMAC:
            mac = hmac.new(self._mac_key, header, hashlib.sha1)
            mac.update(payload)
            return mac.digest()
        return b""

    def package(self, entry_id: int, last_add_confirmed: int, length: int, payload: bytes) -> bytes:
        """The entry body: header, digest, payload."""
        header = _HEADER.pack(self.ledger_id, entry_id, last_add_confirmed, length)
        return b"".join((header, self._digest(header, payload), payload))

    def verify(self, entry_id: int | None, body: bytes) -> tuple[EntryHeader, bytes]:
        """The header and payload of `body`, after checking its digest, ledger id and (unless None) entry id.

        Raises DigestMatchError for a body that is too short, a digest that does not match, or an entry of
        another ledger or position: a corrupted entry is an error, never data.
        """
        prefix = METADATA_LENGTH + self.digest_length
        if len(body) < prefix:
            raise DigestMatchError(
                f"entry of ledger {self.ledger_id} is {len(body)} bytes, shorter than its {prefix}-byte header"
            )
        view = memoryview(body)
        header_bytes = bytes(view[:METADATA_LENGTH])
        payload = bytes(view[prefix:])
        expected = self._digest(header_bytes, payload)
        if not hmac.compare_digest(expected, view[METADATA_LENGTH:prefix]):
            raise DigestMatchError(
                f"digest mismatch in ledger {self.ledger_id} entry {_HEADER.unpack(header_bytes)[1]}"
                f" ({self.digest_type.name})"
            )
        header = EntryHeader(*_HEADER.unpack(header_bytes))
        if header.ledger_id != self.ledger_id:
            raise DigestMatchError(f"entry of ledger {header.ledger_id} read for ledger {self.ledger_id}")
        if entry_id is not None and header.entry_id != entry_id:
            raise DigestMatchError(f"entry {header.entry_id} of ledger {self.ledger_id} read for entry {entry_id}")
        return header, payload
