"""One client connection: one task reads frames and answers them; writes go to the stream in order.

Owns: the commands of one TCP connection (lookups, producers, consumers, acks, pings), its producers
and consumers by the client's ids, keep-alive, and closing only this connection on bad input.
Must not touch: ordering decisions (subscriptions' dispatchers), storage internals, other connections.

Requests that must wait (topic loading, subscribing, seeking) run as tasks so that the connection keeps
reading; everything else is answered inline, in arrival order.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from functools import partial
from typing import Any

from magnetar.broker.config import UnknownListener
from magnetar.broker.connection_auth import ConnectionAuthentication
from magnetar.broker.consumer import ServerConsumer
from magnetar.broker.logs import consumer_changed, remote_address
from magnetar.broker.producer import Send, ServerProducer
from magnetar.broker.schema_compatibility import SchemaData
from magnetar.broker.schemas import from_wire, schema_id, to_wire, version_bytes, version_from_bytes
from magnetar.broker.service import TOPIC_DOMAINS, BrokerService
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.core.errors import CoreError
from magnetar.core.events import KeySharedMeta
from magnetar.positions import EARLIEST, LATEST, Position
from magnetar.protocol import commands, messages
from magnetar.protocol.connection import ServerProtocol
from magnetar.protocol.framing import ProtocolError, SendFrame, command_field_name
from magnetar.protocol.pulsar_api_pb2 import BaseCommand, CommandSubscribe

__all__ = ["ServerConnection", "SERVER_VERSION"]

log = logging.getLogger(__name__)

SERVER_VERSION = "magnetar-0.1.0"
_SUB_TYPES = {
    CommandSubscribe.Exclusive: "Exclusive",
    CommandSubscribe.Shared: "Shared",
    CommandSubscribe.Failover: "Failover",
    CommandSubscribe.Key_Shared: "Key_Shared",
}
_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}
# GET_TOPICS_OF_NAMESPACE modes: PERSISTENT (the default), NON_PERSISTENT, ALL.
_NAMESPACE_MODE_DOMAINS = {0: ("persistent",), 1: ("non-persistent",), 2: TOPIC_DOMAINS}
_producer_names = itertools.count()
# Read size per socket read: large enough that a burst of SENDs is parsed in one go.
_READ_SIZE = 256 * 1024


_INT64_SIGN = 1 << 63
_ACK = BaseCommand.ACK
_ACK_YIELD_IDS = 64
# Position(ledger, entry) without the Python-level __new__ NamedTuple generates: one per acked id.
# Measured with bench/e2e_throughput.py (the event loop's CPU µs per message, commit c201da2).
_new_position = partial(tuple.__new__, Position)


def _signed(value: int) -> int:
    """Ledger and entry ids are uint64 on the wire; -1 travels as 2**64 - 1."""
    return value - (1 << 64) if value >= _INT64_SIGN else value


def _position(message_id: Any) -> Position:
    return Position(_signed(message_id.ledgerId), _signed(message_id.entryId))


class ServerConnection:
    def __init__(self, service: BrokerService, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        self.protocol = ServerProtocol(service.config["maxMessageSize"])
        self.producers: dict[int, ServerProducer] = {}
        self.consumers: dict[int, ServerConsumer] = {}
        self.peer = writer.get_extra_info("peername")
        self.remote_address = remote_address(self.peer)  # `/host:port`, the prefix of its log lines
        self.close_reason: str | None = None  # for the log; None when the client closed it
        self.client_version = ""  # from CONNECT, for the admin stats
        self.closed = False
        self.ssl_object = writer.get_extra_info("ssl_object")  # on the TLS port (brokerServicePortTls)
        self.auth = ConnectionAuthentication(self)  # the client's role (docs/security.md)
        self._loop = asyncio.get_running_loop()
        # Keep-alive counts on the loop's clock (monotonic), which the shell simulator drives.
        self.last_received = self._loop.time()
        self._tasks: set[asyncio.Task[None]] = set()
        # SENDs of the current socket read, per producer, until they are appended together.
        self._sends: dict[ServerProducer, list[Send]] = {}
        # Frames written during this turn of the event loop; they leave together at its end (`_flush`).
        self._output: list[bytes] = []
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
        timeout_ms = self.service.config["connectionLivenessCheckTimeoutMillis"]
        if self.closed:
            return False
        if timeout_ms <= 0:
            return True
        check = self._liveness
        if check is None:
            check = self._liveness = self._loop.create_future()
            self._loop.call_later(timeout_ms / 1000, self._liveness_timed_out, check)
            self.write(commands.ping())
        return await asyncio.shield(check)

    def _liveness_timed_out(self, check: asyncio.Future[bool]) -> None:
        if check.done():
            return
        log.warning("[%s] closing connection: liveness check timed out, no PONG", self.remote_address)
        self.close_reason = "liveness check timed out"
        # Its producers and consumers go now, before the caller retries what they held.
        self._cleanup()

    def _liveness_answered(self, alive: bool) -> None:
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

    def _flush(self) -> None:
        output = self._output
        if output:
            self._output = []
            if not self.writer.is_closing():
                self.writer.write(b"".join(output))

    async def run(self) -> None:
        keep_alive = asyncio.get_running_loop().create_task(self._keep_alive())
        try:
            while not self.closed:
                data = await self.reader.read(_READ_SIZE)
                if not data:
                    break
                self.last_received = self._loop.time()
                try:
                    frames = self.protocol.receive_data(data)
                except ProtocolError as error:
                    log.warning("[%s] closing connection: protocol error: %s", self.remote_address, error)
                    self.close_reason = f"protocol error: {error}"
                    break
                if self.auth.pending:
                    frames = await self.auth.handshake(frames)
                try:
                    for frame in frames:
                        if isinstance(frame, SendFrame):
                            self._on_send(frame)
                        else:
                            command = frame.command
                            # Anything else may depend on the SENDs before it (CLOSE_PRODUCER): append them first.
                            self._publish_pending()
                            self._dispatch(command)
                            if command.type == _ACK and len(command.ack.message_id) >= _ACK_YIELD_IDS:
                                # A grouped ACK of hundreds of ids takes a millisecond or more, and a
                                # client's consumers send theirs together: let the receipts and
                                # dispatches that became due run between them.
                                await asyncio.sleep(0)
                    self._publish_pending()
                except ProtocolError as error:
                    log.warning("[%s] closing connection: protocol error: %s", self.remote_address, error)
                    self.close_reason = f"protocol error: {error}"
                    self.closed = True
                if self.writer.transport.get_write_buffer_size() > 4 * 1024 * 1024:
                    # Bounded output: a slow reader must not make the broker buffer without limit.
                    await self.writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError) as error:
            self.close_reason = self.close_reason or f"connection lost: {error!r}"
        finally:
            keep_alive.cancel()
            self._cleanup()

    def _cleanup(self) -> None:
        self.closed = True
        self._liveness_answered(False)
        for task in self._tasks:
            task.cancel()
        for consumer in list(self.consumers.values()):
            self._detach_consumer(consumer)
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
        interval = self.service.config["keepAliveIntervalSeconds"]
        while True:
            await asyncio.sleep(interval)
            idle = self._loop.time() - self.last_received
            if idle > 2 * interval:
                log.warning(
                    "[%s] closing connection: keep-alive timeout, no frame for %.0f s", self.remote_address, idle
                )
                self.close_reason = f"keep-alive timeout, no frame for {idle:.0f} s"
                self.abort()
                return
            if idle > interval:
                self.write(commands.ping())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget_producer(self, producer_id: int) -> None:
        self.producers.pop(producer_id, None)

    def forget_consumer(self, consumer_id: int) -> None:
        self.consumers.pop(consumer_id, None)

    def _detach_consumer(self, consumer: ServerConsumer) -> None:
        consumer.detach()
        subscription = consumer.subscription
        if not subscription.durable and not subscription.consumers:
            self._spawn(subscription.topic.drop_reader(subscription))

    # ------------------------------------------------------------------------------ commands

    def _dispatch(self, command: BaseCommand) -> None:
        kind = command.type
        if kind == BaseCommand.ACK:
            self._on_ack(command.ack)
        elif kind == BaseCommand.FLOW:
            consumer = self.consumers.get(command.flow.consumer_id)
            if consumer is not None:
                consumer.flow(command.flow.messagePermits)
        elif kind == BaseCommand.CONNECT:
            self.client_version = command.connect.client_version
            log.info(
                "[%s] Connected with clientVersion=%s, protocolVersion=%d",
                self.remote_address,
                self.client_version,
                self.protocol.protocol_version,
            )
            self.write(
                commands.connected(
                    SERVER_VERSION, self.protocol.protocol_version, self.service.config["maxMessageSize"]
                )
            )
        elif kind == BaseCommand.PING:
            self.write(commands.pong())
        elif kind == BaseCommand.AUTH_RESPONSE:
            self._spawn(self.auth.on_auth_response(command.authResponse))
        elif kind == BaseCommand.PONG:
            self._liveness_answered(True)
        elif kind == BaseCommand.PARTITIONED_METADATA:
            self._spawn(self._on_partitioned_metadata(command.partitionMetadata))
        elif kind == BaseCommand.LOOKUP:
            self._on_lookup(command.lookupTopic)
        elif kind == BaseCommand.PRODUCER:
            self._spawn(self._on_producer(command.producer))
        elif kind == BaseCommand.SUBSCRIBE:
            self._spawn(self._on_subscribe(command.subscribe))
        elif kind == BaseCommand.REDELIVER_UNACKNOWLEDGED_MESSAGES:
            request = command.redeliverUnacknowledgedMessages
            consumer = self.consumers.get(request.consumer_id)
            if consumer is not None:
                ids = [_position(m) for m in request.message_ids]
                if log.isEnabledFor(logging.DEBUG):
                    log.debug(
                        "[%s] Redelivering %s unacknowledged messages on topic %s / %s for consumer %s (consumerId=%d)",
                        self.remote_address,
                        len(ids) if ids else "all",
                        consumer.subscription.topic.name,
                        consumer.subscription.name,
                        consumer.name,
                        request.consumer_id,
                    )
                epoch = request.consumer_epoch if request.HasField("consumer_epoch") else None
                consumer.redeliver(ids or None, epoch)
        elif kind == BaseCommand.CLOSE_PRODUCER:
            producer = self.producers.pop(command.close_producer.producer_id, None)
            if producer is not None:
                producer.close_silently(by="client")
            self.write(commands.success(command.close_producer.request_id))
        elif kind == BaseCommand.CLOSE_CONSUMER:
            consumer = self.consumers.pop(command.close_consumer.consumer_id, None)
            if consumer is not None:
                self._detach_consumer(consumer)
            self.write(commands.success(command.close_consumer.request_id))
        elif kind == BaseCommand.UNSUBSCRIBE:
            self._spawn(self._on_unsubscribe(command.unsubscribe))
        elif kind == BaseCommand.SEEK:
            self._spawn(self._on_seek(command.seek))
        elif kind == BaseCommand.GET_LAST_MESSAGE_ID:
            self._spawn(self._on_get_last_message_id(command.getLastMessageId))
        elif kind == BaseCommand.GET_TOPICS_OF_NAMESPACE:
            request = command.getTopicsOfNamespace
            authorization = self.service.authorization
            if authorization.enabled and not authorization.can_list_topics(request.namespace, self.auth.role):
                log.info(
                    "[%s] Role %s may not list the topics of %s", self.remote_address, self.auth.role, request.namespace
                )
                self.write(
                    commands.error(
                        request.request_id, "AuthorizationError", "Client is not authorized to GetTopicsOfNamespace"
                    )
                )
                return
            topics = self.service.topics_of_namespace(request.namespace, _NAMESPACE_MODE_DOMAINS[request.mode])
            self.write(commands.get_topics_of_namespace_response(request.request_id, topics))
        elif kind == BaseCommand.GET_SCHEMA:
            self._on_get_schema(command.getSchema)
        elif kind == BaseCommand.GET_OR_CREATE_SCHEMA:
            self._spawn(self._on_get_or_create_schema(command.getOrCreateSchema))
        else:
            self._not_allowed(command)

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

    def _error(self, request_id: int, error: BaseException) -> None:
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

    # ------------------------------------------------------------------------------ lookups

    async def _on_partitioned_metadata(self, request: Any) -> None:
        try:
            name = TopicName.parse(request.topic)
            if self.service.authorization.enabled and not self.service.authorization.can_lookup(name, self.auth.role):
                log.info("[%s] Role %s may not get partition metadata of %s", self.remote_address, self.auth.role, name)
                self.write(
                    commands.partitioned_metadata_response(
                        request.request_id,
                        error_code="AuthorizationError",
                        message="Client is not authorized to Get Partition Metadata",
                    )
                )
                return
            partitions = await self.service.partitions_for_lookup(name)
        except InvalidTopicName as error:
            log.info("[%s] Request %d failed: InvalidTopicName: %s", self.remote_address, request.request_id, error)
            self.write(
                commands.partitioned_metadata_response(
                    request.request_id, error_code="InvalidTopicName", message=str(error)
                )
            )
            return
        self.write(commands.partitioned_metadata_response(request.request_id, partitions))

    def _on_lookup(self, request: Any) -> None:
        try:
            name = TopicName.parse(request.topic)
        except InvalidTopicName as error:
            log.info("[%s] Request %d failed: InvalidTopicName: %s", self.remote_address, request.request_id, error)
            self.write(commands.lookup_response(request.request_id, error_code="InvalidTopicName", message=str(error)))
            return
        if self.service.authorization.enabled and not self.service.authorization.can_lookup(name, self.auth.role):
            log.info("[%s] Role %s is not authorized to Lookup %s", self.remote_address, self.auth.role, name)
            self.write(
                commands.lookup_response(
                    request.request_id, error_code="AuthorizationError", message="Client is not authorized to Lookup"
                )
            )
            return
        try:
            # The listener the client names (Java's listenerName, Go's ListenerName, Python's listener_name),
            # else the internal one; Pulsar answers a name it does not have with ServiceNotReady.
            url, url_tls = self.service.config.lookup_urls(request.advertised_listener_name.strip())
        except UnknownListener as error:
            log.info("[%s] Request %d failed: ServiceNotReady: %s", self.remote_address, request.request_id, error)
            self.write(commands.lookup_response(request.request_id, error_code="ServiceNotReady", message=str(error)))
            return
        # TLS clients read brokerServiceUrlTls (reference §7); both are answered, as Pulsar does.
        self.write(commands.lookup_response(request.request_id, url, broker_service_url_tls=url_tls))

    # ---------------------------------------------------------------------------- producers

    async def _on_producer(self, request: Any) -> None:
        try:
            name = TopicName.parse(request.topic)
            self.service.authorization.check_produce(name, self.auth.role)
            topic = await self.service.get_topic(name)
            # Registered or matched before the producer joins, as Pulsar's tryAddSchema; a retried
            # create matches the version it registered.
            schema_version = await self.service.schemas.producer_schema_version(name, _declared_schema(request))
            existing = self.producers.get(request.producer_id)
            if existing is not None:
                # The client retried a create that already succeeded: answer the same way again.
                self.write(
                    commands.producer_success(
                        request.request_id,
                        existing.name,
                        topic.last_sequence_id(existing.name),
                        topic_epoch=topic.topic_epoch,
                        schema_version=schema_version,
                    )
                )
                return
            producer_name = request.producer_name or f"{self.service.config['clusterName']}-0-{next(_producer_names)}"
            access_mode = _ACCESS_MODES.get(request.producer_access_mode, "Shared")
            producer = ServerProducer(self, topic, request.producer_id, producer_name, access_mode)
            if access_mode == "WaitForExclusive" and topic.producers:
                # Parked: the client waits for a second PRODUCER_SUCCESS with producer_ready=true.
                log.info(
                    "[%s] Producer %s waits for exclusive access to topic %s", self.remote_address, producer_name, name
                )
                self.write(
                    commands.producer_success(
                        request.request_id,
                        producer_name,
                        topic.last_sequence_id(producer_name),
                        schema_version=schema_version,
                        producer_ready=False,
                    )
                )
                await topic.wait_until_free()
            holder = topic.producers.get(producer_name)
            if holder is not None and holder.connection is not self:
                # Refused below if its connection answers; closed (and its producer with it) if it does not.
                await holder.connection.check_liveness()
            epoch = topic.add_producer(
                producer, access_mode, request.topic_epoch if request.HasField("topic_epoch") else None
            )
        except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
            self._error(request.request_id, error)
            return
        if self.closed:
            producer.close_silently()
            return
        self.producers[request.producer_id] = producer
        log.info(
            "[%s] Created producer on topic %s: producerName=%s, producerId=%d, accessMode=%s",
            self.remote_address,
            name,
            producer_name,
            request.producer_id,
            access_mode,
        )
        self.write(
            commands.producer_success(
                request.request_id,
                producer_name,
                topic.last_sequence_id(producer_name),
                topic_epoch=epoch,
                schema_version=schema_version,
            )
        )

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
                    producer.publish_many(batch)

    # ---------------------------------------------------------------------------- consumers

    async def _on_subscribe(self, request: Any) -> None:
        try:
            subscription_type = _SUB_TYPES[request.subType]
            name = TopicName.parse(request.topic)
            self.service.authorization.check_consume(name, self.auth.role, request.subscription)
            if not self.service.subscription_type_allowed(name, subscription_type):
                raise _NotAllowed(f"{subscription_type} subscriptions are disabled for {name.namespace_name}")
            if request.consumer_id in self.consumers:
                self.write(commands.success(request.request_id))
                return
            if request.read_compacted and subscription_type not in ("Exclusive", "Failover"):
                raise _NotAllowed("readCompacted only allowed on failover or exclusive subscriptions")
            topic = await self.service.get_topic(name, create=request.force_topic_creation)
            schema = from_wire(request.schema) if request.HasField("schema") else None
            if schema is not None and schema.type != "AUTO_CONSUME":
                await self.service.schemas.add_schema_if_idle_or_check_compatible(topic, schema)
            start = _position(request.start_message_id) if request.HasField("start_message_id") else None
            initial = "earliest" if request.initialPosition == 1 else "latest"
            known = topic.subscriptions.get(request.subscription)
            subscription = await topic.subscribe(request.subscription, request.durable, initial, start)
            if known is None and not subscription.consumers:
                # New, and not joined by a consumer that subscribed at the same time and came back first.
                log.info(
                    "[%s] Created subscription on topic %s / %s (%s, initial position %s)",
                    self.remote_address,
                    name,
                    request.subscription,
                    "durable" if request.durable else "non-durable",
                    initial,
                )
            if request.replicate_subscription_state and subscription.durable:
                # PIP-33: true makes the subscription replicated (for good: false never unmakes it).
                if self.service.config["enableReplicatedSubscriptions"]:
                    await topic.set_subscription_replicated(subscription, True)
                else:
                    log.warning(
                        "[%s] Replicated subscription requested on %s / %s while enableReplicatedSubscriptions "
                        "is false: not replicated",
                        self.remote_address,
                        name,
                        request.subscription,
                    )
            meta = None
            # An Exclusive consumer may declare STICKY ranges too: a reader with key hash ranges.
            declares_ranges = subscription_type == "Exclusive" and request.HasField("keySharedMeta")
            if subscription_type == "Key_Shared" or declares_ranges:
                ksm = request.keySharedMeta
                meta = KeySharedMeta(
                    "STICKY" if ksm.keySharedMode == 1 else "AUTO_SPLIT",
                    ksm.allowOutOfOrderDelivery,
                    tuple((r.start, r.end) for r in ksm.hashRanges),
                )
            consumer = ServerConsumer(
                self, subscription, request.consumer_id, request.consumer_name, name.partition_index
            )
            if request.HasField("consumer_epoch"):
                consumer.epoch = request.consumer_epoch
            if schema is not None:
                consumer.schema_type = schema.type
            subscription.read_compacted = request.read_compacted
            if subscription_type == "Exclusive":
                # Refused by the core if a holder answers; a holder whose connection does not is gone first.
                holders = {c.connection for c in subscription.consumers.values() if c.connection is not self}
                await asyncio.gather(*(holder.check_liveness() for holder in holders))
            consumer.consumer_id = subscription.add_consumer(consumer, subscription_type, request.priority_level, meta)
        except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
            self._error(request.request_id, error)
            return
        if self.closed:
            consumer.detach()
            return
        self.consumers[request.consumer_id] = consumer
        log.info(
            "[%s] Created consumer on topic %s / %s: subscriptionType=%s, consumerName=%s, consumerId=%d",
            self.remote_address,
            name,
            request.subscription,
            subscription_type,
            request.consumer_name,
            request.consumer_id,
        )
        consumer_changed(subscription, consumer, "joined")
        self.write(commands.success(request.request_id))

    def _on_ack(self, ack: Any) -> None:
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is None:
            return
        if ack.ack_type == 1:
            if ack.message_id:
                consumer.acknowledge_cumulative(_position(ack.message_id[0]))
        else:
            # A grouped ACK carries hundreds of ids: each is read once, and only batch entries' ack sets
            # are copied out (an entry acked whole has none).
            whole: list[Position] = []
            with_ack_sets: list[tuple[Position, list[int]]] = []
            for message_id in ack.message_id:
                ledger_id, entry_id = message_id.ledgerId, message_id.entryId
                if ledger_id >= _INT64_SIGN or entry_id >= _INT64_SIGN:
                    position = Position(_signed(ledger_id), _signed(entry_id))
                else:
                    position = _new_position((ledger_id, entry_id))
                ack_set = message_id.ack_set
                if ack_set:
                    with_ack_sets.append((position, list(ack_set)))
                else:
                    whole.append(position)
            consumer.acknowledge(whole, with_ack_sets)
        if ack.HasField("request_id"):
            self.write(commands.ack_response(ack.consumer_id, ack.request_id))

    async def _on_unsubscribe(self, request: Any) -> None:
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            log.info(
                "[%s] Request %d failed: ConsumerNotFound: unknown consumer", self.remote_address, request.request_id
            )
            self.write(commands.error(request.request_id, "ConsumerNotFound", "unknown consumer"))
            return
        subscription = consumer.subscription
        others = [c for c in subscription.consumers.values() if c is not consumer]
        if others:
            log.info(
                "[%s] Request %d failed: UnknownError: Subscription %s has other connected consumers",
                self.remote_address,
                request.request_id,
                subscription.name,
            )
            self.write(
                commands.error(
                    request.request_id,
                    "UnknownError",
                    f"Subscription {subscription.name} has other connected consumers",
                )
            )
            return
        self.consumers.pop(request.consumer_id, None)
        consumer.detach()
        await subscription.topic.unsubscribe(subscription.name)
        log.info(
            "[%s] Deleted subscription on topic %s / %s: unsubscribed by consumer %s (consumerId=%d)",
            self.remote_address,
            subscription.topic.name,
            subscription.name,
            consumer.name,
            request.consumer_id,
        )
        self.write(commands.success(request.request_id))

    async def _on_seek(self, request: Any) -> None:
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            log.info(
                "[%s] Request %d failed: ConsumerNotFound: unknown consumer", self.remote_address, request.request_id
            )
            self.write(commands.error(request.request_id, "ConsumerNotFound", "unknown consumer"))
            return
        subscription = consumer.subscription
        cursor = subscription.cursor
        try:
            if request.HasField("message_publish_time"):
                await cursor.reset_to_publish_time(request.message_publish_time)
            else:
                target = _position(request.message_id)
                if target == EARLIEST or target[0] < 0:
                    target = subscription.topic.ledger.first_position()
                elif target == LATEST:
                    target = subscription.topic.ledger.next_valid_position(
                        subscription.topic.ledger.last_confirmed_entry
                    )
                await cursor.reset(target)
        except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
            self._error(request.request_id, error)
            return
        log.info(
            "[%s] Reset subscription on topic %s / %s to %s (seek by consumer %s): mark-delete position %s, "
            "consumers to close: %d",
            self.remote_address,
            subscription.topic.name,
            subscription.name,
            f"publish time {request.message_publish_time}" if request.HasField("message_publish_time") else target,
            consumer.name,
            cursor.mark_delete_position,
            len(subscription.consumers),
        )
        # Pulsar closes the subscription's consumers before it answers: each re-subscribes from the new
        # position. Answered first, the Java client completes the seek while still connected, keeps its
        # old start (a seek by time's is earliest) and drops what the new subscription sends.
        subscription.disconnect_consumers()
        self.write(commands.success(request.request_id))

    async def _on_get_last_message_id(self, request: Any) -> None:
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            log.info(
                "[%s] Request %d failed: ConsumerNotFound: unknown consumer", self.remote_address, request.request_id
            )
            self.write(commands.error(request.request_id, "ConsumerNotFound", "unknown consumer"))
            return
        topic = consumer.subscription.topic
        try:
            # Not a trailing marker: consumers never receive those (Pulsar #22571).
            last = await topic.last_dispatchable_position()
            compacted = await topic.compaction.last_message_id(last) if consumer.subscription.read_compacted else None
            if compacted is not None:
                last, batch_index = compacted
            else:
                batch_index = await topic.largest_batch_index(last)
        except Exception as error:  # noqa: BLE001 - any failure answered with its ServerError code (else UnknownError)
            self._error(request.request_id, error)
            return
        mark_delete = consumer.subscription.cursor.mark_delete_position
        self.write(
            commands.get_last_message_id_response(
                request.request_id,
                last[0],
                last[1],
                batch_index=batch_index,
                partition=consumer.partition_index,
                mark_delete_position=mark_delete,
            )
        )

    def _on_get_schema(self, request: Any) -> None:
        """A version of the topic's schema, the newest without one: the registry answers for a topic that
        is not loaded, or no longer exists, as Pulsar's does (AUTO_CONSUME asks by message version)."""
        try:
            name = TopicName.parse(request.topic)
        except InvalidTopicName as error:
            self.write(
                commands.get_schema_response(request.request_id, error_code="InvalidTopicName", message=str(error))
            )
            return
        version = version_from_bytes(request.schema_version) if request.schema_version else None
        stored = self.service.schemas.get(name, version)
        if stored is None:
            log.info(
                "[%s] Request %d failed: TopicNotFound: no schema version %s for %s",
                self.remote_address,
                request.request_id,
                "latest" if version is None else version,
                name,
            )
            self.write(
                commands.get_schema_response(
                    request.request_id, error_code="TopicNotFound", message="Topic not found or no-schema"
                )
            )
            return
        self.write(
            commands.get_schema_response(
                request.request_id, to_wire(schema_id(name), stored), version_bytes(stored.version)
            )
        )

    async def _on_get_or_create_schema(self, request: Any) -> None:
        """The Go client's first send with a schema: the version of that schema on an existing topic,
        registered as a producer's would be (Pulsar's handleGetOrCreateSchema)."""
        try:
            name = TopicName.parse(request.topic)
            if not self.service.topic_exists(name):
                self.write(
                    commands.get_or_create_schema_response(
                        request.request_id, error_code="TopicNotFound", message="Topic not found"
                    )
                )
                return
            schema = from_wire(request.schema)
            version = await self.service.schemas.producer_schema_version(
                name, None if schema.type == "NONE" else schema
            )
        except Exception as error:  # answered with its ServerError code
            code = "InvalidTopicName" if isinstance(error, InvalidTopicName) else getattr(error, "server_error", None)
            if code is None:
                log.error(
                    "[%s] Request %d failed: UnknownError: %r",
                    self.remote_address,
                    request.request_id,
                    error,
                    exc_info=error,
                )
                code = "UnknownError"
            else:
                log.info("[%s] Request %d failed: %s: %s", self.remote_address, request.request_id, code, error)
            self.write(commands.get_or_create_schema_response(request.request_id, error_code=code, message=str(error)))
            return
        self.write(commands.get_or_create_schema_response(request.request_id, version))


def _declared_schema(request: Any) -> SchemaData | None:
    """The schema a PRODUCER declares; none for no schema or type None (the clients send BYTES so)."""
    if not request.HasField("schema"):
        return None
    schema = from_wire(request.schema)
    return None if schema.type == "NONE" else schema


class _NotAllowed(CoreError):
    server_error = "NotAllowedError"
