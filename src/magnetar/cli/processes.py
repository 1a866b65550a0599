"""Child processes of the local cluster (`magnetar local-cluster`) and of the tests' fixtures: ZooKeeper,
the bookies, magnetar's brokers and the one-shot programs that set a cluster up.

Owns: starting a child with its output in a log file of its own and in a session of its own (Ctrl-C in a
terminal reaches only the parent, which stops the children in order), tied to the parent's life (the
kernel sends it SIGTERM, or SIGKILL, when the thread that started it ends: `setpriv --pdeathsig`,
util-linux, so a killed parent leaves nothing behind); stopping by PID (SIGTERM, then SIGKILL after a timeout), kill -9,
SIGSTOP and SIGCONT; waiting until a child is ready, with the tail of its log when it exits first; free
ports and ports in use. Must not touch: what the children are (local_bookkeeper.py and local_cluster.py
say that).
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "ChildProcess",
    "PortUnavailableError",
    "ProcessStartError",
    "check_port_free",
    "free_port",
    "port_listening",
    "stop_all",
    "wait_until",
]

# Lines of a child's log shown when it failed to start: enough for a Java stack trace's cause.
LOG_TAIL_LINES = 20
POLL_INTERVAL_S = 0.05


class ProcessStartError(RuntimeError):
    """A child exited, or was not ready in time: the first line says which and why, the rest is the end of
    its log."""


class PortUnavailableError(RuntimeError):
    """A port the cluster was told to use cannot be listened on: another program holds it, or it is
    privileged."""


class ChildProcess:
    """One program run as a child, its stdout and stderr appended to `log_path` (each start adds to it).
    `death_signal` is what the kernel sends it when the parent goes (setpriv's name: TERM, KILL)."""

    def __init__(self, name: str, log_path: Path, command: Sequence[str] = (), death_signal: str = "TERM") -> None:
        self.name = name
        self.log_path = log_path
        self.command = list(command)
        self.death_signal = death_signal
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    def start(self) -> None:
        command = ["setpriv", "--pdeathsig", self.death_signal, "--", *self.command]
        # The child writes to its own copy of the descriptor: ours is closed once it is started.
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.paused = False

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.process.poll() if self.process is not None else None

    def request_stop(self) -> None:
        """SIGTERM, and SIGCONT to a paused child, which would not run its handler otherwise."""
        if not self.running:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        if self.paused:
            self.resume()

    def wait_stopped(self, deadline: float) -> None:
        """Wait for the child asked to stop until `deadline` (time.monotonic()), then SIGKILL it."""
        if self.process is None:
            return
        try:
            self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()

    def stop(self, timeout_s: float) -> None:
        self.request_stop()
        self.wait_stopped(time.monotonic() + timeout_s)

    def wait_done(self, what: str, timeout_s: float) -> None:
        """Wait for a program that runs to its end; ProcessStartError unless it ends with code 0 in time."""
        assert self.process is not None
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            error = self.failure(f"{what} in {timeout_s:g} s")
            self.kill()
            raise error from None
        if code != 0:
            raise self.failure(what)

    def kill(self) -> None:
        """kill -9: no shutdown at all."""
        if not self.running:
            return
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.paused = False

    def pause(self) -> None:
        """kill -STOP: the child neither runs nor answers, and nothing tells its peers. Returns once it is
        stopped (or has exited)."""
        if self.running:
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGSTOP)
            self._wait_state(os.WSTOPPED)
            self.paused = True

    def resume(self) -> None:
        """kill -CONT; returns once the child runs again (or has exited)."""
        if self.running:
            assert self.process is not None
            os.kill(self.process.pid, signal.SIGCONT)
            self._wait_state(os.WCONTINUED)
        self.paused = False

    def _wait_state(self, state: int) -> None:
        """Wait for the child to reach `state` or to exit; WNOWAIT leaves its status for Popen to collect."""
        assert self.process is not None
        os.waitid(os.P_PID, self.process.pid, state | os.WEXITED | os.WNOWAIT)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def failure(self, what: str) -> ProcessStartError:
        """The error of a child that did not do `what`: why in one line, then the end of its log."""
        code = self.returncode
        reason = f"exited with code {code}" if code is not None else "is still running"
        tail = "\n".join(self.output().splitlines()[-LOG_TAIL_LINES:])
        return ProcessStartError(f"{self.name} {reason} and did not {what}; the end of {self.log_path}:\n{tail}")


def wait_until(ready: Callable[[], bool], process: ChildProcess, what: str, timeout_s: float) -> None:
    """Return once `ready()` holds; ProcessStartError when `process` exits first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if ready():
            return
        if not process.running:
            raise process.failure(what)
        if time.monotonic() > deadline:
            error = process.failure(f"{what} in {timeout_s:g} s")
            process.kill()
            raise error
        time.sleep(POLL_INTERVAL_S)


def stop_all(processes: Sequence[ChildProcess], timeout_s: float) -> None:
    """SIGTERM to every one at once, then SIGKILL to those still running after `timeout_s`."""
    for process in processes:
        process.request_stop()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        process.wait_stopped(deadline)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def port_listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def check_port_free(port: int, what: str) -> None:
    """PortUnavailableError when another program holds `port` on 127.0.0.1; `what` names the port's use."""
    with socket.socket() as probe:
        # As a server binds: a port in TIME_WAIT after a stopped broker is free to listen on.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as failure:
            if failure.errno == errno.EADDRINUSE:
                raise PortUnavailableError(f"port {port} ({what}) on 127.0.0.1 is in use by another program") from None
            reason = os.strerror(failure.errno) if failure.errno else str(failure)
            raise PortUnavailableError(f"cannot listen on 127.0.0.1 port {port} ({what}): {reason}") from None
