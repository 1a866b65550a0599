"""Brokers of a cluster as their cluster services alone, sharing one in-memory metadata store: no
listener, no storage; their loaded topics are a set the test fills, with counters it sets, their CPU time
a number it sets, and the leader's requests to the other owners go straight to their services. On the
simulator's virtual loop (`run_virtual`), the load manager's minutes pass in no time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from magnetar.broker.cluster.brokers import LocalBrokerData
from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.cluster.modular_load_manager import REPORTING, SHEDDING
from magnetar.broker.cluster.service import ClusterService
from magnetar.broker.config import load_config
from magnetar.broker.figures import TopicCounters
from magnetar.broker.topic_name import TopicName
from magnetar.clock import LoopClock
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.sim.shell.loop import VirtualClockLoop

# The name the lease's renewal is spawned with.
RENEWAL = "renewing the metadata session's lease"
# Tasks that run for as long as the broker does: `settle` does not wait for them.
_FOREVER = {RENEWAL, REPORTING, SHEDDING}
# The wall clock's epoch milliseconds at the loop's time 0 (2026-01-01).
EPOCH_MS = 1_767_225_600_000
IDLE = TopicCounters(0, 0, 0, 0, 0, 0)


class Topics:
    """The loaded topics of one broker (ServedTopics), with the counters the test sets, or steady rates
    they grow by (`flow`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.loaded: set[TopicName] = set()
        self.unloaded: list[TopicName] = []
        self.counters: dict[TopicName, TopicCounters] = {}
        self._flows: dict[TopicName, tuple[float, TopicCounters]] = {}

    def flow(self, name: TopicName, per_s: TopicCounters) -> None:
        """From now on the topic's counters grow by `per_s` each second (its producers and consumers: as
        `per_s` names them)."""
        self.counters[name] = self._counters(name)
        self._flows[name] = (self._loop.time(), per_s)

    def _counters(self, name: TopicName) -> TopicCounters:
        base = self.counters.get(name, IDLE)
        since_s, per_s = self._flows.get(name, (0.0, IDLE))
        elapsed_s = self._loop.time() - since_s
        return TopicCounters(
            base.msg_in + int(per_s.msg_in * elapsed_s),
            base.bytes_in + int(per_s.bytes_in * elapsed_s),
            base.msg_out + int(per_s.msg_out * elapsed_s),
            base.bytes_out + int(per_s.bytes_out * elapsed_s),
            per_s.producers if name in self._flows else base.producers,
            per_s.consumers if name in self._flows else base.consumers,
        )

    def loaded_topics(self) -> list[TopicName]:
        return sorted(self.loaded, key=str)

    async def unload_topic(self, name: TopicName) -> None:
        self.loaded.discard(name)
        self.unloaded.append(name)

    def topic_counters(self) -> dict[TopicName, TopicCounters]:
        return {name: self._counters(name) for name in self.loaded}


class CpuTime:
    """The process's CPU time, in seconds: growing by `share` of the loop's time, the share the test
    sets (`use`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._since_s = loop.time()
        self._seconds = 0.0
        self._share = 0.0

    def use(self, share: float) -> None:
        """From now on, `share` of one core (0.9: 90%)."""
        self._seconds, self._since_s, self._share = self(), self._loop.time(), share

    def __call__(self) -> float:
        return self._seconds + self._share * (self._loop.time() - self._since_s)


class Owners:
    """The other brokers' admin API (OwnerRequests), reaching their services in this process."""

    def __init__(self) -> None:
        self.by_url: dict[str, ClusterService] = {}
        self.requests: list[tuple[str, str, Bundle]] = []

    async def unload(self, owner: LocalBrokerData, bundle: Bundle) -> None:
        self.requests.append(("unload", owner.web_service_url, bundle))
        await self.by_url[owner.web_service_url].unload_bundle(bundle)

    async def split(self, owner: LocalBrokerData, bundle: Bundle, unload: bool) -> None:
        self.requests.append(("split", owner.web_service_url, bundle))
        await self.by_url[owner.web_service_url].split_bundle(bundle, unload)


class Member:
    def __init__(self, service: ClusterService, topics: Topics, cpu: CpuTime, tasks: list[asyncio.Task[Any]]) -> None:
        self.service = service
        self.topics = topics
        self.cpu = cpu
        self._tasks = tasks

    async def settle(self) -> None:
        """Let notifications arrive and the tasks they started finish (the lease's renewal and the load
        manager's loops, which run for as long as the broker does, are not among them)."""
        for _ in range(5):
            await asyncio.sleep(0)
            while self._tasks:
                await self._tasks.pop()


def member(
    server: MemoryMetadataServer,
    index: int,
    session_timeout_ms: int = 0,
    owners: Owners | None = None,
    **settings: str,
) -> Member:
    config = load_config(
        overrides={"brokerServicePort": str(6650 + index), "webServicePort": str(8080 + index), **settings}
    )
    tasks: list[asyncio.Task[Any]] = []

    def spawn(coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        if name not in _FOREVER:
            tasks.append(task)
        return task

    loop = asyncio.get_running_loop()
    topics = Topics(loop)
    cpu = CpuTime(loop)
    clock = LoopClock(loop, lambda: EPOCH_MS + int(loop.time() * 1000))
    store = server.connect(session_timeout_ms)
    service = ClusterService(config, clock, store, topics, spawn, cpu_time_s=cpu, owner_requests=owners)
    if owners is not None:
        owners.by_url[config.advertised_web_url] = service
    return Member(service, topics, cpu, tasks)


async def start(
    server: MemoryMetadataServer, count: int, each: dict[int, dict[str, str]] | None = None, **settings: str
) -> list[Member]:
    """`count` brokers with `settings`, broker i with `each[i]` too; the first one started leads."""
    owners = Owners()
    each = each or {}
    members = [member(server, i, owners=owners, **settings, **each.get(i, {})) for i in range(count)]
    for each in members:
        await each.service.start()
    return members


def run_virtual(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `scenario` on the simulator's virtual loop: a sleep of minutes passes at once."""
    loop = VirtualClockLoop()
    try:
        loop.run_until_complete(scenario())
    finally:
        loop.shut_down()
