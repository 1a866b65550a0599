"""A seeded schedule of the real BookKeeper client against fake bookies on virtual time, and the checks of
BookKeeper's safety properties over what the clients saw.

Owns: `BKOptions` (what a seed derives: bookies, quorums, entries, window, timeouts, latencies, faults, when
a second client recovers the ledger), `BKWorld` (the bookies, the metadata, the clients and what they saw),
`run_bk_schedule` and the checks:
- `ack-not-covered`: at the moment an add was acknowledged to the writer, fewer than A bookies of its write
  set, in the ensemble the stored metadata gives it, held the entry (recovery, reading that metadata,
  could lose it: what an acknowledgement during an ensemble change risks);
- `acked-lost`: an acknowledged entry is past the closed ledger's lastEntryId, or reads back other bytes;
- `zombie-ack`: the old writer got an acknowledgement of an entry past lastEntryId after the recovery closed
  the ledger (fencing failed);
- `readers-disagree`: two readers of the closed ledger, or a reader of the open ledger and the closed one,
  saw other entries;
- `phantom-entry`: the closed ledger holds bytes the writer never appended;
- `close-mismatch`: the writer's own close succeeded at an entry other than the ledger's last;
- `lac`: the writer's last add confirmed is not its highest acknowledged entry;
- `unretrieved-error`: the client left a failure nobody retrieved (asyncio would log it and drop it);
- `client-raised`: the client raised something other than a BookKeeper error;
- `recovery-failed`, `unreadable`, `stalled`: with every bookie back, the ledger could not be recovered or
  read, or the schedule never ended.
As in the TLA+ model of BookKeeper's replication protocol: no acknowledged entry is lost, readers agree on
a closed ledger, and a recovered ledger's writer gets no further acknowledgement past its end.
Must not touch: the client's behaviour: it runs the real `magnetar.bookkeeper` code over the real wire
codec and the real `BookieClient`, and only reads the handles' public state.
"""

from __future__ import annotations

import asyncio
import gc
import random
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from magnetar.bookkeeper import BKError, BookieClient, BookKeeper, LedgerHandle, LedgerMetadata, MemoryLedgerManager
from magnetar.bookkeeper.digest import DigestType
from magnetar.bookkeeper.errors import LedgerFencedError
from magnetar.bookkeeper.schedule import write_set
from magnetar.clock import LoopClock
from magnetar.sim.bookkeeper.network import Latency, SimBookieServer, SimLoop
from magnetar.sim.shell.loop import Stalled

__all__ = ["BKOptions", "BKResult", "BKWorld", "Fault", "SimLedgerManager", "run_bk_schedule"]

PASSWORD = b"sim"
EPOCH_MS = 1_767_225_600_000  # the virtual clock's 0, as epoch milliseconds (2026-01-01)
RECOVERY_ATTEMPTS = 5
SCHEDULE_DEADLINE_S = 3_600.0  # virtual seconds a schedule may take before it counts as stalled
TRACE_MAX = 60
QUORUMS = ((2, 2, 1), (2, 2, 2), (3, 2, 2), (3, 3, 2), (3, 3, 3), (4, 3, 2), (4, 2, 2))


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: str  # "crash" (restarted after duration_s, journal kept) or "stall" (requests lost for duration_s)
    bookie: int
    duration_s: float


