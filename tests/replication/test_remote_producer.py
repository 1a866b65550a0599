"""RemoteProducer, the replicator's producer on a remote cluster: against a real magnetar broker process (read
back with the official client), and against a scripted fake remote for lookups, keep-alives and protocol errors.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
from collections.abc import Callable

import httpx
import pulsar
import pytest

from magnetar.protocol import commands
from magnetar.protocol.forwarding import forwarded_sends
from magnetar.protocol.framing import FrameDecoder, encode_frame
from magnetar.protocol.messages import encode_batch, encode_entry
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, KeyValue, MessageMetadata, SingleMessageMetadata
from magnetar.replication.producer import PRODUCER_ID, RemoteError, RemoteProducer, RemoteUnavailable

NAME = "pulsar.repl.a-->b"
# Guards against a hang, never a timing assertion: each scenario finishes in well under a second.
HANG_GUARD_S = 30
PUBLISH_TIME_MS = 1_700_000_000_000


def _forwarded(stored: bytes) -> tuple[bytes, int]:
    """The SEND frame and sequence id a replicator of cluster a forwards `stored` to cluster b with."""
    send = forwarded_sends(PRODUCER_ID, [stored], "a", "b")[0]
    assert send is not None
    return send[0], send[1]


def _send(producer: RemoteProducer, *entries: tuple[bytes, int]) -> None:
    producer.send_frames([frame for frame, _ in entries], [sequence_id for _, sequence_id in entries])


def _single(producer: str, sequence_id: int, key: str, data: bytes, **properties: str) -> tuple[bytes, int]:
    """A stored single-message entry as the replicator forwards it: (SEND frame, sequence id)."""
    metadata = MessageMetadata(
        producer_name=producer,
        sequence_id=sequence_id,
        publish_time=PUBLISH_TIME_MS,
        partition_key=key,
        properties=[KeyValue(key=k, value=v) for k, v in properties.items()],
    )
    return _forwarded(encode_entry(metadata, data))


def _batch(producer: str, first_sequence_id: int, key: str, bodies: list[bytes]) -> tuple[bytes, int]:
    payload = encode_batch(
        (
            SingleMessageMetadata(
                partition_key=key, sequence_id=first_sequence_id + i, properties=[KeyValue(key="j", value=str(i))]
            ),
            body,
        )
        for i, body in enumerate(bodies)
    )
    last = first_sequence_id + len(bodies) - 1
    metadata = MessageMetadata(
        producer_name=producer,
        sequence_id=first_sequence_id,
        highest_sequence_id=last,
        publish_time=PUBLISH_TIME_MS,
        partition_key=key,
        num_messages_in_batch=len(bodies),
    )
    return _forwarded(encode_entry(metadata, payload))


def _recording(
    url: str, topic: str, name: str = NAME, **options: object
) -> tuple[RemoteProducer, list[tuple[int, int]]]:
    """A producer whose receipts (the remote's message ids) collect in the list returned with it."""
    received: list[tuple[int, int]] = []
    return RemoteProducer(url, topic, name, on_receipts=received.extend, **options), received  # type: ignore[arg-type]


async def _answered(producer: RemoteProducer, received: list, count: int) -> None:
    """Until `received` holds `count` receipts; RemoteUnavailable if the connection goes first."""
    while len(received) < count:
        if not producer.connected:
            raise RemoteUnavailable(producer.failure or "not started")
        await asyncio.sleep(0.001)


async def _disconnected(producer: RemoteProducer) -> None:
    while producer.connected:
        await asyncio.sleep(0.001)


async def _wait_for_room(producer: RemoteProducer) -> None:
    """As a replicator waits for receipts: until the queue has room (the socket drained too)."""
    while not producer.room:
        if not producer.connected:
            raise RemoteUnavailable(producer.failure or "not started")
        await asyncio.sleep(0.001)
    await producer.drain()


async def _send_all(producer: RemoteProducer, received: list, entries: list[tuple]) -> list[tuple[int, int]]:
    """Send `entries` and return their receipts."""
    start = len(received)
    for entry in entries:
        await _wait_for_room(producer)
        _send(producer, entry)
    await _answered(producer, received, start + len(entries))
    return received[start:]


def _run(scenario: Callable[[], object]) -> object:
    async def guarded() -> object:
        return await asyncio.wait_for(scenario(), HANG_GUARD_S)

    return asyncio.run(guarded())


def _receive_all(client: pulsar.Client, topic: str, count: int) -> list[pulsar.Message]:
    consumer = client.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest)
    received = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=10_000)
        consumer.acknowledge(message)
        received.append(message)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(timeout_millis=200)
    return received


