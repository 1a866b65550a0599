"""The layers of docs/architecture.md, checked on the source: which layer's modules import which (an
import under TYPE_CHECKING counts: it is a dependency on the other layer's names all the same), that no
package's modules import each other in a circle, that only the clock module reads the system's clocks,
and that the admin API reads the broker through its public names, never another object's `_private`
attributes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "src" / "magnetar"

# What each layer may import besides itself; `positions` (the shared position type) is everyone's.
ALLOWED: dict[str, set[str]] = {
    "positions": set(),
    "clock": set(),
    "core": set(),
    # The metadata store's interface and stores (ZooKeeper, SQLite, memory): it knows no topic.
    "metadata": set(),
    # A managed ledger's engine keeps its ledgers on BookKeeper and their lists in a metadata store.
    "storage": {"bookkeeper", "metadata"},
    # BookKeeper's client: its wire, digests, ledger metadata and ledgers; it knows no managed ledger.
    "bookkeeper": set(),
    # An entry's sticky key and hash come out of its metadata: core's pure functions.
    "protocol": {"core"},
    "client": {"protocol"},
    "replication": {"client", "protocol", "storage"},
    "broker": {"client", "core", "metadata", "protocol", "replication", "storage"},
    # Storage's names only (its errors, stored schemas, the latency buckets' bounds): ledgers and
    # cursors are read through the broker's queries (broker/figures.py).
    "admin": {"broker", "core", "protocol", "replication", "storage"},
    # A network client: the broker's code is out of its reach.
    "spark": {"client", "core", "protocol"},
    # The simulator runs the real core and shell, with storage and transport injected, and the real
    # BookKeeper client against its fake bookies (sim/bookkeeper): fakes belong to the simulator.
    "sim": {"bookkeeper", "broker", "core", "metadata", "protocol", "replication", "storage"},
    "cli": {"admin", "broker", "client", "metadata", "protocol", "sim", "storage"},
}
# The position type and the clock every layer shares.
SHARED = {"magnetar.positions", "magnetar.clock"}
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(SOURCE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_by_module() -> dict[str, set[str]]:
    """Each module's imports of other magnetar modules, TYPE_CHECKING ones and those inside functions
    included. `from package import module` imports the module; `from package import name` the package."""
    names = {_module_name(path): path for path in SOURCE.rglob("*.py")}
    imports: dict[str, set[str]] = {}
    for name, path in names.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                targets = [
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in names else node.module
                    for alias in node.names
                ]
            else:
                continue
            for imported in targets:
                while imported and imported not in names:
                    imported = imported.rpartition(".")[0]
                if imported.startswith("magnetar.") and imported != name:
                    found.add(imported)
        imports[name] = found
    return imports


def _circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_circle_finder_finds_a_circle():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and p.name != "__pycache__"))
def test_no_import_circle_inside_a_package(package):
    """A package's modules form layers of their own: each imports only modules below it."""
    imports = _imports_by_module()
    prefix = f"magnetar.{package}"
    inside = {
        name: {other for other in found if other == prefix or other.startswith(f"{prefix}.")}
        for name, found in imports.items()
        if name == prefix or name.startswith(f"{prefix}.")
    }
    assert _circles(inside) == []


# The clients are network programs, not parts of a broker: they read the system's clocks themselves.
CLOCK_READERS_ALLOWED = {"client", "cli", "spark", "sim"}
_CLOCK_READS = ("time.time", "time.time_ns", "time.monotonic", "time.perf_counter", "datetime.now", "loop.time")


def test_only_the_clock_module_reads_the_system_clocks():
    wrong = []
    for path in MODULES:
        if layer_of(path) in CLOCK_READERS_ALLOWED or path == SOURCE / "clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(_CLOCK_READS):
                wrong.append(f"{path.relative_to(SOURCE)}:{node.lineno} calls {ast.unparse(node.func)}")
    assert wrong == []
