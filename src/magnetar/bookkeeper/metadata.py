"""A ledger's metadata, its bytes in BookKeeper's format v3 and its place in ZooKeeper.

Owns: `LedgerMetadata` (immutable: every change is a new value written by compare-and-set), `State`,
`serialize`/`parse` (`LedgerMetadataSerDe`), the hierarchical ledger paths (`StringUtils`,
`HierarchicalLedgerManager`, `LongHierarchicalLedgerManager`). Must not touch: ZooKeeper itself
(zk_ledger_manager.py), bookies.

Format v3 (written by every BookKeeper since 4.9, read by BookieShell `ledgermetadata`):

    "BookieMetadataFormatVersion\\t3\\n" | varint length | LedgerMetadataFormat (data_formats.proto)

Paths under the ledgers root (`/ledgers` by default): the id as `%010d` split 2-4-4, id 1 ->
`/00/0000/L0001`; from 2^31 - 1 on, as `%019d` split 3-4-4-4-4 (`getHybridHierarchicalLedgerPath`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from google.protobuf.message import DecodeError

from magnetar.bookkeeper.data_formats_pb2 import LedgerMetadataFormat
from magnetar.bookkeeper.digest import DigestType
from magnetar.bookkeeper.errors import MetadataSerializationError

__all__ = [
    "INVALID_ENTRY_ID",
    "SHORT_LEDGER_ID_MAX",
    "LedgerMetadata",
    "State",
    "ledger_path",
    "parse",
    "serialize",
]

INVALID_ENTRY_ID = -1
# Integer.MAX_VALUE: ZkLedgerIdGenerator hands out ids below it; from it on ids and paths are "long".
SHORT_LEDGER_ID_MAX = 2**31 - 1
_VERSION_KEY = b"BookieMetadataFormatVersion\t"
_V3_HEADER = _VERSION_KEY + b"3\n"
# LedgerMetadataSerDe.MAX_VERSION_DIGITS.
_MAX_VERSION_DIGITS = 10


class State(enum.IntEnum):
    """`LedgerMetadataFormat.State`: the numbers are the stored ones."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    """What BookKeeper knows of one ledger.

    Invariants: 0 < ack_quorum_size <= write_quorum_size <= ensemble_size; `ensembles` is not empty, starts
    at entry 0, its first entry ids strictly increase and each ensemble has `ensemble_size` distinct bookies;
    `last_entry_id` and `length` mean something only when the state is CLOSED (-1 and 0 otherwise).
    """

    ensemble_size: int
    write_quorum_size: int
    ack_quorum_size: int
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    digest_type: DigestType
    password: bytes
    state: State = State.OPEN
    last_entry_id: int = INVALID_ENTRY_ID
    length: int = 0
    ctime: int | None = None
    custom_metadata: Mapping[str, bytes] = field(default_factory=dict)
    c_token: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.ack_quorum_size <= self.write_quorum_size <= self.ensemble_size:
            raise ValueError(
                f"need 0 < ackQuorum <= writeQuorum <= ensemble, got E={self.ensemble_size}"
                f" W={self.write_quorum_size} A={self.ack_quorum_size}"
            )
        if not self.ensembles or self.ensembles[0][0] != 0:
            raise ValueError("a ledger's first ensemble must start at entry 0")
        previous = -1
        for first_entry_id, bookies in self.ensembles:
            if first_entry_id <= previous:
                raise ValueError(f"ensembles must start at increasing entries, got {first_entry_id} after {previous}")
            if len(bookies) != self.ensemble_size or len(set(bookies)) != len(bookies):
                raise ValueError(f"ensemble at entry {first_entry_id} must be {self.ensemble_size} distinct bookies")
            previous = first_entry_id

    @property
    def is_closed(self) -> bool:
        return self.state is State.CLOSED

    @property
    def last_ensemble(self) -> tuple[int, tuple[str, ...]]:
        """The last segment: (its first entry id, its bookies)."""
        return self.ensembles[-1]

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The bookies of the segment that holds `entry_id`."""
        chosen = self.ensembles[0][1]
        for first_entry_id, bookies in self.ensembles:
            if first_entry_id > entry_id:
                break
            chosen = bookies
        return chosen

    def with_state(self, state: State) -> LedgerMetadata:
        return replace(self, state=state)

    def closed_at(self, last_entry_id: int, length: int) -> LedgerMetadata:
        return replace(self, state=State.CLOSED, last_entry_id=last_entry_id, length=length)

    def with_ensemble(self, first_entry_id: int, bookies: tuple[str, ...]) -> LedgerMetadata:
        """A new last segment from `first_entry_id`, replacing the last one if it starts there
        (`LedgerMetadataBuilder.newEnsembleEntry` / `replaceEnsembleEntry`)."""
        last_first, _ = self.ensembles[-1]
        if first_entry_id < last_first:
            raise ValueError(f"a new ensemble cannot start at {first_entry_id}, before the last one ({last_first})")
        kept = self.ensembles[:-1] if first_entry_id == last_first else self.ensembles
        return replace(self, ensembles=(*kept, (first_entry_id, bookies)))


