"""The write, read and recovery logic against in-process fake bookies (deterministic, no JVM): in-order
completion after A acks, the LAC piggybacked, ensemble change, fencing, and the recovery rules, including
the cases where stopping at the first bookie that lacks an entry would lose an acknowledged one."""

from __future__ import annotations

import asyncio
import random

import pytest

from magnetar.bookkeeper import BookKeeper, MemoryLedgerManager
from magnetar.bookkeeper.digest import DigestManager, DigestType, master_key
from magnetar.bookkeeper.errors import (
    DigestMatchError,
    LedgerFencedError,
    NotEnoughBookiesError,
)
from magnetar.bookkeeper.metadata import State
from magnetar.bookkeeper.schedule import write_set
from magnetar.bookkeeper.wire import encode_add_request
from magnetar.clock import LoopClock
from magnetar.sim.bookkeeper.bookie import FakeBookies

BOOKIES = ("b0:3181", "b1:3181", "b2:3181", "b3:3181")


def client(bookies: FakeBookies, count: int = 3, manager: MemoryLedgerManager | None = None) -> BookKeeper:
    manager = manager or MemoryLedgerManager(BOOKIES[:count])
    return BookKeeper(
        manager, bookies, rng=random.Random(7), clock=LoopClock(asyncio.get_running_loop(), lambda: 1_000)
    )


def test_adds_complete_in_order_after_the_ack_quorum_with_the_lac_piggybacked() -> None:
    async def scenario() -> None:
        bookies = FakeBookies(reverse_answers=True)
        bk = client(bookies)
        ledger = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = ledger.metadata.last_ensemble[1]
        bookies.silent.add(ensemble[2])
        completed: list[int] = []

        async def add(i: int) -> None:
            completed.append(await ledger.append(f"e{i}".encode()))

        await asyncio.gather(*(add(i) for i in range(10)))
        assert completed == list(range(10)) and ledger.last_add_confirmed == 9
        await ledger.append(b"serial")
        digest = DigestManager(ledger.ledger_id, DigestType.CRC32C, b"pw")
        header, payload = digest.verify(10, bookies.entries[ensemble[0]][(ledger.ledger_id, 10)])
        assert (header.last_add_confirmed, header.length, payload) == (9, 26, b"serial")
        assert (ledger.ledger_id, 0) not in bookies.entries[ensemble[2]]
        await ledger.close()
        assert bk.ledger_manager is not None
        metadata = (await bk.ledger_manager.read_ledger_metadata(ledger.ledger_id)).metadata
        assert (metadata.state, metadata.last_entry_id, metadata.length) == (State.CLOSED, 10, 26)

    asyncio.run(scenario())


def test_pending_adds_are_bounded_and_keep_call_order() -> None:
    async def scenario() -> None:
        bookies = FakeBookies()
        bk = BookKeeper(
            MemoryLedgerManager(BOOKIES[:2]),
            bookies,
            clock=LoopClock(asyncio.get_running_loop(), lambda: 1_000),
            rng=random.Random(1),
            pending_adds_max=3,
        )
        ledger = await bk.create_ledger(2, 2, 2)
        ids = await asyncio.gather(*(ledger.append(bytes([i])) for i in range(20)))
        assert ids == list(range(20))
        entries = await ledger.read(0, 19)
        assert [entry.payload for entry in entries] == [bytes([i]) for i in range(20)]

    asyncio.run(scenario())


def test_a_failed_bookie_is_replaced_from_the_first_unconfirmed_entry() -> None:
    async def scenario() -> None:
        bookies = FakeBookies()
        bk = client(bookies, count=3)
        ledger = await bk.create_ledger(2, 2, 2)
        for i in range(5):
            await ledger.append(f"e{i}".encode())
        first = ledger.metadata.last_ensemble[1]
        bookies.down.add(first[1])
        ids = await asyncio.gather(*(ledger.append(f"e{i}".encode()) for i in range(5, 12)))
        assert ids == list(range(5, 12))
        (start_0, ensemble_0), (start_1, ensemble_1) = ledger.metadata.ensembles
        assert (start_0, ensemble_0, start_1) == (0, first, 5)
        assert ensemble_1[0] == first[0] and ensemble_1[1] == next(b for b in BOOKIES[:3] if b not in first)
        stored = (await bk.ledger_manager.read_ledger_metadata(ledger.ledger_id)).metadata
        assert stored.ensembles == ledger.metadata.ensembles
        entries = await ledger.read(0, 11)
        assert [entry.payload for entry in entries] == [f"e{i}".encode() for i in range(12)]

    asyncio.run(scenario())


def test_without_a_replacement_adds_go_on_while_the_ack_quorum_is_reachable() -> None:
    async def scenario() -> None:
        bookies = FakeBookies()
        bk = client(bookies, count=3)
        wide = await bk.create_ledger(3, 3, 2)
        bookies.down.add(wide.metadata.last_ensemble[1][0])
        assert await asyncio.gather(*(wide.append(b"x") for _ in range(4))) == [0, 1, 2, 3]
        assert len(wide.metadata.ensembles) == 1
        narrow = await bk.create_ledger(3, 2, 2)
        bookies.down.add(narrow.metadata.last_ensemble[1][1])
        with pytest.raises(NotEnoughBookiesError):
            await asyncio.gather(*(narrow.append(b"x") for _ in range(3)))

    asyncio.run(scenario())


