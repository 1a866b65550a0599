"""A whole cluster on this machine, each part a child process: one ZooKeeper, BookKeeper's bookies and
magnetar brokers. `magnetar local-cluster` runs one until Ctrl-C; the cluster tests start one per module
(tests/cluster_processes.py) and kill, pause and restart its members.

Owns: the start-up order (ZooKeeper, BookKeeper's `initnewcluster`, the bookies, and meanwhile
`magnetar initialize-cluster-metadata` once; then the brokers, each `magnetar broker --config` with a
broker.conf of Pulsar's keys written here, its own ports and data directory), readiness (each broker's
`magnetar ready` line, then every broker listing all of them at `/admin/v2/brokers/{cluster}`), the
cluster's URLs, a topic's owner (the HTTP lookup), kill -9, SIGSTOP/SIGCONT and restart of a broker,
kill -9 and start of a bookie, and the stop in order: the brokers (which close their ledgers on the
bookies), the bookies, ZooKeeper. Must not touch: what a broker does; it runs the commands a user runs and
learns the brokers' state as a user does, from their logs and their HTTP API, except that a restart waits
in the metadata store for a killed broker's registration to expire.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.broker.cluster.brokers import BROKERS_ROOT
from magnetar.broker.topic_name import TopicName
from magnetar.cli.local_bookkeeper import SESSION_TIMEOUT_MS_MAX, LocalBookKeeperCluster, classpath
from magnetar.cli.processes import ChildProcess, ProcessStartError, check_port_free, free_port, stop_all, wait_until
from magnetar.metadata.urls import open_metadata_store

__all__ = ["ClusterBroker", "LocalCluster", "serve_local_cluster"]

CLUSTER_NAME = "local"
# The broker's line once every listener serves (cli/standalone.py).
BROKER_READY = "magnetar ready in "
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15
HTTP_TIMEOUT_S = 5
# Past the session timeout, ZooKeeper expires a session within a tick (500 ms) of its check; a margin for
# a loaded machine.
SESSION_EXPIRY_MARGIN_S = 10


@dataclass
class ClusterBroker:
    """Broker `index` of the cluster: its ports, files and process."""

    index: int
    port: int
    web_port: int
    root: Path
    process: ChildProcess

    @property
    def name(self) -> str:
        return f"broker-{self.index}"

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def broker_id(self) -> str:
        """Pulsar's broker id, the name of its registration: advertisedAddress:webServicePort."""
        return f"127.0.0.1:{self.web_port}"

    @property
    def config_path(self) -> Path:
        return self.root / f"{self.name}.conf"

    @property
    def data_dir(self) -> Path:
        return self.root / self.name


