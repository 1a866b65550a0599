"""The `magnetar` entry point: its commands, the pass-through to `sim` and `perf`, `standalone`'s option
errors; and, in process, the parsing the admin commands do before a request (times, sizes, message ids,
batches in peeked answers)."""

from __future__ import annotations

import json
import re

import pytest
import typer
from cli_runner import COMMAND_TIMEOUT_S, fails, magnetar, ok

from magnetar.cli.admin import parse_message_id, parse_relative_time_s, parse_size_bytes
from magnetar.cli.client import split_messages
from magnetar.cli.rest import decode_messages
from magnetar.protocol.messages import encode_batch
from magnetar.protocol.pulsar_api_pb2 import KeyValue, SingleMessageMetadata


def test_no_command_shows_every_command() -> None:
    result = magnetar()
    assert result.returncode == 2
    for command in ("standalone", "admin", "produce", "consume", "sim", "perf"):
        assert command in result.stdout + result.stderr


def test_offline_topics_command_is_gone() -> None:
    assert "No such command 'topics'" in fails("topics", "create-partitioned-topic", "t", "-p", "2", code=2)


def test_sim_receives_its_arguments_untouched() -> None:
    result = ok("sim", "--seed", "3", "--mode", "pip379")
    assert "SEED=3" in result.stdout
    assert "reproduce with: magnetar sim --seed 3 --mode pip379" in result.stdout
    assert "usage: magnetar sim" in ok("sim", "--help").stdout


def test_perf_runs_with_its_own_options(module_broker, tmp_path) -> None:
    assert "usage: magnetar perf produce" in ok("perf", "produce", "--help").stdout
    summary_path = tmp_path / "perf.json"
    ok(
        "perf",
        "produce",
        "--service-url",
        module_broker.url,
        "--topic",
        "cli-perf",
        "--messages",
        "50",
        "--json",
        str(summary_path),
    )
    summary = json.loads(summary_path.read_text())
    assert summary["messages"] == 50 and summary["failures"] == 0


def test_standalone_option_errors() -> None:
    assert "-c takes KEY=VALUE" in fails("standalone", "-c", "bogus", code=2)
    assert "No such file" in fails("standalone", "--config", "/nonexistent/broker.conf", code=2)
    assert "unknown" in fails("standalone", "-c", "noSuchSetting=1", code=2).lower()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("3h", 10_800), ("2d", 172_800), ("5w", 3_024_000), ("1y", 31_536_000)],
)
def test_relative_times_as_pulsar_reads_them(text: str, seconds: int) -> None:
    assert parse_relative_time_s(text) == seconds


@pytest.mark.parametrize(
    ("text", "size"), [("4096", 4096), ("10M", 10 << 20), ("16g", 16 << 30), ("3T", 3 << 40), ("-1", -1)]
)
def test_sizes_as_pulsar_reads_them(text: str, size: int) -> None:
    assert parse_size_bytes(text) == size


@pytest.mark.parametrize("text", ["", "m", "-5m", "1.5h", "3 days"])
def test_bad_times_are_refused(text: str) -> None:
    with pytest.raises(typer.BadParameter):
        parse_relative_time_s(text)


def test_message_ids() -> None:
    assert parse_message_id("12:34") == {"ledgerId": 12, "entryId": 34, "partitionIndex": -1}
    for text in ("12", "12:34:0", "a:b"):
        with pytest.raises(typer.BadParameter):
            parse_message_id(text)


def test_split_messages_like_pulsar_client() -> None:
    assert split_messages(["a,b", "c"], ",") == ["a", "b", "c"]
    assert split_messages(["a,b"], "|") == ["a,b"]
    assert split_messages(["a,b"], "") == ["a,b"]


def test_decode_a_peeked_batch_into_messages() -> None:
    first = SingleMessageMetadata(payload_size=2, partition_key="k", sequence_id=7)
    first.properties.append(KeyValue(key="a", value="b"))
    second = SingleMessageMetadata(payload_size=3)
    body = encode_batch([(first, b"hi"), (second, b"\xff\x00\x01")])
    headers = {"x-pulsar-message-id": "5:9", "x-pulsar-num-batch-message": "2", "x-pulsar-publish-time": "t"}
    decoded = decode_messages(headers, body)
    assert [m["messageId"] for m in decoded] == ["5:9:0", "5:9:1"]
    assert decoded[0]["key"] == "k" and decoded[0]["sequenceId"] == 7
    assert decoded[0]["properties"] == {"a": "b"} and decoded[0]["payload"] == "hi"
    assert decoded[1]["encoding"] == "base64" and decoded[1]["payload"] == "/wAB"


