"""Appends (single and batches) until the file-size limit makes the disk "full", then checks the
process survives.

Run as `python disk_full_child.py DATA_DIR`. RLIMIT_FSIZE makes every write past the limit fail with
EFBIG, as a full disk fails with ENOSPC: SQLite reports an I/O error for the commit. Prints one JSON
line with what happened; the test asserts on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys

from magnetar.positions import EARLIEST
from magnetar.storage import ManagedLedgerFactory, StorageConfig, StorageWriteError

TOPIC = "persistent://public/default/full"


async def main() -> None:
    data_dir = sys.argv[1]
    config = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)
    factory = await ManagedLedgerFactory.open(data_dir, config)
    ledger = await factory.open_ledger(TOPIC)
    completed = []
    for index in range(20):
        completed.append((await ledger.append(b"%06d" % index + os.urandom(4000)), index))
    # Without this the kernel kills us with SIGXFSZ instead of failing the write.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    used = sum(os.path.getsize(os.path.join(data_dir, name)) for name in os.listdir(data_dir))
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (used + 64 * 1024, hard))
    errors = []
    index = 20
    while index < 400:
        # Single appends and batches of three alternate: a failed commit must fail either kind.
        batch = [index] if index % 2 == 0 else [index, index + 1, index + 2]
        index += len(batch)
        datas = [b"%06d" % number + os.urandom(4000) for number in batch]
        try:
            if len(batch) == 1:
                positions = [await ledger.append(datas[0])]
            else:
                positions = await ledger.append_many(datas, [0] * 3, [1] * 3, [0] * 3, [""] * 3, batch)
            completed.extend(zip(positions, batch))
        except StorageWriteError as error:
            errors.append(str(error))
            if len(errors) == 3:
                break
    # Space comes back: appends must work again, on a new ledger (the failed one is fenced).
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    after = await ledger.append(b"after")
    factory.cache.__init__(factory.cache.capacity_bytes)
    stored = {entry.position: entry.data[:6] for entry in await ledger.read_entries(EARLIEST, 10_000)}
    lost = [index for position, index in completed if stored.get(position) != b"%06d" % index]
    await factory.close()
    print(json.dumps({"errors": errors, "completed": len(completed), "lost": lost, "after": list(after)}))


if __name__ == "__main__":
    asyncio.run(main())