def write_raw(
    bookies: FakeBookies, ledger_id: int, ensemble: tuple[str, ...], entry_id: int, lac: int, on: list[int]
) -> None:
    """Entry `entry_id` ("r<id>", carrying `lac`) stored on ensemble indexes `on` only, as a writer that
    crashed mid-add leaves it."""
    digest = DigestManager(ledger_id, DigestType.CRC32C, b"pw")
    body = digest.package(entry_id, lac, 2 * (entry_id + 1), f"r{entry_id}".encode())
    frame = encode_add_request(master_key(b"pw"), body)
    for index in on:
        bookies.add_entry(ensemble[index], ledger_id, entry_id, frame).add_done_callback(lambda f: f.exception())


def test_recovery_keeps_an_entry_that_one_bookie_of_its_write_set_lacks() -> None:
    """E=3 W=3 A=2, a pipelining writer whose last entries carry LAC 3. Entry 5 reached bookies 0 and 1 (two
    acks: it may have been acknowledged), not bookie 2, which is the first its write set asks. Stopping at
    that first "no such entry" would lose entry 5; the rule stops only where W - A + 1 = 2 bookies lack the
    entry: entry 6, which only bookie 2 has (so it cannot have been acknowledged)."""

    async def scenario() -> None:
        bookies = FakeBookies()
        bk = client(bookies)
        ledger = await bk.create_ledger(3, 3, 2, password=b"pw")
        ensemble = ledger.metadata.last_ensemble[1]
        await asyncio.sleep(0)
        for entry_id in range(5):
            write_raw(bookies, ledger.ledger_id, ensemble, entry_id, entry_id - 1, [0, 1, 2])
        write_raw(bookies, ledger.ledger_id, ensemble, 5, 3, [0, 1])
        write_raw(bookies, ledger.ledger_id, ensemble, 6, 3, [2])
        await asyncio.sleep(0)
        assert write_set(5, 3, 3)[0] == 2 and write_set(6, 3, 3)[:2] == (0, 1)
        recovered = await bk.open_ledger(ledger.ledger_id, b"pw")
        assert recovered.is_closed and recovered.last_add_confirmed == 5
        assert recovered.metadata.length == 12
        assert [entry.payload for entry in await recovered.read(0, 5)] == [f"r{i}".encode() for i in range(6)]
        # Recovery wrote entry 5 again on every bookie of its write set.
        assert all((ledger.ledger_id, 5) in bookies.entries[bookie] for bookie in ensemble)

    asyncio.run(scenario())


def test_recovery_fences_the_writer_and_survives_a_silent_bookie() -> None:
    async def scenario() -> None:
        bookies = FakeBookies()
        manager = MemoryLedgerManager(BOOKIES[:3])
        writer_client, recovering_client = client(bookies, manager=manager), client(bookies, manager=manager)
        ledger = await writer_client.create_ledger(3, 3, 2, password=b"pw")
        for i in range(8):
            await ledger.append(f"w{i}".encode())
        bookies.down.add(ledger.metadata.last_ensemble[1][2])
        recovered = await recovering_client.open_ledger(ledger.ledger_id, b"pw")
        assert recovered.last_add_confirmed == 7
        with pytest.raises(LedgerFencedError):
            await ledger.append(b"late")

    asyncio.run(scenario())


def test_recovery_waits_for_coverage_and_fails_without_it() -> None:
    async def scenario() -> None:
        bookies = FakeBookies()
        bk = client(bookies)
        ledger = await bk.create_ledger(3, 2, 2, password=b"pw")
        await ledger.append(b"x")
        ensemble = ledger.metadata.last_ensemble[1]
        # E=3 W=2 A=2 with two bookies down: the write quorum of those two is unknown, so fencing cannot
        # be proven complete, and recovery refuses to decide the ledger's end.
        bookies.down.update(ensemble[:2])
        with pytest.raises(Exception, match="down"):
            await bk.open_ledger(ledger.ledger_id, b"pw")
        metadata = (await bk.ledger_manager.read_ledger_metadata(ledger.ledger_id)).metadata
        assert metadata.state is State.IN_RECOVERY

    asyncio.run(scenario())


def test_reads_fall_back_to_the_next_replica_and_never_return_a_corrupt_entry() -> None:
    async def scenario() -> None:
        bookies = FakeBookies()
        bk = client(bookies)
        ledger = await bk.create_ledger(3, 2, 2, password=b"pw")
        await ledger.append(b"first")
        await ledger.append(b"second")
        ensemble = ledger.metadata.last_ensemble[1]
        first_replica = ensemble[write_set(0, 3, 2)[0]]
        good = bookies.entries[first_replica][(ledger.ledger_id, 0)]
        bookies.entries[first_replica][(ledger.ledger_id, 0)] = good[:-1] + b"X"
        assert [entry.payload for entry in await ledger.read(0, 1)] == [b"first", b"second"]
        second_replica = ensemble[write_set(0, 3, 2)[1]]
        bookies.entries[second_replica][(ledger.ledger_id, 0)] = good[:-1] + b"Y"
        with pytest.raises(DigestMatchError):
            await ledger.read(0, 0)
        bookies.down.add(ensemble[write_set(1, 3, 2)[0]])
        assert [entry.payload for entry in await ledger.read(1, 1)] == [b"second"]

    asyncio.run(scenario())
