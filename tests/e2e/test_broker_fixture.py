"""The broker fixture leaves no broker process behind: not when a broker does not get ready, not when the
test run itself is killed."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

# tests/conftest.py under a name of its own: `import conftest` finds whichever directory's conftest the run
# collected last.
_PATH = Path(__file__).resolve().parents[1] / "conftest.py"
_SPEC = importlib.util.spec_from_file_location("magnetar_tests_conftest", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
conftest = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(conftest)


def _gone(pid: int, within_s: float = 20) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A child of this process stays a zombie until reaped; it no longer runs.
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def test_a_broker_that_is_not_ready_in_time_is_killed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "START_TIMEOUT_S", 0.0)
    broker = conftest.BrokerProcess(tmp_path / "data", {})
    with pytest.raises(RuntimeError, match="not ready"):
        broker.start()
    assert broker.process is not None
    assert broker.process.poll() is not None


def test_a_killed_test_run_takes_its_brokers_with_it(tmp_path: Path) -> None:
    """A process that started a broker is SIGKILLed, as a CI timeout or a Ctrl-C'd run would end it."""
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        import importlib.util
        spec = importlib.util.spec_from_file_location("magnetar_tests_conftest", {str(_PATH)!r})
        conftest = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(conftest)
        broker = conftest.BrokerProcess(Path({str(tmp_path / "data")!r}), {{}})
        broker.start()
        print(broker.process.pid, flush=True)
        time.sleep(600)
        """
    )
    runner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert runner.stdout is not None
        broker_pid = int(runner.stdout.readline())
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        assert _gone(broker_pid), f"broker {broker_pid} outlived the process that started it"
    finally:
        if runner.poll() is None:
            runner.kill()