@dataclass(frozen=True)
class BKOptions:
    bookies: int = 4
    quorum: tuple[int, int, int] = (3, 3, 2)
    entries: int = 30
    window: int = 4
    append_gap_s: float = 0.01
    timeout_s: float = 5.0
    network_s: float = 0.002
    handling_s: float = 0.005
    slow_fraction: float = 0.0
    metadata_s: float = 0.01
    faults: tuple[Fault, ...] = ()
    # When second clients open the ledger with recovery (two of them race each other).
    recovery_at_s: tuple[float, ...] = ()
    tail_read_at_s: float | None = None

    @classmethod
    def from_seed(cls, seed: int) -> BKOptions:
        rng = random.Random(seed)
        bookies = rng.choice((3, 4, 5))
        quorum = rng.choice([q for q in QUORUMS if q[0] <= bookies])
        entries = rng.randint(5, 60)
        gap = rng.choice((0.0, 0.005, 0.02))
        span = max(entries * gap, 0.2)
        faults = tuple(
            sorted(
                (
                    Fault(
                        rng.uniform(0, span),
                        rng.choice(("crash", "stall")),
                        rng.randrange(bookies),
                        rng.uniform(0.01, 10),
                    )
                    for _ in range(rng.choice((0, 1, 2, 3, 4)))
                ),
                key=lambda fault: fault.at_s,
            )
        )
        return cls(
            bookies=bookies,
            quorum=quorum,
            entries=entries,
            window=rng.choice((1, 3, 10, 100)),
            append_gap_s=gap,
            timeout_s=rng.choice((1.0, 5.0, 30.0)),
            network_s=rng.choice((0.0005, 0.005)),
            handling_s=rng.choice((0.001, 0.01)),
            slow_fraction=rng.choice((0.0, 0.0, 0.05)),
            metadata_s=rng.choice((0.001, 0.02, 0.5)),
            faults=faults,
            recovery_at_s=tuple(rng.uniform(0, span * 1.5) for _ in range(rng.choice((0, 1, 1, 2)))),
            tail_read_at_s=rng.choice((None, rng.uniform(0, span))),
        )


class SimLedgerManager(MemoryLedgerManager):
    """The in-memory metadata with ZooKeeper's round trip, keeping what is stored (and when) for the
    checkers to read at any instant, and calling `on_store` after each store."""

    def __init__(self, bookies: tuple[str, ...], delay_s: float) -> None:
        super().__init__(bookies)
        self.delay_s = delay_s
        self.stored: dict[int, LedgerMetadata] = {}
        self.stores: list[tuple[float, LedgerMetadata]] = []
        # When a client asked for writable bookies: a handle does so as its ensemble change begins.
        self.bookies_asked_at: list[float] = []
        self.on_store: list[Callable[[], None]] = []

    def _store(self, ledger_id: int, metadata: LedgerMetadata) -> None:
        self.stored[ledger_id] = metadata
        self.stores.append((asyncio.get_running_loop().time(), metadata))
        for callback in self.on_store:
            callback()

    async def create_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata) -> int:
        await asyncio.sleep(self.delay_s)
        version = await super().create_ledger_metadata(ledger_id, metadata)
        self._store(ledger_id, metadata)
        return version

    async def write_ledger_metadata(self, ledger_id: int, metadata: LedgerMetadata, version: int) -> int:
        await asyncio.sleep(self.delay_s)
        written = await super().write_ledger_metadata(ledger_id, metadata, version)
        self._store(ledger_id, metadata)
        return written

    async def writable_bookies(self) -> tuple[str, ...]:
        self.bookies_asked_at.append(asyncio.get_running_loop().time())
        return await super().writable_bookies()


@dataclass
class BKResult:
    seed: int | None
    options: BKOptions
    acked: int = 0
    last_entry_id: int | None = None
    # What happened, to see what a sweep exercised: ensemble changes in the closed ledger's metadata, adds
    # the writer saw fail with EFENCED (a zombie writer), entries a recovery found past the LAC.
    ensemble_changes: int = 0
    fenced_appends: int = 0
    virtual_s: float = 0.0
    violations: list[tuple[str, str]] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)

    def describe(self) -> str:
        replay = f"python -m magnetar.sim.bookkeeper --seed {self.seed}" if self.seed is not None else "scripted"
        lines = [f"seed {self.seed} ({replay}): {self.options}"]
        lines += [f"  {kind}: {detail}" for kind, detail in self.violations]
        lines += ["  trace (last events):"] + [f"    {event}" for event in self.trace[-TRACE_MAX:]]
        return "\n".join(lines)


