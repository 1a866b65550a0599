"""One client connection: one task reads frames and hands each command to its handler; writes go to the
stream in order.

Owns: the socket of one TCP connection (reading, framing, bounded output written once per loop turn),
its producers and consumers by the client's ids, the SENDs of one socket read gathered per producer,
keep-alive and liveness checks, the tasks of its requests that wait, and closing only this connection
on bad input. What each command does is its role's handler in broker/commands/, installed by
`commands.open_connection`.
Must not touch: ordering decisions (subscriptions' dispatchers), storage internals, other connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from magnetar.broker.connection_auth import ConnectionAuthentication
from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.context import BrokerContext
from magnetar.broker.logs import remote_address
from magnetar.broker.producer import SEND_ENTRY, SEND_MESSAGES, Send, ServerProducer
from magnetar.broker.publish_limits import PendingPublishes
from magnetar.broker.tasks import BackgroundTasks
from magnetar.broker.topic_name import InvalidTopicName
from magnetar.protocol import commands, messages
from magnetar.protocol.connection import ServerProtocol
from magnetar.protocol.framing import Frame, ProtocolError, SendFrame, command_field_name
from magnetar.protocol.pulsar_api_pb2 import BaseCommand

if TYPE_CHECKING:
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic

__all__ = ["CommandHandler", "ServerConnection"]

log = logging.getLogger(__name__)

# Read size per socket read: large enough that a burst of SENDs is parsed in one go.
_READ_SIZE = 256 * 1024
# Output a slow reader may leave unsent before the connection stops reading its commands.
_OUTPUT_BYTES_MAX = 4 * 1024 * 1024
_ACK = BaseCommand.ACK
# A grouped ACK of this many ids or more lets the loop run in between (`run`).
_ACK_YIELD_IDS = 64

# A command's handler: installed per command type by its role's module (broker/commands/).
CommandHandler = Callable[[BaseCommand], object]


class ServerConnection:
    def __init__(self, context: BrokerContext, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.context = context
        # Whether the broker may still deliver (a broker of a cluster: its session's lease holds); None alone.
        self.serving = None if context.cluster is None else context.cluster.serving
        self.reader = reader
        self.writer = writer
        self.protocol = ServerProtocol(context.config["maxMessageSize"])
        # Command type -> handler, installed by commands.open_connection; a type without one is refused.
        self.handlers: dict[int, CommandHandler] = {}
        self.producers: dict[int, ServerProducer] = {}
        self.consumers: dict[int, ServerConsumer[PersistentSubscription[PersistentTopic]]] = {}
        self.peer = writer.get_extra_info("peername")
        self.remote_address = remote_address(self.peer)  # `/host:port`, the prefix of its log lines
        self.close_reason: str | None = None  # for the log; None when the client closed it
        self.client_version = ""  # from CONNECT, for the admin stats
        self.closed = False
        self.ssl_object = writer.get_extra_info("ssl_object")  # on the TLS port (brokerServicePortTls)
        self.auth = ConnectionAuthentication(
            self, context.authentication, context.config, context.clock
        )  # docs/security.md
        self._loop = asyncio.get_running_loop()
        # Keep-alive counts on the broker's monotonic clock, which the shell simulator drives.
        self._clock = context.clock
        self.last_received = self._clock.monotonic()
        self._tasks = BackgroundTasks(self.remote_address)
        # SENDs of the current socket read, per producer, until they are appended together.
        self._sends: dict[ServerProducer, list[Send]] = {}
        # SENDs read and not yet answered, against maxPendingPublishRequestsPerConnection and the broker's
        # publish buffer: over either, the connection stops reading (publish_limits.py).
        self.publishes = PendingPublishes(
            context.config["maxPendingPublishRequestsPerConnection"], context.publish_buffer
        )
        self._rate = context.publish_rate
        # Frames written during this turn of the event loop; they leave together at its end (`_flush`).
        self._output: list[bytes] = []
        # Which of them are MESSAGE frames (`deliver`), by their index in _output.
        self._deliveries: list[int] = []
        # The liveness check in progress (a PING waiting for its PONG), shared by everyone who asks.
        self._liveness: asyncio.Future[bool] | None = None

    # ----------------------------------------------------------------------------- lifecycle

    def is_alive(self) -> bool:
        return not self.closed

    async def check_liveness(self) -> bool:
        """Pulsar's checkConnectionLiveness: whether the client still answers. A producer name or an
        Exclusive subscription held by this connection is about to be refused to another one; if this
        connection is half-open (its client gone without a FIN, e.g. a replicator whose process or network
        went away), the PING gets no PONG within `connectionLivenessCheckTimeoutMillis`, the connection is
        closed (and with it what it held) and the answer is False. 0 turns the check off (always alive)."""
        timeout_ms = self.context.config["connectionLivenessCheckTimeoutMillis"]
        if self.closed:
            return False
        if timeout_ms <= 0:
            return True
        check = self._liveness
        if check is None:
            check = self._liveness = self._loop.create_future()
            self._clock.call_later(timeout_ms / 1000, lambda: self._liveness_timed_out(check))
            self.write(commands.ping())
        return await asyncio.shield(check)

    def _liveness_timed_out(self, check: asyncio.Future[bool]) -> None:
        if check.done():
            return
        log.warning("[%s] closing connection: liveness check timed out, no PONG", self.remote_address)
        self.close_reason = "liveness check timed out"
        # Its producers and consumers go now, before the caller retries what they held.
        self._cleanup()

    def liveness_answered(self, alive: bool) -> None:
        check, self._liveness = self._liveness, None
        if check is not None and not check.done():
            check.set_result(alive)

    def write(self, data: bytes) -> None:
        """Queue frames for the client. Everything written during one turn of the event loop (receipts of
        several commits, MESSAGE frames of several dispatches, answers to a read's commands) leaves in
        one socket write at the start of the next turn: one send syscall instead of one per caller."""
        if not self.closed:
            output = self._output
            output.append(data)
            if len(output) == 1:
                self._loop.call_soon(self._flush)

    def deliver(self, data: bytes) -> None:
        """Queue MESSAGE frames, as `write` does, except that they do not leave if the broker may no longer
        serve when they would: its session's lease lapsed between the dispatch and this turn's end (the
        process was stopped there, kill -STOP), another broker may own the topic already, and what was
        dispatched goes back to the subscription when the topic closes (the chaos suite saw one go out)."""
        if not self.closed:
            self._deliveries.append(len(self._output))
            self.write(data)

    def _flush(self) -> None:
        output = self._output
        if output:
            self._output = []
            deliveries, self._deliveries = self._deliveries, []
            if deliveries and self.serving is not None and not self.serving():
                dropped = set(deliveries)
                output = [data for index, data in enumerate(output) if index not in dropped]
            if output and not self.writer.is_closing():
                self.writer.write(b"".join(output))

    async def run(self) -> None:
        keep_alive = self.spawn(self._keep_alive(), "keep-alive")
        try:
            while not self.closed:
                data = await self.reader.read(_READ_SIZE)
                if not data:
                    break
                self.last_received = self._clock.monotonic()
                try:
                    frames = self.protocol.receive_data(data)
                except ProtocolError as error:
                    log.warning("[%s] closing connection: protocol error: %s", self.remote_address, error)
                    self.close_reason = f"protocol error: {error}"
                    break
                if self.auth.pending:
                    frames = await self.auth.handshake(frames)
                try:
                    await self._on_frames(frames)
                except ProtocolError as error:
                    log.warning("[%s] closing connection: protocol error: %s", self.remote_address, error)
                    self.close_reason = f"protocol error: {error}"
                    self.closed = True
                if self.writer.transport.get_write_buffer_size() > _OUTPUT_BYTES_MAX:
                    # Bounded output: a slow reader must not make the broker buffer without limit.
                    await self.writer.drain()
                if self.publishes.over_limit:
                    # Back-pressure on producers: read no more SENDs until the receipts caught up.
                    await self.publishes.room()
                if self._rate.over_limit:
                    await self._rate.room()
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            self.close_reason = self.close_reason or f"connection lost: {error!r}"
        finally:
            keep_alive.cancel()
            self._cleanup()

    async def _on_frames(self, frames: list[Frame | SendFrame]) -> None:
        """The frames of one socket read, in order: SENDs gathered per producer, every other command to its
        handler once the SENDs before it are appended."""
        for frame in frames:
            if isinstance(frame, SendFrame):
                self._on_send(frame)
            else:
                command = frame.command
                # Anything else may depend on the SENDs before it (CLOSE_PRODUCER): append them first.
                self._publish_pending()
                self._handle(command)
                if command.type == _ACK and len(command.ack.message_id) >= _ACK_YIELD_IDS:
                    # A grouped ACK of hundreds of ids takes a millisecond or more, and a client's
                    # consumers send theirs together: let the receipts and dispatches that became due
                    # run between them.
                    await asyncio.sleep(0)
        self._publish_pending()

    def _cleanup(self) -> None:
        self.closed = True
        self.liveness_answered(False)
        self._tasks.cancel()
        for consumer in list(self.consumers.values()):
            self.detach_consumer(consumer)
        self.consumers.clear()
        for producer in list(self.producers.values()):
            producer.close_silently()
        self.producers.clear()
        self._flush()
        self.writer.close()

    def close_gracefully(self) -> None:
        """Shutdown: tell each producer and consumer to go elsewhere, then close."""
        self.close_reason = "broker shutdown"
        for producer in list(self.producers.values()):
            producer.close_by_broker()
        for consumer in list(self.consumers.values()):
            consumer.close_by_broker()
        self.abort()

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            self._flush()
            self.writer.close()

    async def _keep_alive(self) -> None:
        interval = self.context.config["keepAliveIntervalSeconds"]
        while True:
            await self._clock.sleep(interval)
            idle = self._clock.monotonic() - self.last_received
            if idle > 2 * interval:
                log.warning(
                    "[%s] closing connection: keep-alive timeout, no frame for %.0f s", self.remote_address, idle
                )
                self.close_reason = f"keep-alive timeout, no frame for {idle:.0f} s"
                self.abort()
                return
            if idle > interval:
                self.write(commands.ping())

    def spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run a request that waits (loading a topic, subscribing, seeking) beside the reading: the
        connection owns it, logs its failure and cancels it when it closes."""
        return self._tasks.spawn(coroutine, name)

    def forget_producer(self, producer_id: int) -> None:
        self.producers.pop(producer_id, None)

    def forget_consumer(self, consumer_id: int) -> None:
        self.consumers.pop(consumer_id, None)

    def detach_consumer(self, consumer: ServerConsumer) -> None:
        consumer.detach()
        subscription = consumer.subscription
        if not subscription.durable and not subscription.consumers:
            self.spawn(subscription.topic.drop_reader(subscription), f"drop reader {subscription.name}")

    # ------------------------------------------------------------------------------ commands

    def _handle(self, command: BaseCommand) -> None:
        handler = self.handlers.get(command.type)
        if handler is None:
            self._not_allowed(command)
        else:
            handler(command)

    def _not_allowed(self, command: BaseCommand) -> None:
        """An unsupported request gets ERROR{NotAllowed} with its request id, so the client does not wait."""
        body = getattr(command, command_field_name(command.type), None)
        request_id = getattr(body, "request_id", None)
        name = BaseCommand.Type.Name(command.type)
        if request_id is None:
            log.info("[%s] ignoring %s: not supported", self.remote_address, name)
            return
        log.info(
            "[%s] Request %d failed: NotAllowedError: %s is not supported by magnetar",
            self.remote_address,
            request_id,
            name,
        )
        self.write(commands.error(request_id, "NotAllowedError", f"{name} is not supported by magnetar"))

    def error(self, request_id: int, error: BaseException) -> None:
        """ERROR for a request that failed: the error's Pulsar code (its `server_error`), else UnknownError
        with the traceback in the log."""
        code = getattr(error, "server_error", None)
        if isinstance(error, InvalidTopicName):
            code = "InvalidTopicName"
        if code is None:
            log.error(
                "[%s] Request %d failed: UnknownError: %r", self.remote_address, request_id, error, exc_info=error
            )
            code = "UnknownError"
        else:
            log.info("[%s] Request %d failed: %s: %s", self.remote_address, request_id, code, error)
        self.write(commands.error(request_id, code, str(error) or type(error).__name__))

    # ---------------------------------------------------------------------------- SENDs

    def _on_send(self, send: SendFrame) -> None:
        producer = self.producers.get(send.producer_id)
        if producer is None:
            raise ProtocolError(f"SEND for unknown producer id {send.producer_id}")
        try:
            entry, key_hash, count, publish_time, deliver_at_time, marker, name = messages.index_send(send.payload)
        except messages.ChecksumError as error:
            log.info("[%s] SEND of producer %s failed: ChecksumError: %s", self.remote_address, producer.name, error)
            self.write(commands.send_error(send.producer_id, send.sequence_id, "ChecksumError", str(error)))
            return
        if marker and producer.remote_cluster is None:
            # Markers are the broker's; only another cluster's replicator forwards them (PIP-33).
            raise ProtocolError("a client does not publish internal marker entries")
        if deliver_at_time:
            producer.topic.note_delayed_delivery()
        sends = self._sends.get(producer)
        if sends is None:
            sends = self._sends[producer] = []
        sends.append((send.sequence_id, send.highest_sequence_id, entry, key_hash, count, publish_time, name, marker))

    def _publish_pending(self) -> None:
        """Hand each producer the SENDs gathered from this read in one storage call."""
        if self._sends:
            sends, self._sends = self._sends, {}
            for producer, batch in sends.items():
                if not producer.closed:
                    size_bytes = sum(map(len, map(SEND_ENTRY, batch)))
                    self.publishes.read(len(batch), size_bytes)
                    if self._rate.enabled:
                        self._rate.read(sum(map(SEND_MESSAGES, batch)), size_bytes)
                    try:
                        producer.publish_many(batch)
                    except BaseException:
                        # Refused before any of it was pending (storage busy): nothing will answer these.
                        self.publishes.answered(len(batch), size_bytes)
                        raise

    def publish_answered(self, count: int, size_bytes: int) -> None:
        """`count` SENDs of `size_bytes` entry bytes got their receipt or their error."""
        self.publishes.answered(count, size_bytes)
