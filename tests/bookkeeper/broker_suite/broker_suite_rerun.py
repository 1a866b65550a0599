"""Collect a black-box module's tests into a module of this directory, where the brokers store on BookKeeper.

Each module is rerun by a module of its own (test_<name>_bookkeeper.py here), because a module may override
a conftest fixture (test_e2e_flows's `client` is its module broker's) and that override must reach its own
tests only. A module of a directory with its own conftest.py (tests/replication) brings that conftest's
fixtures along. Every test of each module reruns: none of them depends on SQLite's files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TESTS = Path(__file__).resolve().parents[2]


def _load(directory: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bookkeeper_rerun_{directory.name}_{name}", directory / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fixtures(module: ModuleType) -> dict[str, object]:
    return {
        key: value
        for key, value in vars(module).items()
        if not key.startswith("_") and type(value).__name__ == "FixtureFunctionDefinition"
    }


def rerun(directory: str, name: str) -> dict[str, object]:
    """The tests of tests/`directory`/`name`.py, with that module's fixtures and its directory's conftest
    fixtures, to put in the rerunning module's namespace."""
    where = TESTS / directory
    # The modules import their helpers (key_shared_helpers, crash_workload) from their own directory.
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    collected = _fixtures(_load(where, "conftest")) if (where / "conftest.py").exists() else {}
    module = _load(where, name)
    collected.update(_fixtures(module))
    collected.update({key: value for key, value in vars(module).items() if key.startswith("test_")})
    return collected
