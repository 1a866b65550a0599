"""Ledger handles: `LedgerHandle` writes a ledger (or re-writes its tail during recovery), `ReadHandle`
reads one.

Owns: the write path (`LedgerHandle` and `PendingAddOp`: round-robin distribution, completion after A acks,
completion in entry order, the last add confirmed piggybacked on each entry, ensemble change, close) and the
read handle. Must not touch: how metadata is stored (ledger_manager.py), sockets (bookie_client.py).

An add is acknowledged once A bookies of its write set have it and every earlier add is acknowledged; its
entry id is then the last add confirmed (LAC). When a bookie fails a write (anything but EFENCED or EUA, which
end the handle), the handle replaces it by a writable bookie outside the ensemble, writes a new segment from
LAC + 1 into the metadata by compare-and-set, and resends the unconfirmed adds that the bookie held
(`LedgerHandle.handleBookieFailure`, `ensembleChangeLoop`). No add is acknowledged while that happens. When
no bookie can replace it, adds that can still reach A acks without it go on (the Java client's
`delayEnsembleChange` behaviour: the ledger stays under-replicated) and the others fail with
NotEnoughBookiesException.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from magnetar.bookkeeper import wire
from magnetar.bookkeeper.bookie_client import BookieTransport
from magnetar.bookkeeper.digest import DigestManager, master_key
from magnetar.bookkeeper.errors import (
    BKError,
    LedgerClosedError,
    LedgerFencedError,
    MetadataVersionError,
    NotEnoughBookiesError,
    ReadError,
    UnauthorizedAccessError,
    WriteError,
)
from magnetar.bookkeeper.ledger_manager import LedgerManager, Versioned
from magnetar.bookkeeper.metadata import LedgerMetadata, State
from magnetar.bookkeeper.reader import LedgerEntry, read_entries, read_last_confirmed
from magnetar.bookkeeper.schedule import write_set

__all__ = ["ClientContext", "LedgerHandle", "ReadHandle"]

log = logging.getLogger(__name__)

# Adds of one handle sent and not yet acknowledged; `append` waits beyond it. Each keeps its frame (up to
# Pulsar's 5 MiB entry) until acknowledged, and a bookie failure resends all of them: a bound on both.
PENDING_ADDS_MAX = 1000
# BookKeeper's `maxAllowedEnsembleChanges` default: a handle whose bookies keep failing gives up.
ENSEMBLE_CHANGES_MAX = 10


@dataclass
class ClientContext:
    """What every handle of one client shares: the bookies, the metadata, the placement's randomness."""

    transport: BookieTransport
    ledger_manager: LedgerManager
    rng: random.Random = field(default_factory=random.Random)
    pending_adds_max: int = PENDING_ADDS_MAX


class ReadHandle:
    """A ledger open for reading: entries up to its last add confirmed (its last entry once closed)."""

    def __init__(self, context: ClientContext, ledger_id: int, metadata: LedgerMetadata, password: bytes, lac: int):
        self._context = context
        self.ledger_id = ledger_id
        self.metadata = metadata
        self.last_add_confirmed = lac
        self._digest = DigestManager(ledger_id, metadata.digest_type, password)

    @property
    def is_closed(self) -> bool:
        return self.metadata.is_closed

    async def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries first..last (at most the last add confirmed), digests checked."""
        if first < 0 or last < first:
            raise ValueError(f"cannot read entries {first}..{last}")
        if last > self.last_add_confirmed:
            raise ReadError(
                f"ledger {self.ledger_id}: entry {last} is beyond the last add confirmed {self.last_add_confirmed}"
            )
        return await read_entries(self._context.transport, self.ledger_id, self.metadata, self._digest, first, last)

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies how far the writer got (`readLastConfirmed`); a closed ledger's is its last entry."""
        if not self.metadata.is_closed:
            found = await read_last_confirmed(self._context.transport, self.ledger_id, self.metadata, self._digest)
            self.last_add_confirmed = max(self.last_add_confirmed, found.last_add_confirmed)
        return self.last_add_confirmed


