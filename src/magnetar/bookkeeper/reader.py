"""Reading a ledger's entries from its bookies: replica fallback, digest checks, the last add confirmed.

Owns: `LedgerEntry`, `read_entry` (`PendingReadOp.SequenceReadRequest`: the write set's bookies one after
the other until one answers with a valid entry), `read_entries`, `read_last_confirmed`
(`ReadLastConfirmedOp`, with or without fencing). Must not touch: ledger metadata storage, adds.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from magnetar.bookkeeper import wire
from magnetar.bookkeeper.bookie_client import BookieTransport
from magnetar.bookkeeper.digest import DigestManager
from magnetar.bookkeeper.errors import (
    BKError,
    DigestMatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    ReadError,
    UnauthorizedAccessError,
)
from magnetar.bookkeeper.metadata import INVALID_ENTRY_ID, LedgerMetadata
from magnetar.bookkeeper.schedule import Answer, QuorumCoverageSet, bookies_missing_entry_required, write_set

__all__ = ["LedgerEntry", "LastConfirmed", "read_entries", "read_entry", "read_last_confirmed"]

# Entries read at once by `read_entries`: each holds its body until the batch is complete, so a long range
# is read in slices of this many (about Pulsar's `dispatcherMaxReadBatchSize` of 100 entries, twice).
READ_BATCH_MAX = 200


class LedgerEntry(NamedTuple):
    ledger_id: int
    entry_id: int
    # The ledger's length in bytes up to and including this entry, as its writer counted it.
    length: int
    payload: bytes


class LastConfirmed(NamedTuple):
    """The highest last-add-confirmed the bookies' last entries carry, and the ledger length that entry gave."""

    last_add_confirmed: int
    length: int


async def read_entry(
    transport: BookieTransport,
    ledger_id: int,
    metadata: LedgerMetadata,
    digest: DigestManager,
    entry_id: int,
    *,
    recovery_key: bytes | None = None,
) -> LedgerEntry:
    """One entry from the first bookie of its write set that has a valid copy.

    With `recovery_key` (the master key) this is a recovery read: it fences as it reads, and it raises
    NoSuchEntryError as soon as W - A + 1 bookies of the write set report the entry missing, the proof that it
    was never acknowledged. Without it, NoSuchEntryError means no bookie of the write set has it. Any other
    outcome is an error: DigestMatchError when the only copies found were corrupt.
    """
    ensemble = metadata.ensemble_at(entry_id)
    replicas = write_set(entry_id, metadata.ensemble_size, metadata.write_quorum_size)
    missing_required = bookies_missing_entry_required(metadata.write_quorum_size, metadata.ack_quorum_size)
    flags = wire.FLAG_NONE if recovery_key is None else wire.FLAG_DO_FENCING | wire.FLAG_HIGH_PRIORITY
    missing = 0
    first_error: BKError | None = None
    for index in replicas:
        bookie = ensemble[index]
        try:
            body = await transport.read_entry(bookie, ledger_id, entry_id, flags, recovery_key)
            header, payload = digest.verify(entry_id, body)
        except (NoSuchEntryError, NoSuchLedgerError):
            missing += 1
            if recovery_key is not None and missing >= missing_required:
                raise NoSuchEntryError(
                    f"ledger {ledger_id} entry {entry_id}: {missing} of its {len(replicas)} bookies do not have it"
                ) from None
            continue
        except BKError as error:
            first_error = first_error or error
            continue
        return LedgerEntry(ledger_id, entry_id, header.length, payload)
    if first_error is None:
        raise NoSuchEntryError(f"ledger {ledger_id} entry {entry_id}: none of its bookies has it")
    if isinstance(first_error, DigestMatchError):
        raise first_error
    raise ReadError(f"ledger {ledger_id} entry {entry_id}: no bookie answered with it ({first_error})") from first_error


async def read_entries(
    transport: BookieTransport, ledger_id: int, metadata: LedgerMetadata, digest: DigestManager, first: int, last: int
) -> list[LedgerEntry]:
    """Entries first..last, in order; the first failure raises."""
    entries: list[LedgerEntry] = []
    for start in range(first, last + 1, READ_BATCH_MAX):
        stop = min(last, start + READ_BATCH_MAX - 1)
        entries += await asyncio.gather(
            *(read_entry(transport, ledger_id, metadata, digest, entry_id) for entry_id in range(start, stop + 1))
        )
    return entries


async def read_last_confirmed(
    transport: BookieTransport,
    ledger_id: int,
    metadata: LedgerMetadata,
    digest: DigestManager,
    *,
    fence_key: bytes | None = None,
) -> LastConfirmed:
    """The highest LAC carried by the last entries of the last ensemble's bookies, once the answers cover
    every write quorum (`ReadLastConfirmedOp`). With `fence_key` each read also fences the ledger on that
    bookie: when this returns, no write quorum has A bookies left that would still accept the old writer's
    adds. Raises the last error seen when the answers never cover; UnauthorizedAccessError at once."""
    _, ensemble = metadata.last_ensemble
    coverage = QuorumCoverageSet(metadata.ensemble_size, metadata.write_quorum_size, metadata.ack_quorum_size)
    flags = wire.FLAG_NONE if fence_key is None else wire.FLAG_DO_FENCING
    reads = {
        asyncio.ensure_future(transport.read_entry(bookie, ledger_id, wire.LAST_ADD_CONFIRMED, flags, fence_key)): index
        for index, bookie in enumerate(ensemble)
    }
    best = LastConfirmed(INVALID_ENTRY_ID, 0)
    last_error: BKError = ReadError(f"ledger {ledger_id}: no bookie of {list(ensemble)} answered")
    pending = set(reads)
    try:
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for future in done:
                answer, found, error = _last_confirmed_answer(future, digest)
                coverage.add_bookie(reads[future], answer)
                if error is not None:
                    last_error = error
                    continue
                if found is not None and found.last_add_confirmed > best.last_add_confirmed:
                    best = found
                if coverage.is_covered():
                    return best
        raise last_error
    finally:
        for future in pending:
            future.add_done_callback(_consume)


def _last_confirmed_answer(
    future: asyncio.Future[bytes], digest: DigestManager
) -> tuple[Answer, LastConfirmed | None, BKError | None]:
    """What one bookie's answer to a last-confirmed read tells: whether it counts for coverage, the last
    add confirmed its last entry carries (None when it has no entry), and the error that makes it no
    valid answer. An answer whose digest fails counts for coverage (the bookie answered, and is fenced
    if asked to be) but is no valid answer. UnauthorizedAccessError is raised at once."""
    error = future.exception()
    if error is None:
        try:
            header, _ = digest.verify(None, future.result())
        except DigestMatchError as mismatch:
            return Answer.KNOWN, None, mismatch
        return Answer.KNOWN, LastConfirmed(header.last_add_confirmed, header.length), None
    if isinstance(error, (NoSuchEntryError, NoSuchLedgerError)):
        # The writer may have crashed before any entry reached this bookie.
        return Answer.KNOWN, None, None
    if isinstance(error, UnauthorizedAccessError):
        raise error
    return Answer.UNKNOWN, None, error if isinstance(error, BKError) else ReadError(str(error))


def _consume(future: asyncio.Future[bytes]) -> None:
    # An answer nobody waits for any more: read its outcome so asyncio does not report it as never retrieved.
    if not future.cancelled():
        future.exception()
