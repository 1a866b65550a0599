"""Fixtures of the BookKeeper conformance tests: a local cluster (ZooKeeper + 3 bookies, four JVMs) per
module, BookKeeper's own tools as the oracle. Nothing is skipped: without Java or the jars the tests fail
with a line that says what to install or run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bookkeeper_fixture import LocalBookKeeperCluster, start_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBookKeeperCluster]:
    cluster = start_cluster(tmp_path_factory)
    yield cluster
    cluster.stop()
