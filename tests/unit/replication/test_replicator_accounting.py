"""The replicator's choice of what to forward and its cursor accounting, on a real managed ledger: what goes
to the remote and what is skipped, which markers go to the topic's controller, and how far the cursor's
mark-delete position moves as receipts come back (skipped entries move with the sent ones before them)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from magnetar.client.security import ClientSecurity
from magnetar.clock import LoopClock
from magnetar.positions import Position
from magnetar.protocol import markers
from magnetar.protocol.forwarding import forwarded_sends
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE, FrameDecoder
from magnetar.protocol.messages import encode_entry, parse_entry
from magnetar.protocol.pulsar_api_pb2 import MessageMetadata
from magnetar.replication.producer import RemoteUnavailable
from magnetar.replication.replicator import Replicator, cursor_name
from magnetar.storage import ManagedLedgerFactory, StorageConfig

CONFIG = StorageConfig(defaultRetentionTimeInMinutes=-1, defaultRetentionSizeInMB=-1)


class _Nowhere:
    """No cluster registered: these replicators never connect; the tests drive their sends by hand."""

    def broker_service_url(self, cluster: str) -> str | None:
        return None

    def admin_service_url(self, cluster: str) -> str | None:
        return None

    def security(self, cluster: str) -> ClientSecurity:
        return ClientSecurity()


NOWHERE = _Nowhere()


class RecordingProducer:
    """Stands in for the RemoteProducer: records each SEND as the remote reads it (the metadata of its
    payload section, its sequence id, its marker flag); receipts are handed over by the test."""

    connected = True
    room = 1000
    write_budget = 1 << 20

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.sent: list[tuple[MessageMetadata, int, bool]] = []

    def send_frames(self, frames: list[bytes], sequence_ids: list[int]) -> None:
        for frame, sequence_id in zip(frames, sequence_ids, strict=True):
            ((command, section),) = FrameDecoder().receive_data(frame)
            assert command.send.sequence_id == sequence_id
            self.sent.append((parse_entry(section).metadata, sequence_id, command.send.marker))


def _forward(replicator: Replicator, producer: Any, entries: list[Any]) -> None:
    """What the replicator's loop does with a read: into the read-ahead, then sent as room allows."""
    replicator._buffer(entries, producer.max_frame_bytes)
    replicator._send_buffered(producer)


def _data(sequence_id: int, payload: bytes = b"payload", **fields: Any) -> bytes:
    metadata = MessageMetadata(producer_name="p", sequence_id=sequence_id, publish_time=1, partition_key="k", **fields)
    return encode_entry(metadata, payload)


def _run(
    tmp_path: Path, entries: list[bytes], receipts: list[int], max_frame_bytes: int = DEFAULT_MAX_MESSAGE_SIZE
) -> dict[str, Any]:
    """Append `entries`, let a replicator of cluster r1 to r2 read them all, then hand it receipts in
    groups of the given sizes; returns what was sent and the mark-delete position after each step."""

    async def scenario() -> dict[str, Any]:
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), CONFIG)
        try:
            ledger = await factory.open_ledger("persistent://t/ns/topic")
            cursor = await ledger.open_cursor(cursor_name("r2"), "latest")
            positions = []
            for data in entries:
                parsed = parse_entry(data)
                positions.append(
                    await ledger.append(
                        data, parsed.key_hash, 1, parsed.publish_time, parsed.producer_name, parsed.sequence_id
                    )
                )
            replicator = Replicator(
                "persistent://t/ns/topic",
                "r1",
                "r2",
                ledger,
                cursor,
                NOWHERE,
                LoopClock(asyncio.get_running_loop()),
                1000,
            )
            producer = RecordingProducer(max_frame_bytes)
            _forward(replicator, producer, cursor.undeleted_entries(await cursor.read_entries(100)))
            mark_deletes = [cursor.mark_delete_position]
            for count in receipts:
                replicator._on_receipts([(9, i) for i in range(count)])
                mark_deletes.append(cursor.mark_delete_position)
            return {
                "positions": positions,
                "sent": producer.sent,
                "mark_deletes": mark_deletes,
                "msg_out": replicator.msg_out_counter,
            }
        finally:
            await factory.close()

    return asyncio.run(scenario())