def _admin_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


# -------------------------------------------------------------------------------- against magnetar


def test_entries_reach_the_remote_as_sent(broker_factory, client_factory, topic: str) -> None:
    broker = broker_factory()
    singles = [_single("orders-1", i, f"customer-{i % 10}", f"single {i}".encode(), i=str(i)) for i in range(1000)]
    batch_sizes = (2, 5, 10)
    batches = [
        _batch("orders-2", 5000 + 100 * b, f"batch-{b}", [f"batch {b} message {j}".encode() for j in range(size)])
        for b, size in enumerate(batch_sizes)
    ]

    async def scenario() -> list[tuple[int, int]]:
        # A small queue, so that the sender waits for room many times.
        producer, received = _recording(broker.url, topic, max_pending=64)
        await producer.start()
        assert producer.connected and producer.connected_since_ms is not None
        assert producer.address == broker.url.removeprefix("pulsar://")
        positions = await _send_all(producer, received, singles + batches)
        assert (producer.pending, producer.oldest_pending_since_ms) == (0, None)
        await producer.close()
        assert not producer.connected
        return positions

    positions = _run(scenario)
    assert len(positions) == len(singles) + len(batches)
    assert positions == sorted(positions) and len(set(positions)) == len(positions)

    received = _receive_all(client_factory(broker.url), topic, len(singles) + sum(batch_sizes))
    for i, message in enumerate(received[: len(singles)]):
        assert message.data() == f"single {i}".encode()
        assert message.partition_key() == f"customer-{i % 10}"
        assert message.properties() == {"i": str(i)}
        assert message.producer_name() == "orders-1"
        assert message.message_id().batch_index() == -1
    batch_messages = received[len(singles) :]
    by_entry: dict[tuple[int, int], list[pulsar.Message]] = {}
    for message in batch_messages:
        by_entry.setdefault((message.message_id().ledger_id(), message.message_id().entry_id()), []).append(message)
    assert [len(group) for group in by_entry.values()] == list(batch_sizes)
    assert list(by_entry) == positions[len(singles) :]
    for b, group in enumerate(by_entry.values()):
        assert [m.message_id().batch_index() for m in group] == list(range(batch_sizes[b]))
        assert [m.data() for m in group] == [f"batch {b} message {j}".encode() for j in range(batch_sizes[b])]
        assert {m.partition_key() for m in group} == {f"batch-{b}"}
        assert [m.properties() for m in group] == [{"j": str(j)} for j in range(batch_sizes[b])]

    # The official client does not expose replicated_from; the admin API's examine-message does.
    answer = httpx.get(
        broker.http_url + _admin_path(topic) + "/examinemessage",
        params={"initialPosition": "earliest", "messagePosition": 1},
    )
    assert answer.status_code == 200
    assert answer.headers["X-Pulsar-replicated-from"] == "a"
    assert answer.headers["X-Pulsar-producer-name"] == "orders-1"


