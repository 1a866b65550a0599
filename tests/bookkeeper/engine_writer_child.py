"""The writer of the kill -9 test: appends to one topic through the BookKeeper engine, 50 appends in flight,
and prints each append's index and position once its receipt (the ack quorum's acknowledgement) came, until
it is killed. Arguments: the metadata service URI, the ZooKeeper hosts, the topic."""

from __future__ import annotations

import asyncio
import sys

from bookkeeper_fixture import SESSION_TIMEOUT_MS
from magnetar.bookkeeper import BookKeeper
from magnetar.metadata.zookeeper import ZKMetadataStore
from magnetar.storage import ManagedLedgerFactory, StorageConfig
from magnetar.storage.bookkeeper_engine import BookKeeperEngine

CONFIG = StorageConfig(
    managedLedgerMaxEntriesPerLedger=300,
    managedLedgerMinLedgerRolloverTimeMinutes=0,
    defaultRetentionTimeInMinutes=-1,
    defaultRetentionSizeInMB=-1,
    managedLedgerDefaultEnsembleSize=3,
    managedLedgerDefaultWriteQuorum=3,
    managedLedgerDefaultAckQuorum=2,
)


async def main(uri: str, hosts: str, topic: str) -> None:
    bookkeeper = await BookKeeper.connect(uri, timeout_s=10)
    store = await ZKMetadataStore.connect(hosts, "", SESSION_TIMEOUT_MS)
    factory = await ManagedLedgerFactory.open("unused", CONFIG, engine=BookKeeperEngine(bookkeeper, store, CONFIG))
    ledger = await factory.open_ledger(topic)
    window = asyncio.Semaphore(50)
    index = 0

    async def append(i: int) -> None:
        position = await ledger.append(f"entry-{i}".encode())
        print(i, position.ledger_id, position.entry_id, flush=True)
        window.release()

    tasks = set()
    while True:
        await window.acquire()
        task = asyncio.ensure_future(append(index))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        index += 1


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
