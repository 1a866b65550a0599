"""The embedded engine: one SQLite database in WAL mode, group commit, and reads on worker threads.

Owns: the files of the data directory (`magnetar.db` and its `-wal`/`-shm`, `commit-seq`, `LOCK`),
their schema, the checks that run before the data is trusted, the commit thread, the checkpoint
thread and the reader threads, the column runs (`Run`) entries travel in between them and the
layers above, and every SQL statement of the storage: the layers above call named operations
(`insert_topic`, `delete_ledger`, `upsert_cursor`, `put_metadata`, `read_entries`, ...) and never see
a connection. Must not touch: ledger, cursor or topic logic; it stores the rows the layers above
describe and hands back the rows they ask for. On the event loop thread it only queues writes
(`submit` and the named writes) and turns runs into `Entry` objects; SQL runs on its threads.

Group commit: every write (appended entries of all topics, cursor snapshots, metadata, ledger
deletions) is queued; one thread takes everything queued, writes it in one transaction and commits
it with one fsync (`journalSyncData=true`, SQLite `synchronous=FULL`), then reports the whole batch
back to the event loop with one `call_soon_threadsafe`. While a commit is in its fsync, new writes
pile up and form the next batch, so the batch grows with the load without a timer. Checkpoints
(copying the WAL into the database file) run on their own thread, beside commits, never inside one.

Entries are stored as segments: one row holds the entries one transaction appended to one ledger,
their bytes concatenated and the indexed fields as packed arrays (native byte order), under a
CRC-32C (CRC-32 in databases of schema version 1). Row-per-entry
costs SQLite a B-tree insert per entry and reached only 11% of the raw write+fsync loop for 100 B
entries; segments reach the limit of the Python code around them (numbers in docs/storage.md).
Segment id = `ledger_id << 32 | first_entry_id`, so a range of positions is a range of row ids.

Damage is caught three ways: the database header must agree with the file size; `PRAGMA
quick_check` runs at every open; and `commit-seq`, rewritten (without fsync) after every commit,
must not be ahead of the database's own commit counter, which catches a truncated or damaged WAL
that SQLite would otherwise silently cut back to its last valid frame. On reads, every segment's
CRC is checked and every ledger range must come back without holes.
"""

from __future__ import annotations

import asyncio
import fcntl
import gc
import os
import queue
import sqlite3
import struct
import threading
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, partial
from itertools import accumulate, chain, repeat
from typing import Any, NamedTuple

import crc32c

from magnetar.clock import Clock
from magnetar.positions import Position
from magnetar.storage.engine_records import Catalog, TopicState
from magnetar.storage.errors import (
    DataDirectoryLockedError,
    LedgerFencedError,
    StorageCorruptionError,
    StorageError,
    StorageWriteError,
)

__all__ = [
    "Entry",
    "Run",
    "SqliteEngine",
    "CommitReport",
    "DB_FILE",
    "COMMIT_SEQ_FILE",
    "ENTRY_KEY_SHIFT",
    "entries_of_run",
    "gc_paused",
    "new_entry",
    "new_position",
    "run_of_columns",
    "runs_of_records",
]

DB_FILE = "magnetar.db"
COMMIT_SEQ_FILE = "commit-seq"
LOCK_FILE = "LOCK"
# Version 2 checksums segments with CRC-32C (hardware instructions, ~10 GB/s here), version 1 with
# zlib's CRC-32 (~2 GB/s, a fifth of a cold read's CPU); a database keeps the one it was created with.
# Versions 3 (CRC-32C) and 4 (CRC-32) may store a segment's constant producer name and message count
# once, which a magnetar that reads only versions 1 and 2 would misread: opening a version-2 database
# makes it version 3, a version-1 database version 4, so that an older magnetar refuses it by name.
SCHEMA_VERSION = 3
_SCHEMA_UPGRADES = {1: 4, 2: 3}

# One transaction takes at most this many queued items (an item is one loop iteration's appends to
# one topic, or one other write): enough for every topic of a busy broker to join the same commit,
# few enough that one commit's work stays in the tens of milliseconds.
GROUP_COMMIT_ITEMS_MAX = 10_000
# ...and at most this many payload bytes, which bounds the memory a batch pins and the WAL growth of
# one transaction.
GROUP_COMMIT_BYTES_MAX = 32 * 1024 * 1024
# A commit with at least this many items, or this many appended entries, goes at once; a smaller one
# may wait journalMaxGroupWaitMSec for company. Each item is one topic's appends of one loop iteration
# (a socket read of SENDs, or more) or a cursor/metadata write. The wait is there to share an fsync
# and a wake-up of the event loop among many appends at moderate rates; a commit that already
# carries this many entries shares them enough, and waiting would only add latency: it made every
# commit of the append benchmark wait the whole 1 ms (1197 entries, in one item), a third of its time.
GROUP_WAIT_ITEMS_MIN = 64
GROUP_WAIT_ENTRIES_MIN = 64
# A segment is what a read of one entry pulls from disk, so keep it small enough that a redelivery
# of one message does not read megabytes, and large enough that SQLite costs per batch, not per entry.
SEGMENT_ENTRIES_MAX = 2_000
SEGMENT_BYTES_MAX = 1024 * 1024
# The WAL is checkpointed (its pages copied into the database file, which SQLite then fsyncs) by a
# thread of its own once about this many bytes were committed since the last checkpoint: SQLite's
# automatic checkpoint does it inside the commit that crosses 1000 pages, and that one commit then
# waits for the copy and a second fsync. Measured on the append path, that was most of the commit
# time (100 B entries: 0.79 us per entry with it, 0.14 without; 1 KB: 6.3 and 1.5).
CHECKPOINT_EVERY_BYTES = 4 * 1024 * 1024
# Checkpoints that run beside commits cannot start the WAL over while new frames keep arriving; once
# its file exceeds this, the commit thread checkpoints in line after a commit, which catches up
# fully, and the next transaction starts the WAL over.
WAL_BYTES_MAX = 64 * 1024 * 1024
# A commit of appends alone is one statement (_APPEND_COMMIT_SCHEMA) up to this many payload bytes: SQLite
# stages the rows of a multi-row INSERT into a view before its trigger runs, an extra copy of every
# byte. Neutral for the 120 KB commits of 100 B entries on one topic; commits of 15 MB (1 KB entries,
# 16 topics) went from 281 000 to 194 000-199 000 entries/s. The statements it saves matter at
# moderate rates, where commits are a few KB.
APPEND_COMMIT_BYTES_MAX = 256 * 1024
# Two reader threads: the machine class we target has two cores, and SQLite releases the GIL while it
# steps, so a second reader overlaps one thread's I/O with the other's decoding.
READER_THREADS = 2