def test_receipts_match_in_send_order_while_sequence_ids_go_back(broker_factory, client_factory, topic: str) -> None:
    """Many original producers' sequence ids, forwarded as they are: 5, 3, 9, and 5 again from another
    producer. A broker without deduplication (the default) stores them all and answers in send order."""
    broker = broker_factory()
    entries = [
        _single("p1", 5, "k", b"p1-5"),
        _single("p1", 3, "k", b"p1-3"),
        _single("p1", 9, "k", b"p1-9"),
        _single("p2", 5, "k", b"p2-5"),
    ]

    async def scenario() -> list[tuple[int, int]]:
        producer, received = _recording(broker.url, topic)
        await producer.start()
        positions = await _send_all(producer, received, entries)
        await producer.close()
        return positions

    positions = _run(scenario)
    assert positions == sorted(positions) and len(set(positions)) == 4 and (-1, -1) not in positions
    received = _receive_all(client_factory(broker.url), topic, 4)
    assert [m.data() for m in received] == [b"p1-5", b"p1-3", b"p1-9", b"p2-5"]
    assert [(m.message_id().ledger_id(), m.message_id().entry_id()) for m in received] == positions


def test_a_killed_remote_leaves_every_pending_send_unanswered(broker_factory, topic: str) -> None:
    broker = broker_factory()
    disconnects: list[RemoteUnavailable] = []

    async def scenario() -> None:
        producer, received = _recording(broker.url, topic, on_disconnect=disconnects.append)
        await producer.start()
        await _send_all(producer, received, [_single("p", 0, "k", b"first")])
        # Frozen, the broker answers nothing: what is sent next stays pending until the kill.
        os.kill(broker.process.pid, signal.SIGSTOP)
        for i in range(1, 51):
            await _wait_for_room(producer)
            _send(producer, _single("p", i, "k", b"lost?"))
        assert producer.pending == 50
        assert producer.oldest_pending_since_ms is not None
        await asyncio.to_thread(broker.kill)
        await _disconnected(producer)
        assert len(received) == 1 and producer.pending == 0 and producer.failure
        assert producer.room == 0
        with pytest.raises(RemoteUnavailable):
            await producer.drain()
        with pytest.raises(RemoteUnavailable):
            _send(producer, _single("p", 51, "k", b"late"))
        await producer.close()

    _run(scenario)
    assert len(disconnects) == 1


def test_close_producer_from_the_broker_disconnects(broker_factory, topic: str) -> None:
    """An unload closes the topic's producers (CLOSE_PRODUCER); the replicator then starts a new one."""
    broker = broker_factory()

    async def scenario() -> None:
        lost = asyncio.Event()
        producer, received = _recording(broker.url, topic, on_disconnect=lambda _error: lost.set())
        await producer.start()
        await _send_all(producer, received, [_single("p", 0, "k", b"before")])
        async with httpx.AsyncClient(base_url=broker.http_url) as http:
            answer = await http.put(_admin_path(topic) + "/unload")
        assert answer.status_code == 204
        await lost.wait()
        assert not producer.connected
        assert producer.room == 0
        with pytest.raises(RemoteUnavailable):
            await producer.drain()
        again, received_again = _recording(broker.url, topic)
        await again.start()
        assert (await _send_all(again, received_again, [_single("p", 1, "k", b"after")]))[0][1] >= 0
        await again.close()

    _run(scenario)


def test_send_error_closes_the_connection(broker_factory, topic: str) -> None:
    broker = broker_factory()
    disconnects: list[RemoteUnavailable] = []

    async def scenario() -> None:
        producer, received = _recording(broker.url, topic, on_disconnect=disconnects.append)
        await producer.start()
        await _send_all(producer, received, [_single("p", 0, "k", b"fine")])
        damaged = bytearray(_single("p", 1, "k", b"damaged")[0])
        damaged[-1] ^= 0xFF
        _send(producer, (bytes(damaged), 1))
        await _disconnected(producer)
        assert producer.failure is not None and "ChecksumError" in producer.failure
        assert len(received) == 1
        with pytest.raises(RemoteUnavailable):
            _send(producer, _single("p", 2, "k", b"next"))

    _run(scenario)
    assert len(disconnects) == 1


