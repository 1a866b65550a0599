"""Replay one schedule of the BookKeeper simulation, or sweep a range of seeds.

    python -m magnetar.sim.bookkeeper --seed N           # one schedule, its trace
    python -m magnetar.sim.bookkeeper --seeds 1000 [--first 0]

Exits 1 when a schedule broke a property; each such schedule prints its seed, options and trace.
"""

from __future__ import annotations

import argparse
import sys

from magnetar.sim.bookkeeper.world import run_bk_schedule


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.sim.bookkeeper")
    parser.add_argument("--seed", type=int, help="replay this seed and print its trace")
    parser.add_argument("--seeds", type=int, default=100, help="schedules of a sweep")
    parser.add_argument("--first", type=int, default=0, help="the sweep's first seed")
    args = parser.parse_args()
    if args.seed is not None:
        result = run_bk_schedule(args.seed)
        print(result.describe())
        return 1 if result.violations else 0
    failed = [
        result for result in map(run_bk_schedule, range(args.first, args.first + args.seeds)) if result.violations
    ]
    for result in failed:
        print(result.describe())
    print(f"{args.seeds} schedules from seed {args.first}: {len(failed)} broke a property")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
