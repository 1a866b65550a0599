"""The BookKeeper engine: a topic's ledgers on BookKeeper bookies, its ledger list and cursors in a metadata
store, as Pulsar's managed ledger keeps them (`ManagedLedgerImpl`, `MetaStoreImpl`, `ManagedCursorImpl`).

Owns: the BookKeeper ledger behind every magnetar ledger (ledger id = BookKeeper ledger id), the encoding of
a segment into one BookKeeper entry, the `ManagedLedgerInfo` and `ManagedCursorInfo` records
(ml_data_formats.proto, Pulsar's field numbers) at Pulsar's paths, written by compare-and-set with the
owner's extra `Check`s, the load sequence that fences a previous owner, the segment index of each ledger,
and the admin records and compacted views it stores in the same metadata store. Must not touch: ledger,
cursor or topic logic (the layers above decide; this stores); sockets (the BookKeeper client and the
metadata store own theirs).

Paths: `/managed-ledgers/{tenant}/{namespace}/persistent/{topic}` holds the ledger list, each cursor is a
child node of it; admin records keep their own `/admin/...` paths; a compacted view is
`/magnetar/compacted/{tenant}/{namespace}/persistent/{topic}` (JSON: its ledger, horizon and time).

Load (`open_topic`), as `ManagedLedgerImpl.initialize`: read the list and its version; open the last ledger
with recovery, which fences it on the bookies (the previous owner's next add gets EFENCED) and closes it
at the last entry an ack quorum holds; read that entry's header for the ledger's real entry count and size;
create a new ledger; write the list back at the version read. Another broker that loaded the topic in
between wrote another version: the write fails, and so does this load. Every later write of the list or a
cursor names the version this engine wrote last, so once another engine took the topic, the first one's
metadata writes fail too and it stops writing the topic (`LedgerFencedError`).

One BookKeeper entry carries one segment, the columns `sqlite_engine._encode_segment` packs, behind a
header naming the segment's first entry id, its entry count and the ledger's payload bytes before it, so
that positions stay per SEND and a reader finds the segment of an entry by the headers (a binary search
over the ledger's BookKeeper entries; for the ledgers this engine writes the index is kept as it writes).
A ledger has at most `_ADDS_IN_FLIGHT` adds out; the appends submitted meanwhile wait and go out together,
encoded into as few segments as the segment limits allow, when one returns. Column integers are
little-endian (the packing is native; the header says which).
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

from magnetar.bookkeeper import BKError, BookKeeper, DigestType, LedgerHandle, ReadHandle
from magnetar.bookkeeper.errors import LedgerFencedError as BKLedgerFencedError
from magnetar.clock import Clock
from magnetar.metadata.store import (
    BadVersionError,
    Check,
    MetadataStore,
    MetadataStoreError,
    NotEmptyError,
    NotFoundError,
    Notification,
    NotificationType,
    Op,
    Put,
    SessionEvent,
)
from magnetar.positions import Position
from magnetar.storage import ml_data_formats_pb2 as pb
from magnetar.storage.config import StorageConfig
from magnetar.storage.engine_records import RECORD_ROOTS, Catalog, TopicState
from magnetar.storage.errors import (
    LedgerFencedError,
    RecordVersionError,
    StorageBusyError,
    StorageError,
    StorageWriteError,
)
from magnetar.storage.sqlite_engine import (
    CommitReport,
    Entry,
    Run,
    _encode_segments,
    entries_of_run,
    gc_paused,
    new_entry,
    new_position,
    run_of_columns,
)

__all__ = ["BookKeeperEngine", "ChecksFor", "managed_ledger_path", "decode_segment_entry", "encode_segment_entry"]

log = logging.getLogger(__name__)

# (owner's topic name) -> the Checks every metadata write of that topic carries: the broker's ownership
# of the topic's bundle (its znode's version), so that a broker that lost the bundle cannot write.
ChecksFor = Callable[[str], Sequence[Check]]

MANAGED_LEDGERS = "/managed-ledgers"
# A ledger list's node is /managed-ledgers/{tenant}/{namespace}/{domain}/{topic}: four names down.
_TOPIC_DEPTH = 4
COMPACTED = "/magnetar/compacted"
# Magic, format version, byte order ('<'), the segment's first entry id, its entry count, the ledger's
# payload bytes before it, and the byte lengths of its seven columns.
_HEADER = struct.Struct("<2sBcqIQ7I")
_MAGIC = b"MS"
_FORMAT = 1
# The trimmed-entries counter in ManagedLedgerInfo.properties (Pulsar's tools show it as a property).
_TRIMMED = "magnetar.entriesTrimmed"
# A cursor's batch sizes (the partly acknowledged entries' message counts), which Pulsar's deleteSet
# does not carry: it is a bit set of the unacknowledged indexes, without its length.
_BATCH_SIZES = "magnetar.batchSizes"
# Ledger ids generated ahead (a ZooKeeper round trip each), so that a rollover on the append path gets one
# without waiting: the engine's topics together can roll this many ledgers faster than the ids come back
# before an append is refused with StorageBusyError. At Pulsar's 50 000 entries per ledger that is 1.6M
# entries in a few milliseconds; only tests with ledgers of a few entries come near it.
_IDS_AHEAD = 32
# BookKeeper adds out per ledger before the next appends wait, to go out together in one entry once one
# returns. An add costs the loop the same whatever it carries (three bookie frames out and three responses
# in, a digest, a future; bench/bookkeeper_add.py measured 140-230 µs of Python a pipelined add): at 10,000
# unbatched SENDs a second, one add each was most of the loop's core.
_ADDS_IN_FLIGHT = 2
# Reads and writes back of a cursor at a load before concluding that another owner writes it.
_TAKE_ATTEMPTS = 5
_DIGESTS = {"CRC32C": DigestType.CRC32C, "CRC32": DigestType.CRC32, "MAC": DigestType.HMAC, "DUMMY": DigestType.DUMMY}
_PASSWORD = b""


def _no_crc(*parts: Any) -> int:
    return 0  # BookKeeper's digest covers every entry


def managed_ledger_path(name: str) -> str:
    """`persistent://t/n/x` → `/managed-ledgers/t/n/persistent/x` (the local name URL-encoded, as Pulsar's
    `TopicName.getPersistenceNamingEncoding`)."""
    domain, _, rest = name.partition("://")
    tenant, namespace, local = rest.split("/", 2)
    return f"{MANAGED_LEDGERS}/{tenant}/{namespace}/{domain}/{quote(local, safe='')}"


def _topic_of_path(path: str) -> str:
    """`/managed-ledgers/t/n/persistent/x` → `persistent://t/n/x` (`managed_ledger_path` undone)."""
    tenant, namespace, domain, local = path[len(MANAGED_LEDGERS) + 1 :].split("/")
    return f"{domain}://{tenant}/{namespace}/{unquote(local)}"


def encode_segment_entry(row: tuple[Any, ...], bytes_before: int) -> bytes:
    """One BookKeeper entry of a segment row as `_encode_segments` made it."""
    seg_id, count, data, lengths, hashes, counts, times, sequences, names = row[:9]
    name_bytes = names.encode()
    columns = (data, lengths, hashes, counts, times, sequences, name_bytes)
    header = _HEADER.pack(_MAGIC, _FORMAT, b"<", seg_id & 0xFFFFFFFF, count, bytes_before, *map(len, columns))
    return b"".join((header, *columns))


def decode_segment_entry(ledger_id: int, payload: bytes) -> tuple[Run, int]:
    """The run a BookKeeper entry holds and the ledger's payload bytes before it."""
    magic, version, order, first, count, before, *lengths = _HEADER.unpack_from(payload)
    if magic != _MAGIC or version != _FORMAT or order != b"<":
        raise StorageError(f"ledger {ledger_id}: an entry that is not a magnetar segment ({magic!r}, {version})")
    columns = []
    offset = _HEADER.size
    for length in lengths:
        columns.append(payload[offset : offset + length])
        offset += length
    data, lengths_column, hashes, counts, times, sequences, names = columns
    run = run_of_columns(
        ledger_id, first, count, data, lengths_column, hashes, counts, times, sequences, names.decode()
    )
    return run, before


