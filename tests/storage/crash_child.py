"""The process the crash test SIGKILLs: verifies what it finds, then appends and acks until killed.

Run as `python crash_child.py DATA_DIR FACTS_JSON OUT_FILE ROUND SEED {work,verify}`.

Verification checks the facts the parent gathered from earlier rounds' output:
- every completed append is present at its reported position, byte-identical, with its fields;
- every stored entry is one some writer appended (its bytes regenerate from its name), and each
  writer's entries are in sequence order without holes;
- each cursor is at or after its last persisted mark-delete position, and every entry at or below
  the mark-delete position, and every individually deleted entry, was acknowledged by the workload.

Output lines (written with one os.write each, so a SIGKILL leaves only whole lines or a torn last one):
`A topic L E writer seq` after an append completed (half the writers use `append_many`: one
write of all the lines of a batch once its future completed); `I topic L E` before an individual ack;
`C topic L E` before a cumulative ack; `P topic L E` after a cursor flush of mark-delete L:E completed;
`VERIFIED n`, or `FAIL reason` and exit status 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import zlib

from magnetar.positions import EARLIEST, Position
from magnetar.storage import ManagedLedgerFactory, StorageConfig

TOPICS = [f"persistent://public/default/crash-{index}" for index in range(3)]
WRITERS = 8


def payload(round_: int, writer: int, seq: int) -> bytes:
    generator = random.Random(f"{round_}/{writer}/{seq}")
    return f"{round_}/{writer}/{seq}/".encode() + generator.randbytes(generator.randint(0, 700))


def fields(round_: int, writer: int, seq: int, data: bytes) -> tuple[int, int, int, str, int]:
    return (zlib.crc32(data) & 0x7FFFFFFF, seq % 5 + 1, round_ * 1_000_000 + seq, f"r{round_}-w{writer}", seq)


def config(round_: int) -> StorageConfig:
    return StorageConfig(
        managedLedgerMaxEntriesPerLedger=40,
        managedLedgerMinLedgerRolloverTimeMinutes=0,
        defaultRetentionTimeInMinutes=-1,
        defaultRetentionSizeInMB=-1,
        managedLedgerCursorPositionFlushSeconds=0.05,
        managedLedgerMaxUnackedRangesToPersist=50,
        # Alternate rounds run without fsync: a process crash must lose nothing either way.
        journalSyncData=round_ % 2 == 0,
    )


class Failure(Exception):
    pass


async def verify(factory: ManagedLedgerFactory, facts: dict) -> int:
    total = 0
    # A writer appends seq n+1 only after seq n completed, so its seqs over all topics have no hole.
    seqs_by_writer: dict[tuple[int, int], list[int]] = {}
    for index, topic in enumerate(TOPICS):
        ledger = await factory.open_ledger(topic)
        key = str(index)
        stored: dict[Position, tuple[int, int, int]] = {}
        last_seq: dict[tuple[int, int], int] = {}
        position: tuple[int, int] = ledger.next_valid_position(ledger.previous_position(ledger.first_position()))
        previous = EARLIEST
        while True:
            entries = await ledger.read_entries(position, 1000)
            if not entries:
                break
            for entry in entries:
                if entry.position <= previous:
                    raise Failure(f"{topic}: {entry.position} after {previous}")
                previous = entry.position
                try:
                    round_, writer, seq = (int(part) for part in entry.data.split(b"/", 3)[:3])
                except ValueError:
                    raise Failure(f"{topic}: unknown entry at {entry.position}") from None
                data = payload(round_, writer, seq)
                if entry.data != data or tuple(entry[2:]) != fields(round_, writer, seq, data):
                    raise Failure(f"{topic}: entry at {entry.position} differs from what was appended")
                if seq <= last_seq.get((round_, writer), -1):
                    raise Failure(f"{topic}: writer {round_}/{writer} seq {seq} at {entry.position} out of order")
                last_seq[(round_, writer)] = seq
                seqs_by_writer.setdefault((round_, writer), []).append(seq)
                stored[entry.position] = (round_, writer, seq)
            position = ledger.next_valid_position(entries[-1].position)
        for ledger_id, entry_id, round_, writer, seq in facts["completed"].get(key, []):
            if stored.get(Position(ledger_id, entry_id)) != (round_, writer, seq):
                raise Failure(f"{topic}: completed append {round_}/{writer}/{seq} at {ledger_id}:{entry_id} is missing")
        cursor = ledger.cursors.get("sub")
        persisted = facts["persisted"].get(key)
        if cursor is None:
            if persisted is not None:
                raise Failure(f"{topic}: cursor with persisted position {persisted} is gone")
        else:
            md = cursor.mark_delete_position
            if persisted is not None and md < tuple(persisted):
                raise Failure(f"{topic}: mark-delete {md} is before its persisted position {persisted}")
            intents = {tuple(p) for p in facts["intents"].get(key, [])}
            cumulative = tuple(facts["cumulative"].get(key, EARLIEST))
            for acked in stored:
                if acked <= md and acked not in intents and acked > cumulative:
                    raise Failure(f"{topic}: mark-delete {md} is beyond unacknowledged entry {acked}")
            for lower, upper in cursor.individually_deleted.ranges():
                for entry_id in range(lower[1] + 1, upper[1] + 1):
                    acked = (upper[0], entry_id)
                    if acked not in intents and acked > cumulative:
                        raise Failure(f"{topic}: entry {acked} is deleted but was never acknowledged")
            for acked, (_size, mask) in cursor.batch_deleted.items():
                if mask != 1:
                    raise Failure(f"{topic}: batch indexes {mask:b} acked at {acked}, only index 0 was")
            cursor.check_invariants()
        ledger.check_invariants()
        total += len(stored)
    for (round_, writer), seqs in seqs_by_writer.items():
        if sorted(seqs) != list(range(len(seqs))):
            missing = sorted(set(range(max(seqs) + 1)) - set(seqs))
            raise Failure(f"writer {round_}/{writer} has seqs up to {max(seqs)} but lacks {missing[:5]}")
    return total


async def work(factory: ManagedLedgerFactory, round_: int, seed: int, out: int) -> None:
    ledgers = [await factory.open_ledger(topic) for topic in TOPICS]
    cursors = [await ledger.open_cursor("sub", "earliest") for ledger in ledgers]

    def emit(line: str) -> None:
        os.write(out, (line + "\n").encode())

    async def writer(number: int) -> None:
        generator = random.Random(f"{seed}/{round_}/writer/{number}")
        seq = 0
        while True:
            index = generator.randrange(len(TOPICS))
            data = payload(round_, number, seq)
            position = await ledgers[index].append(data, *fields(round_, number, seq, data))
            emit(f"A {index} {position[0]} {position[1]} {number} {seq}")
            seq += 1

    async def batch_writer(number: int) -> None:
        # Batches of up to 20 entries in ledgers of 40: many span a rollover. A batch's future may
        # complete only once all of its entries are durable, so every line emitted here is checked.
        generator = random.Random(f"{seed}/{round_}/writer/{number}")
        seq = 0
        while True:
            index = generator.randrange(len(TOPICS))
            seqs = range(seq, seq + generator.randint(1, 20))
            datas = [payload(round_, number, n) for n in seqs]
            columns = list(zip(*(fields(round_, number, n, data) for n, data in zip(seqs, datas))))
            positions = await ledgers[index].append_many(datas, *map(list, columns))
            emit("".join(f"A {index} {p[0]} {p[1]} {number} {n}\n" for p, n in zip(positions, seqs)).rstrip("\n"))
            seq = seqs[-1] + 1

    async def acker(index: int) -> None:
        generator = random.Random(f"{seed}/{round_}/acker/{index}")
        cursor = cursors[index]
        while True:
            entries = await cursor.read_entries(generator.randint(1, 20))
            if not entries:
                await asyncio.sleep(0.002)
                continue
            for entry in entries:
                roll = generator.random()
                position = entry.position
                if roll < 0.6:
                    emit(f"I {index} {position[0]} {position[1]}")
                    cursor.delete(position)
                elif roll < 0.63:
                    emit(f"C {index} {position[0]} {position[1]}")
                    cursor.mark_delete(position)
                elif roll < 0.7 and entry.message_count > 1:
                    cursor.delete_batch_indexes(position, entry.message_count, [0])
            await asyncio.sleep(0)

    async def flusher(index: int) -> None:
        generator = random.Random(f"{seed}/{round_}/flush/{index}")
        cursor = cursors[index]
        while True:
            await asyncio.sleep(generator.uniform(0.005, 0.03))
            md = cursor.mark_delete_position
            await cursor.flush()
            emit(f"P {index} {md[0]} {md[1]}")

    await asyncio.gather(
        *(writer(number) for number in range(0, WRITERS, 2)),
        *(batch_writer(number) for number in range(1, WRITERS, 2)),
        *(acker(index) for index in range(len(TOPICS))),
        *(flusher(index) for index in range(len(TOPICS))),
    )


async def main() -> int:
    data_dir, facts_path, out_path, round_text, seed_text, mode = sys.argv[1:7]
    round_, seed = int(round_text), int(seed_text)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    with open(facts_path) as file:
        facts = json.load(file)
    factory = await ManagedLedgerFactory.open(data_dir, config(round_))
    try:
        total = await verify(factory, facts)
    except Failure as failure:
        os.write(out, f"FAIL {failure}\n".encode())
        return 1
    os.write(out, f"VERIFIED {total}\n".encode())
    if mode == "work":
        await work(factory, round_, seed, out)
    await factory.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
