"""`magnetar produce` and `magnetar consume` as subprocesses against one broker process.

Each test uses its own topic; what one command produces another consumes, so the effects are checked
end to end through the broker.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import uuid

import pytest
from cli_runner import fails, ok, ok_json


@pytest.fixture
def url(module_broker) -> str:
    return module_broker.url


@pytest.fixture
def topic() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"


def consume_json(url: str, topic: str, count: int, *extra: str) -> list[dict]:
    result = ok("consume", topic, "-s", "check", "-p", "Earliest", "-n", str(count), "--service-url", url, *extra)
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_produce_splits_repeats_and_consume_receives_in_order(url, topic) -> None:
    summary = ok_json(
        "produce", topic, "-m", "a,b,c", "-m", "d", "-n", "2", "-k", "k1", "-p", "x=y", "--service-url", url
    )
    assert summary["produced"] == 8 and summary["failed"] == 0
    messages = consume_json(url, topic, 8)
    assert [m["content"] for m in messages] == list("abcdabcd")
    assert {m["key"] for m in messages} == {"k1"}
    assert all(m["properties"] == {"x": "y"} and m["encoding"] == "utf-8" for m in messages)
    assert all(m["redeliveryCount"] == 0 for m in messages)
    # Consume acknowledged them: the same subscription resumes after them.
    assert ok("produce", topic, "-m", "last", "--service-url", url).stdout
    assert [m["content"] for m in consume_json(url, topic, 1)] == ["last"]


def test_produce_files_and_separator_consume_as_text_and_hex(url, topic, tmp_path) -> None:
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\xffbin")
    result = ok(
        "produce",
        topic,
        "-m",
        "one|two",
        "-s",
        "|",
        "-f",
        str(binary),
        "--disable-batching",
        "--service-url",
        url,
        "--output",
        "text",
    )
    assert result.stdout.strip() == "3 messages successfully produced"
    text = ok("consume", topic, "-s", "t", "-p", "Earliest", "-n", "2", "--service-url", url, "-o", "text")
    assert text.stdout.splitlines() == [
        "----- got message -----",
        "key:[null], content:one",
        "----- got message -----",
        "key:[null], content:two",
    ]
    assert "2 messages successfully consumed" in text.stderr
    hexed = ok("consume", topic, "-s", "t", "-n", "1", "--hex", "--service-url", url, "-o", "text")
    assert hexed.stdout.splitlines()[1] == "key:[null], content:00 ff 62 69 6e"
    as_json = consume_json(url, topic, 3)
    assert as_json[2]["content"] == "00ff62696e" and as_json[2]["encoding"] == "hex"


@pytest.mark.parametrize("subscription_type", ["Shared", "Key_Shared", "Failover"])
def test_consume_subscription_types(url, topic, subscription_type) -> None:
    ok("produce", topic, "-m", "p,q", "-k", "same", "--service-url", url)
    result = ok(
        "consume", topic, "-s", "typed", "-t", subscription_type, "-p", "Earliest", "-n", "2", "--service-url", url
    )
    assert [json.loads(line)["content"] for line in result.stdout.splitlines()] == ["p", "q"]


def test_long_produce_reports_progress_on_stderr(url, topic) -> None:
    # 30 messages at 20 msg/s last at least 1.45 s, past the first progress interval.
    result = ok("produce", topic, "-m", "x", "-n", "30", "--rate", "20", "--service-url", url)
    assert json.loads(result.stdout)["produced"] == 30
    assert "produce: " in result.stderr and "/30 messages" in result.stderr


def test_consume_forever_ends_cleanly_on_ctrl_c(url, topic) -> None:
    ok("produce", topic, "-m", "a,b,c", "--service-url", url)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar.cli.main",
            "consume",
            topic,
            "-s",
            "forever",
            "-p",
            "Earliest",
            "-n",
            "0",
            "--service-url",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [json.loads(process.stdout.readline()) for _ in range(3)]
        process.send_signal(signal.SIGINT)
        _rest, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    assert [line["content"] for line in lines] == ["a", "b", "c"]
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    # The three were acknowledged before the interrupt: the subscription's backlog is empty.
    ok("produce", topic, "-m", "d", "--service-url", url)
    result = ok("consume", topic, "-s", "forever", "-n", "1", "--service-url", url)
    assert json.loads(result.stdout)["content"] == "d"


def test_usage_errors_exit_2() -> None:
    assert "Missing option" in fails("consume", "t", code=2)
    assert "give messages with -m or files with -f" in fails("produce", "t", code=2)
    assert "key=value" in fails("produce", "t", "-m", "x", "-p", "novalue", code=2)
    assert "cannot read" in fails("produce", "t", "-f", "/nonexistent/file", code=2)
    assert "'Bogus'" in fails("consume", "t", "-s", "s", "-t", "Bogus", code=2)


def test_broker_error_is_one_line_with_the_brokers_reason(url) -> None:
    for verb in (["produce", "-m", "x"], ["consume", "-s", "s"]):
        stderr = fails(verb[0], "persistent://no-such-tenant/ns/t", *verb[1:], "--service-url", url)
        assert stderr.splitlines() == [
            "magnetar: TopicNotFound: Received error response from server: TopicNotFound "
            "(Namespace no-such-tenant/ns does not exist)"
        ]


def test_a_topic_the_broker_refuses_to_look_up_is_one_line_with_the_reason(url) -> None:
    """The official client retries a refused lookup (InvalidTopicName is retryable to it) until its
    operation timeout and then says Timeout; the command asks the broker once and says its answer."""
    for verb in (["produce", "-m", "x"], ["consume", "-s", "s"]):
        stderr = fails(verb[0], "my topic!", *verb[1:], "--service-url", url)
        assert stderr.splitlines() == [
            "magnetar: InvalidTopicName: invalid characters in topic name 'persistent://public/default/my topic!'"
        ]


def test_no_broker_is_one_line_at_once() -> None:
    """Nothing listens on the port: the command says so instead of retrying for the operation timeout."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead = f"pulsar://127.0.0.1:{unused.getsockname()[1]}"
    for verb in (["produce", "t", "-m", "x"], ["consume", "t", "-s", "s"]):
        stderr = fails(*verb, "--service-url", dead)
        assert stderr.splitlines() == [f"magnetar: cannot connect to a broker at {dead}: Connection refused"]


def test_a_failed_send_is_reported_and_exits_1(url, topic, tmp_path) -> None:
    """A message larger than the broker accepts fails in the client (MessageTooBig): the command says how
    many failed and why, and exits 1 (it crashed with UnboundLocalError before: `error` was shadowed)."""
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (6 * 1024 * 1024))
    small = tmp_path / "small.txt"
    small.write_bytes(b"fine")
    stderr = fails("produce", topic, "-f", str(small), "-f", str(big), "--disable-batching", "--service-url", url)
    assert stderr.splitlines() == [
        "magnetar: 1 messages failed: MessageTooBig: the largest message has 6,291,456 bytes, the broker takes "
        "5,242,880 (maxMessageSize)"
    ]
    assert "Traceback" not in stderr