class LocalCluster:
    """ZooKeeper, `bookies` bookies and `brokers` brokers under `root` (a new directory), on 127.0.0.1.
    Broker i listens on `port + i` and `http_port + i`, or on free ports where those are 0. The brokers'
    metadata sessions last `session_timeout_ms` (metadataStoreSessionTimeoutMillis): a broker killed or
    paused loses its bundles that long after. Call its methods from a thread without a running event loop."""

    def __init__(
        self,
        root: Path,
        brokers: int = 3,
        bookies: int = 3,
        *,
        session_timeout_ms: int = 30_000,
        port: int = 0,
        http_port: int = 0,
        cluster_name: str = CLUSTER_NAME,
    ) -> None:
        self.root = root
        self.cluster_name = cluster_name
        self.session_timeout_ms = session_timeout_ms
        self.bookkeeper = LocalBookKeeperCluster(
            root,
            bookies,
            journal_sync_data=True,
            session_timeout_ms_max=max(SESSION_TIMEOUT_MS_MAX, session_timeout_ms),
        )
        self.brokers = [
            ClusterBroker(
                index,
                port + index if port else free_port(),
                http_port + index if http_port else free_port(),
                root,
                # SIGKILL when this process dies without stopping them: ZooKeeper and the bookies get
                # their signal at the same moment, and a broker's clean stop without them does not end
                # (one outlived a killed test run by 40 minutes).
                ChildProcess(f"broker-{index}", root / f"broker-{index}.log", death_signal="KILL"),
            )
            for index in range(brokers)
        ]
        self._initializer = ChildProcess("initialize-cluster-metadata", root / "initialize-cluster-metadata.log")

    @property
    def metadata_store_url(self) -> str:
        return f"zk:{self.bookkeeper.zookeeper.address}"

    @property
    def service_url(self) -> str:
        """Every broker's binary address in one URL, which the official clients take: a lookup goes to any."""
        return "pulsar://" + ",".join(f"127.0.0.1:{broker.port}" for broker in self.brokers)

    @property
    def web_service_url(self) -> str:
        return "http://" + ",".join(f"127.0.0.1:{broker.web_port}" for broker in self.brokers)

    def broker_url(self, index: int) -> str:
        return self.brokers[index].url

    def http_url(self, index: int) -> str:
        return self.brokers[index].http_url

    @property
    def processes(self) -> list[ChildProcess]:
        """ZooKeeper, the bookies and the brokers, in the order they start."""
        return [self.bookkeeper.zookeeper.process, *self.bookkeeper.bookies, *(b.process for b in self.brokers)]

    @property
    def log_paths(self) -> dict[str, Path]:
        """Each process's log by its name (zookeeper, bookie-0, initialize-cluster-metadata, broker-0, ...)."""
        return {process.name: process.log_path for process in [*self.processes, self._initializer]}

    # ------------------------------------------------------------------ start and stop

    def start(self) -> None:
        """Start everything; returns once every broker lists every broker. On any failure what started
        is stopped again: PortUnavailableError, MissingJava, ProcessStartError (with the end of the log of
        the child that failed)."""
        for broker in self.brokers:
            check_port_free(broker.port, f"brokerServicePort of {broker.name}")
            check_port_free(broker.web_port, f"webServicePort of {broker.name}")
        classpath()
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.bookkeeper.launch()
            # It needs ZooKeeper only: it runs while the bookies start.
            self._initializer.command = [
                *_magnetar_command(),
                "initialize-cluster-metadata",
                "--cluster",
                self.cluster_name,
                "--metadata-store",
                self.metadata_store_url,
                "--configuration-metadata-store",
                self.metadata_store_url,
                "--web-service-url",
                self.web_service_url,
                "--broker-service-url",
                self.service_url,
                "--existing-bk-metadata-service-uri",
                self.bookkeeper.metadata_service_uri,
            ]
            self._initializer.start()
            self.bookkeeper.wait_for_bookies()
            self._initializer.wait_done("write the cluster's metadata", START_TIMEOUT_S)
            for broker in self.brokers:
                broker.config_path.write_text(self._broker_config(broker))
            self._start_brokers(self.brokers)
        except BaseException:
            self.terminate()
            raise

    def _broker_config(self, broker: ClusterBroker) -> str:
        bookies = len(self.bookkeeper.bookies)
        # Pulsar's production choice with three bookies: each entry on all three, acknowledged by two, so a
        # bookie lost loses nothing acknowledged; fewer bookies, each entry on all of them.
        ensemble = min(3, bookies)
        ack_quorum = min(2, ensemble)
        settings = {
            "clusterName": self.cluster_name,
            "metadataStoreUrl": self.metadata_store_url,
            "configurationMetadataStoreUrl": self.metadata_store_url,
            "metadataStoreSessionTimeoutMillis": self.session_timeout_ms,
            "bookkeeperMetadataServiceUri": self.bookkeeper.metadata_service_uri,
            "managedLedgerDefaultEnsembleSize": ensemble,
            "managedLedgerDefaultWriteQuorum": ensemble,
            "managedLedgerDefaultAckQuorum": ack_quorum,
            "bindAddress": "127.0.0.1",
            "advertisedAddress": "127.0.0.1",
            "brokerServicePort": broker.port,
            "webServicePort": broker.web_port,
        }
        header = f"# {broker.name} of the local cluster '{self.cluster_name}' (magnetar local-cluster)\n"
        return header + "".join(f"{key}={value}\n" for key, value in settings.items())

    def _start_brokers(self, brokers: list[ClusterBroker]) -> None:
        starts_before = {}
        for broker in brokers:
            starts_before[broker.index] = broker.process.output().count(BROKER_READY)
            broker.process.command = [
                *_magnetar_command(),
                "broker",
                "--config",
                str(broker.config_path),
                "--data-dir",
                str(broker.data_dir),
            ]
            broker.process.start()
        for broker in brokers:
            self._wait_serving(broker, starts_before[broker.index])
        expected = {broker.broker_id for broker in brokers}
        for broker in brokers:
            self._wait_listing(broker, expected)

    def _wait_serving(self, broker: ClusterBroker, starts_before: int) -> None:
        wait_until(
            lambda: broker.process.output().count(BROKER_READY) > starts_before,
            broker.process,
            "serve",
            START_TIMEOUT_S,
        )

    def _wait_listing(self, broker: ClusterBroker, expected: set[str]) -> None:
        wait_until(
            lambda: expected <= set(self._active_brokers(broker)),
            broker.process,
            f"list {', '.join(sorted(expected))} at /admin/v2/brokers/{self.cluster_name}",
            START_TIMEOUT_S,
        )

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Stop everything by PID, in order: the brokers (which unload their bundles and close their
        ledgers on the bookies), the bookies, ZooKeeper; each group SIGTERM at once, SIGKILL after `timeout_s`."""
        stop_all([self._initializer, *(broker.process for broker in self.brokers)], timeout_s)
        self.bookkeeper.stop(timeout_s)

    # ------------------------------------------------------------------ brokers

    def kill_broker(self, index: int) -> None:
        """kill -9 of broker `index`: its bundles and registration stay until its metadata session expires."""
        self.brokers[index].process.kill()

    def stop_broker(self, index: int) -> None:
        """kill -STOP of broker `index`: it neither serves nor renews its session until cont_broker."""
        self.brokers[index].process.pause()

    def cont_broker(self, index: int) -> None:
        """kill -CONT of broker `index`."""
        self.brokers[index].process.resume()

    def restart_broker(self, index: int) -> None:
        """Stop broker `index` cleanly if it runs (SIGTERM), wait until its registration is gone (after a
        kill -9: until its session expired), and start it again on its ports and data; returns once it
        serves and lists itself."""
        broker = self.brokers[index]
        broker.process.stop(STOP_TIMEOUT_S)
        timeout_s = self.session_timeout_ms / 1000 + SESSION_EXPIRY_MARGIN_S
        if not asyncio.run(self._registration_gone(broker, timeout_s)):
            raise ProcessStartError(
                f"{broker.name}'s registration {BROKERS_ROOT}/{broker.broker_id} is still in the metadata store "
                f"{timeout_s:g} s after it stopped: its session outlives metadataStoreSessionTimeoutMillis"
            )
        self._start_brokers([broker])

    async def _registration_gone(self, broker: ClusterBroker, timeout_s: float) -> bool:
        store = await open_metadata_store(self.metadata_store_url)
        deadline = time.monotonic() + timeout_s
        try:
            while await store.exists(f"{BROKERS_ROOT}/{broker.broker_id}") is not None:
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.1)
            return True
        finally:
            await store.close()

    def active_brokers(self, index: int | None = None) -> list[str]:
        """The broker ids `/admin/v2/brokers/{cluster}` lists, asked of broker `index` (any serving one
        by default)."""
        return self._active_brokers(self._serving() if index is None else self.brokers[index])

    def _active_brokers(self, broker: ClusterBroker) -> list[str]:
        try:
            answer: list[str] = _get_json(f"{broker.http_url}/admin/v2/brokers/{self.cluster_name}")
        except (OSError, ValueError):
            return []
        return answer

    def owner(self, topic: str) -> int:
        """The index of the broker that owns `topic` (a full name or a short one), from the HTTP lookup of
        a serving broker; a topic nobody owns is assigned an owner by that lookup, as a client's is."""
        name = TopicName.parse(topic)
        broker = self._serving()
        path = f"/lookup/v2/topic/{name.domain}/{name.tenant}/{name.namespace}/{name.local}"
        found = _get_json(broker.http_url + path)["brokerUrl"]
        for candidate in self.brokers:
            if candidate.url == found:
                return candidate.index
        raise LookupError(f"the lookup of {name} answered {found}, none of this cluster's brokers")

    def _serving(self) -> ClusterBroker:
        for broker in self.brokers:
            if broker.process.running and not broker.process.paused:
                return broker
        raise LookupError("no broker of the cluster is running")

    # ------------------------------------------------------------------ bookies

    def kill_bookie(self, index: int) -> None:
        """kill -9 of bookie `index`: its registration stays until its ZooKeeper session expires (zkTimeout)."""
        self.bookkeeper.kill_bookie(index)

    def start_bookie(self, index: int) -> None:
        """Start bookie `index` again on its port and data; returns once it serves."""
        self.bookkeeper.start_bookie(index)