def test_what_goes_what_is_skipped_and_how_far_the_cursor_moves(tmp_path: Path) -> None:
    request_from_r2 = parse_entry(markers.snapshot_request("s-1", "r2", 5))
    request_from_r2.metadata.replicated_from = "r2"
    local_snapshot = markers.snapshot("s-0", "r1", Position(1, 0), {"r2": Position(7, 7)}, 5, None)
    local_update = markers.subscription_update("sub", {"r1": Position(1, 0), "r2": Position(7, 7)}, 5)
    entries = [
        _data(0),  # local data: sent
        encode_entry(request_from_r2.metadata, request_from_r2.payload),  # r2's marker: never sent back
        _data(1),  # sent
        _data(2, replicated_from="r3"),  # came from another cluster: never forwarded again
        _data(3, replicate_to=["r3"]),  # the client left r2 out
        local_snapshot,  # replicate_to names only r1: stays
        local_update,  # a local UPDATE: sent, as a marker
    ]
    result = _run(tmp_path, entries, receipts=[1, 1, 1])
    p = result["positions"]
    assert [(m.sequence_id, m.replicated_from, marker) for m, _, marker in result["sent"]] == [
        (0, "r1", False),
        (1, "r1", False),
        (0, "r1", True),
    ]
    assert result["sent"][2][0].marker_type == markers.UPDATE
    before_first = result["mark_deletes"][0]
    assert before_first < p[0]
    # First receipt: entry 0, and the marker skipped right behind it. Second: entry 2 and the three
    # skipped behind it. Third: the UPDATE, the last entry.
    assert result["mark_deletes"][1:] == [p[1], p[5], p[6]]
    assert result["msg_out"] == 3


def test_entries_all_skipped_move_the_cursor_at_once(tmp_path: Path) -> None:
    entries = [_data(0, replicated_from="r2"), _data(1, replicated_from="r3"), _data(2, replicate_to=["r1"])]
    result = _run(tmp_path, entries, receipts=[])
    assert result["sent"] == []
    assert result["mark_deletes"] == [result["positions"][-1]]


def test_receipts_in_one_group_move_the_cursor_once_to_the_last(tmp_path: Path) -> None:
    result = _run(tmp_path, [_data(i) for i in range(5)], receipts=[3, 2])
    p = result["positions"]
    assert result["mark_deletes"][1:] == [p[2], p[4]]
    assert result["msg_out"] == 5


def test_an_entry_larger_than_the_remote_accepts_is_skipped_and_logged(tmp_path: Path, caplog) -> None:
    """Its SEND would close the connection, and holding it would stop everything behind it: it is passed
    like an entry not for this remote, with an error in the log."""
    entries = [_data(0), _data(1, payload=bytes(600)), _data(2)]
    result = _run(tmp_path, entries, receipts=[1, 1], max_frame_bytes=500)
    p = result["positions"]
    assert [m.sequence_id for m, _, _ in result["sent"]] == [0, 2]
    assert result["mark_deletes"][1:] == [p[1], p[2]]
    assert result["msg_out"] == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"[persistent://t/ns/topic] Entry {p[1]} not replicated to r2: its SEND of 640 bytes exceeds the "
        "remote's limit of 500"
    ]


def _pass_scenario(tmp_path: Path, local_before: int, answered: bool) -> dict[str, Any]:
    """`local_before` local entries, read and sent (receipts given when `answered`), then three entries
    another cluster's replicator stored, handed to `pass_replicated` as its append's first and last."""

    async def scenario() -> dict[str, Any]:
        factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), CONFIG)
        try:
            ledger = await factory.open_ledger("persistent://t/ns/topic")
            cursor = await ledger.open_cursor(cursor_name("r2"), "latest")
            replicator = Replicator(
                "persistent://t/ns/topic",
                "r1",
                "r2",
                ledger,
                cursor,
                NOWHERE,
                LoopClock(asyncio.get_running_loop()),
                1000,
            )
            producer = RecordingProducer()
            for sequence_id in range(local_before):
                await ledger.append(_data(sequence_id), 0, 1, 1, "p", sequence_id)
            entries = cursor.undeleted_entries(await cursor.read_entries(100))
            _forward(replicator, producer, entries)
            if answered and entries:
                replicator._on_receipts([(9, i) for i in range(len(entries))])
            stored = [await ledger.append(_data(100 + i, replicated_from="r3"), 0, 1, 1, "q", i) for i in range(3)]
            before = cursor.mark_delete_position
            replicator.pass_replicated(stored[0], stored[-1])
            after = cursor.mark_delete_position
            # Whatever pass_replicated left, the loop's own read skips: both ways end in the same place.
            _forward(replicator, producer, cursor.undeleted_entries(await cursor.read_entries(100)))
            return {"stored": stored, "before": before, "after": after, "sent": len(producer.sent)}
        finally:
            await factory.close()

    return asyncio.run(scenario())