def _first_entry_of(payload: bytes) -> int:
    first: int = _HEADER.unpack_from(payload)[3]
    return first


@dataclass(eq=False)
class _Part:
    """One submission's entries of one ledger: reported once the group of adds it went out in is durable."""

    ledger_id: int
    last_entry_id: int
    durable: bool = False
    error: StorageError | None = None


@dataclass(eq=False)
class _Group:
    """The appends one flush of a ledger's waiting submissions encoded: their segments went out as
    `remaining` BookKeeper adds, and every part of it is durable once they all are."""

    parts: list[_Part]
    entries: int
    size: int
    remaining: int


@dataclass(eq=False)
class _Submission:
    owner: Any
    parts: list[_Part]

    @property
    def done(self) -> bool:
        return all(part.durable or part.error is not None for part in self.parts)


@dataclass(eq=False)
class _Ledger:
    """A ledger of a loaded topic: its handle once open, its durable figures, and its segment index
    (`firsts[i]` is the first entry id of BookKeeper entry i) as far as known."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp_ms: int = 0
    writer: LedgerHandle | None = None
    reader: ReadHandle | None = None
    firsts: dict[int, int] = field(default_factory=dict)
    # Appends not yet encoded, in order: (runs, part), while the writer is not open or `_ADDS_IN_FLIGHT`
    # adds are out.
    waiting: list[tuple[list[Run], _Part]] = field(default_factory=list)
    assigned_bytes: int = 0
    next_bk_entry: int = 0
    in_flight: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    failed: StorageError | None = None


@dataclass(eq=False)
class _Topic:
    topic_id: int
    name: str
    path: str
    version: int
    ledgers: dict[int, _Ledger]
    trimmed: int
    current: _Ledger | None = None
    prepared: int | None = None
    fenced: StorageError | None = None
    order: deque[_Submission] = field(default_factory=deque)
    rolling: asyncio.Task[Any] | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    cursor_versions: dict[str, int] = field(default_factory=dict)
    cursor_locks: dict[str, asyncio.Lock] = field(default_factory=dict)


class BookKeeperEngine:
    """A `StorageEngine` on a BookKeeper client and a metadata store. `checks` gives the extra Checks of every
    metadata write of a topic (none by default; a broker sets it once its cluster service exists, before any
    topic loads); it may raise LedgerFencedError, which fences the topic as a failed Check does. Its
    shutdown closes the BookKeeper client with `owns_bookkeeper` and the store with `owns_store`; otherwise
    they stay the caller's (a broker shares its metadata store with its other parts)."""

    def __init__(
        self,
        bookkeeper: BookKeeper,
        store: MetadataStore,
        config: StorageConfig,
        *,
        checks: ChecksFor | None = None,
        name: str = "bookkeeper",
        owns_bookkeeper: bool = False,
        owns_store: bool = False,
    ) -> None:
        self.data_dir = name
        self._bk = bookkeeper
        self._store = store
        self._config = config
        self.checks: ChecksFor = checks or (lambda topic: ())
        self._digest = _DIGESTS[config.managedLedgerDigestType]
        self._topics: dict[int, _Topic] = {}
        self._topic_ids: dict[str, int] = {}
        self._ids: deque[int] = deque()
        self._refilling: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_commit: Callable[[CommitReport], None] | None = None
        self._clock: Clock | None = None
        self._compacted: dict[int, tuple[Position | None, list[Entry]]] = {}
        self._next_topic_id = 1
        self._owns_bookkeeper = owns_bookkeeper
        self._stored: set[str] = set()
        self._owns_store = owns_store
        self._on_record: Callable[[str, str | None, int], None] | None = None
        self._record_paths: set[str] = set()

    @classmethod
    async def connect(
        cls, config: StorageConfig, store: MetadataStore, clock: Clock, *, owns_store: bool = False
    ) -> BookKeeperEngine:
        """An engine on the bookies `bookkeeperMetadataServiceUri` names, its own client closed with it, its
        records in `store`. ValueError, saying why, when the bookies' metadata cannot be reached."""
        uri = config.bookkeeperMetadataServiceUri
        try:
            bookkeeper = await BookKeeper.connect(uri, clock=clock, timeout_s=config.bookkeeperClientTimeoutInSeconds)
        except (BKError, OSError) as failure:
            raise ValueError(f"cannot reach the bookies' metadata at {uri}: {failure}") from None
        return cls(bookkeeper, store, config, name=uri, owns_bookkeeper=True, owns_store=owns_store)

    # ------------------------------------------------------------------ open / close

    async def load(self) -> Catalog:
        """The metadata records under RECORD_ROOTS, and the names of the stored topics (kept from then on
        by the store's notifications, as other brokers create and delete topics); topics are loaded when
        their owner opens them."""
        self._store.register_listener(self._on_notification)
        self._store.register_session_listener(self._on_session_event)
        rows = await self._walk_records()
        await self._list_topics(MANAGED_LEDGERS, 0, self._stored)
        await self._refill_ids()
        return Catalog({}, rows)

    async def _walk_records(self) -> list[tuple[str, str, int]]:
        rows: list[tuple[str, str, int]] = []
        for root in RECORD_ROOTS:
            await self._walk(root, rows)
        self._record_paths = {path for path, _, _ in rows}
        return rows

    async def _list_topics(self, path: str, depth: int, into: set[str]) -> None:
        children = await self._store.get_children(path)
        if depth == _TOPIC_DEPTH - 1:
            into.update(_topic_of_path(f"{path}/{child}") for child in children)
            return
        for child in children:
            await self._list_topics(f"{path}/{child}", depth + 1, into)

    def _on_notification(self, notification: Notification) -> None:
        path = notification.path
        if notification.type is NotificationType.CHILDREN_CHANGED:
            return
        if self._on_record is not None and any(path == root or path.startswith(root + "/") for root in RECORD_ROOTS):
            self._spawn(self._refresh_record(path))
            return
        if not path.startswith(MANAGED_LEDGERS + "/") or path.count("/") != _TOPIC_DEPTH + 1:
            return
        if notification.type is NotificationType.CREATED:
            self._stored.add(_topic_of_path(path))
        elif notification.type is NotificationType.DELETED:
            self._stored.discard(_topic_of_path(path))

    def watch_records(self, on_record: Callable[[str, str | None, int], None]) -> None:
        """A notification names a record's node, not what it holds: the node is read again, so that what
        `on_record` gets is what the store held after the change (reads answer in order)."""
        self._on_record = on_record

    async def _refresh_record(self, path: str) -> None:
        try:
            got = await self._store.get(path)
        except MetadataStoreError as error:
            log.warning("bookkeeper engine: cannot read the changed record %s: %s", path, error)
            return
        assert self._on_record is not None
        if got is None or not got.value:
            self._record_paths.discard(path)
            self._on_record(path, None, -1)
        else:
            self._record_paths.add(path)
            self._on_record(path, got.value.decode(), got.stat.version)

    def _on_session_event(self, event: SessionEvent) -> None:
        """ZooKeeper notifies nothing of what changed while the connection was down: once it is back, the
        records and the stored topics are read again (as Pulsar's metadata caches refresh on a
        reconnection)."""
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED) and self._on_record is not None:
            self._spawn(self._resync_records())

    async def _resync_records(self) -> None:
        before, stored = self._record_paths, set[str]()
        try:
            rows = await self._walk_records()
            await self._list_topics(MANAGED_LEDGERS, 0, stored)
        except MetadataStoreError as error:
            self._record_paths = before
            log.warning("bookkeeper engine: cannot read the records again after a reconnection: %s", error)
            return
        self._stored = stored
        assert self._on_record is not None
        for path in sorted(before - self._record_paths):
            self._on_record(path, None, -1)
        for path, value, version in rows:
            self._on_record(path, value, version)

    def stored_topics(self) -> set[str]:
        """Every topic with a ledger list in the store, whichever broker wrote it."""
        return self._stored

    async def _walk(self, path: str, rows: list[tuple[str, str, int]]) -> None:
        got = await self._store.get(path)
        if got is not None and got.value:
            rows.append((path, got.value.decode(), got.stat.version))
        for child in await self._store.get_children(path):
            await self._walk(f"{path}/{child}", rows)

    def start(self, loop: asyncio.AbstractEventLoop, on_commit: Callable[[CommitReport], None], clock: Clock) -> None:
        self._loop = loop
        self._on_commit = on_commit
        self._clock = clock

    async def shutdown(self) -> None:
        """Wait for the adds and writes in flight, then close every topic's ledger (CLOSED in its metadata,
        so that the next owner recovers nothing)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for topic in self._topics.values():
            await self._close_topic(topic)
        if self._refilling is not None:
            await asyncio.gather(self._refilling, return_exceptions=True)
        if self._owns_store:
            await self._store.close()
        if self._owns_bookkeeper:
            await self._bk.close()

    async def close_topic(self, topic_id: int) -> None:
        """Close the topic's ledger (CLOSED in its metadata) and write the list with its figures; the topic
        is forgotten, so a later load here reads everything back, as any other broker's would."""
        topic = self._topics.pop(topic_id, None)
        if topic is None:
            return
        del self._topic_ids[topic.name]
        if topic.rolling is not None:
            await asyncio.gather(topic.rolling, return_exceptions=True)
        await self._close_topic(topic)

    async def _close_topic(self, topic: _Topic) -> None:
        ledger = topic.current
        if ledger is not None and ledger.writer is not None and topic.fenced is None:
            await self._close_writer(ledger)
            await self._write_final_info(topic)

    async def _close_writer(self, ledger: _Ledger) -> None:
        while ledger.in_flight:
            ledger.idle.clear()
            await ledger.idle.wait()
        writer, ledger.writer = ledger.writer, None
        if writer is None:
            return
        try:
            await writer.close()
        except BKError as error:
            log.warning("ledger %s: close failed (its next owner recovers it): %s", ledger.ledger_id, error)

    async def _write_final_info(self, topic: _Topic) -> None:
        """The list with the closed ledger's figures, for Pulsar's tools; the next load reads them from the
        ledger itself anyway, so a failure here loses nothing."""
        try:
            await self._write_info(topic)
        except (StorageError, MetadataStoreError) as error:
            log.warning("%s: the ledger list at close was not written: %s", topic.name, error)

    def _spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("bookkeeper engine: a background write failed", exc_info=task.exception())

    # ------------------------------------------------------------------ ledger ids

    async def _refill_ids(self) -> None:
        manager = self._bk.ledger_manager
        while len(self._ids) < _IDS_AHEAD:
            self._ids.append(await manager.generate_ledger_id())

    def _refill_soon(self) -> None:
        if self._refilling is None or self._refilling.done():
            self._refilling = asyncio.ensure_future(self._refill_ids())

    def _drop_ids_up_to(self, ledger_id: int) -> None:
        """Forget the ids generated ahead that are not above `ledger_id`, a topic's last ledger: a managed
        ledger's ledgers go in increasing id order, and a topic that moved here has ledgers another broker
        created with ids it generated after some of ours (as Pulsar's ids come from ZooKeeper when each
        ledger is created, they increase). The ids dropped are never used: BookKeeper's need not be dense."""
        while self._ids and self._ids[0] <= ledger_id:
            self._ids.popleft()

    async def _next_id(self, after: int = -1) -> int:
        self._drop_ids_up_to(after)
        while not self._ids:
            await self._refill_ids()
            self._drop_ids_up_to(after)
        self._refill_soon()
        return self._ids.popleft()

    def allocate_ledger_id(self, topic_id: int) -> int:
        """The ledger the load created, the first time; then an id generated ahead, whose ledger is created
        now: appends to it wait until it is created and in the ledger list, as Pulsar's appends
        wait while the managed ledger is `CreatingLedger`."""
        topic = self._topics[topic_id]
        if topic.prepared is not None:
            ledger_id, topic.prepared = topic.prepared, None
            return ledger_id
        # Two refills running at once may have queued their ids out of order.
        self._drop_ids_up_to(max(topic.ledgers, default=-1))
        if not self._ids:
            self._refill_soon()
            raise StorageBusyError(f"{topic.name}: no BookKeeper ledger id generated ahead yet")
        ledger_id = self._ids.popleft()
        self._refill_soon()
        ledger = _Ledger(ledger_id, timestamp_ms=self._now_ms())
        topic.ledgers[ledger_id] = ledger
        previous, topic.current = topic.current, ledger
        if topic.fenced is not None:
            ledger.failed = topic.fenced
        else:
            topic.rolling = self._spawn(self._roll(topic, previous, ledger, topic.rolling))
        return ledger_id

    def _now_ms(self) -> int:
        assert self._clock is not None, "engine not started"
        return self._clock.time_ms()

    async def _roll(
        self, topic: _Topic, previous: _Ledger | None, ledger: _Ledger, before: asyncio.Task[Any] | None
    ) -> None:
        """Create `ledger` on the bookies, close `previous` once its adds are done, and write both into the
        ledger list in one compare-and-set (`ManagedLedgerImpl.ledgerClosed` + `createLedgerAfterClosed`).
        Rollovers of a topic take turns (`before`, the one before): a ledger is closed after it was opened."""
        try:
            ledger.writer = await self._create(topic, ledger.ledger_id)
            if before is not None:
                await asyncio.wait([before])
            if previous is not None:
                await self._close_writer(previous)
                if previous.entries == 0 and topic.ledgers.pop(previous.ledger_id, None) is not None:
                    self._spawn(self._delete_bk_ledger(previous.ledger_id))
            await self._write_info(topic)
        except (BKError, StorageError, MetadataStoreError) as error:
            self._ledger_failed(topic, ledger, error)
            return
        if ledger.waiting:
            self._flush(topic, ledger)

    async def _create(self, topic: _Topic, ledger_id: int) -> LedgerHandle:
        config = self._config
        return await self._bk.create_ledger(
            config.managedLedgerDefaultEnsembleSize,
            config.managedLedgerDefaultWriteQuorum,
            config.managedLedgerDefaultAckQuorum,
            self._digest,
            _PASSWORD,
            {
                "application": b"pulsar",
                "component": b"managed-ledger",
                "pulsar/managed-ledger": topic.path[len(MANAGED_LEDGERS) + 1 :].encode(),
            },
            ledger_id=ledger_id,
        )

    async def _delete_bk_ledger(self, ledger_id: int) -> None:
        try:
            await self._bk.delete_ledger(ledger_id)
        except BKError as error:
            log.warning("ledger %s: delete failed (left to BookKeeper's GC of orphans): %s", ledger_id, error)

    # ------------------------------------------------------------------ the ledger list

    def _info_bytes(self, topic: _Topic) -> bytes:
        info = pb.ManagedLedgerInfo()
        for ledger in topic.ledgers.values():
            info.ledgerInfo.add(
                ledgerId=ledger.ledger_id, entries=ledger.entries, size=ledger.size, timestamp=ledger.timestamp_ms
            )
        if topic.trimmed:
            info.properties.add(key=_TRIMMED, value=str(topic.trimmed))
        return info.SerializeToString()

    async def _write_info(self, topic: _Topic) -> None:
        """The ledger list, by compare-and-set on the version this engine read or wrote last, with the
        owner's Checks; a refusal fences the topic here."""
        async with topic.lock:
            if topic.fenced is not None:
                raise topic.fenced
            topic.version = await self._cas(topic, topic.path, self._info_bytes(topic), topic.version)

    async def _cas(self, topic: _Topic, path: str, value: bytes, version: int) -> int:
        try:
            ops: list[Op] = [*self.checks(topic.name), Put(path, value, version)]
        except LedgerFencedError as error:
            self._fence(topic, error)
            raise
        try:
            stats = await self._store.multi(ops)
        except (BadVersionError, NotFoundError) as error:
            fenced = LedgerFencedError(f"{topic.name}: another owner has the topic ({path}: {error})")
            self._fence(topic, fenced)
            raise fenced from error
        stat = stats[-1]
        assert stat is not None
        return stat.version

    def _fence(self, topic: _Topic, error: StorageError) -> None:
        """The topic is another owner's: no add goes out for it from now on (those out already complete or
        fail on their own), so that this broker stops writing the moment it learns it lost the topic."""
        if topic.fenced is None:
            log.warning("%s", error)
            topic.fenced = error
            if topic.current is not None:
                self._ledger_failed(topic, topic.current, error)

    # ------------------------------------------------------------------ appends

    def submit(self, item: Any) -> None:
        owner, runs, _size, _entries = item
        topic = self._topics[owner.topic_id]
        by_ledger: dict[int, list[Run]] = {}
        for run in runs:
            by_ledger.setdefault(run.ledger_id, []).append(run)
        submission = _Submission(owner, [])
        for ledger_id, ledger_runs in by_ledger.items():
            ledger = topic.ledgers[ledger_id]
            last = ledger_runs[-1]
            part = _Part(ledger_id, last.first_entry_id + len(last.datas) - 1)
            submission.parts.append(part)
            if ledger.failed is not None:
                part.error = ledger.failed
                continue
            ledger.waiting.append((ledger_runs, part))
            if ledger.writer is not None and ledger.in_flight < _ADDS_IN_FLIGHT:
                self._flush(topic, ledger)
        # In the order once whole: a ledger failing above reports what is done, and must not take this
        # submission for done while parts of it are still to come. Adds complete on later loop turns.
        topic.order.append(submission)
        self._report(topic)

    def _flush(self, topic: _Topic, ledger: _Ledger) -> None:
        """Encode every submission waiting for the ledger into segments together and add them: the SENDs
        that arrived while adds were out share BookKeeper entries, as SQLite's group commit shares one
        transaction, so an add costs its frames, digest and round trip once for many messages."""
        waiting, ledger.waiting = ledger.waiting, []
        runs = [run for part_runs, _part in waiting for run in part_runs]
        parts = [part for _runs, part in waiting]
        rows: list[tuple[Any, ...]] = []
        try:
            entries, size = _encode_segments(ledger.ledger_id, runs, rows, _no_crc)
        except (struct.error, OverflowError, TypeError) as error:
            # As in the SQLite engine: a field its column cannot hold fails that ledger (the appends
            # encoded with it too, so that entry ids keep no holes), nothing else.
            bad = StorageWriteError(f"{topic.name}: ledger {ledger.ledger_id}: an entry field does not fit: {error}")
            for part in parts:
                part.error = bad
            self._ledger_failed(topic, ledger, bad)
            return
        group = _Group(parts, entries, size, len(rows))
        writer = ledger.writer
        assert writer is not None
        for row in rows:
            payload = encode_segment_entry(row, ledger.assigned_bytes)
            ledger.assigned_bytes += len(row[2])
            ledger.firsts[ledger.next_bk_entry] = _first_entry_of(payload)
            ledger.next_bk_entry += 1
            ledger.in_flight += 1
            future = asyncio.ensure_future(writer.append(payload))
            future.add_done_callback(lambda done: self._added(topic, ledger, group, done))

    def _added(self, topic: _Topic, ledger: _Ledger, group: _Group, done: asyncio.Future[int]) -> None:
        ledger.in_flight -= 1
        error = None if done.cancelled() else done.exception()
        if done.cancelled() or error is not None:
            self._ledger_failed(topic, ledger, error or StorageWriteError("add cancelled"))
            for part in group.parts:
                if part.error is None:
                    part.error = ledger.failed
        else:
            group.remaining -= 1
            # The parts of a group fail together: the first one's error is the group's.
            if group.remaining == 0 and group.parts[0].error is None:
                ledger.entries += group.entries
                ledger.size += group.size
                ledger.timestamp_ms = self._now_ms()
                for part in group.parts:
                    part.durable = True
        if ledger.waiting and ledger.writer is not None and ledger.in_flight < _ADDS_IN_FLIGHT:
            self._flush(topic, ledger)
        if not ledger.in_flight:
            ledger.idle.set()
        self._report(topic)

    def _ledger_failed(self, topic: _Topic, ledger: _Ledger, error: BaseException) -> None:
        if ledger.failed is not None:
            return
        if isinstance(error, BKLedgerFencedError):
            self._fence(topic, LedgerFencedError(f"{topic.name}: ledger {ledger.ledger_id} fenced by another owner"))
        if isinstance(error, StorageError):
            failure: StorageError = error
        else:
            failure = StorageWriteError(f"{topic.name}: ledger {ledger.ledger_id}: {error}")
        ledger.failed = topic.fenced or failure
        for _runs, part in ledger.waiting:
            part.error = ledger.failed
        ledger.waiting = []
        self._report(topic)

    def _report(self, topic: _Topic) -> None:
        """Report the submissions done, oldest first, stopping at the first not done: an owner learns of
        its appends in position order."""
        order = topic.order
        report = CommitReport()
        while order and order[0].done:
            submission = order.popleft()
            for part in submission.parts:
                if part.error is None:
                    report.appended.append((submission.owner, part.ledger_id, part.last_entry_id))
                else:
                    report.failed.append((submission.owner, part.ledger_id, part.error))
        if (report.appended or report.failed) and self._on_commit is not None:
            self._on_commit(report)

    # ------------------------------------------------------------------ loading a topic

    async def open_topic(self, name: str, topic_id: int | None, decode_ranges: Callable[[bytes], Any]) -> TopicState:
        path = managed_ledger_path(name)
        got = await self._store.get(path)
        topic = _Topic(self._next_topic_id, name, path, -1, {}, 0)
        self._next_topic_id += 1
        if got is not None:
            topic.version = got.stat.version
            self._read_info(topic, got.value)
            await self._recover_last(topic)
        ledger_id = await self._next_id(after=max(topic.ledgers, default=-1))
        ledger = _Ledger(ledger_id, timestamp_ms=self._now_ms())
        ledger.writer = await self._create(topic, ledger_id)
        empty = [info.ledger_id for info in topic.ledgers.values() if info.entries == 0]
        for empty_id in empty:
            del topic.ledgers[empty_id]
        topic.ledgers[ledger_id] = ledger
        try:
            topic.version = await self._cas(topic, path, self._info_bytes(topic), topic.version)
        except LedgerFencedError:
            await self._delete_bk_ledger(ledger_id)
            raise
        for empty_id in empty:
            self._spawn(self._delete_bk_ledger(empty_id))
        self._stored.add(name)
        topic.current = ledger
        topic.prepared = ledger_id
        cursors = await self._load_cursors(topic, decode_ranges)
        self._topics[topic.topic_id] = topic
        self._topic_ids[name] = topic.topic_id
        ledgers = [
            (info.ledger_id, info.entries, info.size, info.timestamp_ms)
            for info in topic.ledgers.values()
            if info.entries
        ]
        return TopicState(topic.topic_id, ledgers, cursors, topic.trimmed)

    def _read_info(self, topic: _Topic, value: bytes) -> None:
        info = pb.ManagedLedgerInfo.FromString(value)
        for item in info.ledgerInfo:
            topic.ledgers[item.ledgerId] = _Ledger(item.ledgerId, item.entries, item.size, item.timestamp)
        for prop in info.properties:
            if prop.key == _TRIMMED:
                topic.trimmed = int(prop.value)

    async def _recover_last(self, topic: _Topic) -> None:
        """Open the last ledger with recovery: fenced on the bookies, closed at its last entry an ack quorum
        holds; its entry count and size are read from that entry's header (the list has them only for the
        ledgers its owner closed)."""
        if not topic.ledgers:
            return
        last = topic.ledgers[max(topic.ledgers)]
        try:
            handle = await self._bk.open_ledger(last.ledger_id, _PASSWORD, recovery=True)
        except BKError as error:
            raise StorageError(f"{topic.name}: cannot recover ledger {last.ledger_id}: {error}") from error
        last.reader = handle
        lac = handle.last_add_confirmed
        if lac < 0:
            last.entries = last.size = 0
            return
        (entry,) = await handle.read(lac, lac)
        run, before = decode_segment_entry(last.ledger_id, entry.payload)
        last.firsts[lac] = run.first_entry_id
        last.entries = run.first_entry_id + len(run.datas)
        last.size = before + sum(map(len, run.datas))

    # ------------------------------------------------------------------ cursors

    async def _load_cursors(self, topic: _Topic, decode_ranges: Callable[[bytes], Any]) -> list[tuple[Any, ...]]:
        cursors = []
        for child in await self._store.get_children(topic.path):
            value = await self._take_cursor(topic, child)
            if value is not None:
                cursors.append(_cursor_record(child, pb.ManagedCursorInfo.FromString(value), decode_ranges))
        return cursors

    async def _take_cursor(self, topic: _Topic, name: str) -> bytes | None:
        """Read a cursor and write it back at the version read, as Pulsar's cursor recovery rewrites the
        cursor's node: the previous owner's next write of it names the version it wrote last and fails, so
        its acknowledgements stop moving the cursor the moment this engine has it. (The ledger list's
        version alone does not guard the cursors, and the ownership node's does not either once the bundle
        has a new node: a node created again starts again at version 0.) A write of the previous owner
        landing between the read and the write back is read again."""
        path = f"{topic.path}/{name}"
        for _ in range(_TAKE_ATTEMPTS):
            got = await self._store.get(path)
            if got is None:
                return None
            try:
                stats = await self._store.multi([*self.checks(topic.name), Put(path, got.value, got.stat.version)])
            except BadVersionError:
                continue
            stat = stats[-1]
            assert stat is not None
            topic.cursor_versions[name] = stat.version
            return got.value
        raise LedgerFencedError(f"{topic.name}: cursor {name} kept changing under this load: another owner has it")

    def upsert_cursor(
        self,
        topic_id: int,
        name: str,
        mark_delete_position: tuple[int, int],
        individually_deleted: bytes,
        batch_deleted: str,
        properties: str,
    ) -> asyncio.Future[None]:
        topic = self._topics[topic_id]
        info = _cursor_info(
            mark_delete_position,
            individually_deleted,
            batch_deleted,
            properties,
            self._config.managedLedgerMaxUnackedRangesToPersistInMetadataStore,
            self._now_ms(),
        )
        return self._write(self._put_cursor(topic, name, info.SerializeToString()))

    async def _put_cursor(self, topic: _Topic, name: str, value: bytes) -> None:
        lock = topic.cursor_locks.setdefault(name, asyncio.Lock())
        async with lock:
            if topic.fenced is not None:
                raise topic.fenced
            path = f"{topic.path}/{name}"
            version = topic.cursor_versions.get(name, -1)
            topic.cursor_versions[name] = await self._cas(topic, path, value, version)

    def delete_cursor(self, topic_id: int, name: str) -> asyncio.Future[None]:
        topic = self._topics[topic_id]
        return self._write(self._delete_cursor(topic, name))

    async def _delete_cursor(self, topic: _Topic, name: str) -> None:
        lock = topic.cursor_locks.setdefault(name, asyncio.Lock())
        async with lock:
            version = topic.cursor_versions.pop(name, None)
            if version is not None:
                await self._store.delete(f"{topic.path}/{name}", version)

    # ------------------------------------------------------------------ the other named writes

    def _write(self, coroutine: Any) -> asyncio.Future[Any]:
        """A named write's future: the coroutine's outcome, the metadata store's errors as StorageError."""
        assert self._loop is not None, "engine not started"
        result: asyncio.Future[Any] = self._loop.create_future()

        async def run() -> None:
            try:
                outcome = await coroutine
            except (MetadataStoreError, BKError) as error:
                result.set_exception(StorageWriteError(f"{self.data_dir}: {error}"))
            except StorageError as error:
                result.set_exception(error)
            else:
                result.set_result(outcome)

        self._spawn(run())
        return result

    def delete_ledger(self, topic_id: int, ledger_id: int, entries: int) -> asyncio.Future[None]:
        """Retention: out of the ledger list first (by compare-and-set), then off the bookies."""
        topic = self._topics[topic_id]
        return self._write(self._delete_ledger(topic, ledger_id, entries))

    async def _delete_ledger(self, topic: _Topic, ledger_id: int, entries: int) -> None:
        ledger = topic.ledgers.pop(ledger_id, None)
        if ledger is None:
            return
        # Retention may pick a ledger the moment it stops being current: its rollover closes it first.
        if topic.rolling is not None:
            await asyncio.wait([topic.rolling])
        await self._close_writer(ledger)
        topic.trimmed += entries
        await self._write_info(topic)
        await self._delete_bk_ledger(ledger_id)

    def delete_topic(self, topic_id: int) -> asyncio.Future[None]:
        topic = self._topics.pop(topic_id)
        self._topic_ids.pop(topic.name, None)
        return self._write(self._delete_topic(topic))

    async def _delete_topic(self, topic: _Topic) -> None:
        ledger = topic.current
        if ledger is not None:
            await self._close_writer(ledger)
        for name in list(topic.cursor_versions):
            await self._delete_cursor(topic, name)
        await self._store.delete(topic.path, topic.version)
        self._stored.discard(topic.name)
        for ledger_id in topic.ledgers:
            await self._delete_bk_ledger(ledger_id)
        await self._store.delete_recursive(_compacted_path(topic))

    def put_metadata(self, path: str, value: str, version: int) -> asyncio.Future[int]:
        """An admin record at its own path, by compare-and-set on the store's version of it, since other
        brokers write the same records."""
        return self._write(self._put_metadata(path, value.encode(), version - 1))

    async def _put_metadata(self, path: str, value: bytes, expected: int) -> int:
        try:
            return (await self._store.put(path, value, expected)).version
        except BadVersionError:
            got = await self._store.get(path) if expected == -1 else None
            if got is None or got.value:
                raise RecordVersionError(f"{path}: changed by another broker") from None
        # The node is there emptied (a record deleted while records below it remain): the record is absent.
        try:
            return (await self._store.put(path, value, got.stat.version)).version
        except BadVersionError:
            raise RecordVersionError(f"{path}: changed by another broker") from None

    def delete_metadata(self, path: str) -> asyncio.Future[None]:
        return self._write(self._delete_metadata(path))

    async def _delete_metadata(self, path: str) -> None:
        """A record whose node has records below it (a tenant's namespaces) is emptied, not removed."""
        try:
            await self._store.delete(path)
        except NotEmptyError:
            await self._store.put(path, b"")

    # ------------------------------------------------------------------ compacted views

    def replace_compacted(
        self, topic_id: int, horizon: tuple[int, int], entries: Sequence[Entry], now_ms: int
    ) -> asyncio.Future[None]:
        """A new compacted ledger holding the view, one BookKeeper entry per compacted entry, then the record
        naming it; the ledger of the view before is deleted after. Readers see one view or the other."""
        topic = self._topics[topic_id]
        return self._write(self._replace_compacted(topic, Position(*horizon), list(entries), now_ms))

    async def _replace_compacted(self, topic: _Topic, horizon: Position, entries: list[Entry], now_ms: int) -> None:
        handle = await self._create(topic, await self._next_id())
        for entry in entries:
            await handle.append(_encode_compacted(entry))
        await handle.close()
        path = _compacted_path(topic)
        got = await self._store.get(path)
        record = {"ledger": handle.ledger_id, "horizon": list(horizon), "compactedAt": now_ms}
        await self._cas(topic, path, json.dumps(record).encode(), -1 if got is None else got.stat.version)
        self._compacted[topic.topic_id] = (horizon, entries)
        if got is not None:
            await self._delete_bk_ledger(json.loads(got.value)["ledger"])

    async def _compacted_view(self, topic_id: int) -> tuple[Position | None, list[Entry]]:
        view = self._compacted.get(topic_id)
        if view is not None:
            return view
        topic = self._topics[topic_id]
        got = await self._store.get(_compacted_path(topic))
        if got is None:
            return None, []
        record = json.loads(got.value)
        handle = await self._bk.open_ledger(record["ledger"], _PASSWORD, recovery=False)
        stored = await handle.read(0, handle.last_add_confirmed) if handle.last_add_confirmed >= 0 else []
        view = (Position(*record["horizon"]), [_decode_compacted(item.payload) for item in stored])
        self._compacted[topic_id] = view
        return view

    async def read_horizon(self, topic_id: int) -> Position | None:
        return (await self._compacted_view(topic_id))[0]

    async def read_compacted(self, topic_id: int, start: tuple[int, int], count: int) -> list[Entry]:
        entries = (await self._compacted_view(topic_id))[1]
        index = bisect_left([entry.position for entry in entries], Position(*start))
        return entries[index : index + count]

    async def read_last_compacted(self, topic_id: int) -> Entry | None:
        entries = (await self._compacted_view(topic_id))[1]
        return entries[-1] if entries else None

    # ------------------------------------------------------------------ reads

    async def _read_handle(self, topic_ledger: _Ledger) -> LedgerHandle | ReadHandle:
        if topic_ledger.writer is not None:
            return topic_ledger.writer
        if topic_ledger.reader is None:
            topic_ledger.reader = await self._bk.open_ledger(topic_ledger.ledger_id, _PASSWORD, recovery=False)
        return topic_ledger.reader

    def _ledger(self, ledger_id: int) -> _Ledger:
        for topic in self._topics.values():
            ledger = topic.ledgers.get(ledger_id)
            if ledger is not None:
                return ledger
        raise StorageError(f"{self.data_dir}: ledger {ledger_id} is not a ledger of a loaded topic")

    async def _first_of(self, ledger: _Ledger, handle: LedgerHandle | ReadHandle, bk_entry: int) -> int:
        first = ledger.firsts.get(bk_entry)
        if first is None:
            (entry,) = await handle.read(bk_entry, bk_entry)
            first = ledger.firsts[bk_entry] = _first_entry_of(entry.payload)
        return first

    async def _locate(self, ledger: _Ledger, handle: LedgerHandle | ReadHandle, entry_id: int) -> int:
        """The BookKeeper entry whose segment holds `entry_id`: a binary search over the segment headers."""
        low, high = 0, handle.last_add_confirmed
        while low < high:
            middle = (low + high + 1) // 2
            if await self._first_of(ledger, handle, middle) <= entry_id:
                low = middle
            else:
                high = middle - 1
        return low

    async def read_entries(self, ledger_id: int, first: int, last: int) -> tuple[list[Run], list[Entry]]:
        ledger = self._ledger(ledger_id)
        handle = await self._read_handle(ledger)
        try:
            start = await self._locate(ledger, handle, first)
            end = await self._locate(ledger, handle, last)
            stored = await handle.read(start, end)
        except BKError as error:
            raise StorageError(f"{self.data_dir}: ledger {ledger_id}: read {first}..{last} failed: {error}") from error
        runs: list[Run] = []
        entries: list[Entry] = []
        expected = first
        with gc_paused():
            for item in stored:
                run, _before = decode_segment_entry(ledger_id, item.payload)
                skip = expected - run.first_entry_id
                take = min(len(run.datas) - skip, last - expected + 1)
                if take <= 0:
                    continue
                runs.append(run)
                entries.extend(entries_of_run(run, skip, take))
                expected += take
        if expected != last + 1:
            raise StorageError(f"{self.data_dir}: ledger {ledger_id} lacks entry {expected} (read {first}..{last})")
        return runs, entries

    async def first_published_at_or_after(self, ledger_id: int, publish_time_ms: int) -> int | None:
        ledger = self._ledger(ledger_id)
        handle = await self._read_handle(ledger)
        for bk_entry in range(handle.last_add_confirmed + 1):
            (item,) = await handle.read(bk_entry, bk_entry)
            run, _before = decode_segment_entry(ledger_id, item.payload)
            for offset, published in enumerate(run.publish_times):
                if published >= publish_time_ms:
                    return run.first_entry_id + offset
        return None


