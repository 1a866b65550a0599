"""Helpers for storage unit tests: each test runs its scenario in a fresh event loop and data dir."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import ManagedLedgerFactory, StorageConfig

SMALL = StorageConfig(
    managedLedgerMaxEntriesPerLedger=5,
    managedLedgerMinLedgerRolloverTimeMinutes=0,
    defaultRetentionTimeInMinutes=-1,
    defaultRetentionSizeInMB=-1,
)


@pytest.fixture(scope="session")
def small_config() -> StorageConfig:
    """Ledgers of 5 entries, rolled at once, kept forever: rollover shows up in every test."""
    return SMALL


@pytest.fixture
def run_storage(tmp_path: Path) -> Callable[..., Any]:
    """`run_storage(scenario, config)` opens a factory on tmp_path, runs `scenario(factory)`, closes."""

    def run(scenario: Callable[[ManagedLedgerFactory], Awaitable[Any]], config: StorageConfig = SMALL) -> Any:
        async def main() -> Any:
            factory = await ManagedLedgerFactory.open(str(tmp_path / "data"), config)
            try:
                return await scenario(factory)
            finally:
                await factory.close()

        return asyncio.run(main())

    return run