def test_entries_stored_by_another_replicator_are_passed_without_a_read_when_all_before_is_done(tmp_path) -> None:
    idle = _pass_scenario(tmp_path / "idle", local_before=0, answered=False)
    assert idle["after"] == idle["stored"][-1]
    answered = _pass_scenario(tmp_path / "answered", local_before=2, answered=True)
    assert answered["before"] < answered["stored"][0]
    assert answered["after"] == answered["stored"][-1]
    assert answered["sent"] == 2


def test_entries_stored_by_another_replicator_wait_behind_unconfirmed_sends(tmp_path) -> None:
    waiting = _pass_scenario(tmp_path, local_before=2, answered=False)
    assert waiting["after"] == waiting["before"] < waiting["stored"][0]
    assert waiting["sent"] == 2


class WindowProducer:
    """Stands in for the RemoteProducer inside the replicator's loop: a queue of `max_pending` sends that
    the test answers, a socket that takes `write_budget` bytes before it must drain, and a connection the
    test can drop."""

    max_frame_bytes = DEFAULT_MAX_MESSAGE_SIZE

    def __init__(self, max_pending: int, unsent_max: int = 1 << 20) -> None:
        self.max_pending = max_pending
        self.unsent_max = unsent_max
        self.connected = True
        self.unanswered: list[int] = []
        self.sent: list[int] = []
        self.unsent = 0  # bytes written that the remote has not read yet
        self.drains = 0

    @property
    def pending(self) -> int:
        return len(self.unanswered)

    @property
    def room(self) -> int:
        return self.max_pending - len(self.unanswered) if self.connected else 0

    @property
    def write_budget(self) -> int:
        return self.unsent_max - self.unsent if self.connected else 0

    async def drain(self) -> None:
        self.drains += 1
        while self.connected and self.unsent:
            await asyncio.sleep(0)
        if not self.connected:
            raise RemoteUnavailable("dropped by the test")

    def send_frames(self, frames: list[bytes], sequence_ids: list[int]) -> None:
        assert self.connected and len(self.unanswered) + len(frames) <= self.max_pending
        self.unanswered += sequence_ids
        self.sent += sequence_ids
        self.unsent += sum(map(len, frames))

    def answer(self, replicator: Replicator, count: int) -> None:
        """The remote reads everything written and stores the oldest `count` unanswered sends."""
        self.unsent = 0
        answered, self.unanswered = self.unanswered[:count], self.unanswered[count:]
        if answered:
            replicator._on_receipts([(9, i) for i in range(len(answered))])

    def drop(self, replicator: Replicator) -> None:
        """The connection goes: as the RemoteProducer's on_disconnect does, the replicator hears of it."""
        self.connected = False
        replicator._progress.set()


async def _topic_with(tmp_path: Path, count: int) -> tuple[Any, Any, Any]:
    factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), CONFIG)
    ledger = await factory.open_ledger("persistent://t/ns/topic")
    cursor = await ledger.open_cursor(cursor_name("r2"), "latest")
    await ledger.append_many(
        [_data(i) for i in range(count)], [0] * count, [1] * count, [1] * count, ["p"] * count, list(range(count))
    )
    return factory, ledger, cursor


