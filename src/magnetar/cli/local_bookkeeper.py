"""ZooKeeper and BookKeeper bookies on this machine, each its own JVM on loopback: the storage half of the
local cluster (local_cluster.py) and the fixture of the BookKeeper and ZooKeeper tests (tests/bookkeeper_fixture.py).

Owns: `ZooKeeperServer` (one ZooKeeperServerMain, alone for the metadata store's tests or under the
bookies, and ZooKeeper's own command-line client against it), `LocalBookKeeperCluster` (free ports, data
directories under one root, `initnewcluster` once, readiness from each bookie's own log line, stop by
PID, kill -9 and restart of one bookie), `run_java` for BookKeeper's tools (BookieShell) and
compat/bookkeeper's programs, and finding the jars. The jars come from `make bookkeeper`
(build/bookkeeper/classpath.txt of the source tree). Must not touch: magnetar's brokers and storage; this
starts BookKeeper's and ZooKeeper's own programs only.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from magnetar.cli.processes import (
    ChildProcess,
    ProcessStartError,
    free_port,
    port_listening,
    stop_all,
    wait_until,
)

__all__ = ["CLASSPATH_FILE", "LocalBookKeeperCluster", "MissingJava", "ZooKeeperServer", "classpath", "run_java"]

REPOSITORY = Path(__file__).resolve().parents[3]
CLASSPATH_FILE = REPOSITORY / "build" / "bookkeeper" / "classpath.txt"
# compat/bookkeeper's own programs (LedgerWriter), compiled beside the classpath.
CLASSES = REPOSITORY / "build" / "bookkeeper" / "classes"

# A bookie's line once its server accepts requests (org.apache.bookkeeper.server.Main).
BOOKIE_READY = "Started component {component=bookie-server}"
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15
DB_LEDGER_STORAGE = "org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage"
# ZooKeeper's own default is 20 ticks (10 s at our 500 ms tick); a broker asks for
# metadataStoreSessionTimeoutMillis (30 s by default), so the bound is at least that.
SESSION_TIMEOUT_MS_MAX = 20_000
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
        raise MissingJava(
            "java not found: ZooKeeper and the bookies need Java 17 (apt-get install openjdk-17-jdk-headless)"
        )
    if not CLASSPATH_FILE.exists():
        raise MissingJava(
            f"{CLASSPATH_FILE} is missing: run `make bookkeeper` in magnetar's source tree for the jars of "
            "ZooKeeper and BookKeeper (needs Maven 3.8+ and Java 17)"
        )
    return f"{CLASSES}:{CLASSPATH_FILE.read_text().strip()}"


def _log4j_option(root: Path) -> str:
    config = root / "log4j2.properties"
    if not config.exists():
        config.write_text(LOG4J2)
    return f"-Dlog4j2.configurationFile={config}"


def _java(root: Path, main_class: str, *args: str) -> list[str]:
    return ["java", *JVM_OPTIONS, _log4j_option(root), "-cp", classpath(), main_class, *args]


def run_java(root: Path, main_class: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one Java program of the BookKeeper classpath to its end; its stdout and stderr as text."""
    return subprocess.run(
        _java(root, main_class, *args), capture_output=True, text=True, timeout=timeout_s, check=False
    )


class ZooKeeperServer:
    """One standalone ZooKeeper 3.9 (ZooKeeperServerMain of the BookKeeper classpath) on 127.0.0.1:`port`,
    its data and log under `root`; sessions of up to `session_timeout_ms_max`."""

    def __init__(
        self, root: Path, port: int | None = None, session_timeout_ms_max: int = SESSION_TIMEOUT_MS_MAX
    ) -> None:
        self.root = root
        self.port = port if port is not None else free_port()
        self.session_timeout_ms_max = session_timeout_ms_max
        self.process = ChildProcess("zookeeper", root / "zookeeper.log")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        """Returns once the server accepts connections."""
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "zk-data").mkdir(exist_ok=True)
        (self.root / "zoo.cfg").write_text(
            f"tickTime=500\ndataDir={self.root / 'zk-data'}\nclientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok,stat\n"
            f"maxSessionTimeout={self.session_timeout_ms_max}\n"
        )
        self.process.command = _java(
            self.root, "org.apache.zookeeper.server.ZooKeeperServerMain", str(self.root / "zoo.cfg")
        )
        self.process.start()
        wait_until(lambda: port_listening(self.port), self.process, f"listen on {self.port}", START_TIMEOUT_S)

    def cli(self, *command: str) -> subprocess.CompletedProcess[str]:
        """ZooKeeper's own command-line client (zkCli.sh's ZooKeeperMain) running one command: `get /path`."""
        return run_java(self.root, "org.apache.zookeeper.ZooKeeperMain", "-server", self.address, *command)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        self.process.stop(timeout_s)


