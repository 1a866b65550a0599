"""`magnetar produce` and `magnetar consume`: pulsar-client's two commands, on the official `pulsar` client.

Owns: reading messages from options and files, pacing to a rate, printing received messages (Pulsar's
"----- got message -----" text, or JSON lines for scripts), and progress on long runs (a rich bar on a
terminal, a plain line per interval otherwise, both on stderr so stdout keeps the data), and a failure
as one line with its cause (an unreachable broker at once, a refused topic within OPERATION_TIMEOUT_S)
and exit code 1. Must not touch: the broker; it is a network client like any other.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar
from urllib.parse import urlsplit

import typer

from magnetar.cli.auth_options import AuthParams, AuthPlugin, Credentials, TlsAllowInsecure, TlsTrustCertPath
from magnetar.cli.output import error

__all__ = ["consume", "produce", "split_messages"]

T = TypeVar("T")

DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
# A run shorter than this shows no progress at all; after it, a plain line per interval or a bar
# redrawn ten times a second.
PROGRESS_INTERVAL_S = 1.0
BAR_REFRESH_S = 0.1
# How soon a consume notices Ctrl-C while no message arrives.
RECEIVE_POLL_MS = 500
# The client's own deadline for connecting, looking a topic up and creating the producer or consumer, each
# answered in milliseconds by a reachable broker. The client retries a refused lookup until this passes
# (its default is 30 s), so it bounds how long a command that cannot start keeps the user waiting.
OPERATION_TIMEOUT_S = 5
# How long the check that some broker of the service URL accepts a TCP connection waits for one.
CONNECT_TIMEOUT_S = 3
# The client's log line, `2026-11-26 01:01:17.716 ERROR [thread] File:line | [local -> remote] text`: its text.
CLIENT_LOG_TEXT = re.compile(r"^\S+ \S+ (?:WARN|ERROR)\s.*? \| (?:\[[^\]]*\] )?(?P<text>.*?)(?: -- req_id: \d+)?$")


class SubscriptionType(str, Enum):
    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    Key_Shared = "Key_Shared"


class SubscriptionPosition(str, Enum):
    Latest = "Latest"
    Earliest = "Earliest"


class TextFormat(str, Enum):
    json = "json"
    text = "text"


ServiceUrl = Annotated[
    str, typer.Option("--service-url", "--url", envvar="MAGNETAR_SERVICE_URL", help="the broker's pulsar:// URL")
]
OutputOption = Annotated[
    TextFormat | None,
    typer.Option("--output", "-o", help="json (one object a line) or text (default: json unless stdout is a terminal)"),
]


def split_messages(messages: list[str], separator: str) -> list[str]:
    """Each -m value holds one or more messages split by the separator, as pulsar-client reads them."""
    if not separator:
        return list(messages)
    return [part for value in messages for part in value.split(separator)]


def _unreachable(service_url: str) -> str | None:
    """Why no host of a pulsar:// or pulsar+ssl:// URL accepts a TCP connection, or None when one does (or
    the URL is not one the check reads; the client then judges it). A dead broker is reported at once: the
    client would retry it for its whole operation timeout."""
    scheme, separator, rest = service_url.partition("://")
    if not separator or scheme not in ("pulsar", "pulsar+ssl"):
        return None
    default_port = 6651 if scheme == "pulsar+ssl" else 6650
    reason = None
    for address in rest.split("/", 1)[0].split(","):
        if address.startswith("["):
            host, _, port = address[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = address.partition(":")
        try:
            socket.create_connection((host, int(port or default_port)), timeout=CONNECT_TIMEOUT_S).close()
        except ValueError:
            return None
        except OSError as failure:
            reason = failure.strerror or str(failure) or type(failure).__name__
            continue
        return None
    return reason


def _check_broker(service_url: str, topic: str, credentials: Credentials) -> int | None:
    """Ask the broker once whether it takes this command's credentials and topic, before the official
    client meets it; return its maxMessageSize (None when the URL names several hosts or no answer came:
    the client then judges). A refusal ends the command with the broker's answer in one line. The
    official client retries a refused CONNECT and a refused lookup (AuthenticationError, InvalidTopicName,
    AuthorizationError) until its operation timeout and then reports only a Timeout; magnetar's own
    client asks once, with the same credentials, and reads the broker's answer."""
    from magnetar.client.security import ClientSecurity
    from magnetar.client.wire import BrokerError, Connection, ConnectionLost, ReadTimeout

    url = urlsplit(service_url)
    try:
        if url.scheme not in ("pulsar", "pulsar+ssl") or "," in url.netloc or not url.port:
            return None
    except ValueError:
        return None
    try:
        security = ClientSecurity.from_options(
            credentials.plugin, credentials.params, credentials.trust_path, credentials.allow_insecure
        )
    except (OSError, ValueError) as failure:
        raise typer.BadParameter(str(failure), param_hint="--auth-params") from None
    try:
        with Connection(service_url, timeout_s=OPERATION_TIMEOUT_S, security=security) as connection:
            connection.partitions(topic)
            return connection.max_message_size
    except BrokerError as failure:
        refusal = (
            str(failure) if failure.code != "AuthenticationError" else _authentication_refusal(service_url, credentials)
        )
    except ConnectionLost as failure:
        refusal = str(failure)
    except (ReadTimeout, ValueError):
        return None
    error(refusal)
    raise typer.Exit(1)


