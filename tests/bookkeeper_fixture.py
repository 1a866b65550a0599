"""A local BookKeeper cluster for tests: ZooKeeper and N bookies, each its own JVM, on loopback.

The processes are magnetar's own (src/magnetar/cli/local_bookkeeper.py, which `magnetar local-cluster`
runs too); this module gives the tests their started cluster or ZooKeeper, failing with one line that
says what to install or run when Java or the jars (`make bookkeeper`) are missing, and stopping what it
started when the start fails.
"""

from __future__ import annotations

import pytest

from magnetar.cli.local_bookkeeper import LocalBookKeeperCluster, MissingJava, ZooKeeperServer, run_java

__all__ = ["LocalBookKeeperCluster", "ZooKeeperServer", "run_java", "start_cluster", "start_zookeeper"]


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
