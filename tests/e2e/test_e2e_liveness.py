"""Pulsar's connection liveness check (`connectionLivenessCheckTimeoutMillis`), against a broker process.

A producer name or an Exclusive subscription held by a connection whose client vanished without a FIN (a
half-open connection: a replicator's remote went away, a client's network dropped) must not keep the new
owner out until the keep-alive notices (up to two `keepAliveIntervalSeconds`): the broker pings the holder
and, without a PONG within the timeout, closes it and admits the newcomer. A holder that answers keeps
what it holds. The silent holder here is a raw socket that registers and then never reads again.
"""

from __future__ import annotations

import asyncio
import socket

import pulsar
import pytest

from magnetar.protocol.framing import FrameDecoder, encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandConnect, CommandProducer, CommandSubscribe
from magnetar.replication.producer import RemoteError, RemoteProducer

NAME = "pulsar.repl.a-->b"
# Guards against a hang, never a timing assertion.
HANG_GUARD_S = 30


def _silent_holder(url: str, command: BaseCommand, answered: int) -> socket.socket:
    """A client that CONNECTs, sends `command`, waits for the answer of type `answered`, then never reads
    or writes again: what the broker sees of a client that vanished without closing."""
    host, port = url.removeprefix("pulsar://").split(":")
    holder = socket.create_connection((host, int(port)), timeout=10)
    connect = BaseCommand(
        type=BaseCommand.CONNECT, connect=CommandConnect(client_version="silent", protocol_version=21)
    )
    holder.sendall(encode_frame(connect) + encode_frame(command))
    decoder = FrameDecoder()
    while True:
        data = holder.recv(65536)
        assert data, "the broker closed the holder's connection before answering it"
        for frame in decoder.receive_data(data):
            assert frame.command.type != BaseCommand.ERROR, frame.command.error
            if frame.command.type == answered:
                return holder


def _producer_command(topic: str) -> BaseCommand:
    return BaseCommand(
        type=BaseCommand.PRODUCER,
        producer=CommandProducer(topic=topic, producer_id=1, request_id=1, producer_name=NAME),
    )


def _run(scenario) -> object:
    async def guarded() -> object:
        return await asyncio.wait_for(scenario(), HANG_GUARD_S)

    return asyncio.run(guarded())


def test_a_producer_name_held_by_a_silent_connection_is_taken_over(broker_factory, topic: str) -> None:
    broker = broker_factory(connectionLivenessCheckTimeoutMillis=300, keepAliveIntervalSeconds=600)
    holder = _silent_holder(broker.url, _producer_command(topic), BaseCommand.PRODUCER_SUCCESS)
    try:

        async def scenario() -> None:
            successor = RemoteProducer(broker.url, topic, NAME)
            await successor.start()  # ProducerBusy without the check, for 20 minutes here
            await successor.close()

        _run(scenario)
        _assert_closed_by_the_broker(holder)
    finally:
        holder.close()


def _assert_closed_by_the_broker(holder: socket.socket) -> None:
    """Reading what the broker wrote (its PING) ends in EOF or a reset: it closed the connection."""
    holder.settimeout(10)
    try:
        while holder.recv(65536):
            pass
    except ConnectionResetError:
        pass


def test_a_producer_name_held_by_a_live_connection_is_refused_after_the_check(broker_factory, topic: str) -> None:
    broker = broker_factory(connectionLivenessCheckTimeoutMillis=300)

    async def scenario() -> None:
        first = RemoteProducer(broker.url, topic, NAME)
        await first.start()
        second = RemoteProducer(broker.url, topic, NAME)
        with pytest.raises(RemoteError) as refused:
            await second.start()
        assert refused.value.code == "ProducerBusy"
        await asyncio.sleep(0.6)  # past the check's timeout: the first answered, so it still holds the name
        assert first.connected
        await first.close()

    _run(scenario)


def test_an_exclusive_subscription_held_by_a_silent_connection_is_taken_over(broker_factory, topic: str) -> None:
    broker = broker_factory(connectionLivenessCheckTimeoutMillis=300, keepAliveIntervalSeconds=600)
    subscribe = BaseCommand(
        type=BaseCommand.SUBSCRIBE,
        subscribe=CommandSubscribe(
            topic=topic, subscription="sub", subType=CommandSubscribe.Exclusive, consumer_id=1, request_id=1
        ),
    )
    holder = _silent_holder(broker.url, subscribe, BaseCommand.SUCCESS)
    client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
        client.create_producer(topic).send(b"after the takeover")
        assert consumer.receive(timeout_millis=10_000).data() == b"after the takeover"
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    finally:
        client.close()
        holder.close()
