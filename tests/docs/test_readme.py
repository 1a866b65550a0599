"""The README's commands, run in order as a new user runs them, against a broker process of the test's own.

What runs: every ```sh and ```python block of README.md, in the order they appear (plain ``` blocks, such
as `make run` and the simulator's transcripts, are not commands to run). A block right after the comment
`<!-- readme-test: make soak only, … -->` runs only under `make soak` (MAGNETAR_README_SOAK=1): the Spark
example, as a local Spark session alone takes 10 to 30 s to start. Python blocks run on this venv's
interpreter with the README's broker URLs rewritten to the test broker's; sh blocks run in bash with
`set -e -o pipefail` (a failing command in a pipeline fails the block), `.venv/bin/magnetar` as from the
repository's root, and MAGNETAR_SERVICE_URL / MAGNETAR_ADMIN_URL pointing at the test broker.
Every block's exit code and key output are checked; a block added to the README needs its check here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SOAK_MARK = "<!-- readme-test: make soak only"
DEFAULT_SERVICE_URL = "pulsar://127.0.0.1:6650"
DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
BLOCK_TIMEOUT_S = 120
SPARK_TIMEOUT_S = 600
KEY_SHARED_LINE = re.compile(r"^(?P<consumer>\S+) (?P<key>customer-\d+) b'order (?P<number>\d+)'$")


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    line: int
    soak_only: bool


def readme_blocks(text: str) -> list[Block]:
    """The fenced ```sh and ```python blocks, in order; other fences are skipped whole."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            language = line[3:].strip()
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            if language in ("sh", "python"):
                soak_only = index > 0 and lines[index - 1].startswith(SOAK_MARK)
                blocks.append(Block(language, "\n".join(lines[index + 1 : end]) + "\n", index + 1, soak_only))
            index = end
        index += 1
    return blocks


def test_readme_blocks_are_found_in_order() -> None:
    """The README's commands as this test knows them: a block added, removed or unmarked shows here first."""
    blocks = readme_blocks(README.read_text())
    assert [(block.language, block.soak_only) for block in blocks] == [
        ("python", False),  # two Key_Shared consumers on `orders`
        ("sh", False),  # the CLI on `payments`
        ("sh", False),  # deduplication on for the Spark sink's target
        ("python", True),  # the Spark query `orders` -> `orders-upper`
    ]
    assert "```sh" not in "\n".join(block.code for block in blocks)


def run_block(block: Block, broker, workdir: Path, timeout: float = BLOCK_TIMEOUT_S) -> subprocess.CompletedProcess:
    env = os.environ | {
        "MAGNETAR_SERVICE_URL": broker.url,
        "MAGNETAR_ADMIN_URL": broker.http_url,
    }
    if block.language == "sh":
        # The README's commands name .venv/bin/magnetar, as from the repository's root after `make run`.
        venv_bin = workdir / ".venv" / "bin"
        if not venv_bin.exists():
            venv_bin.parent.mkdir(exist_ok=True)
            venv_bin.symlink_to(Path(sys.executable).parent)
        command = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    else:
        assert DEFAULT_SERVICE_URL in block.code, f"README line {block.line}: the URL to rewrite is not there"
        code = block.code.replace(DEFAULT_SERVICE_URL, broker.url).replace(DEFAULT_ADMIN_URL, broker.http_url)
        command = [sys.executable, "-c", code]
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"README line {block.line} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


def check_key_shared_example(result: subprocess.CompletedProcess) -> None:
    """100 orders of 10 customers, each customer's at one consumer and in the order sent; nothing else in
    the output (the client's INFO log among the lines was the first thing a new user saw)."""
    lines = result.stdout.splitlines()
    assert [line for line in lines if not KEY_SHARED_LINE.match(line)] == []
    assert " INFO " not in result.stderr, result.stderr
    received = [match.groupdict() for line in lines if (match := KEY_SHARED_LINE.match(line))]
    assert sorted(int(r["number"]) for r in received) == list(range(100))
    consumers_of: dict[str, set[str]] = {}
    numbers_of: dict[str, list[int]] = {}
    for r in received:
        consumers_of.setdefault(r["key"], set()).add(r["consumer"])
        numbers_of.setdefault(r["key"], []).append(int(r["number"]))
    assert all(len(consumers) == 1 for consumers in consumers_of.values()), consumers_of
    assert all(numbers == sorted(numbers) for numbers in numbers_of.values()), numbers_of


def check_cli_example(stdout: str) -> None:
    """produce says 2 produced, consume prints both messages of customer-1 in order, the backlog is 0."""
    lines = stdout.splitlines()
    records = [json.loads(line) for line in lines[:-1]]
    assert [r["produced"] for r in records if "produced" in r] == [2]
    consumed = [r for r in records if "content" in r]
    assert [(r["key"], r["content"]) for r in consumed] == [("customer-1", "created"), ("customer-1", "paid")]
    assert lines[-1] == "0"


def deduplication_applied(broker, topic: str) -> bool:
    url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/deduplicationEnabled?applied=true"
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def run_quick_blocks(blocks: list[Block], broker, workdir: Path) -> None:
    key_shared, cli, deduplication = (block for block in blocks if not block.soak_only)
    check_key_shared_example(run_block(key_shared, broker, workdir))
    check_cli_example(run_block(cli, broker, workdir).stdout)
    run_block(deduplication, broker, workdir)
    assert deduplication_applied(broker, "orders-upper")


def test_readme_commands_run_in_order(broker_factory, tmp_path) -> None:
    """The examples in order on one broker; then Ctrl-C stops the broker with exit code 0, as the README says."""
    broker = broker_factory()
    run_quick_blocks(readme_blocks(README.read_text()), broker, tmp_path)
    broker.process.send_signal(signal.SIGINT)
    assert broker.process.wait(timeout=30) == 0
    assert broker.output().rstrip().endswith("magnetar stopped")


@pytest.mark.skipif(
    os.environ.get("MAGNETAR_README_SOAK") != "1",
    reason="the README's Spark example: a local Spark session alone takes 10 to 30 s to start; make soak runs it",
)
def test_readme_spark_example(broker_factory, tmp_path) -> None:
    blocks = readme_blocks(README.read_text())
    broker = broker_factory()
    run_quick_blocks(blocks, broker, tmp_path)
    (spark,) = (block for block in blocks if block.soak_only)
    result = run_block(spark, broker, tmp_path, timeout=SPARK_TIMEOUT_S)
    assert "100 orders in orders-upper, the first: b'ORDER " in result.stdout, result.stdout
