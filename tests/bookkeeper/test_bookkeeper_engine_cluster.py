"""The BookKeeper engine against real bookies (ZooKeeper + 3 bookies, E=3 W=3 A=2) and records in ZooKeeper:
a second engine loading a topic fences the first and reads back everything the first receipted; a writer
process killed mid-stream loses no receipted entry; BookieShell `readledger` reads, digests checked, a
ledger the engine wrote."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from test_conformance import shell_entries, shell_metadata

from bookkeeper_fixture import SESSION_TIMEOUT_MS, LocalBookKeeperCluster
from magnetar.bookkeeper import BookKeeper
from magnetar.metadata.zookeeper import ZKMetadataStore
from magnetar.positions import Position
from magnetar.storage import LedgerFencedError, ManagedLedgerFactory, StorageConfig
from magnetar.storage.bookkeeper_engine import BookKeeperEngine

CONFIG = StorageConfig(
    managedLedgerMaxEntriesPerLedger=200,
    managedLedgerMinLedgerRolloverTimeMinutes=0,
    defaultRetentionTimeInMinutes=-1,
    defaultRetentionSizeInMB=-1,
    managedLedgerDefaultEnsembleSize=3,
    managedLedgerDefaultWriteQuorum=3,
    managedLedgerDefaultAckQuorum=2,
)
TESTS = Path(__file__).resolve().parents[1]


def zk_hosts(cluster: LocalBookKeeperCluster) -> str:
    return f"127.0.0.1:{cluster.zk_port}"


@asynccontextmanager
async def engine_factory(cluster: LocalBookKeeperCluster, *, close: bool = True) -> AsyncIterator[ManagedLedgerFactory]:
    """A broker's storage on the cluster; `close=False` leaves its ledgers open, as a crashed broker does."""
    bookkeeper = await BookKeeper.connect(cluster.metadata_service_uri, timeout_s=10)
    store = await ZKMetadataStore.connect(zk_hosts(cluster), "", SESSION_TIMEOUT_MS)
    factory = await ManagedLedgerFactory.open("unused", CONFIG, engine=BookKeeperEngine(bookkeeper, store, CONFIG))
    try:
        yield factory
    finally:
        if close:
            await factory.close()
        await store.close()
        await bookkeeper.close()


def test_a_second_engine_fences_the_first_and_reads_all_it_receipted(cluster: LocalBookKeeperCluster) -> None:
    topic = "persistent://public/default/fenced"

    async def scenario() -> None:
        async with engine_factory(cluster, close=False) as first:
            ledger = await first.open_ledger(topic)
            receipted = list(await asyncio.gather(*(ledger.append(f"a{i}".encode()) for i in range(450))))
            in_flight = [ledger.append(f"b{i}".encode()) for i in range(50)]
            async with engine_factory(cluster) as second:
                taken = await second.open_ledger(topic)
                outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
                receipted += [outcome for outcome in outcomes if isinstance(outcome, Position)]
                with pytest.raises(LedgerFencedError):
                    await ledger.append(b"after the fence")
                stored = {}
                start = taken.first_position()
                while len(stored) < taken.number_of_entries:
                    entries = await taken.read_entries(start, 1000)
                    stored.update((entry.position, entry.data) for entry in entries)
                    start = taken.next_valid_position(entries[-1].position)
                assert [stored.get(p) for p in receipted[:450]] == [f"a{i}".encode() for i in range(450)]
                assert all(position in stored for position in receipted[450:])

    asyncio.run(scenario())


def test_a_killed_writer_loses_no_receipted_entry(cluster: LocalBookKeeperCluster) -> None:
    topic = "persistent://public/default/killed"
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen(
        [
            sys.executable,
            str(TESTS / "bookkeeper" / "engine_writer_child.py"),
            cluster.metadata_service_uri,
            zk_hosts(cluster),
            topic,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    )
    assert child.stdout is not None
    receipts = []
    for line in child.stdout:
        receipts.append(tuple(map(int, line.split())))
        if len(receipts) == 1500:
            break
    child.send_signal(signal.SIGKILL)
    rest, errors = child.communicate()
    receipts += [tuple(map(int, line.split())) for line in rest.splitlines() if line.strip()]
    assert len(receipts) >= 1500, errors[-3000:]

    async def read_back() -> dict[Position, bytes]:
        async with engine_factory(cluster) as successor:
            ledger = await successor.open_ledger(topic)
            stored: dict[Position, bytes] = {}
            start = ledger.first_position()
            while len(stored) < ledger.number_of_entries:
                entries = await ledger.read_entries(start, 1000)
                stored.update((entry.position, entry.data) for entry in entries)
                start = ledger.next_valid_position(entries[-1].position)
            return stored

    stored = asyncio.run(read_back())
    for index, ledger_id, entry_id in receipts:
        assert stored.get(Position(ledger_id, entry_id)) == f"entry-{index}".encode()


def test_bookie_shell_reads_a_ledger_the_engine_wrote(cluster: LocalBookKeeperCluster) -> None:
    topic = "persistent://public/default/shell"

    async def write() -> int:
        async with engine_factory(cluster) as factory:
            ledger = await factory.open_ledger(topic)
            await asyncio.gather(*(ledger.append(f"shell-{i}".encode()) for i in range(120)))
            return ledger.current_ledger.ledger_id

    ledger_id = asyncio.run(write())
    lines = shell_entries(cluster, ledger_id)
    assert any("shell-0" in line for line in lines) and any("shell-119" in line for line in lines)
    metadata = shell_metadata(cluster, ledger_id)
    assert "state=CLOSED" in metadata and "pulsar/managed-ledger" in metadata