def _compacted_path(topic: _Topic) -> str:
    return COMPACTED + topic.path[len(MANAGED_LEDGERS) :]


_COMPACTED_HEADER = struct.Struct("<qqiiqqI")


def _encode_compacted(entry: Entry) -> bytes:
    name = entry.producer_name.encode()
    header = _COMPACTED_HEADER.pack(
        entry.position[0],
        entry.position[1],
        entry.sticky_key_hash,
        entry.message_count,
        entry.publish_time,
        entry.sequence_id,
        len(name),
    )
    return b"".join((header, name, entry.data))


def _decode_compacted(payload: bytes) -> Entry:
    ledger_id, entry_id, key_hash, count, published, sequence, name_length = _COMPACTED_HEADER.unpack_from(payload)
    start = _COMPACTED_HEADER.size
    name = payload[start : start + name_length].decode()
    data = payload[start + name_length :]
    return new_entry((new_position((ledger_id, entry_id)), data, key_hash, count, published, name, sequence))


def _cursor_info(
    mark_delete: tuple[int, int],
    individually_deleted: bytes,
    batch_deleted: str,
    properties: str,
    max_ranges: int,
    now_ms: int,
) -> pb.ManagedCursorInfo:
    """Pulsar's snapshot of a cursor kept in the metadata store (`cursorsLedgerId` -1: no cursor ledger):
    the first `max_ranges` acknowledged ranges, batch indexes as Pulsar's bit sets of the indexes still
    unacknowledged, integer properties as LongProperty and the rest as StringProperty (JSON)."""
    info = pb.ManagedCursorInfo(
        cursorsLedgerId=-1, markDeleteLedgerId=mark_delete[0], markDeleteEntryId=mark_delete[1], lastActive=now_ms
    )
    flat = array("q")
    flat.frombytes(individually_deleted)
    for index in range(0, min(len(flat), 4 * max_ranges), 4):
        lower, upper = info.individualDeletedMessages.add().lowerEndpoint, None
        lower.ledgerId, lower.entryId = flat[index], flat[index + 1]
        upper = info.individualDeletedMessages[-1].upperEndpoint
        upper.ledgerId, upper.entryId = flat[index + 2], flat[index + 3]
    sizes = []
    for ledger_id, entry_id, size, mask in json.loads(batch_deleted):
        batch = info.batchedEntryDeletionIndexInfo.add()
        batch.position.ledgerId, batch.position.entryId = ledger_id, entry_id
        unacked = ~mask & ((1 << size) - 1)
        batch.deleteSet.extend(_words(unacked, size))
        sizes.append(size)
    if sizes:
        info.cursorProperties.add(name=_BATCH_SIZES, value=json.dumps(sizes))
    for key, value in sorted(json.loads(properties).items()):
        if type(value) is int:
            info.properties.add(name=key, value=value)
        else:
            info.cursorProperties.add(name=key, value=json.dumps(value))
    return info