def test_a_second_producer_of_the_same_name_is_refused(broker_factory, topic: str) -> None:
    broker = broker_factory()

    async def scenario() -> None:
        first, received = _recording(broker.url, topic)
        await first.start()
        second = RemoteProducer(broker.url, topic, NAME)
        with pytest.raises(RemoteError) as refused:
            await second.start()
        assert refused.value.code == "ProducerBusy"
        assert not second.connected
        await _send_all(first, received, [_single("p", 0, "k", b"still fine")])
        await first.close()

    _run(scenario)


def test_a_failed_lookup_raises_remote_error(broker_factory) -> None:
    broker = broker_factory()

    async def scenario() -> None:
        producer = RemoteProducer(broker.url, "persistent://public/default", NAME)
        with pytest.raises(RemoteError) as refused:
            await producer.start()
        assert refused.value.code == "InvalidTopicName"

    _run(scenario)


# -------------------------------------------------------------------------------- without a remote


def test_service_urls() -> None:
    assert RemoteProducer("pulsar+ssl://remote", "t", NAME).address == "remote:6651"
    with pytest.raises(ValueError):
        RemoteProducer("http://remote:8080", "t", NAME)
    assert RemoteProducer("pulsar://remote", "t", NAME).address == "remote:6650"


def test_an_unreachable_remote_raises_remote_unavailable() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]

    async def scenario() -> None:
        producer = RemoteProducer(f"pulsar://127.0.0.1:{port}", "t", NAME)
        with pytest.raises(RemoteUnavailable):
            await producer.start()
        with pytest.raises(RuntimeError):
            await producer.start()

    _run(scenario)


