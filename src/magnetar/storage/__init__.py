"""Durable storage: managed ledgers, cursors and metadata, on an engine (`engine.StorageEngine`): SQLite with
group commit (the default), or BookKeeper bookies with the records in a metadata store (`bookkeeper_engine`).

Owns everything under the data directory (and, on BookKeeper, the topics' ledgers and records). The broker
uses it through `ManagedLedgerFactory` (asyncio-facing; SQLite and fsync run on worker threads). Must not
know about consumers or the wire.
"""

from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.errors import (
    DataDirectoryLockedError,
    LedgerFencedError,
    StorageBusyError,
    StorageClosedError,
    StorageCorruptionError,
    StorageError,
    StorageWriteError,
)
from magnetar.storage.factory import ManagedLedgerFactory
from magnetar.storage.internal_stats import cursor_internal_stats, managed_ledger_internal_stats
from magnetar.storage.ledger_index import LedgerInfo
from magnetar.storage.managed_ledger import BatchPositions, ManagedLedger
from magnetar.storage.metadata import AlreadyExistsError, BadVersionError, MetadataStore, NotFoundError
from magnetar.storage.sqlite_engine import Entry

__all__ = [
    "AlreadyExistsError",
    "BadVersionError",
    "BatchPositions",
    "DataDirectoryLockedError",
    "Entry",
    "LedgerFencedError",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerFactory",
    "MetadataStore",
    "NotFoundError",
    "StorageBusyError",
    "StorageClosedError",
    "StorageConfig",
    "StorageCorruptionError",
    "StorageError",
    "StorageWriteError",
    "cursor_internal_stats",
    "managed_ledger_internal_stats",
]
