"""A real broker process for black-box tests (e2e, admin, CLI, Spark): free ports, a temporary data directory, always stopped.

Tests talk to it only as a user would: the official `pulsar-client`, HTTP, the CLI.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pulsar
import pytest
from pulsar.exceptions import AlreadyClosed

if TYPE_CHECKING:
    from bookkeeper_fixture import BookKeeperStorage

READY = re.compile(r"magnetar ready in \d+ ms: (pulsar://[\d.]+:(\d+)), (http://[\d.]+:(\d+))")
START_TIMEOUT_S = 20


class BrokerProcess:
    """`magnetar standalone` in a child process; `restart()` keeps the data directory and the ports. With
    a `BookKeeperStorage` (tests/bookkeeper_fixture.py), `magnetar broker` of a one-broker cluster that
    stores on its bookies."""

    def __init__(self, data_dir: Path, settings: dict[str, str], storage: BookKeeperStorage | None = None) -> None:
        self.data_dir = data_dir
        self.settings = dict(settings)
        self.storage = storage
        self.cluster_settings: dict[str, str] = {}
        self.log_path = data_dir.parent / f"broker-{uuid.uuid4().hex[:6]}.log"
        self.process: subprocess.Popen | None = None
        self.url = ""
        self.http_url = ""
        self.port = 0
        self.http_port = 0

    def start(self) -> None:
        # The broker goes with the test run whatever ends it: the kernel sends it SIGTERM when the process
        # that started it exits (setpriv --pdeathsig, util-linux), so a killed run leaves no broker behind.
        args = ["setpriv", "--pdeathsig", "TERM", "--", sys.executable, "-m", "magnetar.cli.main"]
        if self.storage is None:
            args += ["standalone", "--port", str(self.port), "--http-port", str(self.http_port)]
        else:
            if not self.cluster_settings:
                self.cluster_settings = self.storage.new_broker_settings(self.settings.get("clusterName", "standalone"))
            config = self.data_dir.parent / f"{self.data_dir.name}-broker.conf"
            config.touch()
            args += ["broker", "--config", str(config)]
            ports = {"brokerServicePort": str(self.port), "webServicePort": str(self.http_port)}
            for key, value in {**self.cluster_settings, **ports}.items():
                args += ["-c", f"{key}={value}"]
        args += ["--data-dir", str(self.data_dir)]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        # The broker writes to its own copy of the descriptor: ours is closed once it is started.
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            match = READY.search(self.log_path.read_text())
            if match and (self.port == 0 or int(match.group(2)) == self.port):
                self.url, self.port = match.group(1), int(match.group(2))
                self.http_url, self.http_port = match.group(3), int(match.group(4))
                return
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.log_path.read_text()}")
            time.sleep(0.02)
        # Not ready: it must not outlive the failure it caused.
        self.kill()
        raise RuntimeError(f"broker not ready in {START_TIMEOUT_S} s:\n{self.log_path.read_text()}")

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        return code

    def kill(self) -> None:
        """kill -9: no shutdown at all."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def restart(self, kill: bool = False) -> None:
        """Stop (SIGTERM, or SIGKILL with `kill`) and start again on the same ports and data."""
        self.kill() if kill else self.stop()
        # The next READY line must be the new process's: keep the old output under another name.
        self.log_path.rename(self.log_path.with_suffix(f".{uuid.uuid4().hex[:4]}.old"))
        self.start()

    def output(self) -> str:
        return self.log_path.read_text()


@pytest.fixture(scope="module")
def broker_storage() -> BookKeeperStorage | None:
    """Where the brokers of the fixtures below store: None, each its own SQLite data directory. A module
    that reruns tests on BookKeeper overrides it."""
    return None


@pytest.fixture
def broker_factory(tmp_path: Path, broker_storage: BookKeeperStorage | None) -> Iterator:
    """Start brokers with given settings; every one is stopped at the end of the test."""
    started: list[BrokerProcess] = []

    def start(**settings: object) -> BrokerProcess:
        broker = BrokerProcess(
            tmp_path / f"data-{len(started)}", {k: str(v) for k, v in settings.items()}, broker_storage
        )
        started.append(broker)  # before it starts: whatever happens next, the teardown stops it
        broker.start()
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def broker(broker_factory) -> BrokerProcess:
    return broker_factory()


@pytest.fixture(scope="module")
def module_broker(
    tmp_path_factory: pytest.TempPathFactory, broker_storage: BookKeeperStorage | None
) -> Iterator[BrokerProcess]:
    """One default broker for a whole test module whose tests do not interfere (each uses its own names)."""
    broker = BrokerProcess(tmp_path_factory.mktemp("module-broker") / "data", {}, broker_storage)
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def module_broker_factory(
    tmp_path_factory: pytest.TempPathFactory, broker_storage: BookKeeperStorage | None
) -> Iterator:
    """Brokers with given settings shared by a module's tests, one per distinct settings (started on
    first use), all stopped at the end of the module. Saves test modules importing `conftest`, which
    resolves to another directory's conftest.py when the run collects that directory first."""
    started: dict[tuple, BrokerProcess] = {}

    def get(**settings: object) -> BrokerProcess:
        key = tuple(sorted((k, str(v)) for k, v in settings.items()))
        if key not in started:
            data_dir = tmp_path_factory.mktemp("module-brokers") / "data"
            broker = started[key] = BrokerProcess(data_dir, dict(key), broker_storage)
            broker.start()
        return started[key]

    yield get
    for broker in started.values():
        broker.stop()


@pytest.fixture
def client_factory():
    """Official clients, closed at the end of the test."""
    clients: list[pulsar.Client] = []

    def make(url: str, **options: object) -> pulsar.Client:
        options.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        options.setdefault("operation_timeout_seconds", 10)
        client = pulsar.Client(url, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(AlreadyClosed):  # a test may have closed it already
            client.close()


@pytest.fixture
def client(broker: BrokerProcess, client_factory) -> pulsar.Client:
    return client_factory(broker.url)


@pytest.fixture
def topic() -> str:
    """A fresh topic name per test."""
    return f"persistent://public/default/t-{uuid.uuid4().hex[:10]}"


# `make test` runs this tree on pytest-xdist workers, and this decides what may run beside what. The suites
# that start ZooKeeper, bookies or whole clusters (dozens of JVM threads, 5 s session timeouts) run one
# after another on one worker, so that no two clusters share the two cores at once; Spark's session is one
# JVM per worker, so its tests keep to one; every other module stays on one worker, so that a
# module-scoped broker starts once; unit tests go wherever a worker is free. (xdist's own `loadgroup` reads
# groups from the node ids it rewrites, which pytest 9 no longer lets it do: this schedules by path.)
SERIAL_GROUPS = {
    "bookkeeper": "clusters",
    "cluster": "clusters",
    "chaos": "clusters",
    "metadata": "clusters",
    "spark": "spark",
}


def schedule_group(nodeid: str) -> str:
    """The unit of scheduling a test belongs to: its group, its module, or (a unit test) itself."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if parts[0] == "tests":
        parts = parts[1:]
    if not parts or parts[0] == "unit":
        return nodeid
    return SERIAL_GROUPS.get(parts[0], path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return schedule_group(nodeid)

    return GroupScheduling(config, log)
