"""How `magnetar` commands show results: JSON for scripts, rich tables for people, errors on stderr.

Owns: choosing the format (JSON when stdout is not a terminal, tables when it is, `--output` to force),
rendering any JSON value as tables, and the one-line error format. Must not touch: requests, the
client, or what the data means (any JSON value renders; commands pass their own table views).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = ["Format", "Output", "error"]

# Past this many columns a list of objects (e.g. consumers in stats) is shown one object per table:
# a terminal row cannot hold thirty fields legibly.
TABLE_COLUMNS_MAX = 8
# A list of short lists of scalars (a Key_Shared consumer's keyHashRangeArrays: ~100 ranges with consistent
# hashing) is one cell, `[0, 16383] [16384, 32767]`; past this many, the first ones and the count, unless
# --verbose asks for all.
CELL_RANGES_MAX = 4
RANGE_ITEMS_MAX = 4


class Format(str, Enum):
    json = "json"
    table = "table"


def error(message: str) -> None:
    print(f"magnetar: {message}", file=sys.stderr, flush=True)


class Output:
    """Where one command's result goes. `fmt` None picks by whether stdout is a terminal."""

    def __init__(self, fmt: Format | None, verbose: bool = False) -> None:
        self.json = fmt == Format.json or (fmt is None and not sys.stdout.isatty())
        self.verbose = verbose
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            # rich loads only when a table is drawn: scripts (JSON) and the broker's start-up skip it.
            from rich.console import Console

            self._console = Console(highlight=False)
        return self._console

    def show(self, data: Any, title: str = "", table_view: Callable[[Any], Any] | None = None) -> None:
        """The answer of a command that returns data. JSON shows it whole; tables show `table_view(data)`
        when the command gives one (fewer, chosen fields where the whole would not read well)."""
        if self.json:
            print(json.dumps(data, indent=2), flush=True)
        else:
            _render(self.console, table_view(data) if table_view else data, title, self.verbose)

    def done(self, message: str) -> None:
        """A command that returns nothing succeeded: silent for scripts (as pulsar-admin is), a line for people."""
        if not self.json:
            self.console.print(message)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _is_range(value: Any) -> bool:
    return isinstance(value, list) and 0 < len(value) <= RANGE_ITEMS_MAX and all(_is_scalar(v) for v in value)


def _is_flat(value: Any) -> bool:
    """Fits in one table cell: a scalar, an empty container, a list of scalars, or a list of ranges."""
    if _is_scalar(value):
        return True
    if isinstance(value, (list, dict)) and not value:
        return True
    return isinstance(value, list) and (all(_is_scalar(item) for item in value) or all(_is_range(i) for i in value))


def _cell(value: Any, verbose: bool = False) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if value % 1 else f"{value:,.0f}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list) and value and all(_is_range(item) for item in value):
        shown = value if verbose or len(value) <= CELL_RANGES_MAX else value[:CELL_RANGES_MAX]
        text = " ".join("[" + ", ".join(_cell(v) for v in item) + "]" for item in shown)
        return text if len(shown) == len(value) else f"{text} … {len(value)} in all (--verbose shows them)"
    if isinstance(value, list):
        return ", ".join(_cell(item) for item in value) if value else "-"
    if isinstance(value, dict):
        return json.dumps(value) if value else "-"
    return str(value)


def _table(title: str, show_header: bool = True) -> Table:
    from rich.table import Table

    # A title wider than its table would wrap; the table grows to hold it instead.
    return Table(title=title or None, show_header=show_header, title_justify="left", min_width=len(title) or None)


def _render(console: Console, data: Any, title: str, verbose: bool) -> None:
    if _is_scalar(data):
        console.print(_cell(data))
    elif isinstance(data, list):
        _render_list(console, data, title, verbose)
    elif isinstance(data, dict):
        _render_dict(console, data, title, verbose)


def _render_list(console: Console, items: list[Any], title: str, verbose: bool) -> None:
    if not items:
        console.print(f"{title}: none" if title else "none")
        return
    if all(_is_scalar(item) for item in items):
        table = _table(title, show_header=False)
        table.add_column()
        for item in items:
            table.add_row(_cell(item))
        console.print(table)
        return
    if all(isinstance(item, dict) for item in items):
        columns = list(dict.fromkeys(key for item in items for key in item))
        if len(columns) <= TABLE_COLUMNS_MAX and all(_is_flat(v) for item in items for v in item.values()):
            table = _table(title)
            for column in columns:
                table.add_column(column, overflow="fold")
            for item in items:
                table.add_row(*(_cell(item.get(column), verbose) for column in columns))
            console.print(table)
            return
    for index, item in enumerate(items):
        _render(console, item, f"{title}[{index}]", verbose)


def _render_dict(console: Console, data: dict[str, Any], title: str, verbose: bool) -> None:
    flat = [(key, value) for key, value in data.items() if _is_flat(value)]
    if flat or not data:
        table = _table(title, show_header=False)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for key, value in flat:
            table.add_row(key, _cell(value, verbose))
        console.print(table)
    for key, value in data.items():
        if not _is_flat(value):
            _render(console, value, f"{title} › {key}" if title else key, verbose)
