"""Leader election among the brokers, as Pulsar's LeaderElectionService: whoever creates the ephemeral
`/loadbalance/leader` (Pulsar's LeaderBroker JSON: brokerId, serviceUrl) leads, and the others run the
election again when that node is deleted.

Owns: electing, knowing the current leader, resigning. Must not touch: what the leader decides
(the cluster service asks `is_leader`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from magnetar.metadata.store import BadVersionError, MetadataStore, NotFoundError, Notification, NotificationType

__all__ = ["LEADER_PATH", "LeaderBroker", "LeaderElection"]

LEADER_PATH = "/loadbalance/leader"

log = logging.getLogger("magnetar.broker.cluster")

LeaderBroker = dict[str, str]


class LeaderElection:
    def __init__(
        self,
        store: MetadataStore,
        self_data: LeaderBroker,
        spawn: Callable[[Coroutine[Any, Any, None], str], object],
    ) -> None:
        self._store = store
        self._self = self_data
        self._spawn = spawn
        self.leader: LeaderBroker | None = None
        self.is_leader = False
        self._running = False
        self._version: int | None = None
        store.register_listener(self._on_notification)

    async def start(self) -> None:
        self._running = True
        await self.elect()

    async def elect(self) -> None:
        """Try to become the leader; learn who is otherwise."""
        if not self._running:
            return
        try:
            stat = await self._store.put(LEADER_PATH, json.dumps(self._self).encode(), -1, ephemeral=True)
        except BadVersionError:
            found = await self._store.get(LEADER_PATH)
            if found is None:
                await self.elect()
                return
            self.leader = json.loads(found.value)
            self.is_leader = found.stat.created_by_self
            if self.is_leader:
                self._version = found.stat.version
            return
        self._version = stat.version
        self.leader = dict(self._self)
        self.is_leader = True
        log.info("This broker is now the leader: %s", self._self["serviceUrl"])

    def _on_notification(self, notification: Notification) -> None:
        if notification.path == LEADER_PATH and notification.type is NotificationType.DELETED and self._running:
            self.leader = None
            self.is_leader = False
            self._spawn(self.elect(), "leader election")

    def forget(self) -> None:
        """The session was lost: its leader node is gone with it."""
        self.is_leader = False
        self.leader = None
        self._version = None

    async def stop(self) -> None:
        """Resign: the others elect a new leader."""
        self._running = False
        if self.is_leader and self._version is not None:
            try:
                await self._store.delete(LEADER_PATH, self._version)
            except (NotFoundError, BadVersionError):
                pass
        self.forget()
