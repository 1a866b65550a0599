"""Where ledger metadata and ledger ids live: the `LedgerManager` interface, and its in-memory store.

Owns: `LedgerManager` (ids, versioned metadata with compare-and-set, the writable bookies), `Versioned`,
`MemoryLedgerManager` (one process, for tests and the deterministic simulator). Must not touch: bookies,
entries. The ZooKeeper store, in BookKeeper's own places, is zk_ledger_manager.py.

Every metadata write names the version it read: a write over a version it did not see fails with
MetadataVersionError (ZooKeeper's BadVersion), which is what keeps two clients from both closing, recovering
or changing the ensemble of one ledger.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from magnetar.bookkeeper.errors import LedgerExistError, MetadataVersionError, NoSuchLedgerError
from magnetar.bookkeeper.metadata import LedgerMetadata, parse, serialize

__all__ = ["LedgerManager", "MemoryLedgerManager", "Versioned"]


class Versioned(NamedTuple):
    metadata: LedgerMetadata
    version: int


class LedgerManager(Protocol):
    """Ledger ids, ledger metadata and bookie discovery, as BookKeeper's `LedgerManager`,
    `LedgerIdGenerator` and `RegistrationClient` provide them."""

    async def generate_ledger_id(self) -> int:
        """A ledger id no other client (Java's included) gets."""
        ...

    async def create_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        """Store a new ledger's metadata; its version. LedgerExistError if the id is taken."""
        ...

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned:
        """NoSuchLedgerError if there is none."""
        ...

    async def write_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        """Replace the metadata last read at `version`; the new version. MetadataVersionError if it changed."""
        ...

    async def remove_ledger_metadata(self, ledger_id: int, version: int | None) -> None:
        """Delete the metadata (at `version`, or whatever it is when None). NoSuchLedgerError if absent."""
        ...

    async def writable_bookies(self) -> tuple[str, ...]:
        """The ids of the bookies registered as available and not read-only."""
        ...

    async def close(self) -> None: ...


class MemoryLedgerManager:
    """The ledger manager of one process. Metadata is kept as serialized bytes, so it goes through the same
    format as in ZooKeeper; versions count from 0 per znode, as ZooKeeper's do."""

    def __init__(self, bookies: tuple[str, ...] = (), first_ledger_id: int = 0) -> None:
        self._next_ledger_id = first_ledger_id
        self._ledgers: dict[int, tuple[bytes, int]] = {}
        self._bookies = list(bookies)
        self._readonly: set[str] = set()

    def set_bookies(self, bookies: tuple[str, ...], readonly: frozenset[str] = frozenset()) -> None:
        """Register `bookies`, of which `readonly` are read-only (as /ledgers/available and its readonly child)."""
        self._bookies = list(bookies)
        self._readonly = set(readonly)

    async def generate_ledger_id(self) -> int:
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    async def create_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        if ledger_id in self._ledgers:
            raise LedgerExistError(f"ledger {ledger_id} already exists")
        self._ledgers[ledger_id] = (serialize(metadata), 0)
        return 0

    async def read_ledger_metadata(self, ledger_id: int) -> Versioned:
        stored = self._ledgers.get(ledger_id)
        if stored is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        return Versioned(parse(stored[0], ledger_id), stored[1])

    async def write_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        stored = self._ledgers.get(ledger_id)
        if stored is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        if stored[1] != version:
            raise MetadataVersionError(f"ledger {ledger_id} is at version {stored[1]}, not {version}")
        self._ledgers[ledger_id] = (serialize(metadata), version + 1)
        return version + 1

    async def remove_ledger_metadata(self, ledger_id: int, version: int | None) -> None:
        stored = self._ledgers.get(ledger_id)
        if stored is None:
            raise NoSuchLedgerError(f"ledger {ledger_id} does not exist")
        if version is not None and stored[1] != version:
            raise MetadataVersionError(f"ledger {ledger_id} is at version {stored[1]}, not {version}")
        del self._ledgers[ledger_id]

    async def writable_bookies(self) -> tuple[str, ...]:
        return tuple(bookie for bookie in self._bookies if bookie not in self._readonly)

    async def close(self) -> None:
        """Nothing to release: the metadata lives as long as this object."""
