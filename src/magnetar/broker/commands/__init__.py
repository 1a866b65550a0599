"""The binary protocol's commands, by role: a table from command type to a typed handler, one module per
role (session and authentication, lookup, producers, consumers, schemas).

Owns: `open_connection`, which makes a connection and installs every role's handlers in it. A command
type no role handles is refused by the connection (NotAllowedError with its request id).
Must not touch: sockets and framing (connection.py) or ordering (subscriptions' dispatchers).
"""

from __future__ import annotations

import asyncio

from magnetar.broker.commands import consumers, lookup, producers, schemas, session
from magnetar.broker.connection import ServerConnection
from magnetar.broker.context import BrokerContext

__all__ = ["open_connection"]


def open_connection(
    context: BrokerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> ServerConnection:
    """A connection of `context`'s broker on a client's stream, every command's handler installed."""
    connection = ServerConnection(context, reader, writer)
    for role in (session, lookup, producers, consumers, schemas):
        connection.handlers.update(role.handlers(connection))
    return connection
