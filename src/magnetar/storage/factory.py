"""The storage of one data directory: its engine, entry cache, metadata and a managed ledger per topic.

Owns: opening the engine and the catalog, the managed ledgers (opened once per topic, even when asked
concurrently), ledger ids unique across topics, the commit thread's reports handed to the ledgers
they belong to, the trims that acks, rollovers and the retention timer schedule, the periodic cursor
flush and the staged close. Time is the injected `Clock`. Must not touch: consumers, dispatch or the
wire; SQL (the engine's).
"""

from __future__ import annotations

import asyncio

from magnetar.clock import Clock, LoopClock
from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor import decode_ranges
from magnetar.storage.engine import StorageEngine
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import StorageClosedError
from magnetar.storage.ledger_index import LedgerInfo
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.metadata import MetadataStore
from magnetar.storage.sqlite_engine import CommitReport, SqliteEngine

__all__ = ["ManagedLedgerFactory"]

MB = 1024 * 1024


class ManagedLedgerFactory:
    """The storage of one data directory: engine, cache, metadata, and a managed ledger per topic."""

    def __init__(
        self, data_dir: str, config: StorageConfig, engine: StorageEngine | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config
        self.engine: StorageEngine = engine or SqliteEngine(
            data_dir, config.journalSyncData, config.journalMaxGroupWaitMSec
        )
        self.cache = EntryCache(config.managedLedgerCacheSizeMB * MB)
        self.loop: asyncio.AbstractEventLoop = asyncio.get_running_loop()
        self.clock: Clock = clock or LoopClock(self.loop)
        self.ledgers: dict[str, ManagedLedger] = {}
        self.pending_adds = 0
        self._topic_ids: dict[str, int] = {}
        self._opening: dict[str, asyncio.Future[ManagedLedger]] = {}
        self._closing: dict[str, asyncio.Task[None]] = {}
        self._trim_scheduled: set[ManagedLedger] = set()
        self._trim_writes: set[asyncio.Future[None]] = set()
        self._background: asyncio.Task[None] | None = None
        self._closed = False
        self.metadata: MetadataStore

    @classmethod
    async def open(
        cls,
        data_dir: str,
        config: StorageConfig | None = None,
        engine: StorageEngine | None = None,
        clock: Clock | None = None,
    ) -> ManagedLedgerFactory:
        """`engine` replaces the threaded SQLite engine (the shell simulator commits on its event loop, the
        BookKeeper engine keeps ledgers on bookies);
        `clock` the event loop's clock and the wall clock (`LoopClock`) that rollovers, retention,
        ledger timestamps and the periodic cursor flush read."""
        factory = cls(data_dir, config or StorageConfig(), engine, clock)
        catalog = await factory.engine.load()
        factory._topic_ids = catalog.topic_ids
        factory.metadata = MetadataStore(factory, catalog.metadata)
        factory.engine.watch_records(factory.metadata.record_changed)
        factory.engine.start(factory.loop, factory._on_commit, factory.clock)
        factory._background = factory.loop.create_task(factory._run_background())
        return factory

    def allocate_ledger_id(self, topic_id: int) -> int:
        return self.engine.allocate_ledger_id(topic_id)

    async def open_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger of a topic, created on first use; its cursors are loaded with it."""
        self.check_open()
        ledger = self.ledgers.get(name)
        if ledger is not None:
            return ledger
        opening = self._opening.get(name)
        if opening is not None:
            return await asyncio.shield(opening)
        closing = self._closing.get(name)
        if closing is not None:
            await asyncio.shield(closing)
            return await self.open_ledger(name)
        future: asyncio.Future[ManagedLedger] = self.loop.create_future()
        self._opening[name] = future
        try:
            ledger = await self._load_ledger(name)
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved here; waiters get it through shield
            raise
        finally:
            del self._opening[name]
        self.ledgers[name] = ledger
        future.set_result(ledger)
        return ledger

    async def _load_ledger(self, name: str) -> ManagedLedger:
        known = self._topic_ids.get(name)
        if known is None:
            self.check_open()
        loaded = await self.engine.open_topic(name, known, decode_ranges)
        self._topic_ids[name] = loaded.topic_id
        ledgers = [LedgerInfo(*row) for row in loaded.ledgers]
        ledger = ManagedLedger(self, name, loaded.topic_id, ledgers, loaded.entries_trimmed)
        ledger.restore_cursors(loaded.cursors)
        self.schedule_trim(ledger)
        return ledger

    async def close_ledger(self, name: str) -> None:
        """Close a topic's managed ledger once its topic is unloaded: its appends finished, its cursors
        persisted, its ledger closed by the engine. The next `open_ledger` reads it back from the engine,
        as a restart would, or another broker's load when the topic moved (whose writes this broker's
        cached state would not know)."""
        ledger = self.ledgers.pop(name, None)
        if ledger is None:
            return
        closing = self.loop.create_task(self._close_ledger(ledger))
        self._closing[name] = closing
        try:
            await asyncio.shield(closing)
        finally:
            if self._closing.get(name) is closing:
                del self._closing[name]

    async def _close_ledger(self, ledger: ManagedLedger) -> None:
        pending = ledger.pending_appends()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        flushes = [cursor.flush() for cursor in ledger.cursors.values() if cursor.durable and cursor.dirty]
        if flushes:
            await asyncio.gather(*flushes, return_exceptions=True)
        ledger.state = "Closed"
        self._trim_scheduled.discard(ledger)
        for info in ledger.ledgers:
            self.cache.invalidate_ledger(info.ledger_id, info.entries)
        await self.engine.close_topic(ledger.topic_id)

    def topics(self) -> list[str]:
        """Every stored topic: those loaded or listed here, and those other brokers store in a shared
        engine."""
        return sorted(self._topic_ids.keys() | self.engine.stored_topics())

    async def delete_ledger(self, name: str) -> None:
        """Delete a topic's entries, ledgers and cursors."""
        ledger = await self.open_ledger(name)
        pending = ledger.pending_appends()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        ledger.state = "Closed"
        del self.ledgers[name]
        topic_id = self._topic_ids.pop(name)
        for info in ledger.ledgers:
            self.cache.invalidate_ledger(info.ledger_id, info.entries)
        self.check_open()
        await self.engine.delete_topic(topic_id)

    def _on_commit(self, report: CommitReport) -> None:
        for owner, ledger_id, last_entry_id in report.appended:
            owner.on_durable(ledger_id, last_entry_id)
        for owner, ledger_id, error in report.failed:
            owner.on_failed(ledger_id, error)
        for op in report.ops:
            if op.future.done():
                continue
            if report.error is None:
                op.future.set_result(op.result)
            else:
                op.future.set_exception(report.error)

    def schedule_trim(self, ledger: ManagedLedger) -> None:
        if not self._trim_scheduled:
            self.loop.call_soon(self._trim_now)
        self._trim_scheduled.add(ledger)

    def _trim_now(self) -> None:
        scheduled, self._trim_scheduled = self._trim_scheduled, set()
        for ledger in scheduled:
            if ledger.state != "Closed" and not self._closed:
                for write in ledger.trim():
                    self._trim_writes.add(write)
                    write.add_done_callback(self._trim_writes.discard)

    async def trims_settled(self) -> None:
        """Return once the trims scheduled so far ran and the ledger deletions they queued are durable
        (a trim runs on the loop iteration after what scheduled it: an ack, a rollover, a timer)."""
        while self._trim_scheduled or self._trim_writes:
            if self._trim_writes:
                await asyncio.wait(set(self._trim_writes))
            else:
                await asyncio.sleep(0)

    async def flush_cursors(self) -> None:
        """Persist every dirty durable cursor; returns when they are durable."""
        futures = [
            cursor.flush()
            for ledger in self.ledgers.values()
            for cursor in ledger.cursors.values()
            if cursor.durable and cursor.dirty
        ]
        if futures:
            await asyncio.gather(*futures, return_exceptions=True)

    async def _run_background(self) -> None:
        config = self.config
        flush_every = config.managedLedgerCursorPositionFlushSeconds or config.retentionCheckIntervalInSeconds
        interval = min(flush_every, config.retentionCheckIntervalInSeconds)
        clock = self.clock
        last_retention_check = clock.monotonic()
        while True:
            await clock.sleep(interval)
            await self.flush_cursors()
            for ledger in self.ledgers.values():
                ledger.roll_if_too_old()
            if clock.monotonic() - last_retention_check >= config.retentionCheckIntervalInSeconds:
                last_retention_check = clock.monotonic()
                for ledger in self.ledgers.values():
                    self.schedule_trim(ledger)

    def check_open(self) -> None:
        """Raise StorageClosedError once the factory is closed: every write checks before it queues."""
        if self._closed:
            raise StorageClosedError(f"{self.engine.data_dir}: storage is closed")

    async def close(self) -> None:
        """Staged: finish pending appends, persist dirty cursors, drain the commit thread, checkpoint."""
        if self._closed:
            return
        if self._background is not None:
            self._background.cancel()
            try:
                await self._background
            except asyncio.CancelledError:
                pass
        pending = [future for ledger in self.ledgers.values() for future in ledger.pending_appends()]
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        await self.flush_cursors()
        self._closed = True
        for ledger in self.ledgers.values():
            ledger.state = "Closed"
        await self.engine.shutdown()