def test_decode_a_single_message_prefers_the_json_properties_header() -> None:
    headers = {
        "x-pulsar-message-id": "1:2",
        "x-pulsar-property-camelkey": "v",
        "x-pulsar-property": json.dumps({"camelKey": "v"}),
        "x-pulsar-sequence-id": "3",
        "x-pulsar-partition-key": "k",
    }
    [message] = decode_messages(headers, b"body")
    assert message["messageId"] == "1:2" and message["sequenceId"] == 3 and message["key"] == "k"
    assert message["properties"] == {"camelKey": "v"}
    assert message["payload"] == "body"


def test_version() -> None:
    from importlib.metadata import version

    assert ok("--version").stdout == f"magnetar {version('magnetar')}\n"


@pytest.mark.parametrize(
    "command", [("produce",), ("consume",), ("admin", "topics", "reset-cursor"), ("standalone",), ("tokens", "create")]
)
def test_help_at_80_columns_keeps_option_names_whole_without_python_types(command: tuple[str, ...]) -> None:
    """Plain help, as sim's and perf's argparse prints it: no box that cuts `--subscription-position` to
    `--subscription-posi…`, and metavars in capitals instead of `<bool>` or `<list[str]>`."""
    help_text = magnetar(*command, "--help", env={"COLUMNS": "80", "TERM": "xterm"}).stdout
    assert help_text.startswith(f"Usage: magnetar {' '.join(command)} [OPTIONS]"), help_text
    assert "…" not in help_text and "╭" not in help_text, help_text
    for python_type in ("<bool>", "<int>", "<float>", "<list[", "<Path>", "<str>"):
        assert python_type not in help_text, help_text
    assert "{" not in help_text.splitlines()[0], help_text  # arguments as argparse writes them: TOPIC
    assert all(len(line) <= 80 for line in help_text.splitlines()), help_text


def test_consume_help_names_every_option() -> None:
    help_text = magnetar("consume", "--help", env={"COLUMNS": "80"}).stdout
    for option in ("--subscription-name SUBSCRIPTION_NAME", "--subscription-position", "--num-messages NUM_MESSAGES"):
        assert option in help_text, help_text


def test_pulsar_admins_name_gets_a_did_you_mean() -> None:
    stderr = fails("admin", "topics", "stats-internal", "orders", code=2)
    assert "No such command 'stats-internal'. Did you mean 'internal-stats'?" in stderr


def test_sim_sweep_ends_with_its_table() -> None:
    """The examples first, the table last, so that a long sweep's table is what stays on the screen."""
    lines = ok("sim", "--schedules", "20", "--processes", "1").stdout.rstrip().splitlines()
    assert lines[-4].startswith("type        mode     schedules")
    assert [line.split()[1] for line in lines[-3:]] == ["pip379", "pip282", "classic"]


def test_sim_sweep_shows_progress_on_a_terminal() -> None:
    """On a terminal (here a pseudo-terminal) a bar on stderr counts the schedules; piped, nothing."""
    import os
    import pty
    import subprocess
    import sys

    controller, terminal = pty.openpty()
    args = [
        sys.executable,
        "-m",
        "magnetar.cli.main",
        "sim",
        "--schedules",
        "30",
        "--processes",
        "1",
        "--mode",
        "pip379",
    ]
    process = subprocess.Popen(
        args, stdin=terminal, stdout=subprocess.PIPE, stderr=terminal, env=os.environ | {"COLUMNS": "100"}
    )
    os.close(terminal)
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal's other side closed: the command ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    stdout = process.stdout.read().decode() if process.stdout else ""
    assert process.wait(timeout=COMMAND_TIMEOUT_S) == 0
    shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", shown)
    assert b"sim pip379" in shown and b"30/30 schedules" in shown, shown
    assert "schedules" in stdout and "sim pip379" not in stdout
    assert "sim pip379" not in magnetar("sim", "--schedules", "10", "--processes", "1", "--mode", "pip379").stderr
