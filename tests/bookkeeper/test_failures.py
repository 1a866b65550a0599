"""Bookies SIGKILLed under a writer: recovery keeps every acknowledged entry, an ensemble change moves the
writer to a live bookie, and BookieShell reads the result. A cluster per test: a killed bookie's
registration lingers in ZooKeeper until its session expires."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from test_conformance import connect, shell_entries, shell_metadata

from bookkeeper_fixture import LocalBookKeeperCluster, start_cluster
from magnetar.bookkeeper.errors import BKError

ENTRIES = 400


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBookKeeperCluster]:
    cluster = start_cluster(tmp_path_factory)
    yield cluster
    cluster.stop()


async def write_through_a_kill(
    cluster: LocalBookKeeperCluster, ensemble: int, write_quorum: int, ack_quorum: int, *, kill: int | None = None
) -> tuple[int, list[int], tuple[str, ...]]:
    """Append ENTRIES entries, 20 in flight, SIGKILLing a bookie of the ensemble after a quarter of them
    (ensemble index `kill`, the last one by default). Returns the ledger id, the acknowledged entry ids,
    and the first ensemble. The writer never closes: it is a writer that crashed."""
    bk = await connect(cluster)
    ledger = await bk.create_ledger(ensemble, write_quorum, ack_quorum, password=b"pw")
    first_ensemble = ledger.metadata.last_ensemble[1]
    victim = cluster.bookie_ids.index(first_ensemble[ensemble - 1 if kill is None else kill])
    acknowledged: list[int] = []
    window = asyncio.Semaphore(20)

    async def add(i: int) -> None:
        async with window:
            try:
                acknowledged.append(await ledger.append(f"entry-{i}".encode()))
            except BKError:
                pass

    async def kill_after_a_quarter() -> None:
        while len(acknowledged) < ENTRIES // 4:
            await asyncio.sleep(0.001)
        await asyncio.to_thread(cluster.kill_bookie, victim)

    killer = asyncio.create_task(kill_after_a_quarter())
    await asyncio.gather(*(add(i) for i in range(ENTRIES)))
    await killer
    return ledger.ledger_id, sorted(acknowledged), first_ensemble


def test_recovery_keeps_every_acknowledged_entry_with_a_bookie_killed(fresh_cluster: LocalBookKeeperCluster) -> None:
    cluster = fresh_cluster

    async def scenario() -> tuple[int, list[int], int]:
        ledger_id, acknowledged, _ = await write_through_a_kill(cluster, 3, 3, 2)
        bk = await connect(cluster)
        try:
            recovered = await bk.open_ledger(ledger_id, b"pw")
            assert recovered.is_closed
            last = recovered.last_add_confirmed
            entries = await recovered.read(0, last)
            assert [entry.payload for entry in entries] == [f"entry-{i}".encode() for i in range(last + 1)]
            return ledger_id, acknowledged, last
        finally:
            await bk.close()

    ledger_id, acknowledged, last = asyncio.run(scenario())
    assert acknowledged, "the writer got no acknowledgement at all"
    assert max(acknowledged) <= last
    # Every entry up to the last acknowledged one was acknowledged: completions are in order.
    assert acknowledged == list(range(len(acknowledged)))
    assert shell_entries(cluster, ledger_id) == [f"entry-{i}" for i in range(last + 1)]
    assert f"lastEntryId={last}" in shell_metadata(cluster, ledger_id)


def test_ensemble_change_when_a_bookie_is_killed_mid_write(fresh_cluster: LocalBookKeeperCluster) -> None:
    cluster = fresh_cluster

    async def scenario() -> tuple[int, list[int], tuple[str, ...]]:
        ledger_id, acknowledged, first_ensemble = await write_through_a_kill(cluster, 2, 2, 2)
        bk = await connect(cluster)
        try:
            metadata = (await bk.ledger_manager.read_ledger_metadata(ledger_id)).metadata
            assert len(metadata.ensembles) == 2
            (start_0, ensemble_0), (start_1, ensemble_1) = metadata.ensembles
            assert (start_0, ensemble_0) == (0, first_ensemble)
            assert 0 < start_1 <= len(acknowledged)
            assert ensemble_1[0] == ensemble_0[0] and ensemble_1[1] not in ensemble_0
            recovered = await bk.open_ledger(ledger_id, b"pw")
            entries = await recovered.read(0, recovered.last_add_confirmed)
            assert [entry.payload for entry in entries] == [f"entry-{i}".encode() for i in range(len(entries))]
            return ledger_id, acknowledged, first_ensemble
        finally:
            await bk.close()

    ledger_id, acknowledged, _ = asyncio.run(scenario())
    # With a live bookie to replace the dead one, no add failed.
    assert acknowledged == list(range(ENTRIES))
    assert shell_entries(cluster, ledger_id) == [f"entry-{i}" for i in range(ENTRIES)]
    metadata = shell_metadata(cluster, ledger_id)
    assert "state=CLOSED" in metadata and f"lastEntryId={ENTRIES - 1}" in metadata
