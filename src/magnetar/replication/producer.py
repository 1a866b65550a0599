"""The producer a replicator opens on a remote cluster: one connection, one producer, receipts in send order.

Owns: one TCP connection to a remote Pulsar or magnetar cluster for one topic (TLS for a `pulsar+ssl://`
URL), CONNECT with the credentials given (`ClientSecurity`, as remote_cluster.py decides them), the answer
to an AUTH_CHALLENGE (the credentials read again: a token file rewritten since is what goes), LOOKUP
(following one redirect), PRODUCER under the replicator's name (`pulsar.repl.<local>--><remote>`, Pulsar's
`GeoPersistentReplicator.getProducerName`), SENDs of stored entries as they are (one entry, one SEND, a
batch with its message count: the replicator's producer never batches and never times out), their receipts,
handed to the replicator a socket read at a time, PING/PONG, and forgetting every unanswered send when the
connection goes.
Must not touch: the local topic, its cursor or any storage file (the replicator reads the entries and moves
its cursor on the positions handed back here), the SEND frames (built by
`protocol.forwarding.forwarded_sends`), reconnection and its backoff (the replicator's: it starts a new
`RemoteProducer`), or the broker's objects: the remote is known only through the bytes exchanged.

Receipts are matched by their place in the queue, not by sequence id. The entries come from many original
producers and keep their sequence ids, which therefore repeat and go backwards; the Java client's
sequence-based matching would drop or misattribute receipts there. A broker answers a producer's SENDs in
the order they arrived, so the n-th receipt answers the n-th unanswered SEND, and one whose sequence id is
not the head's means the two sides lost track of each other: the connection closes. Nothing is made per
send but its frame and a small tuple; a receipt is read byte by byte rather than through protobuf
(`FrameDecoder.receive_frames_and_receipts`), and nothing of it is kept but its (ledger id, entry id): a
replicator forwards tens of thousands of entries a second.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple, NoReturn
from urllib.parse import urlsplit

from magnetar.client.security import ClientSecurity
from magnetar.clock import Clock, system_time_ms
from magnetar.protocol.commands import pong, signed_id
from magnetar.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    MESSAGE_SIZE_FRAME_PADDING,
    Frame,
    FrameDecoder,
    ProtocolError,
    SendReceipt,
    encode_frame,
)
from magnetar.protocol.pulsar_api_pb2 import (
    BaseCommand,
    CommandCloseProducer,
    CommandConnect,
    CommandLookupTopic,
    CommandLookupTopicResponse,
    CommandProducer,
    CommandSendError,
    ProducerAccessMode,
    ServerError,
)

__all__ = ["CLIENT_VERSION", "PRODUCER_ID", "RemoteError", "RemoteProducer", "RemoteUnavailable"]

CLIENT_VERSION = "magnetar-replicator"
PROTOCOL_VERSION = 20
# Pulsar's default broker ports, for a service URL that names none.
DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651
# One producer per connection, so its id is fixed: the SENDs given to `send_frames` carry it.
PRODUCER_ID = 0
# CONNECT has no request id; its answer (CONNECTED, or ERROR with Java's -1) is filed under -1.
_CONNECT_REQUEST_ID = -1
_TWO_TO_64 = 1 << 64
_I64_MAX = (1 << 63) - 1
_SEND_RECEIPT = BaseCommand.SEND_RECEIPT
# The service URL's lookup answer, then the answer of the broker it redirects to: a remote that redirects
# again is moving the topic, and the replicator's backoff is the better place to wait for that.
_LOOKUPS_MAX = 2
# How long close() waits for the remote to confirm CLOSE_PRODUCER before dropping the connection anyway:
# the remote forgets the producer with the connection, so the answer is a courtesy.
CLOSE_TIMEOUT_S = 1.0
# Bytes per socket read: the remote only sends small commands (receipts of ~30 bytes).
_READ_BYTES = 64 * 1024
# Unsent bytes the socket may hold before `write_budget` says to wait (`drain()`): a queue of 1,000
# entries of 100 B is ~170 kB of SENDs, so only large entries meet it.
WRITE_BUFFER_MAX = 1024 * 1024

# Which BaseCommand field of an answer carries the request id it answers.
_ANSWER_FIELDS = {
    BaseCommand.SUCCESS: "success",
    BaseCommand.ERROR: "error",
    BaseCommand.PRODUCER_SUCCESS: "producer_success",
    BaseCommand.LOOKUP_RESPONSE: "lookupTopicResponse",
}


class RemoteError(Exception):
    """The remote refused a request or a send; `code` is Pulsar's ServerError name (ProducerBusy,
    TopicNotFound, ...), or UnknownError for a lookup answer this producer cannot follow."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class RemoteUnavailable(Exception):
    """The remote cannot be reached, did not answer in time, or the connection to it is gone (or was
    closed). A send that fails with it may or may not be stored on the remote."""


