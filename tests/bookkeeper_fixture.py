"""A local BookKeeper cluster for tests: ZooKeeper and N bookies, each its own JVM, on loopback.

Owns: `ZooKeeperServer` (one ZooKeeperServerMain, alone for the metadata store's tests or under the
bookies, and ZooKeeper's own command-line client against it), `LocalBookKeeperCluster` (free ports, data directories under one root, readiness from each
process's own log line, `initnewcluster` once, stop by PID: SIGTERM then SIGKILL, kill -9 and restart of
one bookie) and `run_java` for BookKeeper's tools (BookieShell) and compat/bookkeeper's programs. Must not
touch: magnetar's code; it is tooling, kept in tests because it launches JVMs. The jars come from
`make bookkeeper` (build/bookkeeper/classpath.txt).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[1]
CLASSPATH_FILE = REPOSITORY / "build" / "bookkeeper" / "classpath.txt"
CLASSES = REPOSITORY / "build" / "bookkeeper" / "classes"

# A bookie's line once its server accepts requests (org.apache.bookkeeper.server.Main).
BOOKIE_READY = "Started component {component=bookie-server}"
START_TIMEOUT_S = 60
DB_LEDGER_STORAGE = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
STOP_TIMEOUT_S = 15
# Small heaps and the serial collector: four JVMs share 2 cores and a few hundred MB with the tests.
JVM_OPTIONS = [
    "-Djava.net.preferIPv4Stack=true",
    "-Xms32m",
    "-Xmx128m",
    "-XX:MaxDirectMemorySize=128m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
]
LOG4J2 = """\
status = error
appender.file.type = Console
appender.file.name = out
appender.file.target = SYSTEM_ERR
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{HH:mm:ss.SSS} %-5level %c{1} - %msg %X%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = warn
"""


class MissingJava(RuntimeError):
    """Java or the BookKeeper jars are not there: the message says what to install or run."""


def classpath() -> str:
    if shutil.which("java") is None:
        raise MissingJava("java not found: the BookKeeper tests need Java 17 (apt-get install openjdk-17-jdk-headless)")
    if not CLASSPATH_FILE.exists():
        raise MissingJava(f"{CLASSPATH_FILE} is missing: run `make bookkeeper` (needs Maven 3.8+ and Java 17)")
    return f"{CLASSES}:{CLASSPATH_FILE.read_text().strip()}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _log4j_option(root: Path) -> str:
    config = root / "log4j2.properties"
    if not config.exists():
        config.write_text(LOG4J2)
    return f"-Dlog4j2.configurationFile={config}"


def run_java(root: Path, main_class: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one Java program of the BookKeeper classpath to its end; its stdout and stderr as text."""
    command = ["java", *JVM_OPTIONS, _log4j_option(root), "-cp", classpath(), main_class, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


class _Process:
    def __init__(self, name: str, log_path: Path, command: list[str]) -> None:
        self.name = name
        self.log_path = log_path
        self.command = command
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # The JVM goes with the test run whatever ends it: the kernel sends it SIGTERM when the process that
        # started it exits (setpriv --pdeathsig, util-linux), so a killed run leaves no JVM behind.
        command = ["setpriv", "--pdeathsig", "TERM", "--", *self.command]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        if not self.running:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if not self.running:
            return
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _java(root: Path, main_class: str, *args: str) -> list[str]:
    return ["java", *JVM_OPTIONS, _log4j_option(root), "-cp", classpath(), main_class, *args]


def _wait_for_port(port: int, process: _Process) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if not process.running:
            raise RuntimeError(f"{process.name} exited:\n{process.output()}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{process.name} not listening on {port} after {START_TIMEOUT_S} s:\n{process.output()}")


class ZooKeeperServer:
    """One standalone ZooKeeper 3.9 (ZooKeeperServerMain of the BookKeeper classpath) on 127.0.0.1:`port`,
    its data and log under `root`."""

    def __init__(self, root: Path, port: int | None = None) -> None:
        self.root = root
        self.port = port if port is not None else free_port()
        self._process: _Process | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Returns once the server accepts connections."""
        classpath()
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "zk-data").mkdir(exist_ok=True)
        (self.root / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={self.root / 'zk-data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,stat\n"
            "maxSessionTimeout=20000\n"
        )
        self._process = _Process(
            "zookeeper",
            self.root / "zookeeper.log",
            _java(self.root, "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.root / "zoo.cfg")),
        )
        self._process.start()
        _wait_for_port(self.port, self._process)

    def cli(self, *command: str) -> subprocess.CompletedProcess[str]:
        """ZooKeeper's own command-line client (zkCli.sh's ZooKeeperMain) running one command: `get /path`."""
        return run_java(self.root, "org.apache.zookeeper.ZooKeeperMain", "-server", self.address, *command)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()


class LocalBookKeeperCluster:
    """ZooKeeper + `bookies` bookies under `root`; bookie i listens on `bookie_ports[i]`, its id 127.0.0.1:port."""

    def __init__(self, root: Path, bookies: int = 3, journal_sync_data: bool = True) -> None:
        self.root = root
        self.zookeeper = ZooKeeperServer(root)
        self.zk_port = self.zookeeper.port
        self.bookie_ports = [free_port() for _ in range(bookies)]
        self.journal_sync_data = journal_sync_data
        self.metadata_service_uri = f"zk+hierarchical://127.0.0.1:{self.zk_port}/ledgers"
        self._bookies: list[_Process] = []

    @property
    def bookie_ids(self) -> list[str]:
        return [f"127.0.0.1:{port}" for port in self.bookie_ports]

    def conf_path(self, index: int) -> Path:
        return self.root / f"bookie-{index}.conf"

    def _write_configs(self) -> None:
        for index, port in enumerate(self.bookie_ports):
            data = self.root / f"bookie-{index}"
            self.conf_path(index).write_text(
                f"bookiePort={port}\nadvertisedAddress=127.0.0.1\nlisteningInterface=lo\nallowLoopback=true\n"
                f"metadataServiceUri={self.metadata_service_uri}\n"
                f"journalDirectories={data / 'journal'}\nledgerDirectories={data / 'ledgers'}\n"
                "httpServerEnabled=false\nenableStatistics=false\njournalMaxGroupWaitMSec=1\n"
                # Pulsar's ledger storage, which the dbStorage_ sizes below are for. 4.18's default,
                # SortedLedgerStorage, buffers 64 MB skip lists on the heap and ran out of these bookies'
                # 128 MB after ~100 MB of 64 KiB entries (bench/bookkeeper_add.py).
                f"ledgerStorageClass={DB_LEDGER_STORAGE}\n"
                f"journalSyncData={'true' if self.journal_sync_data else 'false'}\n"
                "dbStorage_writeCacheMaxSizeMb=16\ndbStorage_readAheadCacheMaxSizeMb=16\n"
                "dbStorage_rocksDB_blockCacheSize=8388608\nzkTimeout=10000\n"
            )

    def start(self) -> None:
        """ZooKeeper, `initnewcluster`, then every bookie; returns once each bookie logged its start."""
        classpath()
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_configs()
        self.zookeeper.start()
        init = run_java(
            self.root, "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(self.conf_path(0)), "initnewcluster"
        )
        if init.returncode != 0:
            raise RuntimeError(f"initnewcluster failed ({init.returncode}):\n{init.stdout}\n{init.stderr}")
        self._bookies = [
            _Process(
                f"bookie-{index}",
                self.root / f"bookie-{index}.log",
                _java(self.root, "org.apache.bookkeeper.server.Main", "--conf", str(self.conf_path(index))),
            )
            for index in range(len(self.bookie_ports))
        ]
        for index in range(len(self._bookies)):
            self.start_bookie(index, wait=False)
        for index in range(len(self._bookies)):
            self._wait_for_bookie(index, 0)

    def _wait_for_bookie(self, index: int, starts_before: int) -> None:
        bookie = self._bookies[index]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if bookie.output().count(BOOKIE_READY) > starts_before:
                return
            if not bookie.running:
                raise RuntimeError(f"{bookie.name} exited:\n{bookie.output()[-5000:]}")
            time.sleep(0.05)
        raise RuntimeError(f"{bookie.name} not started after {START_TIMEOUT_S} s:\n{bookie.output()[-5000:]}")

    def start_bookie(self, index: int, wait: bool = True) -> None:
        """Start bookie `index` (again, after a stop or kill) on its port and data."""
        bookie = self._bookies[index]
        starts_before = bookie.output().count(BOOKIE_READY)
        bookie.start()
        if wait:
            self._wait_for_bookie(index, starts_before)

    def kill_bookie(self, index: int) -> None:
        """kill -9 of bookie `index`: no shutdown, its ZooKeeper registration stays until its session expires."""
        self._bookies[index].kill()

    def stop_bookie(self, index: int) -> None:
        self._bookies[index].stop()

    def shell(self, *args: str) -> subprocess.CompletedProcess[str]:
        """BookKeeper's BookieShell against this cluster (`ledgermetadata -ledgerid 1`, `readledger …`)."""
        return run_java(self.root, "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(self.conf_path(0)), *args)

    def stop(self) -> None:
        """Stop every process by its PID: SIGTERM, SIGKILL after STOP_TIMEOUT_S."""
        for bookie in self._bookies:
            bookie.stop()
        self.zookeeper.stop()


def start_cluster(tmp_path_factory: pytest.TempPathFactory, bookies: int = 3) -> LocalBookKeeperCluster:
    """A started cluster under a fresh temporary directory; without Java or the jars the test fails with a
    line that says what to install or run. It lives here, not in tests/bookkeeper/conftest.py: a module
    imported as `conftest` is whichever directory's conftest the run collected last."""
    cluster = LocalBookKeeperCluster(tmp_path_factory.mktemp("bookkeeper"), bookies=bookies)
    try:
        cluster.start()
    except MissingJava as missing:
        cluster.stop()
        pytest.fail(str(missing), pytrace=False)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def start_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> ZooKeeperServer:
    """A started ZooKeeper alone; without `make bookkeeper` (make test runs it first) or without Java the test
    fails with what to run, as the bookies' fixture does, rather than pass unseen."""
    if not CLASSPATH_FILE.exists():
        pytest.fail(f"{CLASSPATH_FILE} is missing: run `make bookkeeper` for ZooKeeper's jars", pytrace=False)
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except MissingJava as missing:
        server.stop()
        pytest.fail(str(missing), pytrace=False)
    except BaseException:
        server.stop()
        raise
    return server
