"""Runs the real `magnetar` command in a child process, as a user or a script would, for the CLI tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

COMMAND_TIMEOUT_S = 60


def magnetar(
    *args: str, timeout: float = COMMAND_TIMEOUT_S, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`magnetar ARGS…` with stdout and stderr captured (so stdout is not a terminal: JSON by default);
    `env` adds environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "magnetar.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=os.environ | env if env else None,
    )


def ok(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a command that must succeed."""
    result = magnetar(*args)
    assert result.returncode == 0, f"magnetar {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    return result


def ok_json(*args: str) -> Any:
    """Run a command that must succeed and answer JSON on stdout."""
    return json.loads(ok(*args).stdout)


def fails(*args: str, code: int = 1) -> str:
    """Run a command that must fail with `code`, without a traceback; returns its stderr."""
    result = magnetar(*args)
    assert result.returncode == code, f"magnetar {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr
