"""`magnetar perf produce --client magnetar` against a broker process: what it sends, the official client
receives (every message once, with its key, its size and in per-key order); a broker that goes away
makes it exit non-zero."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from collections import defaultdict

import httpx
import pulsar
import pytest
from cli_runner import magnetar, ok

MESSAGES = 600
KEYS = 7
SIZE = 100


@pytest.mark.parametrize("batching", ["--batching", "--no-batching"])
def test_what_it_produces_the_official_consumer_receives_in_key_order(
    module_broker, client_factory, tmp_path, batching: str
) -> None:
    topic = f"persistent://public/default/perf-{uuid.uuid4().hex[:8]}"
    consumer = client_factory(module_broker.url).subscribe(
        topic, "check", consumer_type=pulsar.ConsumerType.Exclusive, receiver_queue_size=MESSAGES
    )
    summary_path = tmp_path / "produce.json"
    # Small batches and few sends in flight, so that batches close on size and the pending bound bites.
    ok(
        "perf",
        "produce",
        "--client",
        "magnetar",
        "--service-url",
        module_broker.url,
        "--topic",
        topic,
        "--messages",
        str(MESSAGES),
        "--keys",
        str(KEYS),
        "--size",
        str(SIZE),
        "--batching-max-messages",
        "40",
        "--max-pending",
        "100",
        batching,
        "--json",
        str(summary_path),
    )

    by_key: dict[str, list[int]] = defaultdict(list)
    batch_indexes = set()
    for _ in range(MESSAGES):
        message = consumer.receive(10_000)
        payload = message.data()
        assert len(payload) == SIZE
        index = int.from_bytes(payload[:8], "big")
        assert payload[8:] == bytes(SIZE - 8)
        assert message.partition_key() == f"key-{index % KEYS}"
        by_key[message.partition_key()].append(index)
        batch_indexes.add(message.message_id().batch_index())
        consumer.acknowledge(message)
    with pytest.raises(pulsar.Timeout):
        consumer.receive(500)
    assert {key: sorted(indexes) for key, indexes in by_key.items()} == by_key
    assert sorted(i for indexes in by_key.values() for i in indexes) == list(range(MESSAGES))

    summary = json.loads(summary_path.read_text())
    assert (summary["client"], summary["messages"], summary["failures"]) == ("magnetar", MESSAGES, 0)
    if batching == "--batching":
        # A container holds 40 messages at most, 7 keys: at most 6 in a batch, one batch per key. The first
        # container is full (nothing is pending yet); later ones may close on the delay with fewer.
        assert 7 * (MESSAGES // 40) <= summary["entries"] < MESSAGES
        assert max(batch_indexes) == 5
    else:
        assert summary["entries"] == MESSAGES
        assert batch_indexes == {-1}


def test_a_broker_that_goes_away_fails_the_run(broker_factory) -> None:
    broker = broker_factory()
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "perf",
            "produce",
            "--client",
            "magnetar",
            "--service-url",
            broker.url,
            "--topic",
            "perf-gone",
            "--messages",
            "1000000",
            "--rate",
            "500",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert run.stdout is not None
        assert run.stdout.readline().startswith("produce:")  # the first progress line: it is sending
        broker.kill()
        _out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 1
    assert "failed after" in err and "Traceback" not in err


def test_no_broker_fails_without_a_traceback() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = magnetar(
        "perf",
        "produce",
        "--client",
        "magnetar",
        "--service-url",
        f"pulsar://127.0.0.1:{port}",
        "--topic",
        "perf-nobody",
        "--messages",
        "10",
    )
    assert result.returncode == 1
    assert "cannot connect" in result.stderr and "Traceback" not in result.stderr


def consume_what_perf_produces(broker, tmp_path, consume_args: list[str], produce_args: list[str]) -> dict:
    """Run `perf consume` (2 Key_Shared consumers) while `perf produce --client magnetar` publishes
    MESSAGES; check that it exits 0 having acknowledged everything and return its summary."""
    topic = f"persistent://public/default/perf-{uuid.uuid4().hex[:8]}"
    summary_path = tmp_path / "consume.json"
    consume = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "perf",
            "consume",
            *consume_args,
            "--service-url",
            broker.url,
            "--topic",
            topic,
            "--type",
            "Key_Shared",
            "--consumers",
            "2",
            "--messages",
            str(MESSAGES),
            "--receiver-queue-size",
            "50",
            "--idle-timeout",
            "20",
            "--json",
            str(summary_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consume.stdout is not None
        assert "subscribed 2 Key_Shared consumers" in consume.stdout.readline()
        ok(
            "perf",
            "produce",
            "--client",
            "magnetar",
            "--service-url",
            broker.url,
            "--topic",
            topic,
            "--messages",
            str(MESSAGES),
            "--keys",
            str(KEYS),
            "--batching-max-messages",
            "40",
            *produce_args,
        )
        _out, err = consume.communicate(timeout=60)
    finally:
        if consume.poll() is None:
            consume.kill()
            consume.wait()
    assert consume.returncode == 0, err
    summary = json.loads(summary_path.read_text())
    assert summary["messages"] == MESSAGES
    assert sum(summary["per_consumer"]) == MESSAGES and min(summary["per_consumer"]) > 0
    # Every message was acknowledged (the official client's grouped acks leave within 100 ms, and
    # before its consumers close): nothing is left in the subscription's backlog.
    stats_url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic.rsplit('/', 1)[1]}/stats"
    assert httpx.get(stats_url).json()["subscriptions"]["perf"]["msgBacklog"] == 0
    return summary


@pytest.mark.parametrize("batching", ["--batching", "--no-batching"])
def test_consume_on_our_client_receives_and_acks_everything(module_broker, tmp_path, batching: str) -> None:
    summary = consume_what_perf_produces(module_broker, tmp_path, ["--client", "magnetar"], [batching])
    assert summary["client"] == "magnetar"
    assert summary["entries"] < MESSAGES if batching == "--batching" else summary["entries"] == MESSAGES


@pytest.mark.parametrize("batch_receive", ["0", "25"])
def test_consume_on_the_official_client_receives_and_acks_everything(
    module_broker, tmp_path, batch_receive: str
) -> None:
    summary = consume_what_perf_produces(module_broker, tmp_path, ["--batch-receive", batch_receive], [])
    assert (summary["client"], summary["batch_receive"]) == ("pulsar", int(batch_receive))


@pytest.mark.parametrize("verb", ["produce", "consume"])
def test_a_partitioned_topic_is_refused(module_broker, verb: str) -> None:
    name = f"perf-{uuid.uuid4().hex[:8]}"
    created = httpx.put(f"{module_broker.http_url}/admin/v2/persistent/public/default/{name}/partitions", json=2)
    assert created.status_code == 204
    result = magnetar(
        "perf", verb, "--client", "magnetar", "--service-url", module_broker.url, "--topic", name, "--messages", "10"
    )
    assert result.returncode == 2
    assert "non-partitioned topics only" in result.stderr
