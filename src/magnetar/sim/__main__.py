"""`python -m magnetar.sim`: the simulator's command line, the same as `magnetar sim`."""

from __future__ import annotations

import argparse
import sys

from magnetar.core.settings import ORDERING_MODES
from magnetar.sim.report import report_seed, report_sweep

SUBSCRIPTION_TYPES = ("Key_Shared", "Shared", "Failover", "Exclusive")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="magnetar sim",
        description="Run seeded simulations of the ordering core (or, with --shell, of the broker) and report violations.",
    )
    parser.add_argument("--seed", type=int, help="replay one schedule exactly and print its trace")
    parser.add_argument("--mode", choices=(*ORDERING_MODES, "all"), default="all", help="Key_Shared ordering mode")
    parser.add_argument("--type", dest="subscription_type", choices=SUBSCRIPTION_TYPES, default="Key_Shared")
    parser.add_argument("--schedules", type=int, default=500, help="schedules per mode (default 500)")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--processes", type=int, default=None, help="worker processes (default: all cores)")
    parser.add_argument(
        "--shell",
        action="store_true",
        help="simulate the real broker (connections, consumers, subscriptions, storage) under client churn",
    )
    args = parser.parse_args(argv)
    modes = list(ORDERING_MODES) if args.mode == "all" else [args.mode]
    if args.subscription_type != "Key_Shared":
        modes = modes[:1]
    if args.seed is not None:
        ok = all(report_seed(args.seed, mode, args.subscription_type, args.shell) for mode in modes)
    else:
        ok = report_sweep(modes, args.subscription_type, args.schedules, args.first_seed, args.processes, args.shell)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