class _Send(NamedTuple):
    sequence_id: int  # as the wire carries it (uint64)
    sent_at_ms: int


# _Send(...) without the Python-level __new__ NamedTuple generates: one per replicated entry, in the
# catch-up bench/replication_catchup.py measures (commit 4231b75, 17.6 -> 12.8 µs per entry with the
# rest of that change).
_new_send = partial(tuple.__new__, _Send)


def _address(service_url: str) -> tuple[str, int, bool]:
    """(host, port, TLS?) of a `pulsar://host[:port]` or `pulsar+ssl://host[:port]` URL; raises ValueError
    for anything else."""
    url = urlsplit(service_url)
    if url.scheme not in ("pulsar", "pulsar+ssl") or not url.hostname or "," in url.netloc:
        raise ValueError(
            f"a remote service URL looks like pulsar://host:port or pulsar+ssl://host:port, not {service_url!r}"
        )
    tls = url.scheme == "pulsar+ssl"
    return url.hostname, url.port or (DEFAULT_TLS_PORT if tls else DEFAULT_PORT), tls


class RemoteProducer:
    """A client producer on one remote cluster, started once: `start()`, then `send_frames()` while
    `room` allows (and `drain()` when `write_budget` runs out), `close()`. After a lost connection it stays
    disconnected; the replicator makes a new one.

    Receipts go to `on_receipts`, called once per socket read that brought any, with the remote's
    (ledger id, entry id) of each SEND answered, in send order: (-1, -1) when the remote dropped it as a
    duplicate. A SEND the remote refuses (SEND_ERROR) ends the connection: the SENDs after it may
    already be stored, and a replicator resends from its cursor after reconnecting. What was unanswered
    when the connection went is never answered; `failure` says why it went.

    Invariants: `_pending` holds the unanswered SENDs in send order, at most `max_pending` of them, and
    its head is what the next SEND_RECEIPT answers; once disconnected nothing is pending, no request
    waits, and nothing more is written.
    """

    def __init__(
        self,
        service_url: str,
        topic: str,
        producer_name: str,
        max_pending: int = 1000,
        connect_timeout_s: float = 10.0,
        on_receipts: Callable[[list[tuple[int, int]]], None] | None = None,
        on_disconnect: Callable[[RemoteUnavailable], None] | None = None,
        security: ClientSecurity | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`clock` stamps the sends (their age in the replicator's stats) and the connection: the broker's
        when a replicator runs it, else the system's wall clock."""
        host, port, self._tls = _address(service_url)
        self._time_ms = clock.time_ms if clock is not None else system_time_ms
        self._service_address = (host, port)
        self.service_url = service_url
        # TLS trust and credentials (none by default); the credentials are read at each CONNECT and challenge.
        self.security = security or ClientSecurity()
        self._ssl_context: ssl.SSLContext | None = None
        self.topic = topic
        self.producer_name = producer_name
        # Pulsar's replicationProducerQueueSize: what a slow remote may hold unanswered before the
        # replicator stops reading.
        self.max_pending = max_pending
        self.connect_timeout_s = connect_timeout_s
        # Must not raise; runs on the connection's reading task.
        self.on_receipts = on_receipts
        # Called once when an established producer loses its connection (not after close(), and not
        # when start() fails: that raises). It must not raise.
        self.on_disconnect = on_disconnect
        self.connected_since_ms: int | None = None
        self._host, self._port = self._service_address
        self._proxy_to_broker_url: str | None = None
        self._max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._decoder = FrameDecoder()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._request_ids = itertools.count()
        self._requests: dict[int, asyncio.Future[BaseCommand]] = {}
        self._pending: deque[_Send] = deque()
        self._started = False
        self._failure: str | None = None

    # --------------------------------------------------------------------------------- stats

    @property
    def connected(self) -> bool:
        """The producer exists on the remote and its connection is up."""
        return self.connected_since_ms is not None

    @property
    def address(self) -> str:
        """host:port of the broker this producer talks to (after a lookup, the topic's owner)."""
        return f"{self._host}:{self._port}"

    @property
    def channel(self) -> str | None:
        """The connection as Pulsar's stats name it (Netty's channel: `[id: 0x…, L:/local - R:host/ip:port]`),
        None while there is none."""
        writer = self._writer
        if writer is None:
            return None
        local, peer = writer.get_extra_info("sockname"), writer.get_extra_info("peername")
        if not local or not peer:
            return None
        return f"[id: 0x{id(writer) & 0xFFFFFFFF:08x}, L:/{local[0]}:{local[1]} - R:{self._host}/{peer[0]}:{peer[1]}]"

    @property
    def failure(self) -> str | None:
        """Why the connection went (None while it is up or not started yet)."""
        return self._failure

    @property
    def pending(self) -> int:
        """SENDs the remote has not answered yet."""
        return len(self._pending)

    @property
    def oldest_pending_since_ms(self) -> int | None:
        """When the oldest unanswered SEND went out (ms since the epoch): Pulsar's replicationDelayInSeconds
        is its age."""
        return self._pending[0].sent_at_ms if self._pending else None

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect, look the topic up and create the producer, all within `connect_timeout_s`.

        Raises RemoteUnavailable (unreachable, connection lost, no answer in time) or RemoteError (the
        remote refused the lookup or the producer: TopicNotFound, ProducerBusy, ...); either way the
        connection is closed and this producer is done.
        """
        if self._started:
            raise RuntimeError("a RemoteProducer starts once; make a new one to connect again")
        self._started = True
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await self._connect(*self._service_address)
                await self._lookup()
                await self._create_producer()
        except TimeoutError:
            message = f"no answer from {self.address} in {self.connect_timeout_s:g} s"
            self._disconnect(message, notify=False)
            raise RemoteUnavailable(message) from None
        except BaseException as error:  # refused, lost, or cancelled: the connection goes either way
            self._disconnect(str(error) or type(error).__name__, notify=False)
            raise

    async def close(self) -> None:
        """CLOSE_PRODUCER (waiting up to CLOSE_TIMEOUT_S for the answer), then close the connection;
        unanswered sends stay unanswered."""
        if self._failure is not None:
            return
        if self.connected:
            request_id = next(self._request_ids)
            close = CommandCloseProducer(producer_id=PRODUCER_ID, request_id=request_id)
            try:
                async with asyncio.timeout(CLOSE_TIMEOUT_S):
                    await self._request(BaseCommand(type=BaseCommand.CLOSE_PRODUCER, close_producer=close), request_id)
            except (TimeoutError, RemoteError, RemoteUnavailable):
                pass  # the connection closes next, and the remote forgets the producer with it
        self._disconnect("closed", notify=False)

    # -------------------------------------------------------------------------------- sending

    @property
    def room(self) -> int:
        """How many more SENDs may go before `max_pending` are unanswered (0 when disconnected)."""
        return self.max_pending - len(self._pending) if self.connected_since_ms is not None else 0

    @property
    def write_budget(self) -> int:
        """Bytes that may still be written before the socket's unsent bytes reach `WRITE_BUFFER_MAX`: what is
        written and unsent stays bounded even for large entries, while the queue bounds only their count."""
        writer = self._writer
        if writer is None or self.connected_since_ms is None:
            return 0
        return WRITE_BUFFER_MAX - writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        """Return once the socket has taken what was written down to its low-water mark. Raises
        RemoteUnavailable when the connection is gone."""
        self._check_connected()
        assert self._writer is not None
        try:
            await self._writer.drain()
        except OSError as error:
            raise RemoteUnavailable(f"connection to {self.address} lost: {error}") from error
        self._check_connected()

    @property
    def max_frame_bytes(self) -> int:
        """The largest frame the remote accepts (its max message size, plus the room Pulsar's and magnetar's
        decoders allow for the command): a larger one would close the connection."""
        return self._max_message_size + MESSAGE_SIZE_FRAME_PADDING

    def send_frames(self, frames: list[bytes], sequence_ids: list[int]) -> None:
        """SEND stored entries: `frames` are their SEND frames of producer `PRODUCER_ID` (built by
        `protocol.forwarding.forwarded_sends`, each at most `max_frame_bytes`), `sequence_ids` the sequence id
        each carries, as the wire does (uint64). Their receipts come through `on_receipts`, in this order.

        They are written at once, in one write. Raises RemoteUnavailable when the connection is gone,
        RuntimeError when they would make more than `max_pending` sends unanswered (send no more than `room`).
        """
        if self.connected_since_ms is None:
            raise RemoteUnavailable(self._failure or "not started")
        pending = self._pending
        if len(pending) + len(frames) > self.max_pending:
            raise RuntimeError(
                f"{len(frames)} more SENDs would leave over {self.max_pending} unanswered: send no more than room"
            )
        assert self._writer is not None
        self._writer.write(b"".join(frames))
        pending.extend(map(_new_send, zip(sequence_ids, itertools.repeat(self._time_ms()))))

    # ------------------------------------------------------------------------------ handshake

    async def _connect(self, host: str, port: int, proxy_to_broker_url: str | None = None) -> None:
        """Open a connection and CONNECT, through the broker at host:port to `proxy_to_broker_url` if given
        (a Pulsar proxy)."""
        self._host, self._port, self._proxy_to_broker_url = host, port, proxy_to_broker_url
        try:
            if self._tls and self._ssl_context is None:
                self._ssl_context = self.security.ssl_context()
            tls = {"ssl": self._ssl_context, "server_hostname": host} if self._tls else {}
            self._reader, self._writer = await asyncio.open_connection(host, port, **tls)  # type: ignore[arg-type]
        except OSError as error:  # ssl.SSLError too: an untrusted certificate, a failed handshake
            raise RemoteUnavailable(f"cannot connect to {self.address}: {error}") from error
        self._decoder = FrameDecoder()
        self._read_task = asyncio.get_running_loop().create_task(
            self._read_frames(self._reader), name=f"remote producer {self.producer_name} on {self.address}"
        )
        connect: dict[str, Any] = {"client_version": CLIENT_VERSION, "protocol_version": PROTOCOL_VERSION}
        try:
            connect |= self.security.connect_fields()
        except (OSError, ValueError) as error:
            raise RemoteUnavailable(f"no credentials for {self.address}: {error}") from error
        if proxy_to_broker_url is not None:
            connect["proxy_to_broker_url"] = proxy_to_broker_url
        connected = await self._request(
            BaseCommand(type=BaseCommand.CONNECT, connect=CommandConnect(**connect)), _CONNECT_REQUEST_ID
        )
        self._max_message_size = connected.connected.max_message_size or DEFAULT_MAX_MESSAGE_SIZE

    async def _reconnect(self, host: str, port: int, proxy_to_broker_url: str | None = None) -> None:
        if (host, port, proxy_to_broker_url) == (self._host, self._port, self._proxy_to_broker_url):
            return
        task = self._drop_connection()
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)
        await self._connect(host, port, proxy_to_broker_url)

    async def _lookup(self) -> None:
        """Ask who serves the topic and go there. Connect names the owner: this broker, another one, or
        one to reach through this one (a Pulsar proxy, `proxy_through_service_url`). Redirect names a
        broker to ask again, authoritatively. magnetar standalone always answers Connect to itself."""
        authoritative = False
        for _ in range(_LOOKUPS_MAX):
            request_id = next(self._request_ids)
            lookup = CommandLookupTopic(topic=self.topic, request_id=request_id, authoritative=authoritative)
            answer = await self._request(BaseCommand(type=BaseCommand.LOOKUP, lookupTopic=lookup), request_id)
            response = answer.lookupTopicResponse
            if response.response == CommandLookupTopicResponse.Failed:
                raise RemoteError(ServerError.Name(response.error), response.message)
            # A TLS client goes on with TLS: to the answer's brokerServiceUrlTls, as Pulsar's clients do.
            url = response.brokerServiceUrlTls if self._tls else response.brokerServiceUrl
            try:
                host, port, tls = _address(url)
                if tls != self._tls:
                    raise ValueError(f"{'a TLS' if self._tls else 'a plain'} connection cannot follow it")
            except ValueError as error:
                raise RemoteError("UnknownError", f"lookup of {self.topic} answered {url!r}: {error}") from None
            if response.response == CommandLookupTopicResponse.Redirect:
                await self._reconnect(host, port)
                authoritative = response.authoritative
            elif response.proxy_through_service_url:
                await self._reconnect(*self._service_address, proxy_to_broker_url=url)
                return
            else:
                await self._reconnect(host, port)
                return
        raise RemoteUnavailable(f"lookup of {self.topic} redirected more than {_LOOKUPS_MAX - 1} time(s)")

    async def _create_producer(self) -> None:
        request_id = next(self._request_ids)
        producer = CommandProducer(
            topic=self.topic,
            producer_id=PRODUCER_ID,
            request_id=request_id,
            producer_name=self.producer_name,
            # The name is chosen, as Pulsar's replicator chooses it: the remote must not rename it.
            user_provided_producer_name=True,
            producer_access_mode=ProducerAccessMode.Shared,
        )
        await self._request(BaseCommand(type=BaseCommand.PRODUCER, producer=producer), request_id)
        self.connected_since_ms = self._time_ms()

    async def _request(self, command: BaseCommand, request_id: int) -> BaseCommand:
        """Send a request and return its answer; ERROR raises RemoteError."""
        if self._failure is not None:
            raise RemoteUnavailable(self._failure)
        assert self._writer is not None
        future: asyncio.Future[BaseCommand] = asyncio.get_running_loop().create_future()
        self._requests[request_id] = future
        self._writer.write(encode_frame(command))
        try:
            answer = await future
        finally:
            self._requests.pop(request_id, None)
        if answer.type == BaseCommand.ERROR:
            raise RemoteError(ServerError.Name(answer.error.error), answer.error.message)
        return answer

    # -------------------------------------------------------------------------------- reading

    async def _read_frames(self, reader: asyncio.StreamReader) -> None:
        """The connection's one reading task: frames in, answers, receipts and PONGs out."""
        try:
            while True:
                data = await reader.read(_READ_BYTES)
                if not data:
                    raise RemoteUnavailable(f"{self.address} closed the connection")
                receipts: list[tuple[int, int]] = []
                try:
                    self._on_frames(self._decoder.receive_frames_and_receipts(data), receipts)
                finally:
                    # Receipts before a frame that ends the connection still count.
                    if receipts and self.on_receipts is not None:
                        self.on_receipts(receipts)
        except RemoteUnavailable as error:
            self._disconnect(str(error))
        except ProtocolError as error:
            self._disconnect(f"protocol error with {self.address}: {error}")
        except OSError as error:
            self._disconnect(f"connection to {self.address} lost: {error}")

    def _on_frames(self, frames: list[Frame | SendReceipt], receipts: list[tuple[int, int]]) -> None:
        """The frames of one socket read, in order; each receipt answers the oldest unanswered SEND and
        adds where the remote stored it to `receipts`. A receipt read by hand is checked here, inline: a
        replicator reads as many a second as it forwards entries."""
        pending = self._pending
        answered = pending.popleft
        stored = receipts.append
        for frame in frames:
            if frame.__class__ is SendReceipt:
                producer_id, sequence_id, ledger_id, entry_id = frame
            else:
                command = frame.command  # type: ignore[union-attr]
                if command.type != _SEND_RECEIPT:
                    self._on_frame(command)
                    continue
                receipt = command.send_receipt
                producer_id, sequence_id = receipt.producer_id, receipt.sequence_id
                ledger_id, entry_id = receipt.message_id.ledgerId, receipt.message_id.entryId
            if not pending or producer_id != PRODUCER_ID or sequence_id != pending[0][0]:
                self._unexpected_receipt(producer_id, sequence_id)
            answered()
            # signed_id, inline: Pulsar's -1 (a duplicate dropped) comes as 2^64 - 1.
            stored(
                (
                    ledger_id - _TWO_TO_64 if ledger_id > _I64_MAX else ledger_id,
                    entry_id - _TWO_TO_64 if entry_id > _I64_MAX else entry_id,
                )
            )

    def _on_frame(self, command: BaseCommand) -> None:
        kind = command.type
        if kind == BaseCommand.SEND_ERROR:
            self._on_send_error(command.send_error)
        elif kind == BaseCommand.PING:
            assert self._writer is not None
            self._writer.write(pong())
        elif kind == BaseCommand.PONG:
            pass
        elif kind == BaseCommand.AUTH_CHALLENGE:
            self._answer_challenge()
        elif kind == BaseCommand.CLOSE_PRODUCER:
            # Pulsar's broker does this on unload and shutdown; its client reconnects, so does the replicator.
            raise RemoteUnavailable(f"{self.address} closed the producer")
        elif kind == BaseCommand.CONNECTED:
            self._answer(_CONNECT_REQUEST_ID, command)
        elif kind in _ANSWER_FIELDS:
            self._answer(signed_id(getattr(command, _ANSWER_FIELDS[kind]).request_id), command)
        else:
            raise ProtocolError(f"a producer does not expect {BaseCommand.Type.Name(kind)}")

    def _answer_challenge(self) -> None:
        """The remote found our credentials expired: fresh ones go back (AUTH_RESPONSE), or, when the
        plugin cannot give them any more, the connection ends (the remote would end it at its next check)."""
        try:
            response = self.security.auth_response(CLIENT_VERSION, PROTOCOL_VERSION)
        except (OSError, ValueError) as error:
            raise RemoteUnavailable(f"cannot answer the auth challenge of {self.address}: {error}") from error
        assert self._writer is not None
        self._writer.write(encode_frame(response))

    def _answer(self, request_id: int, command: BaseCommand) -> None:
        future = self._requests.get(request_id)
        # An answer nobody waits for any more (a CLOSE_PRODUCER that timed out) is dropped.
        if future is not None and not future.done():
            future.set_result(command)

    def _unexpected_receipt(self, producer_id: int, sequence_id: int) -> NoReturn:
        """A SEND_RECEIPT that does not answer the oldest unanswered SEND: the two sides lost track."""
        pending = self._pending
        if not pending:
            raise ProtocolError(f"SEND_RECEIPT for sequence id {sequence_id} with no SEND unanswered")
        raise ProtocolError(
            f"SEND_RECEIPT for producer {producer_id}, sequence id {sequence_id}; "
            f"the oldest unanswered SEND has sequence id {pending[0][0]}"
        )

    def _on_send_error(self, send_error: CommandSendError) -> None:
        """The remote refused a SEND: the connection closes, whatever the code, since the sends after it
        may already be stored, and a replicator resends from its cursor only after a reconnect. (Pulsar's
        client closes too for every code but ChecksumError.)"""
        error = RemoteError(ServerError.Name(send_error.error), send_error.message)
        if not any(item.sequence_id == send_error.sequence_id for item in self._pending):
            raise ProtocolError(f"SEND_ERROR for sequence id {send_error.sequence_id} with no such SEND unanswered")
        raise RemoteUnavailable(f"{self.address} refused sequence id {send_error.sequence_id}: {error}")

    # ------------------------------------------------------------------------------ disconnecting

    def _check_connected(self) -> None:
        if not self.connected:
            raise RemoteUnavailable(self._failure or "not started")

    def _disconnect(self, message: str, notify: bool = True) -> None:
        """The end of this producer: unanswered sends are forgotten, every request fails with
        RemoteUnavailable, the connection closes, and an established producer's `on_disconnect` runs
        (unless `notify` is False)."""
        if self._failure is not None:
            self._drop_connection()  # a start() after close() may have opened one
            return
        was_connected = self.connected
        self._failure = message
        self.connected_since_ms = None
        self._pending = deque()
        for future in self._requests.values():
            if not future.done():
                future.set_exception(RemoteUnavailable(message))
        self._drop_connection()
        if notify and was_connected and self.on_disconnect is not None:
            self.on_disconnect(RemoteUnavailable(message))

    def _drop_connection(self) -> asyncio.Task[None] | None:
        """Stop reading and close the socket; returns the reading task unless it is the caller."""
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        else:
            task = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        self._reader = None
        return task