def test_a_silent_remote_times_out() -> None:
    async def scenario() -> None:
        accepted: list[asyncio.StreamWriter] = []
        server = await asyncio.start_server(lambda _reader, writer: accepted.append(writer), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        producer = RemoteProducer(f"pulsar://127.0.0.1:{port}", "t", NAME, connect_timeout_s=0.2)
        with pytest.raises(RemoteUnavailable, match="no answer"):
            await producer.start()
        for writer in accepted:
            writer.close()
        server.close()

    _run(scenario)


# -------------------------------------------------------------------------------- against a fake remote


class FakeRemote:
    """A scripted broker: answers CONNECT, LOOKUP (`lookup`'s frame, by default Connect to itself), PRODUCER
    (then a PING when `ping`), SEND (`receipt`'s frame) and CLOSE_PRODUCER, recording what it received."""

    def __init__(self, lookup: Callable | None = None, receipt: Callable | None = None, ping: bool = False) -> None:
        self.lookup = lookup or (lambda request, me: commands.lookup_response(request.request_id, me.url))
        entry_ids = itertools.count()
        self.receipt = receipt or (
            lambda send: commands.send_receipt(send.producer_id, send.sequence_id, 7, next(entry_ids))
        )
        self.ping = ping
        self.connects: list = []
        self.lookups: list = []
        self.ponged = asyncio.Event()

    async def __aenter__(self) -> FakeRemote:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"pulsar://127.0.0.1:{self.port}"
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        try:
            while data := await reader.read(65536):
                for frame in decoder.receive_data(data):
                    writer.write(self._reply(frame.command))
        finally:
            writer.close()

    def _reply(self, command: BaseCommand) -> bytes:
        if command.type == BaseCommand.CONNECT:
            self.connects.append(command.connect)
            return commands.connected("fake", 20, 5 * 1024 * 1024)
        if command.type == BaseCommand.LOOKUP:
            self.lookups.append(command.lookupTopic)
            return self.lookup(command.lookupTopic, self)
        if command.type == BaseCommand.PRODUCER:
            success = commands.producer_success(command.producer.request_id, command.producer.producer_name)
            return success + (commands.ping() if self.ping else b"")
        if command.type == BaseCommand.SEND:
            return self.receipt(command.send)
        if command.type == BaseCommand.CLOSE_PRODUCER:
            return commands.success(command.close_producer.request_id)
        if command.type == BaseCommand.PONG:
            self.ponged.set()
        return b""


def test_a_lookup_redirect_is_followed_once() -> None:
    async def scenario() -> None:
        async with FakeRemote() as owner:
            redirect = lambda request, _me: commands.lookup_response(  # noqa: E731
                request.request_id, owner.url, redirect=True, authoritative=True
            )
            async with FakeRemote(lookup=redirect) as entry_point:
                producer, received = _recording(entry_point.url, "persistent://public/default/t")
                await producer.start()
                assert producer.address == f"127.0.0.1:{owner.port}"
                assert [lookup.authoritative for lookup in owner.lookups] == [True]
                assert await _send_all(producer, received, [_single("p", 0, "k", b"x")]) == [(7, 0)]
                await producer.close()

    _run(scenario)


def test_a_second_redirect_is_not_followed() -> None:
    async def scenario() -> None:
        redirect_to_other: dict[str, str] = {}
        redirect = lambda request, me: commands.lookup_response(  # noqa: E731
            request.request_id, redirect_to_other[me.url], redirect=True
        )
        async with FakeRemote(lookup=redirect) as first, FakeRemote(lookup=redirect) as second:
            redirect_to_other.update({first.url: second.url, second.url: first.url})
            producer = RemoteProducer(first.url, "persistent://public/default/t", NAME)
            with pytest.raises(RemoteUnavailable, match="redirected"):
                await producer.start()

    _run(scenario)


def test_a_proxied_lookup_reconnects_through_the_service_url() -> None:
    async def scenario() -> None:
        proxied = lambda request, _me: commands.lookup_response(  # noqa: E731
            request.request_id, "pulsar://broker-7.internal:6650", proxy_through_service_url=True
        )
        async with FakeRemote(lookup=proxied) as proxy:
            producer = RemoteProducer(proxy.url, "persistent://public/default/t", NAME)
            await producer.start()
            assert [c.proxy_to_broker_url for c in proxy.connects] == ["", "pulsar://broker-7.internal:6650"]
            assert producer.address == f"127.0.0.1:{proxy.port}"
            await producer.close()

    _run(scenario)


def test_ping_is_answered() -> None:
    async def scenario() -> None:
        async with FakeRemote(ping=True) as remote:
            producer = RemoteProducer(remote.url, "persistent://public/default/t", NAME)
            await producer.start()
            await remote.ponged.wait()
            assert producer.connected
            await producer.close()

    _run(scenario)


def test_a_receipt_for_another_sequence_id_closes_the_connection() -> None:
    disconnects: list[RemoteUnavailable] = []

    async def scenario() -> None:
        wrong = lambda send: commands.send_receipt(send.producer_id, send.sequence_id + 1, 7, 0)  # noqa: E731
        async with FakeRemote(receipt=wrong) as remote:
            producer, received = _recording(
                remote.url, "persistent://public/default/t", on_disconnect=disconnects.append
            )
            await producer.start()
            _send(producer, _single("p", 4, "k", b"x"))
            _send(producer, _single("p", 2, "k", b"y"))
            await _disconnected(producer)
            assert producer.failure is not None and "protocol error" in producer.failure
            assert received == [] and producer.pending == 0

    _run(scenario)
    assert len(disconnects) == 1


def test_a_receipt_of_another_shape_is_read_through_protobuf_and_answers_the_same() -> None:
    """A receipt whose message id carries a partition (a field the byte-by-byte reading does not know) is
    parsed by protobuf, matched against the oldest SEND and handed over like any other; Pulsar's -1 (a
    duplicate dropped) comes back signed."""

    async def scenario() -> None:
        def with_partition(send: object) -> bytes:
            sequence_id = send.sequence_id  # type: ignore[attr-defined]
            entry_id = (1 << 64) - 1 if sequence_id == 1 else sequence_id
            receipt = {"producer_id": 0, "sequence_id": sequence_id}
            receipt["message_id"] = {"ledgerId": 7, "entryId": entry_id, "partition": 0}
            return encode_frame(BaseCommand(type=BaseCommand.SEND_RECEIPT, send_receipt=receipt))

        async with FakeRemote(receipt=with_partition) as remote:
            producer, received = _recording(remote.url, "persistent://public/default/t")
            await producer.start()
            for i in range(3):
                _send(producer, _single("p", i, "k", b"x"))
            await _answered(producer, received, 3)
            assert received == [(7, 0), (7, -1), (7, 2)] and producer.pending == 0
            await producer.close()

    _run(scenario)


def test_receipts_before_a_frame_that_ends_the_connection_still_count() -> None:
    """A socket read may bring receipts and then CLOSE_PRODUCER: what was stored is still reported, so
    the replicator does not send it again."""

    async def scenario() -> None:
        def then_close(send: object) -> bytes:
            receipt = commands.send_receipt(0, send.sequence_id, 7, send.sequence_id)  # type: ignore[attr-defined]
            return receipt + (commands.close_producer(0) if send.sequence_id == 2 else b"")  # type: ignore[attr-defined]

        async with FakeRemote(receipt=then_close) as remote:
            producer, received = _recording(remote.url, "persistent://public/default/t")
            await producer.start()
            for i in range(3):
                _send(producer, _single("p", i, "k", b"x"))
            await _disconnected(producer)
            assert received == [(7, 0), (7, 1), (7, 2)]
            assert producer.failure is not None and "closed the producer" in producer.failure

    _run(scenario)


def test_close_leaves_what_is_unanswered_unanswered() -> None:
    disconnects: list[RemoteUnavailable] = []

    async def scenario() -> None:
        async with FakeRemote(receipt=lambda _send: b"") as remote:
            producer, received = _recording(
                remote.url, "persistent://public/default/t", on_disconnect=disconnects.append
            )
            await producer.start()
            for i in range(3):
                _send(producer, _single("p", i, "k", b"x"))
            assert producer.pending == 3
            await producer.close()
            assert (producer.connected, producer.pending, producer.failure, received) == (False, 0, "closed", [])

    _run(scenario)
    assert disconnects == []


def test_a_full_queue_refuses_another_send() -> None:
    async def scenario() -> None:
        async with FakeRemote(receipt=lambda _send: b"") as remote:
            producer = RemoteProducer(remote.url, "persistent://public/default/t", NAME, max_pending=2)
            await producer.start()
            for i in range(2):
                _send(producer, _single("p", i, "k", b"x"))
            assert producer.room == 0
            with pytest.raises(RuntimeError, match="room"):
                _send(producer, _single("p", 2, "k", b"x"))
            await producer.close()
            assert producer.room == 0
            with pytest.raises(RemoteUnavailable):
                _send(producer, _single("p", 2, "k", b"x"))

    _run(scenario)


def test_a_replicator_may_forward_markers_and_a_client_may_not(broker_factory, topic: str) -> None:
    """Markers (PIP-33) are the broker's own entries: another cluster's replicator forwards them, while a
    client that sends one loses its connection."""
    broker = broker_factory()
    metadata = MessageMetadata(
        producer_name="pulsar.marker", sequence_id=0, publish_time=PUBLISH_TIME_MS, marker_type=10
    )
    marker = _forwarded(encode_entry(metadata, b""))

    async def scenario() -> tuple[list[tuple[int, int]], bool]:
        replicator, received = _recording(broker.url, topic)
        await replicator.start()
        positions = await _send_all(replicator, received, [marker])
        await replicator.close()
        client, client_received = _recording(broker.url, topic, "not-a-replicator")
        await client.start()
        _send(client, marker)
        await _disconnected(client)
        assert client_received == []
        return positions, client.connected

    positions, connected = _run(scenario)
    assert len(positions) == 1 and positions[0][1] >= 0
    assert not connected
