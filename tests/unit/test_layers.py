"""DESIGN.md's layers, checked on the source: which layer's modules import which (an import under
TYPE_CHECKING counts: it is a dependency on the other layer's names all the same), and that the admin
API reads the broker through its public names, never another object's `_private` attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "src" / "magnetar"

# What each layer may import besides itself; `positions` (the shared position type) is everyone's.
ALLOWED: dict[str, set[str]] = {
    "positions": set(),
    "core": set(),
    "storage": set(),
    # An entry's sticky key and hash come out of its metadata: core's pure functions.
    "protocol": {"core"},
    "client": {"protocol"},
    "replication": {"client", "protocol", "storage"},
    "broker": {"client", "core", "protocol", "replication", "storage"},
    # Storage's names only (its errors, stored schemas, the latency buckets' bounds): ledgers and
    # cursors are read through the broker's queries (broker/figures.py).
    "admin": {"broker", "core", "protocol", "replication", "storage"},
    # A network client: the broker's code is out of its reach.
    "spark": {"client", "core", "protocol"},
    "perf": {"client", "protocol"},
    # The simulator runs the real core and shell, with storage and transport injected.
    "sim": {"broker", "core", "protocol", "replication", "storage"},
    "cli": {"admin", "broker", "client", "perf", "protocol", "sim", "storage"},
}
# The position type every layer shares.
SHARED = {"magnetar.positions"}
ADMIN_STORAGE_MODULES = {"magnetar.storage.metadata", "magnetar.storage.schemas", "magnetar.storage.write_latency"}


def layer_of(path: Path) -> str:
    relative = path.relative_to(SOURCE)
    return relative.parts[0].removesuffix(".py")


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if node.module == "magnetar":
                found += [(node.lineno, f"magnetar.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, name) for line, name in found if name.startswith("magnetar.")]


MODULES = sorted(path for path in SOURCE.rglob("*.py") if path.name != "__main__.py" or path.parent != SOURCE)


def test_every_layer_has_a_rule():
    assert {layer_of(path) for path in MODULES} - {"__init__"} <= set(ALLOWED)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_downward(layer):
    wrong = []
    for path in MODULES:
        if layer_of(path) != layer:
            continue
        for line, name in imported_modules(ast.parse(path.read_text(), str(path))):
            target = name.split(".")[1]
            if name in SHARED:
                continue
            if target == layer or target in ALLOWED[layer]:
                if layer == "admin" and target == "storage" and name not in ADMIN_STORAGE_MODULES:
                    wrong.append(f"{path.relative_to(SOURCE)}:{line} imports {name}")
                continue
            wrong.append(f"{path.relative_to(SOURCE)}:{line} imports {name}")
    assert wrong == []


def test_admin_reads_no_private_attributes_of_other_objects():
    wrong = []
    for path in sorted((SOURCE / "admin").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
            ):
                wrong.append(f"{path.relative_to(SOURCE)}:{node.lineno} reads .{node.attr}")
    assert wrong == []


def test_admin_reaches_no_ledger_or_cursor():
    """Ledgers and cursors are storage's: admin asks the broker's topics, subscriptions and figures."""
    wrong = []
    for path in sorted((SOURCE / "admin").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("ledger", "cursor"):
                wrong.append(f"{path.relative_to(SOURCE)}:{node.lineno} reads .{node.attr}")
    assert wrong == []
