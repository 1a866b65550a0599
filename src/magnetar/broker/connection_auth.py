"""One connection's authentication: its CONNECT checked before anything else, and its credentials
refreshed on a live connection when they expire (AUTH_CHALLENGE / AUTH_RESPONSE), as ServerCnx does.

Owns: the role of the connection's client, the handshake (CONNECT authenticated, or ERROR
AuthenticationError "Unable to authenticate" and the connection closed), and the refresh check every
`authenticationRefreshCheckSeconds`: an expired credential is challenged if the client supports auth
refresh (feature flag), and the connection closed if it does not, or if the last challenge went
unanswered, or the answer fails or names another role.
Must not touch: the other commands of the connection (connection.py) or what a role may do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.auth import Authenticated, AuthenticationError, AuthenticationService, expired
from magnetar.protocol import commands
from magnetar.protocol.framing import encode_frame
from magnetar.protocol.pulsar_api_pb2 import BaseCommand

if TYPE_CHECKING:
    import ssl

    from magnetar.broker.config import BrokerConfig
    from magnetar.clock import Clock
    from magnetar.protocol.connection import ServerProtocol

__all__ = ["SERVER_VERSION", "AuthenticatedConnection", "ConnectionAuthentication"]

# What CONNECTED and an auth challenge name as the server's version.
SERVER_VERSION = "magnetar-0.1.0"


class AuthenticatedConnection(Protocol):
    """What authentication reaches of its connection (connection.ServerConnection)."""

    remote_address: str
    close_reason: str | None
    ssl_object: ssl.SSLObject | None
    protocol: ServerProtocol

    @property
    def closed(self) -> bool: ...

    def write(self, data: bytes) -> None: ...

    def abort(self) -> None: ...

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]: ...


log = logging.getLogger("magnetar.broker.connection")

# What ServerCnx sends as the challenge's data: "refresh your credentials" (AuthData.REFRESH_AUTH_DATA).
_REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
# The message of the ERROR a refused CONNECT gets: the reason stays in the broker's log, as in Pulsar.
_REFUSED = "Unable to authenticate"


def _auth_challenge(method: str, protocol_version: int, server_version: str) -> bytes:
    command = BaseCommand(type=BaseCommand.AUTH_CHALLENGE)
    challenge = command.authChallenge
    challenge.server_version = server_version
    challenge.protocol_version = protocol_version
    challenge.challenge.auth_method_name = method
    challenge.challenge.auth_data = _REFRESH_AUTH_DATA
    return encode_frame(command)


class ConnectionAuthentication:
    def __init__(
        self,
        connection: AuthenticatedConnection,
        authentication: AuthenticationService,
        config: BrokerConfig,
        clock: Clock,
    ) -> None:
        self._connection = connection
        self._clock = clock
        self._service = authentication
        self._refresh_check_s = float(config["authenticationRefreshCheckSeconds"])
        self.pending = authentication.enabled  # True until CONNECT is authenticated
        self.authenticated: Authenticated | None = None
        self._method = ""
        self._supports_refresh = False
        self._challenged = False

    @property
    def role(self) -> str | None:
        return None if self.authenticated is None else self.authenticated.role

    async def handshake(self, frames: list[Any]) -> list[Any]:
        """Authenticate the CONNECT that leads `frames` (the protocol makes sure it is first); the frames
        go on to be handled as usual when it passes, none when it fails (the connection is closed)."""
        if not frames:
            return frames
        connect = frames[0][0].connect
        connection = self._connection
        self._method = connect.auth_method_name or "none"
        self._supports_refresh = connect.HasField("feature_flags") and connect.feature_flags.supports_auth_refresh
        try:
            # Off the loop: an htpasswd check (bcrypt, apr1) takes milliseconds to hundreds of them.
            self.authenticated = await asyncio.to_thread(
                self._service.authenticate, self._method, connect.auth_data, connection.ssl_object
            )
        except AuthenticationError as error:
            self._refuse(f"authentication with method {self._method} failed: {error}")
            return []
        self.pending = False
        log.info("[%s] Authenticated with role %s (method %s)", connection.remote_address, self.role, self._method)
        if self.authenticated.expires_at is not None:
            connection.spawn(self._check_expiry(), "credentials expiry check")
        return frames

    def _refuse(self, reason: str) -> None:
        connection = self._connection
        log.warning("[%s] Unable to authenticate: %s", connection.remote_address, reason)
        connection.close_reason = f"unable to authenticate: {reason}"
        connection.write(commands.error(-1, "AuthenticationError", _REFUSED))
        connection.abort()

    async def _check_expiry(self) -> None:
        connection = self._connection
        while not connection.closed:
            await self._clock.sleep(self._refresh_check_s)
            if not expired(self.authenticated, self._clock.time_ms() / 1000):
                continue
            if not self._supports_refresh:
                self._close("the client's credentials expired and it does not support auth refresh")
                return
            if self._challenged:
                self._close("no valid answer to the auth refresh challenge")
                return
            log.info(
                "[%s] Credentials of role %s expired: challenging the client", connection.remote_address, self.role
            )
            self._challenged = True
            connection.write(_auth_challenge(self._method, connection.protocol.protocol_version, SERVER_VERSION))

    async def on_auth_response(self, response: Any) -> None:
        """AUTH_RESPONSE to our challenge: the new credentials must pass and name the same role."""
        connection = self._connection
        method = response.response.auth_method_name or self._method
        try:
            refreshed = await asyncio.to_thread(
                self._service.authenticate, method, response.response.auth_data, connection.ssl_object
            )
        except AuthenticationError as error:
            self._refuse(f"refreshed credentials refused: {error}")
            return
        if refreshed.role != self.role:
            self._close(f"the role cannot change on an auth refresh: {self.role} became {refreshed.role}")
            return
        self.authenticated = refreshed
        self._challenged = False
        log.info("[%s] Refreshed the credentials of role %s", connection.remote_address, self.role)

    def _close(self, reason: str) -> None:
        connection = self._connection
        log.warning("[%s] Closing connection: %s", connection.remote_address, reason)
        connection.close_reason = reason
        connection.abort()
