"""Bad input on raw sockets: the broker answers or closes only that connection, serves the others, loses nothing.

Frames are built with magnetar's own protocol helpers (framing, messages, the generated schema); the
broker is driven only through its port. Every test first publishes messages with the official client
(their receipts are the broker's promise), keeps a second client connected, sends the bad input, and
then checks that the bystander still works and every acknowledged publish is still there.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.protocol import messages
from magnetar.protocol.framing import DEFAULT_MAX_MESSAGE_SIZE, MESSAGE_SIZE_FRAME_PADDING, FrameDecoder, encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, MessageMetadata, ServerError

READ_TIMEOUT_S = 10
PUBLISHED = 5


class RawConnection:
    """One TCP connection to the broker, speaking frames by hand."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S)
        self.decoder = FrameDecoder(64 * 1024 * 1024)
        self.frames: list = []

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def command(self, command_type: int, field: str, payload: bytes = b"", **fields: object) -> None:
        self.send(encode_frame(BaseCommand(type=command_type, **{field: fields}), payload))

    def connect(self) -> None:
        self.command(BaseCommand.CONNECT, "connect", client_version="raw-test", protocol_version=20)
        connected = self.expect(BaseCommand.CONNECTED)
        assert connected.connected.protocol_version == 20
        assert connected.connected.server_version

    def read(self) -> BaseCommand:
        """The next frame from the broker (PINGs answered and skipped); AssertionError on EOF."""
        while True:
            while self.frames:
                frame = self.frames.pop(0)
                if frame.command.type == BaseCommand.PING:
                    self.command(BaseCommand.PONG, "pong")
                    continue
                return frame.command
            data = self.sock.recv(65536)
            assert data, "the broker closed the connection"
            self.frames.extend(self.decoder.receive_data(data))

    def expect(self, command_type: int) -> BaseCommand:
        command = self.read()
        assert command.type == command_type, f"expected {BaseCommand.Type.Name(command_type)}, got {command}"
        return command

    def closed_by_broker(self) -> bool:
        """True once the broker closes (EOF or reset) within the read timeout; False if it answers instead."""
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return True
            except TimeoutError:
                return False
            if not data:
                return True
        return False

    def still_open(self) -> bool:
        """A PING gets its PONG: the connection survived."""
        self.command(BaseCommand.PING, "ping")
        return self.read().type == BaseCommand.PONG

    def close(self) -> None:
        self.sock.close()