class LocalBookKeeperCluster:
    """ZooKeeper + `bookies` bookies under `root`; bookie i listens on `bookie_ports[i]`, its id 127.0.0.1:port.
    `journal_sync_data` is the bookies' journalSyncData (true: an entry is acknowledged once fsynced)."""

    def __init__(
        self,
        root: Path,
        bookies: int = 3,
        journal_sync_data: bool = True,
        session_timeout_ms_max: int = SESSION_TIMEOUT_MS_MAX,
    ) -> None:
        self.root = root
        self.zookeeper = ZooKeeperServer(root, session_timeout_ms_max=session_timeout_ms_max)
        self.zk_port = self.zookeeper.port
        self.bookie_ports = [free_port() for _ in range(bookies)]
        self.journal_sync_data = journal_sync_data
        self.metadata_service_uri = f"zk+hierarchical://127.0.0.1:{self.zk_port}/ledgers"
        self.bookies = [ChildProcess(f"bookie-{index}", root / f"bookie-{index}.log") for index in range(bookies)]

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
        self.launch()
        self.wait_for_bookies()

    def launch(self) -> None:
        """ZooKeeper (serving on return), `initnewcluster`, and every bookie started but not yet serving:
        what needs only ZooKeeper can run meanwhile."""
        classpath()
        self.root.mkdir(parents=True, exist_ok=True)
        self._write_configs()
        self.zookeeper.start()
        init = run_java(
            self.root, "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(self.conf_path(0)), "initnewcluster"
        )
        if init.returncode != 0:
            output = "\n".join(f"{init.stdout}\n{init.stderr}".strip().splitlines()[-20:])
            raise ProcessStartError(f"BookKeeper's initnewcluster exited with code {init.returncode}:\n{output}")
        for index in range(len(self.bookies)):
            self._launch_bookie(index)

    def wait_for_bookies(self) -> None:
        for index in range(len(self.bookies)):
            self._wait_for_bookie(index, 0)

    def _launch_bookie(self, index: int) -> int:
        """Start bookie `index`; returns how many starts its log held before."""
        bookie = self.bookies[index]
        starts_before = bookie.output().count(BOOKIE_READY)
        bookie.command = _java(self.root, "org.apache.bookkeeper.server.Main", "--conf", str(self.conf_path(index)))
        bookie.start()
        return starts_before

    def _wait_for_bookie(self, index: int, starts_before: int) -> None:
        bookie = self.bookies[index]
        wait_until(lambda: bookie.output().count(BOOKIE_READY) > starts_before, bookie, "start", START_TIMEOUT_S)

    def start_bookie(self, index: int, wait: bool = True) -> None:
        """Start bookie `index` (again, after a stop or kill) on its port and data."""
        starts_before = self._launch_bookie(index)
        if wait:
            self._wait_for_bookie(index, starts_before)

    def kill_bookie(self, index: int) -> None:
        """kill -9 of bookie `index`: no shutdown, its ZooKeeper registration stays until its session expires."""
        self.bookies[index].kill()

    def stop_bookie(self, index: int) -> None:
        self.bookies[index].stop(STOP_TIMEOUT_S)

    def shell(self, *args: str) -> subprocess.CompletedProcess[str]:
        """BookKeeper's BookieShell against this cluster (`ledgermetadata -ledgerid 1`, `readledger …`)."""
        return run_java(self.root, "org.apache.bookkeeper.bookie.BookieShell", "-conf", str(self.conf_path(0)), *args)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop every bookie at once, then ZooKeeper, by PID: SIGTERM, SIGKILL after `timeout_s`."""
        stop_all(self.bookies, timeout_s)
        self.zookeeper.stop(timeout_s)
