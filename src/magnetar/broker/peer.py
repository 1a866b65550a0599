"""What a producer or a consumer reaches of the client connection it came on, and what the admin API
reads of it: a narrow face of `connection.ServerConnection`, so that producers and consumers never name
the connection's class (the connection is above them: it creates them and hands them its commands); and
the count of open connections the admin API reports.

Owns: nothing but the shape and the count. Must not touch: anything.
"""

from __future__ import annotations

from typing import Any, Protocol

from magnetar.broker.connection_auth import ConnectionAuthentication

__all__ = ["ClientConnection", "ConnectionCount"]


class ConnectionCount:
    """How many client connections the broker has open: Pulsar's `pulsar_active_connections`, and the
    connections created since start (`pulsar_connection_created_total_count`)."""

    __slots__ = ("active", "created")

    def __init__(self) -> None:
        self.active = 0
        self.created = 0


class ClientConnection(Protocol):
    # `/host:port`, the prefix of its log lines; the peer as the socket gave it (admin stats' address).
    remote_address: str
    peer: Any
    client_version: str
    auth: ConnectionAuthentication
    closed: bool

    def write(self, data: bytes) -> None: ...

    # MESSAGE frames: as `write`, but dropped if the broker may no longer serve by the time they would leave.
    def deliver(self, data: bytes) -> None: ...

    def is_alive(self) -> bool: ...

    async def check_liveness(self) -> bool: ...

    def forget_producer(self, producer_id: int) -> None: ...

    def publish_answered(self, count: int, size_bytes: int) -> None:
        """`count` SENDs of `size_bytes` entry bytes, counted against the connection's publish limits when
        read, got their receipt or their error."""
        ...

    def forget_consumer(self, consumer_id: int) -> None: ...
