"""`make run` as the README gives it: what it installs (magnetar and the broker's needs, no extras) and the
PORT, HTTP_PORT and DATA it passes on, read from make's dry run (nothing is installed or started)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(*args: str) -> str:
    """What `make -n -B ARGS` would run from a fresh clone (-B: as if nothing were installed yet)."""
    result = subprocess.run(["make", "-n", "-B", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_make_run_installs_the_broker_without_extras_and_make_setup_the_rest() -> None:
    commands = dry_run("run")
    installs = [line for line in commands.splitlines() if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [".venv/bin/pip install -e ."]
    assert ".venv/bin/magnetar standalone --data-dir data --port 6650 --http-port 8080" in commands
    assert ".venv/bin/pip install -e '.[test,bench,spark]'" in dry_run("setup")


def test_make_run_takes_other_ports_and_directory() -> None:
    commands = dry_run("run", "PORT=6651", "HTTP_PORT=8081", "DATA=data2")
    assert ".venv/bin/magnetar standalone --data-dir data2 --port 6651 --http-port 8081" in commands
