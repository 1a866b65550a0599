"""magnetar's BookKeeper client against real BookKeeper 4.18.0 bookies, with BookKeeper's Java client and
BookieShell as the oracle: what Python writes Java reads (digests checked) and the reverse, fencing, ledger
ids shared with the Java client, a corrupt entry detected."""

from __future__ import annotations

import asyncio
import re

import pytest

from bookkeeper_fixture import LocalBookKeeperCluster, run_java
from magnetar.bookkeeper import BookKeeper, DigestType, LedgerMetadata
from magnetar.bookkeeper.digest import DigestManager, master_key
from magnetar.bookkeeper.errors import DigestMatchError, LedgerFencedError
from magnetar.bookkeeper.schedule import write_set
from magnetar.bookkeeper.wire import encode_add_request

# tests/unit/bookkeeper's GOLDEN_ADD: ledger 900001, entry 0, LAC -1, length 5, CRC32C, password "pw", "hello".
GOLDEN_ADD = bytes.fromhex(
    "00000041020100002aa226ba095b6969a64871977693b14671710d7600000000000dbba10000000000000000"
    "ffffffffffffffff0000000000000005fedd8dc368656c6c6f"
)

PULSAR_METADATA = {
    "application": b"pulsar",
    "component": b"managed-ledger",
    "pulsar/managed-ledger": b"public/default/persistent/orders",
}


def java_write(cluster: LocalBookKeeperCluster, entries: int, password: str, *, close: bool = True) -> int:
    """A ledger written by BookKeeper's Java client (E=3, W=2, A=2, CRC32C); entry i is "java-entry-i"."""
    done = run_java(
        cluster.root,
        "dev.magnetar.bookkeeper.LedgerWriter",
        cluster.metadata_service_uri,
        "3",
        "2",
        "2",
        str(entries),
        password,
        "close" if close else "open",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.strip().splitlines()[-1])


def shell_entries(cluster: LocalBookKeeperCluster, ledger_id: int) -> list[str]:
    """The entries BookieShell `readledger` read (it checks every digest), in order."""
    done = cluster.shell("readledger", "-ledgerid", str(ledger_id), "-msg")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "DigestMatch" not in done.stderr and "Mac mismatch" not in done.stderr, done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if line]


def shell_metadata(cluster: LocalBookKeeperCluster, ledger_id: int) -> str:
    done = cluster.shell("ledgermetadata", "-ledgerid", str(ledger_id))
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "LedgerMetadata{" in line]
    return line


async def connect(cluster: LocalBookKeeperCluster) -> BookKeeper:
    return await BookKeeper.connect(cluster.metadata_service_uri, timeout_s=10)


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda kind: kind.name)
def test_python_writes_java_reads(cluster: LocalBookKeeperCluster, digest_type: DigestType) -> None:
    async def write() -> int:
        bk = await connect(cluster)
        try:
            ledger = await bk.create_ledger(3, 3, 2, digest_type, b"secret", PULSAR_METADATA)
            ids = await asyncio.gather(*(ledger.append(f"py-entry-{i}".encode()) for i in range(30)))
            assert ids == list(range(30))
            await ledger.close()
            return ledger.ledger_id
        finally:
            await bk.close()

    ledger_id = asyncio.run(write())
    metadata = shell_metadata(cluster, ledger_id)
    assert "state=CLOSED" in metadata and "lastEntryId=29" in metadata
    # The Java API calls HMAC "MAC".
    assert f"digestType={'MAC' if digest_type is DigestType.HMAC else digest_type.name}" in metadata
    assert "ensembleSize=3, writeQuorumSize=3, ackQuorumSize=2" in metadata
    # base64 of "managed-ledger"
    assert "component=base64:bWFuYWdlZC1sZWRnZXI=" in metadata
    expected_length = sum(len(f"py-entry-{i}") for i in range(30))
    assert f"length={expected_length}" in metadata
    assert shell_entries(cluster, ledger_id) == [f"py-entry-{i}" for i in range(30)]
    listed = cluster.shell("listledgers")
    assert f"ledgerId={ledger_id}}}" in listed.stderr


