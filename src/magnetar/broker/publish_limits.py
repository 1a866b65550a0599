"""Back-pressure on publishers, as Pulsar's ServerCnx applies it: a connection stops reading its socket
while it has too many SENDs waiting for their receipts (`maxPendingPublishRequestsPerConnection`), and
every connection that publishes stops while the broker holds too many bytes of SENDs not yet answered
(`maxMessagePublishBufferSizeInMB`). Each resumes once its count is back to half its limit, as
Pulsar's `resumeReadsThreshold` and `resumeProducerReadMessagePublishBufferSize` are.

And the broker's publish rate (`brokerPublisherThrottlingMaxMessageRate`, `...MaxByteRate`), as Pulsar's
PIP-322 rate limiter does it: a token bucket per limit, filled at the rate up to one second's worth,
from which every SEND read takes its messages and bytes; a bucket in debt stops every publishing
connection until the debt is paid back, so the rate holds over any second whatever the reads' sizes.

Owns: `PublishBuffer` (the broker-wide byte count and the connections waiting on it), `PendingPublishes`
(one connection's count and its wait) and `PublishRate` (the token buckets). Must not touch: sockets (the
connection stops reading), storage.

While a connection does not read, the client's SENDs wait in its own queue (the Java client's
`maxPendingMessages`, blocking or failing as the producer is configured), its socket buffers and ours:
nothing is dropped. The receipts of what it already sent keep going out, and they are what resumes it.
"""

from __future__ import annotations

import asyncio

from magnetar.clock import Clock

__all__ = ["PendingPublishes", "PublishBuffer", "PublishRate"]


class PublishBuffer:
    """Bytes of SENDs the broker has read and not yet answered, across connections.

    Invariants: `size_bytes` is the sum of the bytes acquired and not released; a waiter is woken once
    the size is at or below `resume_bytes`, and only then."""

    __slots__ = ("limit_bytes", "resume_bytes", "size_bytes", "throttled_connections", "_waiters")

    def __init__(self, limit_mb: int) -> None:
        # 0 or less: no broker-wide limit.
        self.limit_bytes = limit_mb * 1024 * 1024
        self.resume_bytes = self.limit_bytes // 2
        self.size_bytes = 0
        # Connections that stopped reading now for their own limit: Pulsar's
        # pulsar_broker_throttled_connections; those stopped for this buffer are `throttled_global`.
        self.throttled_connections = 0
        self._waiters: list[asyncio.Future[None]] = []

    @property
    def full(self) -> bool:
        return 0 < self.limit_bytes < self.size_bytes

    @property
    def throttled_global(self) -> int:
        """Connections that stopped reading now for this buffer: Pulsar's
        pulsar_broker_throttled_connections_global_limit."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    def acquire(self, size_bytes: int) -> None:
        self.size_bytes += size_bytes

    def release(self, size_bytes: int) -> None:
        self.size_bytes -= size_bytes
        if self._waiters and self.size_bytes <= self.resume_bytes:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    async def room(self) -> None:
        """Return once the buffer is back at or below half its limit (at once if it is not full)."""
        if not self.full:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter


class PendingPublishes:
    """One connection's SENDs read and not yet answered: their count against the connection's limit and
    their bytes in the broker's buffer."""

    __slots__ = ("limit", "resume_at", "count", "_buffer", "_waiter")

    def __init__(self, limit: int, buffer: PublishBuffer) -> None:
        # 0 or less: no limit per connection.
        self.limit = limit
        self.resume_at = limit // 2
        self.count = 0
        self._buffer = buffer
        self._waiter: asyncio.Future[None] | None = None

    @property
    def over_limit(self) -> bool:
        return self.count >= self.limit > 0 or self._buffer.full

    def read(self, count: int, size_bytes: int) -> None:
        self.count += count
        self._buffer.acquire(size_bytes)

    def answered(self, count: int, size_bytes: int) -> None:
        self.count -= count
        self._buffer.release(size_bytes)
        waiter = self._waiter
        if waiter is not None and self.count <= self.resume_at and not waiter.done():
            waiter.set_result(None)

    async def room(self) -> None:
        """Return once the connection may read again: its own count back to half its limit, then the
        broker's buffer back to half of its."""
        if self.count >= self.limit > 0:
            self._waiter = asyncio.get_running_loop().create_future()
            self._buffer.throttled_connections += 1
            try:
                await self._waiter
            finally:
                self._waiter = None
                self._buffer.throttled_connections -= 1
        await self._buffer.room()


class _TokenBucket:
    """Tokens filled at `rate` a second up to one second's worth; taking more than there are leaves a debt."""

    __slots__ = ("rate", "tokens", "updated_s")

    def __init__(self, rate: int, now_s: float) -> None:
        self.rate = rate
        self.tokens = float(rate)
        self.updated_s = now_s

    def refill(self, now_s: float) -> None:
        self.tokens = min(self.rate, self.tokens + (now_s - self.updated_s) * self.rate)
        self.updated_s = now_s

    def debt_s(self) -> float:
        """Seconds until the bucket is out of debt (0 when it is not in debt)."""
        return -self.tokens / self.rate if self.tokens < 0 else 0.0


class PublishRate:
    """The broker-wide publish rate limits; 0 turns a limit off (Pulsar's default)."""

    __slots__ = ("_clock", "_buckets", "_messages", "_bytes")

    def __init__(self, clock: Clock, max_message_rate: int, max_byte_rate: int) -> None:
        self._clock = clock
        now = clock.monotonic()
        self._messages = _TokenBucket(max_message_rate, now) if max_message_rate > 0 else None
        self._bytes = _TokenBucket(max_byte_rate, now) if max_byte_rate > 0 else None
        self._buckets = tuple(b for b in (self._messages, self._bytes) if b is not None)

    @property
    def enabled(self) -> bool:
        return bool(self._buckets)

    def read(self, messages: int, size_bytes: int) -> None:
        """SENDs of `messages` messages and `size_bytes` bytes were read."""
        now = self._clock.monotonic()
        if self._messages is not None:
            self._messages.refill(now)
            self._messages.tokens -= messages
        if self._bytes is not None:
            self._bytes.refill(now)
            self._bytes.tokens -= size_bytes

    @property
    def over_limit(self) -> bool:
        return any(bucket.tokens < 0 for bucket in self._buckets)

    async def room(self) -> None:
        """Return once no bucket is in debt."""
        while True:
            now = self._clock.monotonic()
            for bucket in self._buckets:
                bucket.refill(now)
            wait_s = max((bucket.debt_s() for bucket in self._buckets), default=0.0)
            if wait_s <= 0:
                return
            await self._clock.sleep(wait_s)
