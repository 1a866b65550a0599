"""Errors the storage layer raises.

Owns: the exception types callers can catch. Each message names the file or topic involved, so an
operator can act on it without a stack trace.
"""

from __future__ import annotations

__all__ = [
    "StorageError",
    "StorageCorruptionError",
    "StorageWriteError",
    "StorageBusyError",
    "LedgerFencedError",
    "StorageClosedError",
    "DataDirectoryLockedError",
    "RecordVersionError",
]


class StorageError(Exception):
    """Base class; `server_error` is the Pulsar ServerError name the broker answers with."""

    server_error = "PersistenceError"


class DataDirectoryLockedError(StorageError):
    """Another process (another broker on the same directory) holds the data directory's LOCK file."""


class StorageCorruptionError(StorageError):
    """A file in the data directory is damaged; the message names it."""


class StorageWriteError(StorageError):
    """A commit failed (disk full, read-only, I/O error): nothing in it became durable."""


class LedgerFencedError(StorageWriteError):
    """The append was queued behind a failed commit of the same ledger; Pulsar fences such a ledger."""


class StorageBusyError(StorageError):
    """Too many appends wait for a commit (`managedLedgerMaxPendingAdds`)."""

    server_error = "ServiceNotReady"


class StorageClosedError(StorageError):
    """The storage was closed."""


class RecordVersionError(StorageError):
    """A metadata record's compare-and-set saw another version: another writer (another broker of the
    cluster) changed it first (Pulsar's MetadataStoreException.BadVersionException)."""