class BKWorld:
    """The bookies, the metadata and the clients of one schedule, and what the clients saw."""

    def __init__(self, loop: SimLoop, options: BKOptions, seed: int | None, rng: random.Random) -> None:
        self.loop = loop
        self.options = options
        self.rng = rng
        self.ids = tuple(f"bookie-{index}:3181" for index in range(options.bookies))
        self.servers = [
            SimBookieServer(loop, bookie, Latency(rng, options.network_s, options.handling_s, options.slow_fraction))
            for bookie in self.ids
        ]
        self.manager = SimLedgerManager(self.ids, options.metadata_s)
        self.result = BKResult(seed, options)
        self.transports: list[BookieClient] = []
        self.writer: LedgerHandle | None = None
        self.ledger_created = asyncio.Event()
        self.acked: dict[int, bytes] = {}
        self.appended: set[bytes] = set()
        self.checked_lac = -1
        self.recovered: LedgerMetadata | None = None
        self.writer_closed_at: int | None = None
        self.reads: dict[str, list[bytes]] = {}
        self.ack_times: dict[int, float] = {}
        loop.result_observers.append(self._check_acks_covered)
        self.manager.on_store.append(self._check_stored_covers_acks)

    def client(self) -> BookKeeper:
        clock = LoopClock(self.loop, lambda: EPOCH_MS + int(self.loop.time() * 1000))
        transport = BookieClient(clock, self.options.timeout_s)
        self.transports.append(transport)
        return BookKeeper(self.manager, transport, clock=clock, rng=random.Random(self.rng.random()))

    def event(self, text: str) -> None:
        self.result.trace.append(f"{self.loop.time():9.4f} {text}")

    def violation(self, kind: str, detail: str) -> None:
        self.result.violations.append((kind, detail))
        self.event(f"VIOLATION {kind}: {detail}")

    # --- the writer

    async def write(self) -> None:
        ensemble, write_quorum, ack_quorum = self.options.quorum
        bk = self.client()
        self.writer = await bk.create_ledger(ensemble, write_quorum, ack_quorum, DigestType.CRC32C, PASSWORD)
        self.event(f"created ledger {self.writer.ledger_id} on {list(self.writer.metadata.last_ensemble[1])}")
        self.ledger_created.set()
        calls = iter(range(self.options.entries))
        await asyncio.gather(*(self._append_slot(self.writer, calls) for _ in range(self.options.window)))
        if self.writer.last_add_confirmed != max(self.acked, default=-1):
            self.violation("lac", f"LAC {self.writer.last_add_confirmed}, acknowledged up to {max(self.acked)}")
        try:
            await self.writer.close()
        except BKError as error:
            self.event(f"writer's close failed: {error!r}")
            return
        self.writer_closed_at = self.writer.last_add_confirmed
        self.event(f"writer closed the ledger at {self.writer_closed_at}")

    async def _append_slot(self, ledger: LedgerHandle, calls: Iterator[int]) -> None:
        for call in calls:
            payload = f"call-{call}".encode()
            self.appended.add(payload)
            try:
                entry_id = await ledger.append(payload)
            except BKError as error:
                self.event(f"append {call} failed: {error!r}")
                self.result.fenced_appends += isinstance(error, LedgerFencedError)
                return
            self.acknowledged(entry_id, payload)
            await asyncio.sleep(self.options.append_gap_s)

    def acknowledged(self, entry_id: int, payload: bytes) -> None:
        """The writer's append of `payload` returned `entry_id`."""
        if entry_id in self.acked:
            self.violation("acked-lost", f"entry {entry_id} acknowledged twice")
        self.acked[entry_id] = payload
        self.ack_times[entry_id] = self.loop.time()
        recovered = self.recovered
        if recovered is not None and entry_id > recovered.last_entry_id:
            self.violation(
                "zombie-ack", f"entry {entry_id} acknowledged after recovery closed at {recovered.last_entry_id}"
            )

    def _check_acks_covered(self) -> None:
        """At each future's result: entries the writer's LAC newly covers are on A bookies of their write
        set in the ensemble the stored metadata gives them."""
        writer = self.writer
        if writer is None or writer.last_add_confirmed <= self.checked_lac:
            return
        self._check_covered(range(self.checked_lac + 1, writer.last_add_confirmed + 1))
        self.checked_lac = writer.last_add_confirmed

    def _check_stored_covers_acks(self) -> None:
        """At each metadata store: every entry acknowledged so far is still covered (an ensemble change must
        not move an acknowledged entry to bookies that lack it)."""
        if self.writer is not None:
            self._check_covered(range(self.checked_lac + 1))

    def _check_covered(self, entry_ids: range) -> None:
        assert self.writer is not None
        ledger_id = self.writer.ledger_id
        metadata = self.manager.stored[ledger_id]
        for entry_id in entry_ids:
            ensemble = metadata.ensemble_at(entry_id)
            indexes = write_set(entry_id, metadata.ensemble_size, metadata.write_quorum_size)
            holders = [
                ensemble[index]
                for index in indexes
                if (ledger_id, entry_id) in self.servers[self.ids.index(ensemble[index])].bookie.entries
            ]
            if len(holders) < metadata.ack_quorum_size:
                self.violation(
                    "ack-not-covered",
                    f"entry {entry_id} acknowledged, only {holders} of its stored ensemble {list(ensemble)} hold it",
                )

    # --- the second client, the faults, the readers

    async def recover(self, at_s: float) -> None:
        await self.ledger_created.wait()
        await asyncio.sleep(at_s)
        assert self.writer is not None
        bk = self.client()
        for attempt in range(RECOVERY_ATTEMPTS):
            try:
                handle = await bk.open_ledger(self.writer.ledger_id, PASSWORD)
            except BKError as error:
                self.event(f"recovery attempt {attempt} failed: {error!r}")
                await asyncio.sleep(1.0)
                continue
            if self.recovered is not None and self.recovered.last_entry_id != handle.metadata.last_entry_id:
                self.violation(
                    "readers-disagree",
                    f"recoveries closed at {self.recovered.last_entry_id} and {handle.metadata.last_entry_id}",
                )
            self.recovered = handle.metadata
            self.event(f"second client opened the ledger closed at {handle.metadata.last_entry_id}")
            return

    async def inject(self, fault: Fault) -> None:
        await self.ledger_created.wait()
        await asyncio.sleep(fault.at_s)
        server = self.servers[fault.bookie]
        if fault.kind == "crash":
            server.crash()
            self.event(f"{server.bookie_id} crashed for {fault.duration_s:.3f} s")
            self.loop.call_later(fault.duration_s, self._restart, server)
        else:
            server.stalled = True
            self.event(f"{server.bookie_id} loses requests for {fault.duration_s:.3f} s")
            self.loop.call_later(fault.duration_s, self._unstall, server)

    def _restart(self, server: SimBookieServer) -> None:
        server.restart()
        self.event(f"{server.bookie_id} restarted")

    def _unstall(self, server: SimBookieServer) -> None:
        server.stalled = False
        self.event(f"{server.bookie_id} answers again")

    async def tail_read(self, at_s: float) -> None:
        """A reader of the open ledger (no recovery): what it reads up to the LAC must be the final content."""
        await self.ledger_created.wait()
        await asyncio.sleep(at_s)
        assert self.writer is not None
        try:
            handle = await self.client().open_ledger(self.writer.ledger_id, PASSWORD, recovery=False)
            entries = await handle.read(0, handle.last_add_confirmed) if handle.last_add_confirmed >= 0 else []
        except BKError as error:
            self.event(f"tailing reader failed: {error!r}")
            return
        self.reads["tailing"] = [entry.payload for entry in entries]
        self.event(f"tailing reader read {len(entries)} entries")

    async def read_closed(self, name: str, recovery: bool) -> list[bytes] | None:
        assert self.writer is not None
        try:
            handle = await self.client().open_ledger(self.writer.ledger_id, PASSWORD, recovery=recovery)
            last = handle.metadata.last_entry_id
            entries = await handle.read(0, last) if last >= 0 else []
        except BKError as error:
            self.violation("unreadable", f"{name} could not read the closed ledger: {error!r}")
            return None
        payloads = [entry.payload for entry in entries]
        self.reads[name] = payloads
        return payloads

    async def settle(self) -> LedgerMetadata | None:
        """Every bookie back and answering; the ledger closed, by a last recovery if nobody closed it."""
        for server in self.servers:
            if not server.up or server.stalled:
                server.restart()
        assert self.writer is not None
        metadata = self.manager.stored[self.writer.ledger_id]
        if metadata.is_closed:
            return metadata
        try:
            return (await self.client().open_ledger(self.writer.ledger_id, PASSWORD)).metadata
        except BKError as error:
            self.violation("recovery-failed", f"with every bookie up: {error!r}")
            return None

    # --- the checks at the end

    def check_closed(self, closed: LedgerMetadata, content: list[bytes]) -> None:
        self.result.last_entry_id = closed.last_entry_id
        self.result.ensemble_changes = len(closed.ensembles) - 1
        for entry_id, payload in sorted(self.acked.items()):
            if entry_id > closed.last_entry_id:
                self.violation(
                    "acked-lost", f"entry {entry_id} acknowledged, the ledger ends at {closed.last_entry_id}"
                )
            elif content[entry_id] != payload:
                self.violation(
                    "acked-lost", f"entry {entry_id} acknowledged as {payload!r}, reads {content[entry_id]!r}"
                )
        for entry_id, payload in enumerate(content):
            if payload not in self.appended:
                self.violation("phantom-entry", f"entry {entry_id} reads {payload!r}, never appended")
        if self.writer_closed_at is not None and self.writer_closed_at != closed.last_entry_id:
            self.violation(
                "close-mismatch", f"writer closed at {self.writer_closed_at}, ledger ends at {closed.last_entry_id}"
            )
        for name, payloads in self.reads.items():
            if payloads != content[: len(payloads)] or (name != "tailing" and len(payloads) != len(content)):
                self.violation(
                    "readers-disagree", f"{name} read {len(payloads)} entries other than the closed ledger's"
                )


