"""A local BookKeeper cluster for tests: ZooKeeper and N bookies, each its own JVM, on loopback.

The processes are magnetar's own (src/magnetar/cli/local_bookkeeper.py, which `magnetar local-cluster`
runs too); this module gives the tests their started cluster or ZooKeeper, failing with one line that
says what to install or run when Java or the jars (`make bookkeeper`) are missing, and stopping what it
started when the start fails.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from magnetar.cli.local_bookkeeper import LocalBookKeeperCluster, MissingJava, ZooKeeperServer, run_java

__all__ = [
    "BookKeeperStorage",
    "LocalBookKeeperCluster",
    "ZooKeeperServer",
    "run_java",
    "start_cluster",
    "start_zookeeper",
]


# The engine tests' ZooKeeper store sessions: long enough for a loaded machine, short beside a test.
SESSION_TIMEOUT_MS = 10_000


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


class BookKeeperStorage:
    """Where a broker of the suite's reruns on BookKeeper stores (tests/bookkeeper/broker_suite):
    ZooKeeper and bookies the tests started. Each broker is a cluster of one, `magnetar broker` on
    a ZooKeeper chroot of its own that `initialize-cluster-metadata` writes before its first start."""

    def __init__(self, zookeeper: str, metadata_service_uri: str) -> None:
        self.zookeeper = zookeeper
        self.metadata_service_uri = metadata_service_uri

    def new_broker_settings(self, cluster: str) -> dict[str, str]:
        """The settings of one more broker of `cluster`, its chroot initialized."""
        store = f"zk:{self.zookeeper}/broker-suite-{uuid.uuid4().hex[:10]}"
        subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "initialize-cluster-metadata", "--cluster", cluster]
            + ["--metadata-store", store, "--configuration-metadata-store", store]
            + ["--web-service-url", "http://127.0.0.1:8080", "--broker-service-url", "pulsar://127.0.0.1:6650"]
            + ["--existing-bk-metadata-service-uri", self.metadata_service_uri],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return {
            "clusterName": cluster,
            "metadataStoreUrl": store,
            "bookkeeperMetadataServiceUri": self.metadata_service_uri,
            "managedLedgerDefaultEnsembleSize": "3",
            "managedLedgerDefaultWriteQuorum": "3",
            "managedLedgerDefaultAckQuorum": "2",
            # A broker killed and started again waits for its old session to expire (the registry):
            # the chaos suite's timeout, not the default 30 s.
            "metadataStoreSessionTimeoutMillis": "5000",
        }
