"""The broker's black-box suites run again with every broker storing on BookKeeper (broker_suite_rerun.py says how):
one ZooKeeper and three bookies for the whole directory, and the root conftest's `broker_storage`
overridden, so that `broker`, `broker_factory`, `module_broker` and `module_broker_factory` start brokers of
one-broker clusters on those bookies."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bookkeeper_fixture import BookKeeperStorage, LocalBookKeeperCluster, start_cluster


@pytest.fixture(scope="session")
def suite_bookies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBookKeeperCluster]:
    cluster = start_cluster(tmp_path_factory)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def broker_storage(suite_bookies: LocalBookKeeperCluster) -> BookKeeperStorage:
    return BookKeeperStorage(suite_bookies.zookeeper.address, suite_bookies.metadata_service_uri)