def _authentication_refusal(service_url: str, credentials: Credentials) -> str:
    # The broker keeps the reason in its log (Pulsar's ServerCnx answers only "Unable to authenticate").
    if credentials.plugin:
        return (
            f"AuthenticationError: the broker at {service_url} refused the credentials of --auth-plugin "
            "and --auth-params (the broker's log says why)"
        )
    return (
        f"AuthenticationError: the broker at {service_url} requires credentials: give them with "
        "--auth-plugin and --auth-params"
    )


def _client_cause(log_path: Path) -> str | None:
    """The first warning or error the client logged: the cause (the broker's answer, a refused connection),
    where the exception it raises names only the result (often just Timeout, after the retries)."""
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        match = CLIENT_LOG_TEXT.match(line)
        if match:
            return match.group("text")
    return None


def _with_client(service_url: str, topic: str, work: Callable[[Any, int | None], T], credentials: Credentials) -> T:
    """Run `work(client, max_message_size)` with an official client that is always closed; a client error ends the command
    with one line on stderr (the error and its cause from the client's log) and exit code 1, never a
    traceback. The client logs to a file of its own, read only on failure: its console logger would print
    every retry, on stdout, among the data. A broker that is not there, or refuses the credentials or the
    topic, is reported at once, before the client would retry it for its whole operation timeout."""
    import pulsar

    reason = _unreachable(service_url)
    if reason is not None:
        error(f"cannot connect to a broker at {service_url}: {reason}")
        raise typer.Exit(1)
    max_message_size = _check_broker(service_url, topic, credentials)
    with tempfile.TemporaryDirectory(prefix="magnetar-client-") as log_dir:
        log_path = Path(log_dir) / "client.log"
        try:
            client = pulsar.Client(
                service_url,
                operation_timeout_seconds=OPERATION_TIMEOUT_S,
                logger=pulsar.FileLogger(pulsar.LoggerLevel.Warn, str(log_path)),
                **credentials.client_options(),
            )
        except pulsar.PulsarException as failure:
            error(f"{service_url}: {failure}")
            raise typer.Exit(1) from None
        try:
            return work(client, max_message_size)
        except pulsar.PulsarException as failure:
            error(f"{type(failure).__name__}: {_client_cause(log_path) or failure}")
            raise typer.Exit(1) from None
        finally:
            client.close()


def _wants_json(fmt: TextFormat | None) -> bool:
    return fmt == TextFormat.json or (fmt is None and not sys.stdout.isatty())


class RunProgress:
    """Progress of a long run on stderr: a rich bar on a terminal, one plain line per interval otherwise.

    `advance()` runs once per message: it only counts and compares a clock, drawing at most once per
    interval, so progress costs nothing measurable next to a send or a receive.
    """

    def __init__(self, verb: str, total: int | None) -> None:
        self.verb = verb
        self.total = total
        self.count = 0
        self._started = time.monotonic()
        self._next_report = self._started + PROGRESS_INTERVAL_S
        self._reported_count = 0
        self._reported_at = self._started
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> RunProgress:
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def advance(self, count: int = 1) -> None:
        self.count += count
        now = time.monotonic()
        if now < self._next_report:
            return
        if sys.stderr.isatty():
            self._draw()
            self._next_report = now + BAR_REFRESH_S
            return
        rate = (self.count - self._reported_count) / (now - self._reported_at)
        of_total = f"/{self.total:,}" if self.total else ""
        print(f"{self.verb}: {self.count:,}{of_total} messages, {rate:,.0f} msg/s", file=sys.stderr, flush=True)
        self._reported_count, self._reported_at = self.count, now
        self._next_report = now + PROGRESS_INTERVAL_S

    def _draw(self) -> None:
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            # Printed messages go above the bar only when stdout is the same terminal; a piped stdout
            # must not be captured into the stderr console.
            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                console=Console(stderr=True),
                transient=True,
                redirect_stdout=sys.stdout.isatty(),
                redirect_stderr=False,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.verb, total=self.total)
        rate = self.count / self.seconds
        self._bar.update(self._task, completed=self.count, description=f"{self.verb} {rate:,.0f} msg/s")

    @property
    def seconds(self) -> float:
        return time.monotonic() - self._started