def _magnetar_command() -> list[str]:
    """This interpreter's magnetar: the same installation as the parent's."""
    return [sys.executable, "-m", "magnetar.cli.main"]


def _get_json(url: str) -> Any:
    """GET and parse; a 307 to another broker is followed, as the clients follow it."""
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as answer:
        return json.loads(answer.read())


def serve_local_cluster(cluster: LocalCluster) -> int:
    """Start the cluster, print where everything is, and run until SIGINT or SIGTERM; then stop it all.
    Returns 0 once stopped, 130 when interrupted while starting."""
    # SIGTERM ends it as Ctrl-C does: the children stop in order rather than by their parent-death signal.
    # SIGINT too, explicitly: a shell without job control starts a background command with SIGINT ignored,
    # and Python then leaves it ignored (`make cluster &` in a script could not be stopped with kill -INT).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.default_int_handler)
    started = time.monotonic()
    try:
        cluster.start()
    except KeyboardInterrupt:
        print("magnetar local cluster: interrupted while starting; stopped", flush=True)
        return 130
    _print_cluster(cluster, time.monotonic() - started)
    reported: set[str] = set()
    try:
        while True:
            for process in cluster.processes:
                if process.returncode is not None and process.name not in reported:
                    reported.add(process.name)
                    print(
                        f"magnetar: {process.name} exited with code {process.returncode}; its log: {process.log_path}",
                        file=sys.stderr,
                        flush=True,
                    )
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    # A second Ctrl-C would leave the stop half done; the stop is bounded by its timeouts.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("magnetar local cluster: stopping the brokers, the bookies, then ZooKeeper", flush=True)
    cluster.terminate()
    print(f"magnetar local cluster: stopped; the logs stay in {cluster.root}", flush=True)
    return 0