def _words(bits: int, size: int) -> list[int]:
    """A bit set as Java's `BitSet.toLongArray` gives it: signed 64-bit words, lowest first."""
    words = []
    for _ in range((size + 63) // 64):
        word = bits & 0xFFFFFFFFFFFFFFFF
        words.append(word - (1 << 64) if word >= 1 << 63 else word)
        bits >>= 64
    return words


def _cursor_record(name: str, info: pb.ManagedCursorInfo, decode_ranges: Callable[[bytes], Any]) -> tuple[Any, ...]:
    """A cursor as `ManagedLedger.restore_cursors` takes it, from its ManagedCursorInfo."""
    flat = array("q")
    for item in info.individualDeletedMessages:
        lower, upper = item.lowerEndpoint, item.upperEndpoint
        flat.extend((lower.ledgerId, lower.entryId, upper.ledgerId, upper.entryId))
    try:
        ranges = decode_ranges(flat.tobytes())
    except ValueError as error:
        raise StorageError(f"cursor {name!r}: damaged acknowledged ranges: {error}") from error
    strings = {prop.name: prop.value for prop in info.cursorProperties}
    sizes = json.loads(strings.pop(_BATCH_SIZES, "[]"))
    batches = []
    for batch, size in zip(info.batchedEntryDeletionIndexInfo, sizes):
        unacked = sum((word & 0xFFFFFFFFFFFFFFFF) << (64 * index) for index, word in enumerate(batch.deleteSet))
        mask = ~unacked & ((1 << size) - 1)
        batches.append([batch.position.ledgerId, batch.position.entryId, size, mask])
    properties: dict[str, Any] = {prop.name: prop.value for prop in info.properties}
    properties.update({key: json.loads(value) for key, value in strings.items()})
    return (
        name,
        info.markDeleteLedgerId,
        info.markDeleteEntryId,
        ranges,
        json.dumps(batches),
        json.dumps(properties, sort_keys=True),
    )
