"""`magnetar standalone`'s log as an operator follows it: a broker process, the official client, and the
lines its session leaves (connections, producers, consumers, subscriptions, topics, errors at INFO; the
Key_Shared ranges, draining hashes and redeliveries at DEBUG); and the `--log-level` option and the
`logLevel` setting.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pulsar
import pytest
from cli_runner import fails

# The broker writes a line moments after the client's call returns: wait for it, up to this long.
LOG_WAIT_S = 10
START_TIMEOUT_S = 20
READY = re.compile(r"magnetar ready in \d+ ms")


def wait_for(broker, text: str) -> str:
    """The broker's output once it holds `text` (or after LOG_WAIT_S; the caller's assert says what is missing)."""
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        output = broker.output()
        if text in output or time.monotonic() > deadline:
            return output
        time.sleep(0.02)


def in_order(output: str, lines: list[str]) -> None:
    """Each of `lines` is in `output`, after the one before it."""
    position = 0
    for line in lines:
        found = output.find(line, position)
        assert found >= 0, f"missing after offset {position}: {line!r}\n{output}"
        position = found + len(line)


def flat(text: str) -> str:
    """Rich's error panel wraps and frames long messages: compare words only."""
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


def test_info_log_follows_a_client_session(broker_factory, client_factory, topic) -> None:
    broker = broker_factory()
    client = client_factory(broker.url)
    consumer = client.subscribe(topic, "billing", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="reader-1")
    producer = client.create_producer(topic, producer_name="shop-1")
    producer.send(b"order", partition_key="customer-1")
    consumer.acknowledge(consumer.receive(timeout_millis=5000))
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic, producer_name="shop-1")
    consumer.close()
    producer.close()
    client.close()

    created = re.search(r"\[(/127\.0\.0\.1:\d+)\] Created producer on topic ", wait_for(broker, "Created producer"))
    assert created, broker.output()
    peer = created.group(1)
    output = wait_for(broker, f"[{peer}] Closed connection")
    in_order(
        output,
        [
            f"New connection from {peer}",
            f"[{peer}] Connected with clientVersion=Pulsar-",
            f"[{topic}] Created topic in ",
            f"[{peer}] Created subscription on topic {topic} / billing (durable, initial position latest)",
            f"[{peer}] Created consumer on topic {topic} / billing: subscriptionType=Key_Shared, "
            "consumerName=reader-1, consumerId=0",
            f"[{peer}] Created producer on topic {topic}: producerName=shop-1, producerId=0, accessMode=Shared",
            f"[{peer}] Request ",
            "failed: ProducerBusy: Producer with name 'shop-1' is already connected to topic",
            f"[{peer}] Closed consumer on topic {topic} / billing: subscriptionType=Key_Shared, "
            "consumerName=reader-1, consumerId=0, closed by client",
            f"[{peer}] Closed producer on topic {topic}: producerName=shop-1, producerId=0, closed by client",
            f"[{peer}] Closed connection: client closed",
        ],
    )
    assert " DEBUG " not in output


def test_broker_shutdown_closes_clients_and_says_so(broker_factory, client_factory, topic, tmp_path) -> None:
    broker = broker_factory()
    # The client reconnects to the stopped broker and logs its failure: keep that out of the test's output.
    client = client_factory(
        broker.url, logger=pulsar.FileLogger(pulsar.LoggerLevel.Error, str(tmp_path / "client.log"))
    )
    client.create_producer(topic, producer_name="shop-2")
    client.subscribe(topic, "billing", consumer_name="reader-2")
    assert broker.stop() == 0
    output = broker.output()
    assert f"Closed producer on topic {topic}: producerName=shop-2, producerId=0, closed by broker" in output
    assert f"Closed consumer on topic {topic} / billing: subscriptionType=Exclusive, consumerName=reader-2" in output
    assert "Closed connection: broker shutdown" in output


def test_debug_log_shows_key_shared_ranges_draining_and_redelivery(broker_factory, client_factory, topic) -> None:
    """The `logLevel` setting (here through -c) at debug: a second Key_Shared consumer joins while the first
    holds every key unacked; the ranges after the change and the hashes that start draining are logged."""
    broker = broker_factory(logLevel="debug")
    client = client_factory(broker.url)
    first = client.subscribe(topic, "billing", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="first")
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(f"order {i}".encode(), partition_key=f"customer-{i}")
    for _ in range(40):
        first.receive(timeout_millis=5000)  # held, not acked
    second = client.subscribe(topic, "billing", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="second")

    output = wait_for(broker, "Draining started")
    joined = re.search(
        rf"\[/127\.0\.0\.1:\d+\] Key_Shared ranges on topic {re.escape(topic)} / billing "
        r"after consumer second \(consumerId=\d+\) joined: (.*)",
        output,
    )
    assert joined, output
    assert re.search(r"second \(/127\.0\.0\.1:\d+, consumerId=\d+\): \d+ ranges, \d+ hashes \[", joined.group(1))
    assert re.search(r"first \(/127\.0\.0\.1:\d+, consumerId=\d+\): \d+ ranges, \d+ hashes \[", joined.group(1))
    assert re.search(rf"\[{re.escape(topic)}\]\[billing\] Draining started for \d+ hash(es)? of consumer first", output)

    first.redeliver_unacknowledged_messages()
    output = wait_for(broker, "Redelivering all")
    assert f"Redelivering all unacknowledged messages on topic {topic} / billing for consumer first" in output

    second.close()
    output = wait_for(broker, "left: first")
    assert re.search(r"after consumer second \(consumerId=\d+\) left: first \(.*\): 1 range, 65535 hashes", output)


def test_log_level_errors_name_the_accepted_levels(tmp_path: Path) -> None:
    message = flat(fails("standalone", "--log-level", "verbose", code=2))
    assert (
        "--log-level" in message and "'verbose' is not a log level: use one of debug, info, warning, error" in message
    )
    assert "logLevel: 'loud' is not a log level" in flat(fails("standalone", "-c", "logLevel=loud", code=2))
    conf = tmp_path / "broker.conf"
    conf.write_text("logLevel=loud\n")
    assert "logLevel: 'loud' is not a log level" in flat(fails("standalone", "--config", str(conf), code=2))


def test_log_level_option_overrides_the_setting(tmp_path: Path) -> None:
    """The file says warning, so the INFO line "magnetar ready" appears only because --log-level (in any
    case) says info."""
    conf = tmp_path / "broker.conf"
    conf.write_text("logLevel=warning\n")
    log_path = tmp_path / "broker.log"
    args = [sys.executable, "-m", "magnetar.cli.main", "standalone", "--config", str(conf), "--log-level", "INFO"]
    args += ["--data-dir", str(tmp_path / "data"), "--port", "0", "--http-port", "0"]
    with open(log_path, "w") as log:
        process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not READY.search(log_path.read_text()) and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert READY.search(log_path.read_text()), log_path.read_text()
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
