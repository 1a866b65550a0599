"""The broker's side of one Pulsar connection as a sans-IO state machine, in the manner of h11's Connection.

Owns: the handshake state (CONNECT must come first and only once), the protocol version both sides will
speak, and the rule that a client never sends commands only a broker sends. Bytes go in through
`receive_data`; frames come out; every violation raises the one `ProtocolError`, after which the shell
closes this connection only. Must not touch: sockets, asyncio, clocks, topics, producers or consumers: what
a well-formed request means is the broker's business; builders for the replies live in commands.py.
"""

from __future__ import annotations

import enum

from magnetar.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MESSAGE_SIZE_FRAME_PADDING,
    Frame,
    FrameDecoder,
    ProtocolError,
    SendFrame,
)
from magnetar.protocol.pulsar_api_pb2 import BaseCommand

__all__ = ["PROTOCOL_VERSION_MAX", "ConnectionState", "ServerProtocol"]

# The newest protocol version whose commands magnetar understands; pulsar-client 3.13 (C++ 4.2.0) sends
# it, and later clients may send 21 (pulsar-client-cpp's proto after 4.2.0 has v21), which is answered with
# min(client, this), as Pulsar's `Commands.newConnectedCommand` does.
PROTOCOL_VERSION_MAX = 20

# Commands only a broker sends. A client that sends one has lost track of the protocol; the C++ client's
# own dispatcher treats the mirror case the same way (`ClientConnection::handleIncomingCommand`: an unknown
# command closes the connection).
_BROKER_ONLY_TYPES = frozenset(
    {
        BaseCommand.CONNECTED,
        BaseCommand.SEND_RECEIPT,
        BaseCommand.SEND_ERROR,
        BaseCommand.MESSAGE,
        BaseCommand.SUCCESS,
        BaseCommand.ERROR,
        BaseCommand.PRODUCER_SUCCESS,
        BaseCommand.PARTITIONED_METADATA_RESPONSE,
        BaseCommand.LOOKUP_RESPONSE,
        BaseCommand.CONSUMER_STATS_RESPONSE,
        BaseCommand.REACHED_END_OF_TOPIC,
        BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE,
        BaseCommand.ACTIVE_CONSUMER_CHANGE,
        BaseCommand.GET_TOPICS_OF_NAMESPACE_RESPONSE,
        BaseCommand.GET_SCHEMA_RESPONSE,
        BaseCommand.AUTH_CHALLENGE,
        BaseCommand.ACK_RESPONSE,
        BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE,
        BaseCommand.NEW_TXN_RESPONSE,
        BaseCommand.ADD_PARTITION_TO_TXN_RESPONSE,
        BaseCommand.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
        BaseCommand.END_TXN_RESPONSE,
        BaseCommand.END_TXN_ON_PARTITION_RESPONSE,
        BaseCommand.END_TXN_ON_SUBSCRIPTION_RESPONSE,
        BaseCommand.TC_CLIENT_CONNECT_RESPONSE,
        BaseCommand.WATCH_TOPIC_LIST_SUCCESS,
        BaseCommand.WATCH_TOPIC_UPDATE,
        BaseCommand.TOPIC_MIGRATED,
    }
)


_CONNECT = BaseCommand.CONNECT


class ConnectionState(enum.Enum):
    AWAITING_CONNECT = "awaiting_connect"
    CONNECTED = "connected"
    FAILED = "failed"


class ServerProtocol:
    """One client connection, seen from the broker.

    `receive_data(bytes)` returns the frames the bytes complete. The first frame must be CONNECT; it moves
    the state to CONNECTED and fixes `protocol_version`, which the broker echoes in its CONNECTED reply.
    Any violation raises ProtocolError and leaves the state FAILED, where all further input is refused.
    """

    __slots__ = ("_decoder", "client_version", "client_protocol_version", "max_message_size", "state")

    def __init__(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        self.max_message_size = max_message_size
        self.state = ConnectionState.AWAITING_CONNECT
        self.client_version: str | None = None
        self.client_protocol_version = 0
        self._decoder = FrameDecoder(max_message_size + MESSAGE_SIZE_FRAME_PADDING)

    @property
    def protocol_version(self) -> int:
        """The version both sides speak: min(client's, PROTOCOL_VERSION_MAX), as Pulsar's broker answers."""
        return min(self.client_protocol_version, PROTOCOL_VERSION_MAX)

    def receive_data(self, data: bytes) -> list[Frame | SendFrame]:
        """The frames `data` completes, in order, SENDs as `SendFrame`s; a partial frame waits for the next
        call.

        Raises ProtocolError for an oversized, truncated-size or unparsable frame, a first frame other than
        CONNECT, a second CONNECT, or a command only a broker sends.
        """
        if self.state is ConnectionState.FAILED:
            raise ProtocolError("connection already failed")
        try:
            frames = self._decoder.receive_frames_and_sends(data)
            if self.state is ConnectionState.CONNECTED:
                # The steady state, once per frame: only CONNECT and broker-only commands are refused.
                for frame in frames:
                    if not isinstance(frame, SendFrame):
                        command_type = frame.command.type
                        if command_type == _CONNECT or command_type in _BROKER_ONLY_TYPES:
                            self._check(frame.command)
            else:
                for frame in frames:
                    if isinstance(frame, SendFrame):
                        if self.state is ConnectionState.AWAITING_CONNECT:
                            raise ProtocolError("expected CONNECT as the first command, got SEND")
                    else:
                        self._check(frame.command)
        except ProtocolError:
            self.state = ConnectionState.FAILED
            raise
        return frames

    def _check(self, command: BaseCommand) -> None:
        command_type = command.type
        if self.state is ConnectionState.AWAITING_CONNECT:
            if command_type != BaseCommand.CONNECT:
                raise ProtocolError(f"expected CONNECT as the first command, got {BaseCommand.Type.Name(command_type)}")
            connect = command.connect
            self.client_version = connect.client_version
            self.client_protocol_version = connect.protocol_version
            self.state = ConnectionState.CONNECTED
        elif command_type == BaseCommand.CONNECT:
            raise ProtocolError("CONNECT on a connection that is already connected")
        elif command_type in _BROKER_ONLY_TYPES:
            raise ProtocolError(f"a client does not send {BaseCommand.Type.Name(command_type)}")
