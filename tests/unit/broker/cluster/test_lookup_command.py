"""The LOOKUP command of a broker of a cluster, driven directly: each answer's type, URL and
`authoritative` flag as Pulsar's TopicLookupBase writes them, and ServiceNotReady for a listener the
owner lacks or a bundle being unloaded."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from magnetar.broker.commands.lookup import on_lookup
from magnetar.broker.lookup import Lookup
from magnetar.broker.topic_name import TopicName
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandLookupTopic, CommandLookupTopicResponse, ServerError

from .cluster_helpers import Member, start

CONNECT, REDIRECT, FAILED = (
    CommandLookupTopicResponse.Connect,
    CommandLookupTopicResponse.Redirect,
    CommandLookupTopicResponse.Failed,
)


class _Authorization:
    enabled = False


class _Auth:
    role = None


class _Context:
    def __init__(self, member: Member) -> None:
        self.cluster = member.service
        self.lookup = Lookup(member.service._config, None, member.service)  # type: ignore[arg-type]
        self.authorization = _Authorization()


class _Connection:
    def __init__(self, member: Member) -> None:
        self.context = _Context(member)
        self.auth = _Auth()
        self.remote_address = "/127.0.0.1:5000"
        self.written: list[bytes] = []
        self.tasks: list[asyncio.Task[Any]] = []

    def write(self, frame: bytes) -> None:
        self.written.append(frame)

    def spawn(self, coroutine: Any, _name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self.tasks.append(task)
        return task


async def _lookup(member: Member, topic: str, authoritative: bool = False, listener: str = "") -> Any:
    connection = _Connection(member)
    request = CommandLookupTopic(
        topic=str(TopicName.parse(topic)), request_id=7, authoritative=authoritative, advertised_listener_name=listener
    )
    on_lookup(connection, request)  # type: ignore[arg-type]
    await asyncio.gather(*connection.tasks)
    (frame,) = connection.written
    (size,) = struct.unpack(">I", frame[4:8])
    command = BaseCommand.FromString(frame[8 : 8 + size])
    return command.lookupTopicResponse


def test_each_lookup_answer_carries_pulsars_type_url_and_flag() -> None:
    async def scenario() -> None:
        leader, b, c = await start(MemoryMetadataServer(), 3)
        # Non-leader, nobody owns it: Redirect to the leader, authoritative=false.
        answer = await _lookup(c, "my-topic")
        assert (answer.response, answer.brokerServiceUrl, answer.authoritative) == (
            REDIRECT,
            "pulsar://127.0.0.1:6650",
            False,
        )
        # The leader, least loaded, takes it: Connect to itself.
        answer = await _lookup(leader, "my-topic")
        assert (answer.response, answer.brokerServiceUrl, answer.authoritative) == (
            CONNECT,
            "pulsar://127.0.0.1:6650",
            True,
        )
        # Owned: Connect to the owner from any broker.
        answer = await _lookup(c, "my-topic")
        assert (answer.response, answer.brokerServiceUrl, answer.authoritative) == (
            CONNECT,
            "pulsar://127.0.0.1:6650",
            True,
        )
        await leader.settle()
        # The leader assigns the next bundle to the least loaded: Redirect there, authoritative=true.
        answer = await _lookup(leader, "t-3")
        assert (answer.response, answer.brokerServiceUrl, answer.authoritative) == (
            REDIRECT,
            "pulsar://127.0.0.1:6651",
            True,
        )
        # The authoritative request the client sends next: b takes the bundle.
        answer = await _lookup(b, "t-3", authoritative=True)
        assert (answer.response, answer.brokerServiceUrl) == (CONNECT, "pulsar://127.0.0.1:6651")
        # A bundle being unloaded: ServiceNotReady, and the client retries.
        bundle = await leader.service.bundles.bundle_of(TopicName.parse("my-topic"))
        leader.service._unloading.add(bundle)
        answer = await _lookup(leader, "my-topic")
        assert (answer.response, answer.error) == (FAILED, ServerError.ServiceNotReady)
        assert "being unloaded" in answer.message
        leader.service._unloading.discard(bundle)
        # A listener the owner does not have.
        answer = await _lookup(c, "my-topic", listener="nope")
        assert (answer.response, answer.error, answer.message) == (
            FAILED,
            ServerError.ServiceNotReady,
            "the broker do not have nope listener",
        )

    asyncio.run(scenario())