def _pace(rate: float, index: int, started: float) -> None:
    if rate > 0:
        ahead = started + index / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)


def _properties(pairs: list[str]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{pair!r} is not key=value", param_hint="--properties")
        properties[key] = value
    return properties


def produce(
    topic: Annotated[str, typer.Argument(help="the topic to publish to")],
    messages: Annotated[
        list[str] | None, typer.Option("--messages", "-m", help="message text; several split by the separator")
    ] = None,
    files: Annotated[
        list[Path] | None, typer.Option("--files", "-f", help="files whose whole content is one message each")
    ] = None,
    num_produce: Annotated[int, typer.Option("--num-produce", "-n", help="send all the messages this many times")] = 1,
    rate: Annotated[float, typer.Option("--rate", "-r", help="messages per second; 0 = as fast as possible")] = 0,
    separator: Annotated[str, typer.Option("--separator", "-s", help="splits each -m value into messages")] = ",",
    key: Annotated[str | None, typer.Option("--key", "-k", help="partition key of every message")] = None,
    properties: Annotated[
        list[str] | None, typer.Option("--properties", "-p", help="key=value, on every message (repeatable)")
    ] = None,
    disable_batching: Annotated[bool, typer.Option("--disable-batching", "-db", help="one entry per message")] = False,
    service_url: ServiceUrl = DEFAULT_SERVICE_URL,
    output: OutputOption = None,
    auth_plugin: AuthPlugin = None,
    auth_params: AuthParams = None,
    tls_trust_cert_path: TlsTrustCertPath = None,
    tls_allow_insecure: TlsAllowInsecure = False,
) -> None:
    """Publish messages, as `pulsar-client produce` does."""
    payloads = _payloads(messages or [], files or [], separator)
    if num_produce < 1:
        raise typer.BadParameter("must be at least 1", param_hint="--num-produce")
    message_properties = _properties(properties or [])
    total = len(payloads) * num_produce

    def send_all(client: Any, max_message_size: int | None) -> tuple[list[str], float, int | None]:
        import pulsar

        producer = client.create_producer(topic, batching_enabled=not disable_batching, block_if_queue_full=True)
        failures: list[str] = []
        receipts = [0]

        def receipt(result: Any, _message_id: Any) -> None:
            # One io thread runs every callback, so the counters need no lock.
            receipts[0] += 1
            if result != pulsar.Result.Ok:
                failures.append(result.name)

        with RunProgress("produce", total) as progress:
            started = time.monotonic()
            for index in range(total):
                _pace(rate, index, started)
                producer.send_async(
                    payloads[index % len(payloads)], receipt, properties=message_properties, partition_key=key
                )
                progress.advance()
            producer.flush()
            while receipts[0] < total:
                time.sleep(0.001)
        producer.close()
        return failures, progress.seconds, max_message_size

    failures, seconds, max_message_size = _with_client(
        service_url, topic, send_all, Credentials(auth_plugin, auth_params, tls_trust_cert_path, tls_allow_insecure)
    )
    produced = total - len(failures)
    if _wants_json(output):
        print(json.dumps({"topic": topic, "produced": produced, "failed": len(failures), "seconds": round(seconds, 3)}))
    else:
        print(f"{produced} messages successfully produced", flush=True)
    if failures:
        error(f"{len(failures)} messages failed: {_failure_cause(failures[0], payloads, max_message_size)}")
        raise typer.Exit(1)


def _payloads(messages: list[str], files: list[Path], separator: str) -> list[bytes]:
    """The messages of -m (split by the separator) and the files of -f, in that order; at least one."""
    payloads = [text.encode() for text in split_messages(messages, separator)]
    for path in files:
        try:
            payloads.append(path.read_bytes())
        except OSError as failure:
            raise typer.BadParameter(f"cannot read {path}: {failure.strerror}", param_hint="--files") from None
    if not payloads:
        raise typer.BadParameter("give messages with -m or files with -f")
    return payloads


def _failure_cause(cause: str, payloads: list[bytes], max_message_size: int | None) -> str:
    """The client's result name, with the sizes when a message was too big for the broker."""
    if cause == "MessageTooBig" and max_message_size:
        largest = max(len(payload) for payload in payloads)
        cause += f": the largest message has {largest:,} bytes, the broker takes {max_message_size:,} (maxMessageSize)"
    return cause


def _message_id(message: Any) -> str:
    """Pulsar's text form: ledger:entry:partition, with :batchIndex for a message of a batch."""
    mid = message.message_id()
    text = f"{mid.ledger_id()}:{mid.entry_id()}:{mid.partition()}"
    return f"{text}:{mid.batch_index()}" if mid.batch_index() >= 0 else text


def _as_json(message: Any, hex_dump: bool, hide_content: bool) -> str:
    data = message.data()
    record: dict[str, Any] = {
        "messageId": _message_id(message),
        "key": message.partition_key() or None,
        "properties": message.properties(),
        "publishTime": message.publish_timestamp(),
        "eventTime": message.event_timestamp() or None,
        "redeliveryCount": message.redelivery_count(),
    }
    if not hide_content:
        if hex_dump:
            record["content"], record["encoding"] = data.hex(), "hex"
        else:
            try:
                record["content"], record["encoding"] = data.decode("utf-8"), "utf-8"
            except UnicodeDecodeError:
                record["content"], record["encoding"] = data.hex(), "hex"
    return json.dumps(record)


def _as_text(message: Any, hex_dump: bool, hide_content: bool) -> str:
    """pulsar-client's rendering: `key:[k], properties:[a=b], content:...`."""
    parts = [f"key:[{message.partition_key() or 'null'}]"]
    properties = message.properties()
    if properties:
        parts.append("properties:[" + ", ".join(f"{k}={v}" for k, v in properties.items()) + "]")
    if not hide_content:
        data = message.data()
        parts.append("content:" + (data.hex(" ") if hex_dump else data.decode("utf-8", errors="replace")))
    return "----- got message -----\n" + ", ".join(parts)


def consume(
    topic: Annotated[str, typer.Argument(help="the topic to consume from")],
    subscription_name: Annotated[str, typer.Option("--subscription-name", "-s", help="subscription name")],
    subscription_type: Annotated[
        SubscriptionType, typer.Option("--subscription-type", "-t", help="subscription type")
    ] = SubscriptionType.Exclusive,
    num_messages: Annotated[
        int, typer.Option("--num-messages", "-n", help="how many to receive and acknowledge; 0 = until Ctrl-C")
    ] = 1,
    subscription_position: Annotated[
        SubscriptionPosition,
        typer.Option("--subscription-position", "-p", help="where a new subscription starts"),
    ] = SubscriptionPosition.Latest,
    rate: Annotated[float, typer.Option("--rate", "-r", help="messages per second; 0 = as fast as they come")] = 0,
    hex_dump: Annotated[bool, typer.Option("--hex", help="show content as hex")] = False,
    hide_content: Annotated[bool, typer.Option("--hide-content", help="do not show content")] = False,
    receiver_queue_size: Annotated[int, typer.Option("--queue-size", "-q", help="receiver queue size")] = 1000,
    service_url: ServiceUrl = DEFAULT_SERVICE_URL,
    output: OutputOption = None,
    auth_plugin: AuthPlugin = None,
    auth_params: AuthParams = None,
    tls_trust_cert_path: TlsTrustCertPath = None,
    tls_allow_insecure: TlsAllowInsecure = False,
) -> None:
    """Receive and acknowledge messages, as `pulsar-client consume` does."""
    if num_messages < 0:
        raise typer.BadParameter("must be 0 (forever) or more", param_hint="--num-messages")
    as_json = _wants_json(output)
    render = _as_json if as_json else _as_text

    def receive_all(client: Any, _max_message_size: int | None) -> int:
        import pulsar

        consumer = client.subscribe(
            topic,
            subscription_name,
            consumer_type=getattr(pulsar.ConsumerType, subscription_type.value.replace("_", "")),
            initial_position=getattr(pulsar.InitialPosition, subscription_position.value),
            receiver_queue_size=receiver_queue_size,
        )
        received = 0
        # Ctrl-C ends a consume without -n: the handler only asks the loop to stop, so the consumer and
        # client close cleanly. (A KeyboardInterrupt raised inside the client's receive() escaped an
        # enclosing `except KeyboardInterrupt` in CPython 3.11 with pulsar-client 3.13.)
        stop = threading.Event()
        previous_handler = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
        try:
            with RunProgress("consume", num_messages or None) as progress:
                started = time.monotonic()
                while not stop.is_set() and (num_messages == 0 or received < num_messages):
                    _pace(rate, received, started)
                    try:
                        message = consumer.receive(RECEIVE_POLL_MS)
                    except pulsar.Timeout:
                        continue
                    print(render(message, hex_dump, hide_content), flush=True)
                    consumer.acknowledge(message)
                    received += 1
                    progress.advance()
        finally:
            signal.signal(signal.SIGINT, previous_handler)
        consumer.close()
        return received

    received = _with_client(
        service_url, topic, receive_all, Credentials(auth_plugin, auth_params, tls_trust_cert_path, tls_allow_insecure)
    )
    if not as_json:
        print(f"{received} messages successfully consumed", file=sys.stderr, flush=True)
