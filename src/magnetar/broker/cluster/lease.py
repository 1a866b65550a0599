"""The session's lease: how long this broker may still believe its metadata session, and the ownership
that lives with it, is alive.

Owns: the renewal (a read answered by the metadata servers every quarter of the session timeout), the
instant until which the session surely lives (the send time of the last answered request plus
LEASE_SHARE of the timeout the servers granted: a server expires a session only after hearing nothing
from its client for the whole timeout), and `valid()`. Must not touch: ownership, topics (the cluster
service stops serving when the lease lapses).

Why: a broker whose process was stopped (`kill -STOP`, a long pause) past the session timeout wakes with
its old state: its bundles belong to other brokers by then, but the SESSION_LOST event reaches it only
after its ZooKeeper client has reconnected, and meanwhile the event loop runs whatever was ready, a
dispatch to the consumers still connected among it. The lease is a local fact that needs no round trip:
checked before each dispatch, it stops a woken broker at once. Pulsar has no such check; its storage is
fenced (BookKeeper's recovery, the ledger list's version), its deliveries are not.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Coroutine
from typing import Any

from magnetar.clock import Clock
from magnetar.metadata.store import MetadataStore, MetadataStoreError

__all__ = ["LEASE_SHARE", "SessionLease"]

log = logging.getLogger("magnetar.broker.cluster")

# The share of the granted session timeout the lease covers past the send time of the last answered
# request: the rest is the margin for the two clocks' rates and the server's expiry tick.
LEASE_SHARE = 0.9
# Renewals per session timeout: under a slow but live store the lease is renewed about three times before
# it could lapse.
_RENEWALS = 4


class SessionLease:
    def __init__(
        self, store: MetadataStore, clock: Clock, spawn: Callable[[Coroutine[Any, Any, None], str], object]
    ) -> None:
        self._store = store
        self._clock = clock
        self._spawn = spawn
        # Until this monotonic instant the session lives; +inf for a store whose session never expires.
        self._until = math.inf if store.session_timeout_ms <= 0 else clock.monotonic()
        self._running = False

    def start(self) -> None:
        """Renew from now on (the session was just established: the first renewal starts the lease)."""
        if self._store.session_timeout_ms > 0 and not self._running:
            self._running = True
            self._spawn(self._renew(), "renewing the metadata session's lease")

    def stop(self) -> None:
        self._running = False

    def valid(self) -> bool:
        return self._clock.monotonic() < self._until

    def end(self) -> None:
        """The session is gone (SESSION_LOST): the lease with it, until a renewal on the new session."""
        if self._store.session_timeout_ms > 0:
            self._until = -math.inf

    async def renew(self) -> bool:
        """One renewal; whether the store answered."""
        sent = self._clock.monotonic()
        try:
            await self._store.exists("/")
        except MetadataStoreError as error:
            log.debug("The metadata session's lease was not renewed: %s", error)
            return False
        self._until = max(self._until, sent + LEASE_SHARE * self._store.session_timeout_ms / 1000)
        return True

    async def _renew(self) -> None:
        while self._running:
            await self.renew()
            await self._clock.sleep(self._store.session_timeout_ms / 1000 / _RENEWALS)