def test_reads_run_ahead_of_the_sends_within_twice_the_queue(tmp_path: Path) -> None:
    """A quarter of the queue per read, reads while the remote has sends to answer (not after its
    receipts), and what is held (read and unconfirmed) never more than the queue in flight plus the queue
    read ahead; then a connection dropped while a read is under way: after the rewind, everything
    unconfirmed goes again, in order, once."""
    queue_size = 100
    count = 1000

    async def scenario() -> None:
        factory, ledger, cursor = await _topic_with(tmp_path, count)
        try:
            replicator = Replicator(
                "persistent://t/ns/topic",
                "r1",
                "r2",
                ledger,
                cursor,
                NOWHERE,
                LoopClock(asyncio.get_running_loop()),
                queue_size,
            )
            producer = WindowProducer(queue_size)
            reads: list[tuple[int, int]] = []  # (entries asked, sends unanswered) at each read
            in_progress = 0
            read = cursor.read_entries

            async def recorded(asked: int) -> list[Any]:
                nonlocal in_progress
                reads.append((asked, producer.pending))
                in_progress += 1
                try:
                    # A turn of the loop, as a read from disk takes (a reader thread) and one from the cache does not.
                    await asyncio.sleep(0)
                    return await read(asked)
                finally:
                    in_progress -= 1

            cursor.read_entries = recorded  # type: ignore[method-assign]

            def held() -> int:
                return ledger.count_entries(cursor.mark_delete_position, ledger.previous_position(cursor.read_position))

            task = asyncio.create_task(replicator._forward(producer))  # type: ignore[arg-type]
            while len(producer.sent) < 600 or not in_progress:
                await asyncio.sleep(0)
                assert held() <= 2 * queue_size
                assert len(replicator._read_ahead) <= queue_size
                producer.answer(replicator, 7)
            # Dropped with sends unanswered and a read under way.
            assert producer.unanswered
            producer.drop(replicator)
            with pytest.raises(RemoteUnavailable):
                await task
            assert in_progress == 0
            assert not replicator._read_ahead and replicator._read_ahead_bytes == 0
            assert all(asked <= queue_size // 4 for asked, _ in reads)
            assert sum(unanswered > 0 for _, unanswered in reads) > len(reads) // 2
            confirmed = ledger.count_entries(
                ledger.previous_position(ledger.first_position()), cursor.mark_delete_position
            )
            first_attempt = producer.sent

            cursor.rewind()
            replicator._in_flight.clear()
            producer = WindowProducer(queue_size)
            task = asyncio.create_task(replicator._forward(producer))  # type: ignore[arg-type]
            while cursor.mark_delete_position < ledger.last_confirmed_entry:
                await asyncio.sleep(0)
                assert held() <= 2 * queue_size
                producer.answer(replicator, 13)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert first_attempt[:confirmed] + producer.sent == list(range(count))
        finally:
            await factory.close()

    asyncio.run(scenario())


def test_receipts_send_the_entries_read_ahead_at_once(tmp_path: Path) -> None:
    """With the queue full and a queue's worth read ahead, each group of receipts sends as many entries as
    it answered, within `_on_receipts` itself: the remote gets them without a turn of the replicator's loop;
    up to a quarter of the queue per write, so that the remote's commits do not merge into one."""
    queue_size = 40

    async def scenario() -> None:
        factory, ledger, cursor = await _topic_with(tmp_path, 200)
        try:
            replicator = Replicator(
                "persistent://t/ns/topic",
                "r1",
                "r2",
                ledger,
                cursor,
                NOWHERE,
                LoopClock(asyncio.get_running_loop()),
                queue_size,
            )
            producer = WindowProducer(queue_size)
            task = asyncio.create_task(replicator._forward(producer))  # type: ignore[arg-type]
            while len(replicator._read_ahead) < queue_size:
                await asyncio.sleep(0)
            assert producer.sent == list(range(queue_size))
            for answered in (3, 10, 1):
                before = len(producer.sent)
                producer.answer(replicator, answered)
                assert producer.sent == list(range(before + answered))
                assert producer.pending == queue_size
            # More room than a quarter of the queue: a quarter now, the rest in the next turns of the loop.
            before = len(producer.sent)
            producer.answer(replicator, 25)
            assert producer.sent == list(range(before + queue_size // 4))
            while producer.pending < queue_size:
                await asyncio.sleep(0)
            assert producer.sent == list(range(before + 25))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await factory.close()

    asyncio.run(scenario())


def test_sends_wait_for_the_socket_when_its_unsent_bytes_reach_the_bound(tmp_path: Path) -> None:
    """The queue bounds how many SENDs are unanswered, not their bytes: past `write_budget` the loop drains
    the socket before it sends more, and receipts send only what the budget allows."""

    async def scenario() -> None:
        factory, ledger, cursor = await _topic_with(tmp_path, 50)
        try:
            replicator = Replicator(
                "persistent://t/ns/topic",
                "r1",
                "r2",
                ledger,
                cursor,
                NOWHERE,
                LoopClock(asyncio.get_running_loop()),
                100,
            )
            frame_bytes = len(forwarded_sends(0, [_data(0)], "r1", "r2")[0][0])  # type: ignore[index]
            producer = WindowProducer(100, unsent_max=frame_bytes * 5)
            task = asyncio.create_task(replicator._forward(producer))  # type: ignore[arg-type]
            while not producer.drains:
                await asyncio.sleep(0)
            assert producer.sent == list(range(5))
            producer.answer(replicator, 2)  # the remote read all five: the budget is whole again
            assert producer.sent == list(range(10))
            while cursor.mark_delete_position < ledger.last_confirmed_entry:
                await asyncio.sleep(0)
                producer.answer(replicator, 3)
            assert producer.sent == list(range(50))
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await factory.close()

    asyncio.run(scenario())
