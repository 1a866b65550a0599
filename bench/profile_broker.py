"""Run `magnetar standalone` in this process under cProfile, timed by the event-loop thread's CPU clock.

Wall-clock profilers charge the event loop for time it spends waiting for the GIL or for the CPU on
a shared machine; `time.thread_time` charges only the CPU the loop thread itself burns, which is
what limits the broker. Worker threads (commit, checkpoint, readers) are not profiled. Stop the
broker with SIGTERM (it shuts down cleanly); the statistics are then written to `--out` and the top
functions by own time are printed.

    python bench/profile_broker.py --out broker.pstats -- --data-dir D --port P --http-port H
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time

from magnetar.cli.main import main as magnetar_main


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="broker.pstats")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("standalone_args", nargs=argparse.REMAINDER, help="after --: magnetar standalone's options")
    args = parser.parse_args()
    standalone_args = [arg for arg in args.standalone_args if arg != "--"]
    profiler = cProfile.Profile(time.thread_time)
    try:
        code = profiler.runcall(magnetar_main, ["standalone", *standalone_args])
    finally:
        profiler.dump_stats(args.out)
        stats = pstats.Stats(args.out)
        print(f"loop-thread CPU seconds profiled: {stats.total_tt:.2f}")
        stats.sort_stats("tottime").print_stats(args.top)
    sys.exit(code)


if __name__ == "__main__":
    main()