_ENTRY_SHIFT = 32
_ENTRY_MASK = (1 << _ENTRY_SHIFT) - 1
# `ledger_id << ENTRY_KEY_SHIFT | entry_id`: a position as one int (segment ids, entry cache keys).
ENTRY_KEY_SHIFT = _ENTRY_SHIFT
_COMMIT_SEQ_RECORD = struct.Struct("<QI")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS topics(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS ledgers(
    id INTEGER PRIMARY KEY, topic_id INTEGER NOT NULL, entries INTEGER NOT NULL,
    size INTEGER NOT NULL, timestamp_ms INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS ledgers_by_topic ON ledgers(topic_id, id);
CREATE TABLE IF NOT EXISTS segments(
    id INTEGER PRIMARY KEY, count INTEGER NOT NULL, data BLOB NOT NULL, lengths BLOB NOT NULL,
    sticky_key_hashes BLOB NOT NULL, message_counts BLOB NOT NULL, publish_times BLOB NOT NULL,
    sequence_ids BLOB NOT NULL, producer_names TEXT NOT NULL, publish_time_max INTEGER NOT NULL,
    crc INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS cursors(
    topic_id INTEGER NOT NULL, name TEXT NOT NULL, mark_delete_ledger INTEGER NOT NULL,
    mark_delete_entry INTEGER NOT NULL, individually_deleted BLOB NOT NULL,
    batch_deleted TEXT NOT NULL, properties TEXT NOT NULL, PRIMARY KEY(topic_id, name)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS metadata(
    path TEXT PRIMARY KEY, value TEXT NOT NULL, version INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS compacted_entries(
    topic_id INTEGER NOT NULL, ledger_id INTEGER NOT NULL, entry_id INTEGER NOT NULL, data BLOB NOT NULL,
    sticky_key_hash INTEGER NOT NULL, message_count INTEGER NOT NULL, publish_time INTEGER NOT NULL,
    producer_name TEXT NOT NULL, sequence_id INTEGER NOT NULL,
    PRIMARY KEY(topic_id, ledger_id, entry_id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS compaction_horizons(
    topic_id INTEGER PRIMARY KEY, ledger_id INTEGER NOT NULL, entry_id INTEGER NOT NULL,
    compacted_at_ms INTEGER NOT NULL);
"""


# A commit of appends alone is one statement: an INSERT into this view, whose trigger inserts the
# segment rows, counts them into their ledgers and stores the commit counter. In autocommit mode the
# statement is its own transaction, so its last step is the commit and its fsync. Each SQLite step
# gives up the GIL and must win it back from the event loop, up to a switch interval each: with
# BEGIN, the segments, the ledgers, the counter and COMMIT as five statements, the GIL waits were
# half of a commit's p99 at 10,000 msg/s (commit p50 0.7-0.9 ms, p99 4.1-4.9 ms). TEMP: it lives in
# the writer's connection only, so the database file and its schema version do not change.
_APPEND_COMMIT_SCHEMA = """
CREATE TEMP VIEW IF NOT EXISTS append_commit AS SELECT
    0 AS commit_seq, 0 AS topic_id, 0 AS now_ms, 0 AS id, 0 AS count, x'' AS data, x'' AS lengths,
    x'' AS sticky_key_hashes, x'' AS message_counts, x'' AS publish_times, x'' AS sequence_ids,
    '' AS producer_names, 0 AS publish_time_max, 0 AS crc;
CREATE TEMP TRIGGER IF NOT EXISTS append_commit_rows INSTEAD OF INSERT ON append_commit BEGIN
    INSERT INTO segments VALUES (
        NEW.id, NEW.count, NEW.data, NEW.lengths, NEW.sticky_key_hashes, NEW.message_counts,
        NEW.publish_times, NEW.sequence_ids, NEW.producer_names, NEW.publish_time_max, NEW.crc);
    INSERT INTO ledgers(id, topic_id, entries, size, timestamp_ms)
        VALUES (NEW.id >> 32, NEW.topic_id, NEW.count, length(NEW.data), NEW.now_ms)
        ON CONFLICT(id) DO UPDATE SET entries=entries+excluded.entries, size=size+excluded.size,
        timestamp_ms=excluded.timestamp_ms;
    UPDATE meta SET value=NEW.commit_seq WHERE key='commit_seq';
END;
"""


class Entry(NamedTuple):
    """One stored entry: the bytes of a SEND as received, plus the fields the broker indexes."""

    position: Position
    data: bytes
    sticky_key_hash: int
    message_count: int
    publish_time: int
    producer_name: str
    sequence_id: int


class Run(NamedTuple):
    """Consecutive entries of one ledger as columns: how appends travel to the commit thread, how
    segments come back from disk, and how the entry cache holds entries. One object per column
    instead of an Entry and a Position per entry: fewer allocations, and nothing per entry for the
    cyclic garbage collector to track (see entry_cache). Columns are tuples or arrays, never lists:
    the collector stops tracking a tuple of atomic values, and would walk every slot of a list in
    every full collection."""

    ledger_id: int
    first_entry_id: int
    datas: Sequence[bytes]
    sticky_key_hashes: Sequence[int]
    message_counts: Sequence[int]
    publish_times: Sequence[int]
    producer_names: Sequence[str]
    sequence_ids: Sequence[int]


def segment_id(ledger_id: int, entry_id: int) -> int:
    return ledger_id << _ENTRY_SHIFT | entry_id


@dataclass(eq=False)
class WriteOp:
    """A write other than an append: one of the engine's named writes, `apply(connection, *args)`, run
    inside the group-commit transaction; `future` resolves to its result once that is durable."""

    apply: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    result: Any = None


@dataclass
class CommitReport:
    """What one transaction did, delivered on the event loop.

    `appended` holds `(owner, ledger_id, last_entry_id)` for every ledger that got entries;
    `failed` holds `(owner, ledger_id, error)` for every ledger whose entries did not.
    """

    appended: list[tuple[Any, int, int]] = field(default_factory=list)
    failed: list[tuple[Any, int, StorageError]] = field(default_factory=list)
    ops: list[WriteOp] = field(default_factory=list)
    error: StorageError | None = None


_STOP = object()
# What a commit adds to the WAL, for deciding when to checkpoint: its payload and columns, and the
# pages it rewrites whole. Each ledger appended to rewrites its segments leaf and a part-filled
# overflow page; each commit the `ledgers` and `meta` leaves; a write other than an append, a page or
# so. Counting the payload alone, commits of a few small entries (10,000 unbatched msg/s: 16 entries,
# 2 KB of payload, 64 KB of WAL) grew the WAL to WAL_BYTES_MAX before the checkpoint thread was ever
# asked, and the commit thread then checkpointed in line, 3-5 ms, every second or two.
WAL_PAGES_PER_LEDGER = 2
WAL_PAGES_PER_COMMIT = 2


class SqliteEngine:
    """Blocking engine; `open()` and `close()` run on a worker thread, `submit()` on the loop."""

    def __init__(self, data_dir: str, journal_sync_data: bool = True, group_wait_ms: float = 0.0) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.group_wait_s = group_wait_ms / 1000
        self.db_path = os.path.join(self.data_dir, DB_FILE)
        self.commit_seq_path = os.path.join(self.data_dir, COMMIT_SEQ_FILE)
        self._wal_path = self.db_path + "-wal"
        self.journal_sync_data = journal_sync_data
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._writer: sqlite3.Connection | None = None
        self._writer_suspect = False
        self._page_size = 4096
        self._commit_seq = 0
        self._segment_crc = _SEGMENT_CHECKSUMS[SCHEMA_VERSION]
        self._commit_seq_fd = -1
        self._lock_fd = -1
        self._thread: threading.Thread | None = None
        self._checkpointer: threading.Thread | None = None
        self._checkpoint_wanted = threading.Event()
        self._checkpoint_stop = False
        self._committed_since_checkpoint = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_commit: Callable[[CommitReport], None] | None = None
        self._clock: Clock | None = None
        self._fenced_ledgers: set[int] = set()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._local = threading.local()
        self._read_pool: ThreadPoolExecutor | None = None
        self._next_ledger_id = 1
        self.commits = 0

    # ------------------------------------------------------------------ open / close

    def open(self) -> None:
        try:
            os.makedirs(self.data_dir, exist_ok=True)
            self._lock_fd = os.open(os.path.join(self.data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise StorageError(f"{self.data_dir}: cannot use data directory: {error.strerror}") from error
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise DataDirectoryLockedError(f"{self.data_dir}: another process holds {LOCK_FILE}") from error
        try:
            self._open_checked()
        except BaseException:
            self._close_files()
            raise

    def _open_checked(self) -> None:
        existed = os.path.exists(self.db_path) and os.path.getsize(self.db_path) > 0
        self._check_header()
        self._writer = self._connect()
        try:
            self._writer.executescript(_SCHEMA)
            self._writer.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            self._writer.execute("INSERT OR IGNORE INTO meta VALUES ('commit_seq', 0)")
            self._writer.execute("INSERT OR IGNORE INTO meta VALUES ('deleted_ledger_id_max', 0)")
            self._writer.commit()
            result = self._writer.execute("PRAGMA quick_check").fetchall()
            if result != [("ok",)]:
                details = "; ".join(row[0] for row in result[:5])
                raise StorageCorruptionError(f"{self.db_path}: integrity check failed: {details}")
            (version,) = self._writer.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if version in _SCHEMA_UPGRADES:
                version = _SCHEMA_UPGRADES[version]
                self._writer.execute("UPDATE meta SET value=? WHERE key='schema_version'", (version,))
                self._writer.commit()
            self._writer.executescript(_APPEND_COMMIT_SCHEMA)
            (self._commit_seq,) = self._writer.execute("SELECT value FROM meta WHERE key='commit_seq'").fetchone()
            (self._page_size,) = self._writer.execute("PRAGMA page_size").fetchone()
        except sqlite3.DatabaseError as error:
            raise self._corruption(error) from error
        if version not in _SEGMENT_CHECKSUMS:
            raise StorageError(
                f"{self.db_path}: schema version {version}, this magnetar reads {sorted(_SEGMENT_CHECKSUMS)}"
            )
        self._segment_crc = _SEGMENT_CHECKSUMS[version]
        self._check_commit_seq(existed)
        self._commit_seq_fd = os.open(self.commit_seq_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._write_commit_seq()

    def _connect(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(
                self.db_path, isolation_level=None, check_same_thread=False, cached_statements=128
            )
            # 16 KB pages, for a new database only (SQLite keeps an existing one's page size). An
            # entry segment is a blob of up to 1 MB, which 4 KB pages split into hundreds of overflow
            # pages, each a WAL frame and two writes (1 KB entries, SQLite alone with fsync: 205 000/s
            # with 4 KB pages, 278 000/s with 64 KB). But every commit also rewrites whole pages it
            # only touches: the header page, meta, the ledgers' counters, and per ledger a segments
            # leaf and the part-filled last page of the segment's overflow chain. With 16 topics
            # that is ~35 pages a commit, so the page size is paid per ledger per commit: 100 B
            # entries, 16 topics, the bytes written per entry (WAL and checkpoint) are 448 with 32 KB
            # pages, 307 with 16 KB, 278 with 8 KB (the rows hold 124), and SQLite's CPU per entry
            # 0.29 / 0.24 / 0.25 us; 1 KB entries cost ~6% more CPU with 16 KB than 32 KB, and 8 KB
            # ~25% more (docs/storage.md).
            connection.execute("PRAGMA page_size=16384")
            connection.execute("PRAGMA journal_mode=WAL")
            # FULL: the WAL is fsynced at every commit. NORMAL: only at checkpoints, so a commit
            # survives a process crash but not a power cut.
            connection.execute(f"PRAGMA synchronous={'FULL' if self.journal_sync_data else 'NORMAL'}")
            # No checkpoint inside a commit: the checkpoint thread does them (CHECKPOINT_EVERY_BYTES).
            connection.execute("PRAGMA wal_autocheckpoint=0")
            # When the WAL starts over after a checkpoint, a file grown past the bound is cut back.
            connection.execute(f"PRAGMA journal_size_limit={WAL_BYTES_MAX}")
        except sqlite3.DatabaseError as error:
            raise self._corruption(error) from error
        return connection

    def _check_header(self) -> None:
        """A truncated main file is caught here, before SQLite reads past its end.

        Only when the WAL is empty: with a WAL, a checkpoint that a crash interrupted may have
        written page 1 before the pages it describes, which recovery completes; quick_check covers
        that case.
        """
        if not os.path.exists(self.db_path):
            return
        size = os.path.getsize(self.db_path)
        wal = self.db_path + "-wal"
        if size == 0 or (os.path.exists(wal) and os.path.getsize(wal) > 0):
            return
        with open(self.db_path, "rb") as file:
            header = file.read(100)
        if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
            raise StorageCorruptionError(f"{self.db_path}: not a SQLite database (damaged header)")
        page_size = int.from_bytes(header[16:18], "big")
        page_size = 65536 if page_size == 1 else page_size
        page_count = int.from_bytes(header[28:32], "big")
        header_size_valid = header[24:28] == header[92:96]
        if header_size_valid and size < page_count * page_size:
            raise StorageCorruptionError(
                f"{self.db_path}: truncated: {size} bytes on disk, its header says {page_count * page_size}"
            )

    def _check_commit_seq(self, database_existed: bool) -> None:
        if not os.path.exists(self.commit_seq_path):
            if database_existed and self._commit_seq > 0:
                raise StorageCorruptionError(
                    f"{self.commit_seq_path}: missing beside a database with {self._commit_seq} commits; "
                    "it guards against a cut WAL. Restore it, or delete it only if you accept that "
                    "recent commits may be gone"
                )
            return
        with open(self.commit_seq_path, "rb") as file:
            raw = file.read(_COMMIT_SEQ_RECORD.size)
        if len(raw) < _COMMIT_SEQ_RECORD.size:
            raise StorageCorruptionError(f"{self.commit_seq_path}: truncated ({len(raw)} bytes)")
        seq, crc = _COMMIT_SEQ_RECORD.unpack(raw)
        if zlib.crc32(raw[:8]) != crc:
            raise StorageCorruptionError(f"{self.commit_seq_path}: checksum mismatch")
        if seq > self._commit_seq:
            raise StorageCorruptionError(
                f"{self.db_path}-wal: commit {seq} completed but the database only holds commits up to "
                f"{self._commit_seq}: the WAL was truncated or damaged"
                + ("" if self.journal_sync_data else " (or power was lost with journalSyncData=false)")
                + f". Restore the files, or delete {self.commit_seq_path} to accept the loss"
            )

    def _write_commit_seq(self) -> None:
        # No fsync: written after the commit's own fsync returned, so if this record reached the disk
        # the commit it names did too; if it did not, the check is merely weaker.
        raw = self._commit_seq.to_bytes(8, "little")
        os.pwrite(self._commit_seq_fd, _COMMIT_SEQ_RECORD.pack(self._commit_seq, zlib.crc32(raw)), 0)

    def start(
        self,
        loop: asyncio.AbstractEventLoop,
        on_commit: Callable[[CommitReport], None],
        clock: Clock,
    ) -> None:
        """Start the threads; `on_commit` gets each commit's report on `loop`, and `clock` (the broker's,
        read on the commit thread) stamps the ledgers a commit appends to and times the group wait."""
        self._loop = loop
        self._on_commit = on_commit
        self._clock = clock
        self._read_pool = ThreadPoolExecutor(READER_THREADS, thread_name_prefix="magnetar-storage-read")
        self._thread = threading.Thread(target=self._commit_loop, name="magnetar-group-commit", daemon=True)
        self._thread.start()
        self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="magnetar-checkpoint", daemon=True)
        self._checkpointer.start()

    def _monotonic(self) -> float:
        assert self._clock is not None, "engine not started"
        return self._clock.monotonic()

    def close(self) -> None:
        """Stop the commit thread after it drained the queue, checkpoint, close. Blocking."""
        if self._thread is not None:
            self._queue.put((self._monotonic(), _STOP))
            self._thread.join()
            self._thread = None
        if self._checkpointer is not None:
            self._checkpoint_stop = True
            self._checkpoint_wanted.set()
            self._checkpointer.join()
            self._checkpointer = None
        if self._read_pool is not None:
            self._read_pool.shutdown(wait=True)
            self._read_pool = None
        with self._readers_lock:
            for reader in self._readers:
                reader.close()
            self._readers.clear()
        if self._writer is not None:
            try:
                # A clean shutdown leaves no WAL behind: the next open reads one file.
                self._writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass  # the data is in the WAL, which the next open recovers
            self._writer.close()
            self._writer = None
        self._close_files()

    def _close_files(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._commit_seq_fd >= 0:
            os.close(self._commit_seq_fd)
            self._commit_seq_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _corruption(self, error: sqlite3.DatabaseError) -> StorageError:
        message = str(error)
        if isinstance(error, sqlite3.OperationalError) and "malformed" not in message:
            return StorageError(f"{self.db_path}: {message}")
        return StorageCorruptionError(f"{self.db_path}: {message}")

    # ------------------------------------------------------------------ the engine interface (engine.py)

    async def load(self) -> Catalog:
        """`open()` and `load_catalog()` on a worker thread; closed again if either fails."""
        return await asyncio.to_thread(self._open_and_load)

    def _open_and_load(self) -> Catalog:
        self.open()
        try:
            topic_ids, ledger_id_max, metadata = self.load_catalog()
        except BaseException:
            self.close()
            raise
        self._next_ledger_id = ledger_id_max + 1
        return Catalog(topic_ids, metadata)

    async def shutdown(self) -> None:
        await asyncio.to_thread(self.close)

    def allocate_ledger_id(self, topic_id: int) -> int:
        """The next id after every id ever used in this database, whatever the topic."""
        ledger_id = self._next_ledger_id
        self._next_ledger_id += 1
        return ledger_id

    async def open_topic(self, name: str, topic_id: int | None, decode_ranges: Callable[[bytes], Any]) -> TopicState:
        """A topic the catalog does not list is inserted, empty; one it lists is read back. One process
        holds the data directory (`LOCK`), so there is no previous owner to fence."""
        if topic_id is None:
            return TopicState(await self.insert_topic(name), [], [], 0)
        ledgers, cursors, trimmed = await self.load_topic(topic_id, decode_ranges)
        return TopicState(topic_id, ledgers, cursors, trimmed)

    def stored_topics(self) -> set[str]:
        """None beyond the catalog: this process alone writes the data directory."""
        return set()

    async def close_topic(self, topic_id: int) -> None:
        """Nothing is held per topic: every write of it is already in the queue, and its rows stay."""

    # ------------------------------------------------------------------ loading (open time only)

    def load_catalog(self) -> tuple[dict[str, int], int, list[tuple[str, str, int]]]:
        """Before `start()` (open time), on the writer connection: the topic ids by name, the highest
        ledger id ever used (deleted ones included: ids are never reused, because a cursor may still
        name a deleted ledger and a new ledger with its id would make that mark-delete position cover
        entries nobody acknowledged), and the metadata records as (path, JSON, version)."""
        assert self._thread is None and self._writer is not None
        try:
            topic_ids = dict(self._writer.execute("SELECT name, id FROM topics").fetchall())
            (ledger_id_max,) = self._writer.execute(
                "SELECT max(coalesce((SELECT max(id) FROM ledgers), 0), "
                "(SELECT value FROM meta WHERE key='deleted_ledger_id_max'))"
            ).fetchone()
            metadata = self._writer.execute("SELECT path, value, version FROM metadata").fetchall()
        except sqlite3.DatabaseError as error:
            raise self._corruption(error) from error
        return topic_ids, ledger_id_max, metadata

    # ------------------------------------------------------------------ writes

    def submit(self, item: Any) -> None:
        """Queue `(owner, runs, payload bytes, entries)` (appends, in position order) or a
        `WriteOp`; called on the event loop."""
        self._queue.put((self._monotonic(), item))

    def _write(self, apply: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        assert self._loop is not None, "engine not started"
        future: asyncio.Future[Any] = self._loop.create_future()
        self.submit(WriteOp(apply, args, future))
        return future

    # The named writes: each goes into the next group commit, and its future resolves once durable.

    def insert_topic(self, name: str) -> asyncio.Future[int]:
        """A new topic; resolves to its id."""
        return self._write(_insert_topic, name)

    def delete_ledger(self, topic_id: int, ledger_id: int, entries: int) -> asyncio.Future[None]:
        """A ledger retention deleted: its entries, its row; its id stays used and its `entries` stay
        counted in the topic's trimmed entries."""
        return self._write(_delete_ledger, topic_id, ledger_id, entries)

    def delete_topic(self, topic_id: int) -> asyncio.Future[None]:
        """A topic with its ledgers, entries, cursors, count of trimmed entries and compacted view."""
        return self._write(_delete_topic, topic_id)

    def upsert_cursor(
        self,
        topic_id: int,
        name: str,
        mark_delete_position: tuple[int, int],
        individually_deleted: bytes,
        batch_deleted: str,
        properties: str,
    ) -> asyncio.Future[None]:
        """A durable cursor's snapshot, replacing the one before."""
        row = (topic_id, name, *mark_delete_position, individually_deleted, batch_deleted, properties)
        return self._write(_upsert_cursor, row)

    def delete_cursor(self, topic_id: int, name: str) -> asyncio.Future[None]:
        return self._write(_delete_cursor, topic_id, name)

    def put_metadata(self, path: str, value: str, version: int) -> asyncio.Future[int]:
        """A metadata record (`value` is its JSON), replacing the one at `path`; the file has one writer,
        whose metadata layer checked the version."""
        return self._write(_put_metadata, path, value, version)

    def watch_records(self, on_record: Callable[[str, str | None, int], None]) -> None:
        """Nothing to follow: only this engine writes its file."""

    def delete_metadata(self, path: str) -> asyncio.Future[None]:
        return self._write(_delete_metadata, path)

    def replace_compacted(
        self, topic_id: int, horizon: tuple[int, int], entries: Sequence[Entry], now_ms: int
    ) -> asyncio.Future[None]:
        """A topic's compacted view and its horizon, replaced in one transaction: readers see the old
        view or the new one, never a mix."""
        rows = [(topic_id, entry.position[0], entry.position[1], *entry[1:]) for entry in entries]
        return self._write(_replace_compacted, topic_id, horizon, rows, now_ms)

    def _commit_loop(self) -> None:
        take = self._queue.get
        while True:
            queued_at, item = take()
            if item is _STOP:
                return
            batch, size, stop = self._take_group(queued_at, item)
            report = self._commit(batch)
            if report.error is None:
                pages = WAL_PAGES_PER_COMMIT + WAL_PAGES_PER_LEDGER * len(report.appended) + len(report.ops)
                self._after_commit(size + pages * self._page_size)
            if not self._report_commit(report) or stop:
                return

    def _take_group(self, queued_at: float, first: Any) -> tuple[list[Any], int, bool]:
        """The writes of one commit: `first` (queued at `queued_at`) and what queued behind it, up to
        GROUP_COMMIT_ITEMS_MAX items or GROUP_COMMIT_BYTES_MAX bytes; with their payload bytes, and
        whether `_STOP` came after them."""
        take = self._queue.get
        take_nowait = self._queue.get_nowait
        batch = [first]
        size, entries = (first[2], first[3]) if type(first) is tuple else (0, 0)
        # As BookKeeper's journal does, the wait counts from when the oldest write was queued:
        # writes that queued during the previous commit's fsync have waited already.
        deadline = queued_at + self.group_wait_s
        while len(batch) < GROUP_COMMIT_ITEMS_MAX and size < GROUP_COMMIT_BYTES_MAX:
            try:
                _, item = take_nowait()
            except queue.Empty:
                if len(batch) >= GROUP_WAIT_ITEMS_MIN or entries >= GROUP_WAIT_ENTRIES_MIN or not self.group_wait_s:
                    break
                # A small commit waits a little for company (journalMaxGroupWaitMSec).
                remaining = deadline - self._monotonic()
                if remaining <= 0:
                    break
                try:
                    _, item = take(timeout=remaining)
                except queue.Empty:
                    break
            if item is _STOP:
                return batch, size, True
            batch.append(item)
            if type(item) is tuple:
                size += item[2]
                entries += item[3]
        return batch, size, False

    def _report_commit(self, report: CommitReport) -> bool:
        """Hand `report` to the event loop; False when the loop is gone and nobody waits any more."""
        assert self._loop is not None and self._on_commit is not None
        try:
            self._loop.call_soon_threadsafe(self._on_commit, report)
        except RuntimeError:
            return False
        return True

    def _commit(self, batch: list[Any]) -> CommitReport:  # noqa: C901 - one transaction per group commit on the commit thread: left whole until a split is measured
        report = CommitReport()
        by_ledger: dict[int, list[Run]] = {}
        owners: dict[int, Any] = {}
        for item in batch:
            if type(item) is not tuple:
                report.ops.append(item)
                continue
            owner, runs, _size, _entries = item
            for run in runs:
                ledger_id = run.ledger_id
                if ledger_id in self._fenced_ledgers:
                    fenced = LedgerFencedError(f"ledger {ledger_id} was fenced by a failed commit")
                    report.failed.append((owner, ledger_id, fenced))
                    continue
                ledger_runs = by_ledger.get(ledger_id)
                if ledger_runs is None:
                    by_ledger[ledger_id] = [run]
                    owners[ledger_id] = owner
                else:
                    ledger_runs.append(run)
        assert self._clock is not None, "engine not started"
        now_ms = self._clock.time_ms()
        segments: list[tuple[Any, ...]] = []
        ledgers: list[tuple[int, int, int, int, int]] = []
        topic_ids: list[int] = []  # per segment row, for the one-statement commit
        size_total = 0
        for ledger_id, runs in list(by_ledger.items()):
            rows: list[tuple[Any, ...]] = []
            try:
                count, size = _encode_segments(ledger_id, runs, rows, self._segment_crc)
            except (struct.error, OverflowError, TypeError) as error:
                # A field its column cannot hold (a hash beyond 32 bits, a name that is not a str):
                # that ledger's appends fail and it is fenced; the rest of the commit goes on.
                bad = StorageWriteError(f"{self.db_path}: ledger {ledger_id}: an entry field does not fit: {error}")
                self._fenced_ledgers.add(ledger_id)
                report.failed.append((owners.pop(ledger_id), ledger_id, bad))
                del by_ledger[ledger_id]
                continue
            segments.extend(rows)
            ledgers.append((ledger_id, owners[ledger_id].topic_id, count, size, now_ms))
            size_total += size
            topic_ids.extend(repeat(owners[ledger_id].topic_id, len(rows)))
        try:
            if self._writer_suspect:
                self._reopen_writer()
            writer = self._writer
            assert writer is not None
            commit_seq = self._commit_seq + 1
            if (
                segments
                and not report.ops
                and len(segments) <= _MULTI_ROW_MAX
                and size_total <= APPEND_COMMIT_BYTES_MAX
            ):
                # Appends alone, one statement: see _APPEND_COMMIT_SCHEMA.
                head = (commit_seq,)
                writer.execute(
                    _append_commit_sql(len(segments)),
                    list(chain.from_iterable(map(chain, repeat(head), zip(topic_ids), repeat((now_ms,)), segments))),
                )
            else:
                writer.execute("BEGIN")
                _insert_rows(writer, _insert_segments_sql, segments)
                _insert_rows(writer, _upsert_ledgers_sql, ledgers)
                for op in report.ops:
                    op.result = op.apply(writer, *op.args)
                writer.execute("UPDATE meta SET value=? WHERE key='commit_seq'", (commit_seq,))
                writer.execute("COMMIT")
        except (sqlite3.Error, OSError) as error:
            self._writer_suspect = True
            try:
                if self._writer is not None and self._writer.in_transaction:
                    self._writer.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection is reopened before the next commit anyway
            failure = StorageWriteError(f"{self.db_path}: commit failed, nothing in it is durable: {error}")
            report.error = failure
            for ledger_id in by_ledger:
                self._fenced_ledgers.add(ledger_id)
                report.failed.append((owners[ledger_id], ledger_id, failure))
            return report
        self._commit_seq += 1
        self.commits += 1
        try:
            self._write_commit_seq()
        except OSError:
            pass  # the commit is durable; only the damage check is weaker until the next write
        for ledger_id, runs in by_ledger.items():
            last = runs[-1]
            report.appended.append((owners[ledger_id], ledger_id, last.first_entry_id + len(last.datas) - 1))
        return report

    def _after_commit(self, committed_bytes: int) -> None:
        # The WAL file only grows past WAL_BYTES_MAX when the WAL has not started over since: each
        # time it does, the first commit cuts the file back to that size (journal_size_limit).
        try:
            wal_bytes = os.stat(self._wal_path).st_size
        except OSError:
            wal_bytes = 0
        if wal_bytes > WAL_BYTES_MAX:
            # Nothing is written while this runs, so it catches up with the whole WAL, and the next
            # transaction starts it over. A failure (disk full) loses nothing: the pages stay in it.
            self._checkpoint(self._writer)
            self._committed_since_checkpoint = 0
            return
        self._committed_since_checkpoint += committed_bytes
        if self._committed_since_checkpoint >= CHECKPOINT_EVERY_BYTES:
            self._committed_since_checkpoint = 0
            self._checkpoint_wanted.set()

    def _checkpoint_loop(self) -> None:
        connection: sqlite3.Connection | None = None
        try:
            while True:
                self._checkpoint_wanted.wait()
                self._checkpoint_wanted.clear()
                if self._checkpoint_stop:
                    return
                if connection is None:
                    try:
                        connection = self._connect()
                    except StorageError:
                        continue  # the commit thread's in-line checkpoint still bounds the WAL
                self._checkpoint(connection)
        finally:
            if connection is not None:
                connection.close()

    @staticmethod
    def _checkpoint(connection: sqlite3.Connection | None) -> None:
        """A PASSIVE checkpoint: it never blocks the writer or the readers."""
        if connection is None:
            return
        try:
            connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            pass  # the pages stay in the WAL; the next checkpoint tries again

    def _reopen_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._writer = self._connect()
        self._writer.executescript(_APPEND_COMMIT_SCHEMA)
        self._writer_suspect = False

    # ------------------------------------------------------------------ reads

    async def _run_read(self, function: Callable[..., Any], *args: Any) -> Any:
        """Run `function(connection, *args)` on a reader thread with its own connection."""
        assert self._read_pool is not None, "engine not started"
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._read_pool, self._read, function, args)

    def _read(self, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._connect()
            connection.execute("PRAGMA query_only=1")
            self._local.connection = connection
            with self._readers_lock:
                self._readers.append(connection)
        try:
            return function(connection, *args)
        except sqlite3.DatabaseError as error:
            raise self._corruption(error) from error

    # The named reads: each runs on a reader thread.

    async def read_entries(self, ledger_id: int, first: int, last: int) -> tuple[list[Run], list[Entry]]:
        """Entries `first..last` (inclusive) of one ledger, as Entry objects (for the reader), every one
        of which must exist, and the segments they came from as runs, whole (for the entry cache: they
        may begin before `first` and end after `last`)."""
        result: tuple[list[Run], list[Entry]] = await self._run_read(self._read_entries, ledger_id, first, last)
        return result

    async def load_topic(
        self, topic_id: int, decode_ranges: Callable[[bytes], Any]
    ) -> tuple[list[tuple[int, int, int, int]], list[tuple[Any, ...]], int]:
        """A topic's ledgers that hold entries, as (id, entries, size, timestamp_ms) in id order; its
        cursors as (name, mark-delete ledger, mark-delete entry, acknowledged ranges, batch_deleted,
        properties), the ranges decoded with `decode_ranges` here, off the event loop (a restart
        decodes a million of them); and its count of entries retention deleted."""
        result: tuple[list[tuple[int, int, int, int]], list[tuple[Any, ...]], int] = await self._run_read(
            self._load_topic, topic_id, decode_ranges
        )
        return result

    async def first_published_at_or_after(self, ledger_id: int, publish_time_ms: int) -> int | None:
        """The id of the ledger's first entry published at or after `publish_time_ms`, None if none."""
        result: int | None = await self._run_read(_first_published_at_or_after, ledger_id, publish_time_ms)
        return result

    async def read_horizon(self, topic_id: int) -> Position | None:
        """The horizon of the topic's compacted view, None if it was never compacted."""
        result: Position | None = await self._run_read(_read_horizon, topic_id)
        return result

    async def read_compacted(self, topic_id: int, start: tuple[int, int], count: int) -> list[Entry]:
        """Up to `count` entries of the compacted view at or after `start`, in position order."""
        result: list[Entry] = await self._run_read(_read_compacted, topic_id, start, count)
        return result

    async def read_last_compacted(self, topic_id: int) -> Entry | None:
        """The last entry of the compacted view, None when it holds none."""
        result: Entry | None = await self._run_read(_read_last_compacted, topic_id)
        return result

    def _load_topic(
        self, connection: sqlite3.Connection, topic_id: int, decode_ranges: Callable[[bytes], Any]
    ) -> tuple[list[tuple[int, int, int, int]], list[tuple[Any, ...]], int]:
        ledgers = connection.execute(
            "SELECT id, entries, size, timestamp_ms FROM ledgers WHERE topic_id=? AND entries > 0 ORDER BY id",
            (topic_id,),
        ).fetchall()
        cursors = connection.execute(
            "SELECT name, mark_delete_ledger, mark_delete_entry, individually_deleted, batch_deleted, properties "
            "FROM cursors WHERE topic_id=? ORDER BY name",
            (topic_id,),
        ).fetchall()
        decoded = []
        with gc_paused():
            for name, md_ledger, md_entry, ranges, batch, properties in cursors:
                try:
                    individually_deleted = decode_ranges(ranges)
                except ValueError as error:
                    raise StorageCorruptionError(
                        f"{self.db_path}: cursor {name!r} of topic {topic_id}: damaged acknowledged ranges: {error}"
                    ) from error
                decoded.append((name, md_ledger, md_entry, individually_deleted, batch, properties))
        row = connection.execute("SELECT value FROM meta WHERE key=?", (_entries_trimmed_key(topic_id),)).fetchone()
        return ledgers, decoded, row[0] if row else 0

    def _read_entries(
        self, connection: sqlite3.Connection, ledger_id: int, first: int, last: int
    ) -> tuple[list[Run], list[Entry]]:
        low = segment_id(ledger_id, first)
        # The segment holding `first` starts at or before it; two statements, because SQLite plans a
        # bound computed by a subquery as a full scan instead of a row-id range.
        (start,) = connection.execute(
            "SELECT max(id) FROM segments WHERE id <= ? AND id >= ?", (low, segment_id(ledger_id, 0))
        ).fetchone()
        rows = connection.execute(
            "SELECT * FROM segments WHERE id >= ? AND id <= ? ORDER BY id",
            (low if start is None else start, segment_id(ledger_id, last)),
        ).fetchall()
        runs: list[Run] = []
        entries: list[Entry] = []
        expected = first
        with gc_paused():
            for row in rows:
                run = self.decode_segment(row)
                if run.first_entry_id > expected:
                    break
                skip = expected - run.first_entry_id
                take = min(len(run.datas) - skip, last - expected + 1)
                if take <= 0:
                    continue
                runs.append(run)
                entries.extend(entries_of_run(run, skip, take))
                expected += take
            if expected != last + 1:
                raise StorageCorruptionError(
                    f"{self.db_path}: ledger {ledger_id} lost entry {expected} (asked for {first}..{last})"
                )
        return runs, entries

    def decode_segment(self, row: tuple[Any, ...]) -> Run:
        seg_id, count, data, lengths, hashes, counts, publish_times, sequence_ids, names, _pt_max, crc = row
        if self._segment_crc(data, lengths, hashes, counts, publish_times, sequence_ids, names) != crc:
            raise StorageCorruptionError(
                f"{self.db_path}: segment {seg_id >> _ENTRY_SHIFT}:{seg_id & _ENTRY_MASK} "
                f"({count} entries) fails its checksum"
            )
        return run_of_columns(
            seg_id >> _ENTRY_SHIFT,
            seg_id & _ENTRY_MASK,
            count,
            data,
            lengths,
            hashes,
            counts,
            publish_times,
            sequence_ids,
            names,
        )


def run_of_columns(
    ledger_id: int,
    first_entry_id: int,
    count: int,
    data: bytes,
    lengths: bytes,
    hashes: bytes,
    counts: bytes,
    publish_times: bytes,
    sequence_ids: bytes,
    names: str,
) -> Run:
    """The run of a segment's columns as `_encode_segment` packed them (the SQLite engine's rows and the
    BookKeeper engine's entries hold the same columns)."""
    length_array = array("I")
    length_array.frombytes(lengths)
    hash_array = array("i")
    hash_array.frombytes(hashes)
    count_array = array("i")
    count_array.frombytes(counts)
    if count > 1 and len(count_array) == 1:
        count_array *= count  # one message count for every entry (see _encode_segment)
    time_array = array("q")
    time_array.frombytes(publish_times)
    sequence_array = array("q")
    sequence_array.frombytes(sequence_ids)
    # Built with map over C callables only: a Python loop here costs ~3 us per entry and would
    # cap a backlog read near 300 000 entries/s.
    name_column = tuple(names.split("\0"))
    if count > 1 and len(name_column) == 1:
        name_column *= count  # one producer name for every entry (see _encode_segment)
    offsets = list(accumulate(length_array, initial=0))
    payloads = tuple(map(data.__getitem__, map(slice, offsets, offsets[1:])))
    return Run(
        ledger_id,
        first_entry_id,
        payloads,
        hash_array,
        count_array,
        time_array,
        name_column,
        sequence_array,
    )


class _GcPause:
    """Holds Python's cyclic garbage collector off while entries are made in bulk: a reader thread
    decoding segments, the event loop making Entry objects out of cached runs.

    Making an entry makes two GC-tracked objects (Entry, Position: tuple subclasses, which the
    collector never untracks), ten thousand or more per read. Every 700 allocations start a young
    collection, every ten of those an older one, and so on up to full collections that walk every
    tracked object in the process: measured, that was two thirds of a cold backlog read (300 000
    entries/s with the collector running, 730 000 without). Making entries creates no reference
    cycles, so holding the collector off for these few milliseconds loses nothing: the objects
    allocated meanwhile are examined by the next collection, once instead of dozens of times.
    Process-wide by nature (the collector is), so it is counted across threads and restores the
    collector only if it was enabled before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._was_enabled = False

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0 and self._was_enabled:
                    gc.enable()


gc_paused = _GcPause()


# `tuple.__new__` bound to the class: the same object the NamedTuple constructor makes, without its
# Python-level __new__ (the field count is fixed by the zip that feeds it): one per entry read, in the
# loops bench/storage_read.py measures (commit 7a307b1).
new_position = partial(tuple.__new__, Position)
new_entry = partial(tuple.__new__, Entry)


def entries_of_run(run: Run, start: int = 0, count: int = -1) -> list[Entry]:
    """Entry objects for `count` entries of a run from its `start`-th (all, by default), in C loops."""
    end = len(run.datas) if count < 0 else start + count
    first = run.first_entry_id + start
    positions = map(new_position, zip(repeat(run.ledger_id), range(first, first + end - start)))
    columns: Sequence[Sequence[Any]]
    if start == 0 and end == len(run.datas):
        columns = run[2:]
    else:
        columns = [column[start:end] for column in run[2:]]
    return list(map(new_entry, zip(positions, *columns)))


def runs_of_records(records: list[tuple[Any, ...]]) -> list[Run]:
    """Runs of `(ledger_id, entry_id, data, sticky_key_hash, message_count, publish_time,
    producer_name, sequence_id)` records that are consecutive within each ledger (single appends)."""
    if records[0][0] == records[-1][0]:
        groups = [records]
    else:
        groups = []
        for record in records:
            if not groups or groups[-1][-1][0] != record[0]:
                groups.append([])
            groups[-1].append(record)
    runs = []
    for group in groups:
        _, _, *columns = zip(*group)
        runs.append(Run(group[0][0], group[0][1], *columns))
    return runs


def _chained(checksum: Callable[[bytes, int], int]) -> Callable[..., int]:
    def segment_crc(*parts: Any) -> int:
        crc = 0
        for part in parts:
            crc = checksum(part.encode() if isinstance(part, str) else part, crc)
        return crc

    return segment_crc


# Segment checksum by schema version.
_CRC32, _CRC32C = _chained(zlib.crc32), _chained(crc32c.crc32c)
_SEGMENT_CHECKSUMS: dict[int, Callable[..., int]] = {1: _CRC32, 2: _CRC32C, 3: _CRC32C, 4: _CRC32}


def _encode_segments(
    ledger_id: int, runs: list[Run], rows: list[tuple[Any, ...]], segment_crc: Callable[..., int]
) -> tuple[int, int]:
    """Append to `rows` the segment rows of one ledger's runs in one commit (they are consecutive);
    return their entry count and payload bytes.

    An entry joins a segment while the segment holds fewer than SEGMENT_ENTRIES_MAX entries and
    fewer than SEGMENT_BYTES_MAX bytes before it. Runs are taken whole where they fit, which is the
    usual case (a run is one socket read of SENDs), and are never copied into one merged column:
    each column of a segment is packed run by run and the pieces joined, so the per-entry work is
    the packing alone. Only a run that reaches a limit is cut, where the rule says."""
    count = size = 0
    pieces: list[tuple[Run, int, int, tuple[int, ...]]] = []  # (run, start, end, lengths of the run)
    segment_count = segment_size = 0
    for run in runs:
        lengths = tuple(map(len, run.datas))
        run_count, run_size = len(lengths), sum(lengths)
        count += run_count
        size += run_size
        if segment_count + run_count <= SEGMENT_ENTRIES_MAX and segment_size + run_size < SEGMENT_BYTES_MAX:
            pieces.append((run, 0, run_count, lengths))
            segment_count += run_count
            segment_size += run_size
            continue
        start = 0
        while start < run_count:
            # Bytes before each remaining entry, counted from the segment's start: the first
            # entries below the limit join (at least one: an empty segment has none before it).
            before = list(accumulate(lengths[start:], initial=segment_size))
            joining = bisect_left(before, SEGMENT_BYTES_MAX, 0, run_count - start)
            end = start + min(SEGMENT_ENTRIES_MAX - segment_count, joining)
            if end > start:
                pieces.append((run, start, end, lengths))
                segment_count += end - start
                segment_size = before[end - start]
            if end < run_count:
                rows.append(_encode_segment(pieces, segment_crc))
                pieces, segment_count, segment_size = [], 0, 0
            start = end
    if pieces:
        rows.append(_encode_segment(pieces, segment_crc))
    return count, size


def _insert_rows(writer: sqlite3.Connection, statement: Callable[[int], str], rows: list[tuple[Any, ...]]) -> None:
    """Insert rows with multi-row statements of 64, 32, ... 1 rows. Each statement is one SQLite
    step, and each step gives up the GIL and must win it back from the event loop thread, which can
    take a whole switch interval (5 ms) when the loop is busy; one step per row made a 16-topic
    commit wait for the GIL dozens of times. Powers of two keep the prepared statements few."""
    start = 0
    while start < len(rows):
        size = min(_MULTI_ROW_MAX, 1 << ((len(rows) - start).bit_length() - 1))
        chunk = rows[start : start + size]
        writer.execute(statement(size), list(chain.from_iterable(chunk)))
        start += size


_MULTI_ROW_MAX = 64


@cache
def _insert_segments_sql(rows: int) -> str:
    return "INSERT INTO segments VALUES " + ",".join(["(?,?,?,?,?,?,?,?,?,?,?)"] * rows)


@cache
def _append_commit_sql(rows: int) -> str:
    return "INSERT INTO append_commit VALUES " + ",".join(["(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"] * rows)


@cache
def _upsert_ledgers_sql(rows: int) -> str:
    return (
        "INSERT INTO ledgers(id, topic_id, entries, size, timestamp_ms) VALUES "
        + ",".join(["(?,?,?,?,?)"] * rows)
        + " ON CONFLICT(id) DO UPDATE SET entries=entries+excluded.entries, size=size+excluded.size, "
        "timestamp_ms=excluded.timestamp_ms"
    )


def _encode_segment(
    pieces: list[tuple[Run, int, int, tuple[int, ...]]], segment_crc: Callable[..., int]
) -> tuple[Any, ...]:
    """The row of one segment: entries `start..end-1` of each piece's run, consecutive. Each column
    of the segment is one C call over the pieces' columns chained, never a merged copy."""
    columns: list[list[Sequence[Any]]]
    if len(pieces) == 1:
        run, start, end, lengths = pieces[0]
        if start == 0 and end == len(lengths):
            columns = [[column] for column in run[2:]]
        else:
            columns = [[column[start:end]] for column in run[2:]]
            lengths = lengths[start:end]
        length_columns = [lengths]
    else:
        columns = [[], [], [], [], [], []]
        length_columns = []
        for run, start, end, lengths in pieces:
            whole = start == 0 and end == len(lengths)
            for held, column in zip(columns, run[2:]):
                held.append(column if whole else column[start:end])
            length_columns.append(lengths if whole else lengths[start:end])
    data_columns, hash_columns, count_columns, time_columns, name_columns, sequence_columns = columns
    count = sum(map(len, length_columns))
    data = b"".join(chain.from_iterable(data_columns))
    # struct.pack converts a column of ints ~5x faster than array() does; the layout is the same
    # (native order and sizes), which decode_segment reads back with array.frombytes.
    length_bytes = struct.pack(f"{count}I", *chain.from_iterable(length_columns))
    hash_bytes = struct.pack(f"{count}i", *chain.from_iterable(hash_columns))
    time_bytes = struct.pack(f"{count}q", *chain.from_iterable(time_columns))
    sequence_bytes = struct.pack(f"{count}q", *chain.from_iterable(sequence_columns))
    # A piece is one producer's socket read: one name in every slot, and often one message count
    # (1 without client batching). A constant column is stored once, for every entry (decode_segment
    # tells it apart: a column of several entries holds a NUL per name after the first, 4 bytes per
    # count). That is bytes SQLite writes twice (WAL, database file) and checksums: a broker's
    # producer name is ~15 bytes an entry, as much as a 100 B entry's indexed fields.
    # `count` compares by identity first, so checking costs ~1 ns an entry.
    message_count = count_columns[0][0]
    if all(column.count(message_count) == len(column) for column in count_columns):
        count_bytes = struct.pack("i", message_count)
    else:
        count_bytes = struct.pack(f"{count}i", *chain.from_iterable(count_columns))
    name = name_columns[0][0]
    if type(name) is str and all(column.count(name) == len(column) for column in name_columns):
        name_text = name
    else:
        name_text = "\0".join(chain.from_iterable(name_columns))
    time_max = max(map(max, time_columns))
    crc = segment_crc(data, length_bytes, hash_bytes, count_bytes, time_bytes, sequence_bytes, name_text)
    run, start = pieces[0][0], pieces[0][1]
    return (
        segment_id(run.ledger_id, run.first_entry_id + start),
        count,
        data,
        length_bytes,
        hash_bytes,
        count_bytes,
        time_bytes,
        sequence_bytes,
        name_text,
        time_max,
        crc,
    )


# ---------------------------------------------------------------------- the statements of the named operations
# Writes run on the commit thread inside the group-commit transaction; reads on a reader thread.


def _entries_trimmed_key(topic_id: int) -> str:
    """The `meta` row counting the entries of a topic's ledgers that retention deleted."""
    return f"entries_trimmed:{topic_id}"


def _insert_topic(connection: sqlite3.Connection, name: str) -> int:
    topic_id = connection.execute("INSERT INTO topics(name) VALUES (?)", (name,)).lastrowid
    assert topic_id is not None
    return topic_id


def _delete_ledger_rows(connection: sqlite3.Connection, ledger_id: int) -> None:
    connection.execute(
        "DELETE FROM segments WHERE id >= ? AND id < ?", (segment_id(ledger_id, 0), segment_id(ledger_id + 1, 0))
    )
    connection.execute("DELETE FROM ledgers WHERE id=?", (ledger_id,))
    connection.execute("UPDATE meta SET value=max(value, ?) WHERE key='deleted_ledger_id_max'", (ledger_id,))


def _delete_ledger(connection: sqlite3.Connection, topic_id: int, ledger_id: int, entries: int) -> None:
    _delete_ledger_rows(connection, ledger_id)
    connection.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = value + excluded.value",
        (_entries_trimmed_key(topic_id), entries),
    )


def _delete_topic(connection: sqlite3.Connection, topic_id: int) -> None:
    for (ledger_id,) in connection.execute("SELECT id FROM ledgers WHERE topic_id=?", (topic_id,)).fetchall():
        _delete_ledger_rows(connection, ledger_id)
    connection.execute("DELETE FROM cursors WHERE topic_id=?", (topic_id,))
    connection.execute("DELETE FROM topics WHERE id=?", (topic_id,))
    connection.execute("DELETE FROM meta WHERE key=?", (_entries_trimmed_key(topic_id),))
    connection.execute("DELETE FROM compacted_entries WHERE topic_id=?", (topic_id,))
    connection.execute("DELETE FROM compaction_horizons WHERE topic_id=?", (topic_id,))


def _upsert_cursor(connection: sqlite3.Connection, row: tuple[Any, ...]) -> None:
    connection.execute("INSERT OR REPLACE INTO cursors VALUES (?,?,?,?,?,?,?)", row)


def _delete_cursor(connection: sqlite3.Connection, topic_id: int, name: str) -> None:
    connection.execute("DELETE FROM cursors WHERE topic_id=? AND name=?", (topic_id, name))


def _put_metadata(connection: sqlite3.Connection, path: str, value: str, version: int) -> int:
    connection.execute("INSERT OR REPLACE INTO metadata VALUES (?,?,?)", (path, value, version))
    return version


def _delete_metadata(connection: sqlite3.Connection, path: str) -> None:
    connection.execute("DELETE FROM metadata WHERE path=?", (path,))


def _replace_compacted(
    connection: sqlite3.Connection, topic_id: int, horizon: tuple[int, int], rows: list[tuple[Any, ...]], now_ms: int
) -> None:
    connection.execute("DELETE FROM compacted_entries WHERE topic_id=?", (topic_id,))
    connection.executemany("INSERT INTO compacted_entries VALUES (?,?,?,?,?,?,?,?,?)", rows)
    connection.execute(
        "INSERT INTO compaction_horizons VALUES (?,?,?,?) ON CONFLICT(topic_id) DO UPDATE SET "
        "ledger_id=excluded.ledger_id, entry_id=excluded.entry_id, compacted_at_ms=excluded.compacted_at_ms",
        (topic_id, horizon[0], horizon[1], now_ms),
    )


def _first_published_at_or_after(connection: sqlite3.Connection, ledger_id: int, publish_time_ms: int) -> int | None:
    row = connection.execute(
        "SELECT id, publish_times FROM segments WHERE id >= ? AND id < ? AND publish_time_max >= ? ORDER BY id LIMIT 1",
        (segment_id(ledger_id, 0), segment_id(ledger_id + 1, 0), publish_time_ms),
    ).fetchone()
    if row is None:
        return None
    times = array("q")
    times.frombytes(row[1])
    first_entry: int = row[0] & _ENTRY_MASK
    for offset, published in enumerate(times):
        if published >= publish_time_ms:
            return first_entry + offset
    return None


_COMPACTED_COLUMNS = (
    "ledger_id, entry_id, data, sticky_key_hash, message_count, publish_time, producer_name, sequence_id"
)


def _compacted_entry(row: tuple[Any, ...]) -> Entry:
    return new_entry((new_position((row[0], row[1])), *row[2:]))


def _read_horizon(connection: sqlite3.Connection, topic_id: int) -> Position | None:
    row = connection.execute(
        "SELECT ledger_id, entry_id FROM compaction_horizons WHERE topic_id=?", (topic_id,)
    ).fetchone()
    return None if row is None else Position(*row)


def _read_compacted(connection: sqlite3.Connection, topic_id: int, start: tuple[int, int], count: int) -> list[Entry]:
    rows = connection.execute(
        f"SELECT {_COMPACTED_COLUMNS} FROM compacted_entries WHERE topic_id=? AND (ledger_id, entry_id) >= (?, ?) "
        "ORDER BY ledger_id, entry_id LIMIT ?",
        (topic_id, start[0], start[1], count),
    ).fetchall()
    return [_compacted_entry(row) for row in rows]


def _read_last_compacted(connection: sqlite3.Connection, topic_id: int) -> Entry | None:
    row = connection.execute(
        f"SELECT {_COMPACTED_COLUMNS} FROM compacted_entries WHERE topic_id=? "
        "ORDER BY ledger_id DESC, entry_id DESC LIMIT 1",
        (topic_id,),
    ).fetchone()
    return None if row is None else _compacted_entry(row)
