"""How `magnetar` explains itself: plain help in the style of the `sim` and `perf` commands' argparse, and a
"did you mean" for a command that does not exist.

Owns: the command group class every `magnetar` group uses (a suggestion for a command named with the
right words in another order, as pulsar-admin's `stats-internal` is magnetar's `internal-stats`), and the
metavars of options and arguments (argparse's: the name in capitals), set once on the whole command tree.
Must not touch: what the commands do.
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument, TyperGroup, TyperOption

__all__ = ["PlainArgument", "SuggestingGroup", "name_metavars", "reordered_command"]


class SuggestingGroup(TyperGroup):
    """A command group that names the command an unknown one meant when it has the same words in another
    order; typer's own suggestion covers close spellings."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and self.get_command(ctx, args[0]) is None:
            meant = reordered_command(args[0], self.list_commands(ctx))
            if meant is not None:
                ctx.fail(f"No such command {args[0]!r}. Did you mean {meant!r}?")
        return super().resolve_command(ctx, args)


def reordered_command(name: str, commands: list[str]) -> str | None:
    """The command with `name`'s words in another order (pulsar-admin's `stats-internal` is
    `internal-stats` here), None when there is none."""
    words = sorted(name.split("-"))
    return next((command for command in commands if sorted(command.split("-")) == words), None)


class PlainArgument(TyperArgument):
    """An argument shown as argparse shows one: its name in capitals, in the usage line (`TOPIC`, where
    typer writes `{TOPIC}`) and in the help (without typer's `<str>`)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def _usage_display_name(self) -> str:
        name = str(self.display_name_raw)
        return name if self.required else f"[{name}]"


def name_metavars(command: Any) -> None:
    """Give every option and argument of the command tree argparse's metavar, its name in capitals, where
    typer would show the Python type (`<list[str]>`); choices keep typer's `<json|table>`, flags none.
    Arguments become `PlainArgument`s (typer builds its own class for them, with no way to name another)."""
    for param in command.params:
        if isinstance(param, TyperArgument) and not param.type_descriptor.is_choice:
            param.__class__ = PlainArgument
        if not isinstance(param, TyperOption | TyperArgument) or param.metavar is not None:
            continue
        if (isinstance(param, TyperOption) and param.is_flag) or param.type_descriptor.is_choice:
            continue
        param.metavar = (param.name or "value").upper()
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            name_metavars(sub)