class Survivor:
    """Messages published (and acknowledged by the broker) before the bad input, and a bystander client."""

    def __init__(self, broker, client_factory, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self.client_factory = client_factory
        self.bystander = client_factory(broker.url)
        self.consumer = self.bystander.subscribe(topic, "bystander", consumer_type=pulsar.ConsumerType.Shared)
        self.producer = self.bystander.create_producer(topic)
        self.published = [f"before-{i}" for i in range(PUBLISHED)]
        for text in self.published:
            self.producer.send(text.encode())
        # The bystander consumes and acknowledges the first two.
        for text in self.published[:2]:
            message = self.consumer.receive(timeout_millis=READ_TIMEOUT_S * 1000)
            assert message.data().decode() == text
            self.consumer.acknowledge(message)

    def check(self) -> None:
        assert self.broker.process.poll() is None, "the broker process died"
        # The bystander connection keeps working: publish and receive.
        self.producer.send(b"after")
        got = []
        while "after" not in got:
            message = self.consumer.receive(timeout_millis=READ_TIMEOUT_S * 1000)
            self.consumer.acknowledge(message)
            got.append(message.data().decode())
        assert got == [*self.published[2:], "after"]
        # A new client on a new connection reads every acknowledged publish.
        reader = self.client_factory(self.broker.url).create_reader(self.topic, pulsar.MessageId.earliest)
        everything = []
        while reader.has_message_available():
            everything.append(reader.read_next(timeout_millis=READ_TIMEOUT_S * 1000).data().decode())
        assert everything == [*self.published, "after"]


@pytest.fixture
def survivor(broker, client_factory, topic) -> Survivor:
    return Survivor(broker, client_factory, topic)


@pytest.fixture
def raw(broker) -> Iterator:
    opened: list[RawConnection] = []

    def open_connection() -> RawConnection:
        connection = RawConnection(broker.port)
        opened.append(connection)
        return connection

    yield open_connection
    for connection in opened:
        connection.close()


def metadata(producer_name: str, sequence_id: int) -> MessageMetadata:
    return MessageMetadata(producer_name=producer_name, sequence_id=sequence_id, publish_time=int(time.time() * 1000))


def open_producer(connection: RawConnection, topic: str, producer_id: int = 1) -> str:
    connection.command(BaseCommand.PRODUCER, "producer", topic=topic, producer_id=producer_id, request_id=100)
    success = connection.expect(BaseCommand.PRODUCER_SUCCESS)
    assert success.producer_success.request_id == 100
    return success.producer_success.producer_name


# --------------------------------------------------------------------------------------- framing


def test_garbage_bytes_close_only_that_connection(survivor, raw, broker) -> None:
    rng = random.Random(4)
    for garbage in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", bytes(rng.randrange(256) for _ in range(4096))):
        connection = raw()
        connection.send(garbage)
        assert connection.closed_by_broker()
    assert "closing connection" in broker.output(), "a closed connection is logged"
    survivor.check()


def test_garbage_after_connect_closes_the_connection(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    # A frame whose command bytes are not a protobuf BaseCommand.
    body = b"\xff" * 16
    connection.send(struct.pack(">II", 4 + len(body), len(body)) + body)
    assert connection.closed_by_broker()
    survivor.check()


def test_frame_above_max_message_size_plus_padding(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    total_size = DEFAULT_MAX_MESSAGE_SIZE + MESSAGE_SIZE_FRAME_PADDING  # + the 4-byte prefix: one over
    connection.send(struct.pack(">II", total_size, 20) + b"\x00" * 1024)
    assert connection.closed_by_broker()
    survivor.check()


def test_largest_allowed_message_from_the_client_is_accepted(survivor, client, topic) -> None:
    # The client's own limit is CONNECTED.max_message_size; a payload just under it goes through whole.
    big_topic = f"{topic}-big"
    producer = client.create_producer(big_topic)
    big = random.Random(5).randbytes(DEFAULT_MAX_MESSAGE_SIZE - 4096)
    producer.send(big)
    reader = client.create_reader(big_topic, pulsar.MessageId.earliest)
    assert reader.read_next(timeout_millis=READ_TIMEOUT_S * 1000).data() == big
    survivor.check()


def test_truncated_frame_then_eof(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    command = BaseCommand(type=BaseCommand.PING, ping={}).SerializeToString()
    frame = struct.pack(">II", 4 + len(command) + 100, len(command)) + command
    connection.send(frame)  # 100 bytes short
    connection.sock.shutdown(socket.SHUT_WR)
    assert connection.closed_by_broker()
    survivor.check()


def test_truncated_header_then_eof(survivor, raw) -> None:
    connection = raw()
    connection.send(b"\x00\x00")
    connection.sock.shutdown(socket.SHUT_WR)
    assert connection.closed_by_broker()
    survivor.check()


def test_command_size_above_total_size(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    command = BaseCommand(type=BaseCommand.PING, ping={}).SerializeToString()
    connection.send(struct.pack(">II", 4 + len(command), len(command) + 50) + command)
    assert connection.closed_by_broker()
    survivor.check()


def test_zero_total_size(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    connection.send(struct.pack(">II", 0, 0))
    assert connection.closed_by_broker()
    survivor.check()


# ------------------------------------------------------------------------------------ checksums


def test_send_with_wrong_checksum_gets_send_error_and_the_connection_stays(survivor, raw, topic) -> None:
    connection = raw()
    connection.connect()
    name = open_producer(connection, topic)
    section = bytearray(messages.encode_entry(metadata(name, 0), b"corrupted"))
    section[2] ^= 0xFF  # the first byte of the CRC-32C after the 0x0e01 magic
    connection.command(BaseCommand.SEND, "send", bytes(section), producer_id=1, sequence_id=0)
    error = connection.expect(BaseCommand.SEND_ERROR)
    assert error.send_error.producer_id == 1
    assert error.send_error.sequence_id == 0
    assert error.send_error.error == ServerError.ChecksumError
    assert connection.still_open()
    # The same producer publishes a good message on the same connection.
    connection.command(
        BaseCommand.SEND, "send", messages.encode_entry(metadata(name, 1), b"good"), producer_id=1, sequence_id=1
    )
    receipt = connection.expect(BaseCommand.SEND_RECEIPT)
    assert receipt.send_receipt.sequence_id == 1
    survivor.published.append("good")
    survivor.check()


def test_payload_corrupted_after_the_checksum_was_computed(survivor, raw, topic) -> None:
    connection = raw()
    connection.connect()
    name = open_producer(connection, topic)
    section = bytearray(messages.encode_entry(metadata(name, 0), b"payload"))
    section[-1] ^= 0x01
    connection.command(BaseCommand.SEND, "send", bytes(section), producer_id=1, sequence_id=0)
    assert connection.expect(BaseCommand.SEND_ERROR).send_error.error == ServerError.ChecksumError
    assert connection.still_open()
    survivor.check()


# ------------------------------------------------------------------------------ unknown ids


def test_send_for_unknown_producer_id_closes_the_connection(survivor, raw, topic) -> None:
    connection = raw()
    connection.connect()
    connection.command(
        BaseCommand.SEND, "send", messages.encode_entry(metadata("nobody", 0), b"orphan"), producer_id=42, sequence_id=0
    )
    # Pulsar closes the connection when a SEND names no producer it knows.
    assert connection.closed_by_broker()
    survivor.check()


def test_commands_for_unknown_consumer_ids(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    # FLOW, ACK and REDELIVER for a consumer that does not exist are dropped without a reply.
    connection.command(BaseCommand.FLOW, "flow", consumer_id=7, messagePermits=100)
    connection.command(BaseCommand.ACK, "ack", consumer_id=7, ack_type=0, message_id=[{"ledgerId": 1, "entryId": 0}])
    connection.command(BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES, "redeliverUnacknowledgedMessages", consumer_id=7)
    assert connection.still_open()
    # Requests get an answer with their request id.
    connection.command(BaseCommand.GET_LAST_MESSAGE_ID, "getLastMessageId", consumer_id=7, request_id=11)
    error = connection.expect(BaseCommand.ERROR)
    assert error.error.request_id == 11
    connection.command(BaseCommand.SEEK, "seek", consumer_id=7, request_id=12, message_id={"ledgerId": 1, "entryId": 0})
    assert connection.expect(BaseCommand.ERROR).error.request_id == 12
    connection.command(BaseCommand.UNSUBSCRIBE, "unsubscribe", consumer_id=7, request_id=13)
    assert connection.expect(BaseCommand.ERROR).error.request_id == 13
    connection.command(BaseCommand.CLOSE_CONSUMER, "close_consumer", consumer_id=7, request_id=14)
    assert connection.expect(BaseCommand.SUCCESS).success.request_id == 14
    connection.command(BaseCommand.CLOSE_PRODUCER, "close_producer", producer_id=7, request_id=15)
    assert connection.expect(BaseCommand.SUCCESS).success.request_id == 15
    assert connection.still_open()
    survivor.check()


# --------------------------------------------------------------------------- wrong commands


def test_unknown_request_gets_not_allowed_with_its_request_id(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    connection.command(BaseCommand.NEW_TXN, "newTxn", request_id=77, tc_id=0)
    error = connection.expect(BaseCommand.ERROR)
    assert error.error.request_id == 77
    assert error.error.error == ServerError.NotAllowedError
    assert connection.still_open()
    survivor.check()


def test_command_before_connect_closes_the_connection(survivor, raw, topic) -> None:
    connection = raw()
    connection.command(BaseCommand.PRODUCER, "producer", topic=topic, producer_id=1, request_id=1)
    assert connection.closed_by_broker()
    ping_first = raw()
    ping_first.command(BaseCommand.PING, "ping")
    assert ping_first.closed_by_broker()
    survivor.check()


def test_second_connect_closes_the_connection(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    connection.command(BaseCommand.CONNECT, "connect", client_version="raw-test", protocol_version=20)
    assert connection.closed_by_broker()
    survivor.check()


def test_broker_only_command_from_a_client_closes_the_connection(survivor, raw) -> None:
    connection = raw()
    connection.connect()
    connection.command(BaseCommand.SUCCESS, "success", request_id=1)
    assert connection.closed_by_broker()
    survivor.check()


def test_send_without_payload_closes_the_connection(survivor, raw, topic) -> None:
    connection = raw()
    connection.connect()
    open_producer(connection, topic)
    connection.command(BaseCommand.SEND, "send", producer_id=1, sequence_id=0)
    assert connection.closed_by_broker()
    survivor.check()


def test_abrupt_disconnect_mid_produce_loses_no_receipted_message(survivor, raw, topic) -> None:
    connection = raw()
    connection.connect()
    name = open_producer(connection, topic)
    for sequence_id in range(3):
        entry = messages.encode_entry(metadata(name, sequence_id), f"raw-{sequence_id}".encode())
        connection.command(BaseCommand.SEND, "send", entry, producer_id=1, sequence_id=sequence_id)
    receipts = [connection.expect(BaseCommand.SEND_RECEIPT).send_receipt.sequence_id for _ in range(3)]
    assert receipts == [0, 1, 2]
    # Then half a frame and a reset.
    connection.send(b"\x00\x00\x01")
    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()
    survivor.published.extend(f"raw-{i}" for i in range(3))
    survivor.check()
