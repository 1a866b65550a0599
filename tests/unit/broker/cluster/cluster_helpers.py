"""Brokers of a cluster as their cluster services alone, sharing one in-memory metadata store: no
listener, no storage; their loaded topics are a set the test fills."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from magnetar.broker.cluster.service import ClusterService
from magnetar.broker.config import load_config
from magnetar.broker.topic_name import TopicName
from magnetar.clock import LoopClock
from magnetar.metadata.memory import MemoryMetadataServer

# The name the lease's renewal is spawned with.
RENEWAL = "renewing the metadata session's lease"


class Topics:
    """The loaded topics of one broker (ServedTopics)."""

    def __init__(self) -> None:
        self.loaded: set[TopicName] = set()
        self.unloaded: list[TopicName] = []

    def loaded_topics(self) -> list[TopicName]:
        return sorted(self.loaded, key=str)

    async def unload_topic(self, name: TopicName) -> None:
        self.loaded.discard(name)
        self.unloaded.append(name)


class Member:
    def __init__(self, service: ClusterService, topics: Topics, tasks: list[asyncio.Task[Any]]) -> None:
        self.service = service
        self.topics = topics
        self._tasks = tasks

    async def settle(self) -> None:
        """Let notifications arrive and the tasks they started finish (the lease's renewal, which runs
        for as long as the broker does, is not among them)."""
        for _ in range(5):
            await asyncio.sleep(0)
            while self._tasks:
                await self._tasks.pop()


def member(server: MemoryMetadataServer, index: int, session_timeout_ms: int = 0, **settings: str) -> Member:
    config = load_config(
        overrides={"brokerServicePort": str(6650 + index), "webServicePort": str(8080 + index), **settings}
    )
    tasks: list[asyncio.Task[Any]] = []

    def spawn(coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        if name != RENEWAL:
            tasks.append(task)
        return task

    topics = Topics()
    clock = LoopClock(asyncio.get_running_loop())
    store = server.connect(session_timeout_ms)
    return Member(ClusterService(config, clock, store, topics, spawn), topics, tasks)


async def start(server: MemoryMetadataServer, count: int, **settings: str) -> list[Member]:
    members = [member(server, i, **settings) for i in range(count)]
    for each in members:
        await each.service.start()
    return members
