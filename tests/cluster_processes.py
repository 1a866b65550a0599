"""A whole cluster of processes for a test module: ZooKeeper, real bookies and magnetar brokers
(`LocalCluster`, src/magnetar/cli/local_cluster.py, the one `magnetar local-cluster` runs), under the
module's temporary directory, always stopped at the end.

Not a conftest: a module imported as `conftest` is whichever directory's conftest the run collected last.
A module takes its cluster as a fixture of its own:

    @pytest.fixture(scope="module")
    def cluster(tmp_path_factory):
        with running_cluster(tmp_path_factory, session_timeout_ms=5000) as cluster:
            yield cluster
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from magnetar.cli.local_bookkeeper import MissingJava
from magnetar.cli.local_cluster import LocalCluster
from magnetar.cli.processes import ProcessStartError

__all__ = ["running_cluster"]


@contextmanager
def running_cluster(
    tmp_path_factory: pytest.TempPathFactory, brokers: int = 3, bookies: int = 3, session_timeout_ms: int = 5000
) -> Iterator[LocalCluster]:
    """A started cluster on free ports; without Java or the jars (`make bookkeeper`) the test fails with
    the line that says what to install or run, and a child that does not start fails it with the end of
    that child's log. Whatever the test does, every process is stopped after it."""
    cluster = LocalCluster(
        tmp_path_factory.mktemp("local-cluster"), brokers, bookies, session_timeout_ms=session_timeout_ms
    )
    try:
        try:
            cluster.start()
        except (MissingJava, ProcessStartError) as failure:
            pytest.fail(str(failure), pytrace=False)
        yield cluster
    finally:
        cluster.terminate()