async def _schedule(world: BKWorld) -> None:
    options = world.options
    tasks = [asyncio.ensure_future(world.write())]
    tasks += [asyncio.ensure_future(world.inject(fault)) for fault in options.faults]
    tasks += [asyncio.ensure_future(world.recover(at_s)) for at_s in options.recovery_at_s]
    if options.tail_read_at_s is not None:
        tasks.append(asyncio.ensure_future(world.tail_read(options.tail_read_at_s)))
    await asyncio.gather(*tasks)
    closed = await world.settle()
    if closed is None:
        return
    first = await world.read_closed("reader with recovery", recovery=True)
    await world.read_closed("reader without recovery", recovery=False)
    if first is not None:
        world.check_closed(closed, first)


async def _run(world: BKWorld) -> None:
    try:
        await asyncio.wait_for(_schedule(world), SCHEDULE_DEADLINE_S)
    except TimeoutError:
        world.violation("stalled", f"the schedule did not end within {SCHEDULE_DEADLINE_S} virtual seconds")
    except Exception:  # noqa: BLE001 - whatever the client raised beyond its BKErrors is what the schedule found
        world.violation("client-raised", traceback.format_exc())
    finally:
        for transport in world.transports:
            await transport.close()


def run_bk_schedule(seed: int | None, options: BKOptions | None = None) -> BKResult:
    """One schedule: `options` derived from `seed` unless given; the same seed and options replay exactly."""
    options = options or BKOptions.from_seed(seed or 0)
    loop = SimLoop()
    world = BKWorld(loop, options, seed, random.Random(f"bookkeeper-{seed}"))
    try:
        loop.run_until_complete(_run(world))
        # A task's unretrieved exception is reported when the task is collected: collect now, in the run.
        gc.collect()
    except Stalled as stalled:
        world.violation("stalled", str(stalled))
    finally:
        for unhandled in loop.unhandled:
            world.violation("unretrieved-error", unhandled)
        world.result.virtual_s = loop.time()
        world.result.acked = len(world.acked)
        loop.shut_down()
    return world.result
