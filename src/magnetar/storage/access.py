"""What the metadata store, the managed ledgers and compaction's storage calls reach of the storage that
made them (factory.ManagedLedgerFactory): a narrow face, so that they never name the factory's class
(the factory is above them: it opens them).

Owns: nothing but the shapes. Must not touch: anything.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from magnetar.clock import Clock
    from magnetar.storage.config import StorageConfig
    from magnetar.storage.engine import StorageEngine
    from magnetar.storage.entry_cache import EntryCache

__all__ = ["LedgerStorage", "StorageAccess"]


class StorageAccess(Protocol):
    @property
    def engine(self) -> StorageEngine: ...

    def check_open(self) -> None:
        """Raise StorageClosedError once storage is closed: every write checks before it queues."""
        ...


class LedgerStorage(StorageAccess, Protocol):
    """What a managed ledger reaches of its storage."""

    # Appends queued and not yet durable, across every ledger (the factory's back-pressure count).
    pending_adds: int

    @property
    def config(self) -> StorageConfig: ...

    @property
    def cache(self) -> EntryCache: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def allocate_ledger_id(self, topic_id: int) -> int: ...

    def schedule_trim(self, ledger: Any) -> None:
        """Trim `ledger` (a managed ledger) by its retention at the loop's next turn."""
        ...
