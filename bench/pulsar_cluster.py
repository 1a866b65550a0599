"""Apache Pulsar 4.0.7 brokers on magnetar's local ZooKeeper and bookies, for the cluster benchmarks'
comparison: the same fixture (`LocalBookKeeperCluster`: one ZooKeeper, the bookies with journalSyncData on)
with Pulsar's `PulsarClusterMetadataSetup` and `PulsarBrokerStarter` in place of magnetar's
initialize-cluster-metadata and brokers. It offers what bench/cluster_failover.py asks of a magnetar
`LocalCluster`: start, service_url, owner, kill_broker, restart_broker, terminate.

The classpath is `make pulsar-broker`'s (build/pulsar-broker/classpath.txt).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from magnetar.cli.local_bookkeeper import SESSION_TIMEOUT_MS_MAX, LocalBookKeeperCluster
from magnetar.cli.processes import ChildProcess, ProcessStartError, free_port, stop_all

CLASSPATH = Path(__file__).resolve().parents[1] / "build" / "pulsar-broker" / "classpath.txt"
CLUSTER_NAME = "pulsar-bench"
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 30
# A broker's registration is the ephemeral /loadbalance/brokers/host:webport: gone once its session expired.
REGISTRATION_MARGIN_S = 15


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as failure:
        return failure.code, ""
    except OSError:
        return 0, ""


class PulsarCluster:
    """ZooKeeper, `bookies` bookies and `brokers` Pulsar brokers under `root`, on 127.0.0.1 and free ports."""

    def __init__(self, root: Path, brokers: int = 3, bookies: int = 3, *, session_timeout_ms: int = 30_000) -> None:
        if not CLASSPATH.exists():
            raise SystemExit(f"{CLASSPATH} is missing: run `make pulsar-broker` first")
        self.classpath = CLASSPATH.read_text().strip()
        self.root = root
        self.session_timeout_ms = session_timeout_ms
        self.bookkeeper = LocalBookKeeperCluster(
            root,
            bookies,
            journal_sync_data=True,
            session_timeout_ms_max=max(SESSION_TIMEOUT_MS_MAX, session_timeout_ms),
        )
        self.ports = [(free_port(), free_port()) for _ in range(brokers)]
        self.brokers = [
            ChildProcess(f"pulsar-broker-{index}", root / f"pulsar-broker-{index}.log", death_signal="KILL")
            for index in range(brokers)
        ]

    @property
    def metadata_store_url(self) -> str:
        return f"zk:{self.bookkeeper.zookeeper.address}"

    @property
    def service_url(self) -> str:
        return "pulsar://" + ",".join(f"127.0.0.1:{port}" for port, _ in self.ports)

    def _java(self, main_class: str, *args: str, heap: str = "-Xmx768m") -> list[str]:
        return ["java", "-Xms256m", heap, "-XX:+UseZGC", "-cp", self.classpath, main_class, *args]

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.bookkeeper.start()
            setup = ChildProcess("pulsar-metadata-setup", self.root / "pulsar-metadata-setup.log")
            setup.command = self._java(
                "org.apache.pulsar.PulsarClusterMetadataSetup",
                "--cluster",
                CLUSTER_NAME,
                "--metadata-store",
                self.metadata_store_url,
                "--configuration-metadata-store",
                self.metadata_store_url,
                "--web-service-url",
                "http://" + ",".join(f"127.0.0.1:{web}" for _, web in self.ports),
                "--broker-service-url",
                self.service_url,
                "--existing-bk-metadata-service-uri",
                self.bookkeeper.metadata_service_uri,
                heap="-Xmx256m",
            )
            setup.start()
            setup.wait_done("write Pulsar's cluster metadata", START_TIMEOUT_S)
            for index in range(len(self.brokers)):
                self._launch(index)
            for index in range(len(self.brokers)):
                self._wait_serving(index)
        except BaseException:
            self.terminate()
            raise

    def _config(self, index: int) -> Path:
        port, web = self.ports[index]
        path = self.root / f"pulsar-broker-{index}.conf"
        ensemble = min(3, len(self.bookkeeper.bookies))
        path.write_text(
            f"clusterName={CLUSTER_NAME}\n"
            f"metadataStoreUrl={self.metadata_store_url}\n"
            f"configurationMetadataStoreUrl={self.metadata_store_url}\n"
            f"bookkeeperMetadataServiceUri={self.bookkeeper.metadata_service_uri}\n"
            f"metadataStoreSessionTimeoutMillis={self.session_timeout_ms}\n"
            f"brokerServicePort={port}\nwebServicePort={web}\n"
            "bindAddress=127.0.0.1\nadvertisedAddress=127.0.0.1\n"
            f"managedLedgerDefaultEnsembleSize={ensemble}\nmanagedLedgerDefaultWriteQuorum={ensemble}\n"
            f"managedLedgerDefaultAckQuorum={min(2, ensemble)}\n"
            "bookkeeperUseV2WireProtocol=true\nallowAutoTopicCreationType=non-partitioned\n"
            "functionsWorkerEnabled=false\ntransactionCoordinatorEnabled=false\n"
            "systemTopicEnabled=false\ntopicLevelPoliciesEnabled=false\n"
        )
        return path

    def _launch(self, index: int) -> None:
        broker = self.brokers[index]
        broker.command = self._java("org.apache.pulsar.PulsarBrokerStarter", "--broker-conf", str(self._config(index)))
        broker.start()

    def _wait_serving(self, index: int) -> None:
        _, web = self.ports[index]
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.brokers[index].running:
                raise self.brokers[index].failure("start")
            status, body = _get(f"http://127.0.0.1:{web}/admin/v2/brokers/health")
            if status == 200 and body.strip() == "ok":
                return
            time.sleep(0.5)
        raise ProcessStartError(f"pulsar-broker-{index} did not answer its health check in {START_TIMEOUT_S} s")

    def terminate(self) -> None:
        stop_all(self.brokers, STOP_TIMEOUT_S)
        self.bookkeeper.stop(STOP_TIMEOUT_S)

    def owner(self, topic: str) -> int:
        """The index of the broker Pulsar's HTTP lookup names for `topic` (persistent://tenant/ns/local)."""
        path = topic.replace("persistent://", "persistent/")
        for index, (_, web) in enumerate(self.ports):
            if not self.brokers[index].running:
                continue
            status, body = _get(f"http://127.0.0.1:{web}/lookup/v2/topic/{path}")
            if status == 200:
                found = json.loads(body)["brokerUrl"]
                for candidate, (port, _) in enumerate(self.ports):
                    if found == f"pulsar://127.0.0.1:{port}":
                        return candidate
                raise LookupError(f"the lookup of {topic} answered {found}, none of this cluster's brokers")
        raise LookupError("no Pulsar broker answered the lookup")

    def kill_broker(self, index: int) -> None:
        self.brokers[index].kill()

    def restart_broker(self, index: int) -> None:
        """Start broker `index` again once its registration of the killed session is gone."""
        self.brokers[index].stop(STOP_TIMEOUT_S)
        _, web = self.ports[index]
        others = [w for i, (_, w) in enumerate(self.ports) if i != index and self.brokers[i].running]
        deadline = time.monotonic() + self.session_timeout_ms / 1000 + REGISTRATION_MARGIN_S
        while time.monotonic() < deadline:
            status, body = _get(f"http://127.0.0.1:{others[0]}/admin/v2/brokers/{CLUSTER_NAME}")
            if status == 200 and f"127.0.0.1:{web}" not in json.loads(body):
                break
            time.sleep(0.2)
        self._launch(index)
        self._wait_serving(index)