def test_java_writes_python_reads(cluster: LocalBookKeeperCluster) -> None:
    closed_id = java_write(cluster, 25, "java-secret")
    open_id = java_write(cluster, 12, "java-secret", close=False)

    async def read() -> None:
        bk = await connect(cluster)
        try:
            closed = await bk.open_ledger(closed_id, b"java-secret", recovery=False)
            assert closed.is_closed and closed.last_add_confirmed == 24
            entries = await closed.read(0, 24)
            assert [entry.payload for entry in entries] == [f"java-entry-{i}".encode() for i in range(25)]
            assert entries[-1].length == sum(len(f"java-entry-{i}") for i in range(25))
            # The Java writer exited without closing: without recovery the LAC is the one its last entry
            # carries; with recovery the ledger is fenced and closed at its last entry.
            tail = await bk.open_ledger(open_id, b"java-secret", recovery=False)
            assert not tail.is_closed and tail.last_add_confirmed == 10
            recovered = await bk.open_ledger(open_id, b"java-secret")
            assert recovered.is_closed and recovered.last_add_confirmed == 11
            entries = await recovered.read(0, 11)
            assert [entry.payload for entry in entries] == [f"java-entry-{i}".encode() for i in range(12)]
        finally:
            await bk.close()

    asyncio.run(read())
    assert "state=CLOSED" in shell_metadata(cluster, open_id) and "lastEntryId=11" in shell_metadata(cluster, open_id)


def test_ledger_ids_shared_with_the_java_client(cluster: LocalBookKeeperCluster) -> None:
    async def create() -> int:
        bk = await connect(cluster)
        try:
            ledger = await bk.create_ledger(2, 2, 2)
            await ledger.append(b"x")
            await ledger.close()
            return ledger.ledger_id
        finally:
            await bk.close()

    first = asyncio.run(create())
    from_java = java_write(cluster, 1, "")
    second = asyncio.run(create())
    assert first < from_java < second
    assert len({first, from_java, second}) == 3


def test_fencing_refuses_the_first_writers_adds(cluster: LocalBookKeeperCluster) -> None:
    async def scenario() -> None:
        writer_client, recovering_client = await connect(cluster), await connect(cluster)
        try:
            writer = await writer_client.create_ledger(3, 3, 2, password=b"pw")
            for i in range(10):
                await writer.append(f"before-{i}".encode())
            recovered = await recovering_client.open_ledger(writer.ledger_id, b"pw")
            assert recovered.is_closed and recovered.last_add_confirmed == 9
            with pytest.raises(LedgerFencedError):
                await writer.append(b"after fencing")
            with pytest.raises(LedgerFencedError):
                await writer.append(b"and again")
            # The recovering client decided the ledger's end; the old writer's close finds it closed where
            # its own last add confirmed is, and leaves it so.
            await writer.close()
            metadata = (await writer_client.ledger_manager.read_ledger_metadata(writer.ledger_id)).metadata
            assert metadata.is_closed and metadata.last_entry_id == 9
        finally:
            await writer_client.close()
            await recovering_client.close()

    asyncio.run(scenario())


def test_a_corrupted_entry_is_detected(cluster: LocalBookKeeperCluster) -> None:
    async def scenario() -> int:
        bk = await connect(cluster)
        try:
            ledger = await bk.create_ledger(2, 2, 2, password=b"pw")
            transport = bk._context.transport
            digest = DigestManager(ledger.ledger_id, DigestType.CRC32C, b"pw")
            ensemble = ledger.metadata.last_ensemble[1]
            good = digest.package(0, -1, 4, b"good")
            corrupt = good[:-1] + b"!"  # the payload changed after the digest was computed
            bodies = {0: corrupt, 1: digest.package(1, 0, 8, b"next")}
            for entry_id, body in bodies.items():
                frame = encode_add_request(master_key(b"pw"), body)
                for index in write_set(entry_id, 2, 2):
                    await transport.add_entry(ensemble[index], ledger.ledger_id, entry_id, frame)
            reader = await bk.open_ledger(ledger.ledger_id, b"pw", recovery=False)
            assert reader.last_add_confirmed == 0
            with pytest.raises(DigestMatchError):
                await reader.read(0, 0)
            return ledger.ledger_id
        finally:
            await bk.close()

    ledger_id = asyncio.run(scenario())
    # BookKeeper's own reader refuses the entry too.
    done = cluster.shell("readledger", "-ledgerid", str(ledger_id), "-msg")
    assert "good" not in done.stdout
    assert re.search(r"DigestMatch|[Dd]igest mismatch|Mac mismatch", done.stderr), done.stderr[-3000:]


def test_the_golden_add_frame_is_what_a_bookie_stores(cluster: LocalBookKeeperCluster) -> None:
    async def scenario() -> None:
        bk = await connect(cluster)
        try:
            bookie = cluster.bookie_ids[0]
            metadata = LedgerMetadata(1, 1, 1, ((0, (bookie,)),), DigestType.CRC32C, b"pw")
            await bk.ledger_manager.create_ledger_metadata(900001, metadata.closed_at(0, 5))
            await bk._context.transport.add_entry(bookie, 900001, 0, GOLDEN_ADD)
        finally:
            await bk.close()

    asyncio.run(scenario())
    assert shell_entries(cluster, 900001) == ["hello"]