def _print_cluster(cluster: LocalCluster, elapsed_s: float) -> None:
    bookkeeper = cluster.bookkeeper
    lines = [
        f"magnetar local cluster '{cluster.cluster_name}' ready in {elapsed_s:.1f} s, in {cluster.root}",
        f"service URL    {cluster.service_url}",
        f"web service    {cluster.web_service_url}",
    ]
    for broker in cluster.brokers:
        lines.append(
            f"{broker.name:<14} {broker.url}  {broker.http_url}  pid {broker.process.pid}  "
            f"config {broker.config_path}  log {broker.process.log_path}"
        )
    for index, bookie in enumerate(bookkeeper.bookies):
        lines.append(
            f"{bookie.name:<14} {bookkeeper.bookie_ids[index]}  pid {bookie.pid}  "
            f"config {bookkeeper.conf_path(index)}  log {bookie.log_path}"
        )
    zookeeper = bookkeeper.zookeeper
    lines += [
        f"{'zookeeper':<14} {zookeeper.address}  pid {zookeeper.process.pid}  log {zookeeper.process.log_path}",
        f"metadataStoreUrl={cluster.metadata_store_url}  bookkeeperMetadataServiceUri={bookkeeper.metadata_service_uri}",
        "Ctrl-C stops the cluster.",
    ]
    print("\n".join(lines), flush=True)
