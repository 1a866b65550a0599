"""A `magnetar standalone` process for the e2e benchmarks: fresh data directory, free ports, its CPU time.

The same approach as the e2e tests' harness (start the CLI, wait for its READY line), kept apart so
that benchmarks never import the test suite.
"""

from __future__ import annotations

import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

READY = re.compile(r"magnetar ready in \d+ ms: (pulsar://[\d.]+:(\d+)), (http://[\d.]+:(\d+))")
START_TIMEOUT_S = 20
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """utime + stime of `pid` (all its threads) or of one of its threads, from /proc."""
    path = Path(f"/proc/{pid}/stat") if thread is None else Path(f"/proc/{pid}/task/{thread}/stat")
    fields = path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def machine() -> dict:
    """What a reader needs to weigh the numbers: cores, CPU model, load when measured."""
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    models = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    model = models[0] if models else platform.processor()
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "loadavg": Path("/proc/loadavg").read_text().split()[:3],
        "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def load_line(before: dict, after: dict) -> str:
    return f"load average before {' '.join(before['loadavg'])}, after {' '.join(after['loadavg'])}"


class Broker:
    """Start with `start()`, always `stop()`; output goes to `log_path`."""

    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.settings = settings or {}
        self.log_path = data_dir.parent / f"{data_dir.name}.log"
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.http_url = ""

    def start(self) -> None:
        args = MAGNETAR + ["standalone", "--data-dir", str(self.data_dir), "--port", "0", "--http-port", "0"]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        # The broker writes to its own copy of the descriptor: ours is closed once it is started.
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = READY.search(self.log_path.read_text())
            if match:
                self.url, self.http_url = match.group(1), match.group(3)
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log_path.read_text()}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"broker not ready in {START_TIMEOUT_S} s:\n{self.log_path.read_text()}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
