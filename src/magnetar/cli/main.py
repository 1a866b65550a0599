"""`magnetar` entry point: one subcommand per verb, each handing its arguments to the package that owns it.

Subcommands so far: `sim` (the deterministic simulator of the ordering core). The broker issue adds
`standalone`; admin, produce and consume follow.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

USAGE = """usage: magnetar <command> [options]

commands:
  sim     run seeded simulations of the ordering core (magnetar sim --help)
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "sim":
        from magnetar.sim.__main__ import main as sim_main

        return sim_main(rest)
    print(f"magnetar: unknown command {command!r}\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