def serialize(metadata: LedgerMetadata) -> bytes:
    """Format v3 bytes, as `LedgerMetadataSerDe.serializeVersion3` writes them."""
    message = LedgerMetadataFormat(
        quorumSize=metadata.write_quorum_size,
        ackQuorumSize=metadata.ack_quorum_size,
        ensembleSize=metadata.ensemble_size,
        length=metadata.length,
        lastEntryId=metadata.last_entry_id,
        state=LedgerMetadataFormat.State.ValueType(int(metadata.state)),
        digestType=LedgerMetadataFormat.DigestType.ValueType(int(metadata.digest_type)),
        password=metadata.password,
        cToken=metadata.c_token,
    )
    if metadata.ctime is not None:
        message.ctime = metadata.ctime
    for key, value in metadata.custom_metadata.items():
        message.customMetadata.add(key=key, value=value)
    for first_entry_id, bookies in metadata.ensembles:
        message.segment.add(firstEntryId=first_entry_id, ensembleMember=bookies)
    body = message.SerializeToString()
    return b"".join((_V3_HEADER, _varint(len(body)), body))


def parse(data: bytes, ledger_id: int) -> LedgerMetadata:
    """The metadata in `data`; MetadataSerializationError for anything but well-formed format v3."""
    if not data.startswith(_VERSION_KEY):
        raise MetadataSerializationError(f"ledger {ledger_id}: metadata does not start with {_VERSION_KEY!r}")
    end = data.find(b"\n", len(_VERSION_KEY), len(_VERSION_KEY) + _MAX_VERSION_DIGITS + 1)
    if end < 0:
        raise MetadataSerializationError(f"ledger {ledger_id}: metadata format version has no end")
    version = data[len(_VERSION_KEY) : end]
    if version != b"3":
        raise MetadataSerializationError(
            f"ledger {ledger_id}: metadata format version {version.decode(errors='replace')} (only 3 is read)"
        )
    try:
        size, offset = _read_varint(data, end + 1)
        if offset + size > len(data):
            raise DecodeError(f"{size} bytes announced, {len(data) - offset} present")
        message = LedgerMetadataFormat.FromString(data[offset : offset + size])
    except (DecodeError, IndexError) as error:
        raise MetadataSerializationError(f"ledger {ledger_id}: corrupt metadata: {error}") from error
    state = State(message.state)
    closed = state is State.CLOSED
    try:
        return LedgerMetadata(
            ensemble_size=message.ensembleSize,
            write_quorum_size=message.quorumSize,
            ack_quorum_size=message.ackQuorumSize if message.HasField("ackQuorumSize") else message.quorumSize,
            ensembles=tuple((segment.firstEntryId, tuple(segment.ensembleMember)) for segment in message.segment),
            digest_type=DigestType(message.digestType),
            password=message.password,
            state=state,
            last_entry_id=message.lastEntryId if closed else INVALID_ENTRY_ID,
            length=message.length if closed else 0,
            ctime=message.ctime if message.HasField("ctime") else None,
            custom_metadata={entry.key: entry.value for entry in message.customMetadata},
            c_token=message.cToken,
        )
    except ValueError as error:
        raise MetadataSerializationError(f"ledger {ledger_id}: invalid metadata: {error}") from error


def ledger_path(ledgers_root: str, ledger_id: int) -> str:
    """The znode of a ledger's metadata: `/ledgers/00/0000/L0001` for id 1."""
    if ledger_id < 0:
        raise ValueError(f"ledger id {ledger_id} is negative")
    if ledger_id < SHORT_LEDGER_ID_MAX:
        digits = f"{ledger_id:010d}"
        return f"{ledgers_root}/{digits[:2]}/{digits[2:6]}/L{digits[6:]}"
    digits = f"{ledger_id:019d}"
    return f"{ledgers_root}/{digits[:3]}/{digits[3:7]}/{digits[7:11]}/{digits[11:15]}/L{digits[15:]}"


def _varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int: the length before a v3 metadata message."""
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, offset: int) -> tuple[int, int]:
    """(value, offset after it) of the varint at `offset`; DecodeError when it runs past the data or
    past 32 bits, as protobuf's own reader refuses a length that large."""
    value = shift = 0
    while True:
        if offset >= len(data):
            raise DecodeError("truncated varint")
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift >= 32:
            raise DecodeError("varint longer than 32 bits")