class _PendingAdd:
    """One add on its way (`PendingAddOp`). Invariants: `acked` and `failed` are disjoint subsets of
    `write_set`; `completed` iff len(acked) >= A."""

    __slots__ = (
        "acked",
        "completed",
        "ensemble",
        "entry_id",
        "failed",
        "frame",
        "future",
        "payload_length",
        "write_set",
    )

    def __init__(self, entry_id: int, frame: bytes, payload_length: int, future: asyncio.Future[int]) -> None:
        self.entry_id = entry_id
        self.frame = frame
        self.payload_length = payload_length
        self.future = future
        self.ensemble: tuple[str, ...] = ()
        self.write_set: tuple[int, ...] = ()
        self.acked: set[int] = set()
        self.failed: set[int] = set()
        self.completed = False


class LedgerHandle:
    """A ledger this client writes: created by it, or being recovered by it (`recovery=True`: adds carry
    RECOVERY_ADD, which fenced bookies accept, and new ensembles are kept for the closing metadata write)."""

    def __init__(
        self,
        context: ClientContext,
        ledger_id: int,
        versioned: Versioned,
        password: bytes,
        *,
        recovery: bool = False,
        last_add_confirmed: int = -1,
        length: int = 0,
    ) -> None:
        self._context = context
        self.ledger_id = ledger_id
        self.metadata = versioned.metadata
        self._version = versioned.version
        self._password = password
        self._digest = DigestManager(ledger_id, self.metadata.digest_type, password)
        self._master_key = master_key(password)
        self._recovery = recovery
        self._flags = wire.FLAG_RECOVERY_ADD if recovery else wire.FLAG_NONE
        self.last_add_confirmed = last_add_confirmed
        self._last_add_pushed = last_add_confirmed
        self.length = length
        self._loop = asyncio.get_running_loop()
        self._pending: collections.deque[_PendingAdd] = collections.deque()
        self._room_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._room_reserved = 0
        self._changing_ensemble = False
        self._ensemble_change: asyncio.Task[None] | None = None
        self._delayed_failures: dict[int, str] = {}
        self._unreplaceable: dict[int, str] = {}
        self._ensemble_changes = 0
        self._recovery_ensembles: dict[int, tuple[str, ...]] = {}
        # The metadata as stored when the handle opened (at `_version`): a recovery's closing write applies
        # its ensembles to it, not to `metadata`, which has them already.
        self._opened_metadata = versioned.metadata
        self._error: BKError | None = None
        self._closed = False

    # --- adds

    async def append(self, data: bytes) -> int:
        """Add `data` as the next entry; its entry id once A bookies have it and every earlier add is done.

        Concurrent calls are pipelined and get entry ids in call order.
        """
        self._check_writable()
        if self._room_waiters or len(self._pending) + self._room_reserved >= self._context.pending_adds_max:
            waiter: asyncio.Future[None] = self._loop.create_future()
            self._room_waiters.append(waiter)
            await waiter
            self._room_reserved -= 1
            self._check_writable()
        return await self._push(data).future

    def append_recovered(self, data: bytes) -> None:
        """Write again an entry recovery found past the LAC (recovery handles, in entry order): it goes out at
        once, and its outcome surfaces in `close_recovered`."""
        if not self._recovery:
            raise ValueError("only a recovering handle re-adds entries")
        self._check_writable()
        self._push(data).future.add_done_callback(_retrieve)

    def _check_writable(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise LedgerClosedError(f"ledger {self.ledger_id} is closed")

    def _wake_room_waiters(self) -> None:
        waiters = self._room_waiters
        while waiters and (
            self._error is not None
            or self._closed
            or len(self._pending) + self._room_reserved < self._context.pending_adds_max
        ):
            waiter = waiters.popleft()
            if not waiter.done():
                self._room_reserved += 1
                waiter.set_result(None)

    def _push(self, data: bytes) -> _PendingAdd:
        entry_id = self._last_add_pushed + 1
        self._last_add_pushed = entry_id
        self.length += len(data)
        body = self._digest.package(entry_id, self.last_add_confirmed, self.length, data)
        frame = wire.encode_add_request(self._master_key, body, self._flags)
        op = _PendingAdd(entry_id, frame, len(data), self._loop.create_future())
        self._pending.append(op)
        if not self._changing_ensemble:
            self._send(op)
        return op

    def _send(self, op: _PendingAdd) -> None:
        metadata = self.metadata
        op.ensemble = metadata.last_ensemble[1]
        op.write_set = write_set(op.entry_id, metadata.ensemble_size, metadata.write_quorum_size)
        for index in op.write_set:
            if index in self._unreplaceable:
                op.failed.add(index)
            else:
                self._send_to(op, index)
        self._check_ack_quorum_reachable(op)

    def _send_to(self, op: _PendingAdd, index: int) -> None:
        bookie = op.ensemble[index]
        future = self._context.transport.add_entry(bookie, self.ledger_id, op.entry_id, op.frame)
        future.add_done_callback(functools.partial(self._write_complete, op, index, bookie))

    def _write_complete(self, op: _PendingAdd, index: int, bookie: str, future: asyncio.Future[None]) -> None:
        if op.future.done() or op.ensemble[index] != bookie:
            # Failed already, or that bookie was replaced since: its answer no longer counts.
            if not future.cancelled():
                future.exception()
            return
        error: BKError | None = None if not future.cancelled() else WriteError("add cancelled")
        if error is None:
            raw = future.exception()
            if raw is not None:
                error = raw if isinstance(raw, BKError) else WriteError(str(raw))
        if error is None:
            op.acked.add(index)
            if not op.completed and len(op.acked) >= self.metadata.ack_quorum_size:
                op.completed = True
                self._send_add_success_callbacks()
            return
        if isinstance(error, (LedgerFencedError, UnauthorizedAccessError)):
            # Another client recovers this ledger (or the password is wrong): no ensemble change helps.
            self._fail(error)
            return
        log.info("ledger %s: bookie %s failed entry %s: %s", self.ledger_id, bookie, op.entry_id, error)
        self._handle_bookie_failure({index: bookie})

    def _send_add_success_callbacks(self) -> None:
        pending = self._pending
        while pending and not self._changing_ensemble and pending[0].completed:
            op = pending.popleft()
            self.last_add_confirmed = op.entry_id
            op.future.set_result(op.entry_id)
        self._wake_room_waiters()

    def _check_ack_quorum_reachable(self, op: _PendingAdd) -> None:
        if len(op.write_set) - len(op.failed) < self.metadata.ack_quorum_size:
            failed = sorted(op.ensemble[index] for index in op.failed)
            self._fail(
                NotEnoughBookiesError(
                    f"ledger {self.ledger_id} entry {op.entry_id}: bookies {failed} failed and none can replace them"
                )
            )

    def _fail(self, error: BKError) -> None:
        """End the handle: every add not yet acknowledged fails with `error`, and so will later ones."""
        if self._error is None:
            self._error = error
        self._fail_pending(self._error)

    def _fail_pending(self, error: BKError) -> None:
        while self._pending:
            op = self._pending.pop()
            self.length -= op.payload_length
            if not op.future.done():
                op.future.set_exception(error)
        self._last_add_pushed = self.last_add_confirmed
        self._wake_room_waiters()

    # --- ensemble change

    def _handle_bookie_failure(self, failed: dict[int, str]) -> None:
        if self._error is not None or self._closed:
            return
        if self._changing_ensemble:
            self._delayed_failures.update(failed)
            return
        self._changing_ensemble = True
        self._ensemble_change = self._loop.create_task(self._change_ensemble(failed))

    async def _change_ensemble(self, failed: dict[int, str]) -> None:
        try:
            while failed:
                self._ensemble_changes += 1
                if self._ensemble_changes > ENSEMBLE_CHANGES_MAX:
                    raise WriteError(f"ledger {self.ledger_id}: more than {ENSEMBLE_CHANGES_MAX} ensemble changes")
                ensemble, replaced, unreplaceable = await self._replacements(failed)
                if replaced:
                    await self._install_ensemble(ensemble)
                self._unreplaceable.update(unreplaceable)
                self._resend(replaced, unreplaceable)
                current = self.metadata.last_ensemble[1]
                failed = {
                    index: bookie
                    for index, bookie in self._delayed_failures.items()
                    if current[index] == bookie and index not in self._unreplaceable
                }
                self._delayed_failures.clear()
        except BKError as error:
            self._changing_ensemble = False
            self._fail(error)
            return
        finally:
            self._ensemble_change = None
        self._changing_ensemble = False
        self._send_add_success_callbacks()

    async def _replacements(self, failed: dict[int, str]) -> tuple[tuple[str, ...], dict[int, str], dict[int, str]]:
        """The new ensemble, the indexes replaced (to their new bookie) and those no bookie could replace.

        Replacements are drawn at random among writable bookies outside the ensemble, as BookKeeper's
        `DefaultEnsemblePlacementPolicy` draws them."""
        writable = await self._context.ledger_manager.writable_bookies()
        ensemble = list(self.metadata.last_ensemble[1])
        excluded = set(ensemble) | set(failed.values()) | set(self._unreplaceable.values())
        candidates = sorted(bookie for bookie in writable if bookie not in excluded)
        self._context.rng.shuffle(candidates)
        replaced: dict[int, str] = {}
        unreplaceable: dict[int, str] = {}
        for index, bookie in sorted(failed.items()):
            if ensemble[index] != bookie:
                continue
            if candidates:
                ensemble[index] = replaced[index] = candidates.pop()
            else:
                unreplaceable[index] = bookie
        return tuple(ensemble), replaced, unreplaceable

    async def _install_ensemble(self, ensemble: tuple[str, ...]) -> None:
        """Make `ensemble` the segment from LAC + 1: in the metadata by compare-and-set, or (recovery) kept
        for the closing write (`ReadOnlyLedgerHandle.handleBookieFailure`)."""
        first_entry_id = self.last_add_confirmed + 1
        if self._recovery:
            self._recovery_ensembles[first_entry_id] = ensemble
            self.metadata = self.metadata.with_ensemble(first_entry_id, ensemble)
            return
        manager = self._context.ledger_manager
        metadata, version = self.metadata, self._version
        while True:
            if metadata.state is State.CLOSED:
                raise LedgerClosedError(f"ledger {self.ledger_id} was closed by another client")
            if metadata.state is State.IN_RECOVERY:
                raise LedgerFencedError(f"ledger {self.ledger_id} is being recovered by another client")
            updated = metadata.with_ensemble(first_entry_id, ensemble)
            try:
                self._version = await manager.write_ledger_metadata(self.ledger_id, updated, version)
            except MetadataVersionError:
                metadata, version = await manager.read_ledger_metadata(self.ledger_id)
                continue
            self.metadata = updated
            log.info("ledger %s: ensemble from entry %s is %s", self.ledger_id, first_entry_id, list(ensemble))
            return

    def _resend(self, replaced: dict[int, str], unreplaceable: dict[int, str]) -> None:
        """Send each unconfirmed add to the bookies that replaced failed ones (or for the first time, if it
        was pushed during the change); an add loses the acks of replaced bookies (`unsetSuccessAndSendWriteRequest`)."""
        ensemble = self.metadata.last_ensemble[1]
        ack_quorum_size = self.metadata.ack_quorum_size
        for op in list(self._pending):
            if op.future.done():
                continue
            if not op.write_set:
                self._send(op)
                continue
            op.ensemble = ensemble
            for index in op.write_set:
                if index in replaced:
                    op.acked.discard(index)
                    op.failed.discard(index)
                    op.completed = len(op.acked) >= ack_quorum_size
                    self._send_to(op, index)
                elif index in unreplaceable and index not in op.acked:
                    op.failed.add(index)
            self._check_ack_quorum_reachable(op)

    # --- reads and close

    async def read(self, first: int, last: int) -> list[LedgerEntry]:
        """Entries first..last of this ledger, at most its last add confirmed."""
        return await ReadHandle(
            self._context, self.ledger_id, self.metadata, self._password, self.last_add_confirmed
        ).read(first, last)

    async def close(self) -> None:
        """Close the ledger at its last add confirmed (`LedgerHandle.asyncClose`): adds still pending fail
        with LedgerClosedException, then the metadata goes to CLOSED with lastEntryId and length by
        compare-and-set. Raises LedgerFencedError if another client is recovering it, MetadataVersionError if
        another client closed it elsewhere."""
        if self._closed:
            return
        if self._ensemble_change is not None:
            await asyncio.shield(self._ensemble_change)
        self._closed = True
        self._fail_pending(LedgerClosedError(f"ledger {self.ledger_id} closed before this add completed"))
        if self._recovery:
            raise ValueError("a recovering handle closes through close_recovered()")
        last_entry_id, length = self.last_add_confirmed, self.length
        await self._update_metadata(
            lambda metadata: _close_predicate(self.ledger_id, metadata, last_entry_id, length),
            lambda metadata: metadata.closed_at(last_entry_id, length),
        )

    async def close_recovered(self) -> LedgerMetadata:
        """The end of a recovery: wait for the recovery adds, then CLOSED at the last add confirmed, with
        the ensembles recovery changed (`ReadOnlyLedgerHandle.closeRecovered`)."""
        waiting = [op.future for op in self._pending]
        if waiting:
            await asyncio.gather(*waiting)
        if self._ensemble_change is not None:
            await asyncio.shield(self._ensemble_change)
        if self._error is not None:
            raise self._error
        self._closed = True
        last_entry_id, length = self.last_add_confirmed, self.length

        def close_recovered(metadata: LedgerMetadata) -> LedgerMetadata:
            for first_entry_id, ensemble in sorted(self._recovery_ensembles.items()):
                metadata = metadata.with_ensemble(first_entry_id, ensemble)
            return metadata.closed_at(last_entry_id, length)

        # As ReadOnlyLedgerHandle.closeRecovered, onto the metadata as stored: applied to `metadata`, which the
        # ensemble changes moved on already, a second change's segment came before the first one's again.
        self.metadata = self._opened_metadata
        await self._update_metadata(lambda metadata: metadata.state is State.IN_RECOVERY, close_recovered)
        return self.metadata

    async def _update_metadata(
        self, needs_update: Callable[[LedgerMetadata], bool], update: Callable[[LedgerMetadata], LedgerMetadata]
    ) -> None:
        """BookKeeper's `MetadataUpdateLoop`: apply `update` by compare-and-set while `needs_update` holds,
        re-reading the metadata after each version clash."""
        manager = self._context.ledger_manager
        metadata, version = self.metadata, self._version
        while needs_update(metadata):
            updated = update(metadata)
            try:
                version = await manager.write_ledger_metadata(self.ledger_id, updated, version)
            except MetadataVersionError:
                metadata, version = await manager.read_ledger_metadata(self.ledger_id)
                continue
            metadata = updated
        self.metadata, self._version = metadata, version


def _retrieve(future: asyncio.Future[int]) -> None:
    # Its failure is reported by close_recovered(); read it so asyncio does not log it as never retrieved.
    if not future.cancelled():
        future.exception()


def _close_predicate(ledger_id: int, metadata: LedgerMetadata, last_entry_id: int, length: int) -> bool:
    """Whether a close must still write the metadata; raises when someone else decided the ledger's end."""
    if metadata.state is State.CLOSED:
        if (metadata.last_entry_id, metadata.length) == (last_entry_id, length):
            return False
        raise MetadataVersionError(
            f"ledger {ledger_id} was closed at entry {metadata.last_entry_id} by another client, not at {last_entry_id}"
        )
    if metadata.state is State.IN_RECOVERY:
        raise LedgerFencedError(f"ledger {ledger_id} is being recovered by another client")
    return True
