"""The storage suite's tests that do not depend on one SQLite file, run again with the BookKeeper engine
under every factory they open: real bookies (E=3, W=3, A=2) and the managed-ledger records in ZooKeeper, a
ZooKeeper subtree per data directory (a test that reopens its directory finds its topics again, tests do
not see each other's). In `make test`, not `make check`: it needs the JVMs."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bookkeeper_fixture import SESSION_TIMEOUT_MS, LocalBookKeeperCluster
from magnetar.bookkeeper import BookKeeper
from magnetar.metadata.zookeeper import ZKMetadataStore
from magnetar.storage import ManagedLedgerFactory, StorageConfig
from magnetar.storage.bookkeeper_engine import BookKeeperEngine

UNIT_STORAGE = Path(__file__).resolve().parents[1] / "unit" / "storage"
# Left out, each for its reason. What they check is the SQLite engine's: its files, its lock, its segment
# rows, its group wait and checkpoints. Or they are property sweeps of hundreds of examples whose ledgers hold 1-5 entries: every ledger is a
# BookKeeper ledger and three ZooKeeper writes (create, list, close), minutes per test here; the engine's
# unit tests on the memory store run the same logic. Or they roll more ledgers in one loop iteration than
# the engine has ids generated ahead (docs/storage.md, "Limits").
LEFT_OUT = {
    "test_storage_managed_ledger": {
        "test_second_process_gets_a_clear_lock_error",
        "test_segments_are_split_at_the_entry_and_byte_limits",
        "test_rollover_positions_and_counting_agree_with_a_flat_model",
        "test_cache_stays_within_its_budget",
    },
    "test_storage_append_many": {
        "test_a_batch_lands_where_the_same_single_appends_would",
        "test_a_commit_waits_for_company_only_while_it_carries_few_entries",
        "test_checkpoints_beside_commits_keep_the_wal_bounded",
        "test_appends_of_many_topics_commit_their_segments_counters_and_commit_number_together",
    },
    "test_storage_cursor": {"test_cursor_matches_a_set_model_and_survives_restart"},
}


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bookkeeper_suite_{name}", UNIT_STORAGE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_fixtures = _load("conftest")
run_storage = _fixtures.run_storage
manual_clock = _fixtures.manual_clock
small_config = _fixtures.small_config
for _name, _skipped in LEFT_OUT.items():
    _module = _load(_name)
    globals().update(
        {key: value for key, value in vars(_module).items() if key.startswith("test_") and key not in _skipped}
    )

_open = ManagedLedgerFactory.open.__func__  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def on_bookkeeper(cluster: LocalBookKeeperCluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    async def open_on_bookkeeper(
        cls: type[ManagedLedgerFactory],
        data_dir: str,
        config: StorageConfig | None = None,
        engine: Any = None,
        clock: Any = None,
    ) -> ManagedLedgerFactory:
        config = (config or StorageConfig()).with_changes(
            managedLedgerDefaultEnsembleSize=3, managedLedgerDefaultWriteQuorum=3, managedLedgerDefaultAckQuorum=2
        )
        if engine is None:
            subtree = "/suite-" + hashlib.sha1(os.path.abspath(data_dir).encode()).hexdigest()[:16]
            store = await ZKMetadataStore.connect(f"127.0.0.1:{cluster.zk_port}", subtree, SESSION_TIMEOUT_MS)
            bookkeeper = await BookKeeper.connect(cluster.metadata_service_uri, timeout_s=10)
            engine = BookKeeperEngine(bookkeeper, store, config, name=data_dir, owns_bookkeeper=True, owns_store=True)
        factory: ManagedLedgerFactory = await _open(cls, data_dir, config, engine, clock)
        return factory

    monkeypatch.setattr(ManagedLedgerFactory, "open", classmethod(open_on_bookkeeper))
    yield
