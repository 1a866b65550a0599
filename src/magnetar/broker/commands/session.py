"""The session's commands: CONNECT (after authentication, connection_auth.py), keep-alive PING and
PONG, and AUTH_RESPONSE to a credentials refresh.

Owns: what CONNECTED tells the client (server version, protocol version, maxMessageSize).
Must not touch: who the client is (connection_auth.py and auth.py decide it).
"""

from __future__ import annotations

import logging

from magnetar.broker.connection import CommandHandler, ServerConnection
from magnetar.broker.connection_auth import SERVER_VERSION
from magnetar.protocol import commands
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandAuthResponse, CommandConnect

__all__ = ["handlers"]

log = logging.getLogger("magnetar.broker.connection")


def handlers(connection: ServerConnection) -> dict[int, CommandHandler]:
    return {
        BaseCommand.CONNECT: lambda command: on_connect(connection, command.connect),
        BaseCommand.PING: lambda _command: connection.write(commands.pong()),
        BaseCommand.PONG: lambda _command: connection.liveness_answered(True),
        BaseCommand.AUTH_RESPONSE: lambda command: on_auth_response(connection, command.authResponse),
    }


def on_connect(connection: ServerConnection, request: CommandConnect) -> None:
    connection.client_version = request.client_version
    log.info(
        "[%s] Connected with clientVersion=%s, protocolVersion=%d",
        connection.remote_address,
        connection.client_version,
        connection.protocol.protocol_version,
    )
    max_message_size = connection.context.config["maxMessageSize"]
    connection.write(commands.connected(SERVER_VERSION, connection.protocol.protocol_version, max_message_size))


def on_auth_response(connection: ServerConnection, request: CommandAuthResponse) -> None:
    connection.spawn(connection.auth.on_auth_response(request), "auth refresh")
