"""ACTIVE_CONSUMER_CHANGE goes to Failover consumers only, as Pulsar's notifyActiveConsumerChanged: an
Exclusive subscription (a reader, a compacted consumer) is not told. Seen on the wire with a raw client:
everything the broker wrote for a SUBSCRIBE has arrived once a PING sent after its SUCCESS is answered.
"""

from __future__ import annotations

import socket

import pytest

from magnetar.protocol.framing import FrameDecoder, encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandConnect, CommandPing, CommandSubscribe


def _frames_for_subscribe(url: str, topic: str, sub_type: int) -> list[BaseCommand]:
    """The commands the broker writes for a SUBSCRIBE, up to the PONG of a PING sent after its SUCCESS."""
    host, port = url.removeprefix("pulsar://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as client:
        connect = BaseCommand(
            type=BaseCommand.CONNECT, connect=CommandConnect(client_version="raw", protocol_version=21)
        )
        subscribe = BaseCommand(
            type=BaseCommand.SUBSCRIBE,
            subscribe=CommandSubscribe(topic=topic, subscription="sub", subType=sub_type, consumer_id=1, request_id=1),
        )
        client.sendall(encode_frame(connect) + encode_frame(subscribe))
        decoder = FrameDecoder()
        seen: list[BaseCommand] = []
        pinged = False
        while True:
            data = client.recv(65536)
            assert data, "the broker closed the connection"
            for frame in decoder.receive_data(data):
                seen.append(frame.command)
                assert frame.command.type != BaseCommand.ERROR, frame.command.error
                if frame.command.type == BaseCommand.SUCCESS and not pinged:
                    client.sendall(encode_frame(BaseCommand(type=BaseCommand.PING, ping=CommandPing())))
                    pinged = True
                if frame.command.type == BaseCommand.PONG and pinged:
                    return seen


@pytest.mark.parametrize(
    ("sub_type", "changes"),
    [(CommandSubscribe.Exclusive, []), (CommandSubscribe.Failover, [(1, True)])],
)
def test_active_consumer_change_only_for_failover(module_broker, topic: str, sub_type: int, changes: list) -> None:
    # A regression: an Exclusive consumer was told too (the Go client logged "Consumer not found while active
    # consumer change" for its readers and compacted consumers).
    seen = _frames_for_subscribe(module_broker.url, topic, sub_type)
    told = [
        (c.active_consumer_change.consumer_id, c.active_consumer_change.is_active)
        for c in seen
        if c.type == BaseCommand.ACTIVE_CONSUMER_CHANGE
    ]
    assert told == changes
