"""Storage settings, under Apache Pulsar's broker.conf names and defaults.

Owns: the knobs the managed ledger, cursors, entry cache and group commit read.
Must not touch: anything else; the broker's own table of settings maps its keys onto this one.

Names are Pulsar's camelCase keys verbatim so that an operator's broker.conf line maps one to one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["StorageConfig"]


@dataclass(frozen=True)
class StorageConfig:
    # A ledger is closed and a new one opened when it reaches this many entries...
    managedLedgerMaxEntriesPerLedger: int = 50_000
    # ...or this many megabytes...
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    # ...or is older than this (only checked when an entry is added, as in Pulsar).
    managedLedgerMaxLedgerRolloverTimeMinutes: int = 240
    # The two size limits above apply only once a ledger is at least this old (Pulsar's rule, so a
    # burst does not create a storm of tiny ledgers).
    managedLedgerMinLedgerRolloverTimeMinutes: float = 10
    # Retention of ledgers every durable cursor has passed. -1 means unlimited; 0 and 0 delete a
    # consumed ledger as soon as it is closed. A ledger goes once either limit is exceeded.
    defaultRetentionTimeInMinutes: int = 0
    defaultRetentionSizeInMB: int = 0
    retentionCheckIntervalInSeconds: int = 120
    # Dirty cursors are persisted at least this often and on clean shutdown. 0 persists on every ack
    # (magnetar's reading of 0: Pulsar has no separate "sync every ack" key).
    managedLedgerCursorPositionFlushSeconds: float = 60.0
    # Only this many acknowledged ranges above the mark-delete position are persisted; see
    # docs/storage.md for what a restart does with the rest.
    managedLedgerMaxUnackedRangesToPersist: int = 10_000
    # Same bound for entries whose batch is only partly acknowledged.
    managedLedgerMaxBatchDeletedIndexToPersist: int = 10_000
    # Pulsar's default is a fifth of the JVM's direct memory; we have no JVM, so a fixed budget that
    # holds about a minute of a 1 MB/s topic for tailing reads.
    managedLedgerCacheSizeMB: int = 64
    # true: an append completes after fsync (survives power loss). false: after the write reached
    # the OS (survives a process crash, not a power cut). See docs/storage.md.
    journalSyncData: bool = True
    # BookKeeper's group-commit wait: a commit that would carry fewer than GROUP_WAIT_ITEMS_MIN items
    # waits up to this long for more, so that at moderate rates one fsync and one wake-up of the event
    # loop serve many appends (each commit is a transaction, an fsync and a cross-thread hand-back).
    # 0 commits at once. Adds at most this much to an append's latency.
    journalMaxGroupWaitMSec: float = 1.0
    # Appends waiting for their commit across all topics; beyond it append() refuses. Pulsar bounds
    # the same thing per connection with maxPendingPublishRequestsPerConnection (1000); 100 000 is
    # ~100 MB of 1 KB entries, enough for every connection of a small broker to be full at once.
    managedLedgerMaxPendingAdds: int = 100_000
    # The BookKeeper engine's ledgers (storage/bookkeeper_engine.py; the SQLite engine ignores these): each
    # on this many bookies, each entry written to this many of them and acknowledged once this many have it.
    managedLedgerDefaultEnsembleSize: int = 2
    managedLedgerDefaultWriteQuorum: int = 2
    managedLedgerDefaultAckQuorum: int = 2
    # CRC32C, CRC32, MAC (HMAC-SHA1) or DUMMY, as Pulsar names them.
    managedLedgerDigestType: str = "CRC32C"
    # Where the bookies' metadata is: zk+hierarchical://host:port/ledgers ("" : the SQLite engine).
    bookkeeperMetadataServiceUri: str = ""
    # A request to a bookie that gets no answer in this time fails (and the bookie is replaced).
    bookkeeperClientTimeoutInSeconds: int = 30
    # Only this many acknowledged ranges of a cursor go into its ManagedCursorInfo in the metadata store
    # (the rest as after managedLedgerMaxUnackedRangesToPersist: delivered again after a load).
    managedLedgerMaxUnackedRangesToPersistInMetadataStore: int = 1000

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> StorageConfig:
        """Build from broker.conf-style keys; unknown keys are ignored (they belong to other layers)."""
        known = {field.name: field.type for field in dataclasses.fields(cls)}
        return cls(**{key: value for key, value in values.items() if key in known})

    def with_changes(self, **changes: Any) -> StorageConfig:
        return dataclasses.replace(self, **changes)
