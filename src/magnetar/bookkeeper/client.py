"""The BookKeeper client: create, open (with or without recovery) and delete ledgers.

Owns: `BookKeeper` (`BookKeeper` + `LedgerCreateOp` + `LedgerOpenOp` + `LedgerDeleteOp`), ledger recovery
(`ReadOnlyLedgerHandle.recover`, `LedgerRecoveryOp`). Must not touch: the wire (bookie_client.py), the
metadata's bytes (metadata.py).

Recovery of a ledger its writer left open: set the metadata to IN_RECOVERY (compare-and-set; a writer's
ensemble change then fails), fence every bookie of the last ensemble and learn the highest last add
confirmed once the answers cover every write quorum, read forward from there with fencing reads, write each
entry found again with RECOVERY_ADD, stop at the first entry that W - A + 1 bookies of its write set report
missing (it cannot have been acknowledged), and close the ledger there. Every entry ever acknowledged to the
old writer is then at or below lastEntryId, and the old writer's next add fails with EFENCED.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping

from magnetar.bookkeeper.bookie_client import DEFAULT_TIMEOUT_S, BookieClient, BookieTransport
from magnetar.bookkeeper.digest import DigestManager, DigestType, master_key
from magnetar.bookkeeper.errors import (
    LedgerExistError,
    MetadataVersionError,
    NoSuchEntryError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
)
from magnetar.bookkeeper.ledger import PENDING_ADDS_MAX, ClientContext, LedgerHandle, ReadHandle
from magnetar.bookkeeper.ledger_manager import LedgerManager, Versioned
from magnetar.bookkeeper.metadata import LedgerMetadata, State
from magnetar.bookkeeper.reader import read_entry, read_last_confirmed
from magnetar.bookkeeper.zk_ledger_manager import ZkLedgerManager
from magnetar.clock import Clock, LoopClock

__all__ = ["BookKeeper"]

log = logging.getLogger(__name__)

# LedgerCreateOp retries with a new id when the metadata znode of the generated one exists already.
_CREATE_ATTEMPTS_MAX = 10


class BookKeeper:
    """A BookKeeper client over a ledger manager and a bookie transport (both injected for tests)."""

    def __init__(
        self,
        ledger_manager: LedgerManager,
        transport: BookieTransport,
        *,
        clock: Clock,
        rng: random.Random | None = None,
        pending_adds_max: int = PENDING_ADDS_MAX,
    ) -> None:
        """`clock` stamps the ledgers' creation time (ctime)."""
        self._context = ClientContext(transport, ledger_manager, rng or random.Random(), pending_adds_max)
        self._clock = clock
        self._owned: list[BookieClient | LedgerManager] = []

    @classmethod
    async def connect(
        cls, metadata_service_uri: str, *, clock: Clock | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
    ) -> BookKeeper:
        """A client of the cluster whose metadata is at `zk+hierarchical://host:port/ledgers`;
        `timeout_s` is `bookkeeperClientTimeoutInSeconds`, `clock` the event loop's unless given."""
        clock = clock or LoopClock(asyncio.get_running_loop())
        manager = await ZkLedgerManager.connect(metadata_service_uri)
        bookies = BookieClient(clock, timeout_s)
        client = cls(manager, bookies, clock=clock)
        client._owned = [bookies, manager]
        return client

    @property
    def ledger_manager(self) -> LedgerManager:
        return self._context.ledger_manager

    async def close(self) -> None:
        """Close the connections and the metadata session this client opened itself."""
        for owned in self._owned:
            await owned.close()
        self._owned = []

    async def create_ledger(
        self,
        ensemble_size: int,
        write_quorum_size: int,
        ack_quorum_size: int,
        digest_type: DigestType = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        ledger_id: int | None = None,
    ) -> LedgerHandle:
        """A new ledger on `ensemble_size` writable bookies drawn at random, open for adds. With `ledger_id`
        (one `generate_ledger_id` gave, as the Java client's `createLedgerAdv(ledgerId, ...)` takes it) the
        ledger gets that id, and LedgerExistError if it is taken; without, a generated one."""
        writable = list(await self._context.ledger_manager.writable_bookies())
        if len(writable) < ensemble_size:
            raise NotEnoughBookiesError(
                f"an ensemble of {ensemble_size} needs as many writable bookies, found {writable}"
            )
        ensemble = tuple(self._context.rng.sample(sorted(writable), ensemble_size))
        metadata = LedgerMetadata(
            ensemble_size=ensemble_size,
            write_quorum_size=write_quorum_size,
            ack_quorum_size=ack_quorum_size,
            ensembles=((0, ensemble),),
            digest_type=digest_type,
            password=password,
            ctime=self._clock.time_ms(),
            custom_metadata=dict(custom_metadata or {}),
        )
        manager = self._context.ledger_manager
        if ledger_id is not None:
            version = await manager.create_ledger_metadata(ledger_id, metadata)
            return LedgerHandle(self._context, ledger_id, Versioned(metadata, version), password)
        for _ in range(_CREATE_ATTEMPTS_MAX):
            ledger_id = await manager.generate_ledger_id()
            try:
                version = await manager.create_ledger_metadata(ledger_id, metadata)
            except LedgerExistError:
                continue
            return LedgerHandle(self._context, ledger_id, Versioned(metadata, version), password)
        raise LedgerExistError(f"{_CREATE_ATTEMPTS_MAX} generated ledger ids were all taken")

    async def open_ledger(self, ledger_id: int, password: bytes, *, recovery: bool = True) -> ReadHandle:
        """Open a ledger to read it. With recovery (the default, `openLedger`) an open ledger is fenced,
        recovered and closed first; without (`openLedgerNoRecovery`) it is read up to the last add confirmed
        the bookies report, and its writer is left alone."""
        versioned = await self._context.ledger_manager.read_ledger_metadata(ledger_id)
        metadata = versioned.metadata
        if metadata.password != password:
            raise UnauthorizedAccessError(f"ledger {ledger_id}: wrong password")
        if metadata.is_closed:
            return ReadHandle(self._context, ledger_id, metadata, password, metadata.last_entry_id)
        if recovery:
            metadata = await self._recover(ledger_id, versioned, password)
            return ReadHandle(self._context, ledger_id, metadata, password, metadata.last_entry_id)
        handle = ReadHandle(self._context, ledger_id, metadata, password, -1)
        await handle.read_last_add_confirmed()
        return handle

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies drop its entries in their garbage collection."""
        await self._context.ledger_manager.remove_ledger_metadata(ledger_id, None)

    async def _recover(self, ledger_id: int, versioned: Versioned, password: bytes) -> LedgerMetadata:
        manager = self._context.ledger_manager
        metadata, version = versioned
        while metadata.state is State.OPEN:
            try:
                version = await manager.write_ledger_metadata(
                    ledger_id, metadata.with_state(State.IN_RECOVERY), version
                )
                metadata = metadata.with_state(State.IN_RECOVERY)
            except MetadataVersionError:
                metadata, version = await manager.read_ledger_metadata(ledger_id)
        if metadata.is_closed:
            return metadata
        transport = self._context.transport
        digest = DigestManager(ledger_id, metadata.digest_type, password)
        key = master_key(password)
        found = await read_last_confirmed(transport, ledger_id, metadata, digest, fence_key=key)
        # Entries of the segments before the last are confirmed: an ensemble change only happens past the LAC.
        last_add_confirmed = max(found.last_add_confirmed, metadata.last_ensemble[0] - 1)
        length = 0
        if last_add_confirmed >= 0:
            length = (await read_entry(transport, ledger_id, metadata, digest, last_add_confirmed)).length
        writer = LedgerHandle(
            self._context,
            ledger_id,
            Versioned(metadata, version),
            password,
            recovery=True,
            last_add_confirmed=last_add_confirmed,
            length=length,
        )
        # Reads use the metadata as recovery found it: entries past the LAC are on the old ensemble's
        # bookies, whatever ensemble the recovery adds move to.
        entry_id = last_add_confirmed + 1
        while True:
            try:
                entry = await read_entry(transport, ledger_id, metadata, digest, entry_id, recovery_key=key)
            except NoSuchEntryError:
                break
            writer.length = entry.length - len(entry.payload)
            writer.append_recovered(entry.payload)
            entry_id += 1
        closed = await writer.close_recovered()
        log.info(
            "ledger %s recovered: LAC was %s, closed at entry %s", ledger_id, last_add_confirmed, closed.last_entry_id
        )
        return closed
