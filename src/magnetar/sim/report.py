"""What `magnetar sim` and `python -m magnetar.sim` print.

Owns: the text of the simulator's report: per mode the schedules run, the violations found (split into
those the mode is known for and those it must never show), and one example trace; or, for one seed,
its options, its outcome and how to reproduce it; the progress bar of a sweep on a terminal.
Must not touch: how schedules run (runner.py).
"""

from __future__ import annotations

import sys
import time
from typing import Any

from magnetar.sim.runner import SweepResult, expected_kinds, run_schedule, run_sweep
from magnetar.sim.shell.world import run_shell_schedule

__all__ = ["report_seed", "report_sweep"]


def report_seed(seed: int, ordering_mode: str, subscription_type: str, shell: bool = False) -> bool:
    """Run one schedule and print it; returns True when it showed nothing the mode must never show."""
    result = (run_shell_schedule if shell else run_schedule)(seed, ordering_mode, subscription_type)
    print(result.header())
    print(f"steps={result.steps} deliveries={result.deliveries}")
    expected = expected_kinds(ordering_mode, subscription_type, shell)
    for violation in result.violations:
        label = "expected for this mode" if violation.kind in expected else "VIOLATION"
        print(f"\n[{label}] {violation.report()}")
    if not result.violations:
        print("no violation")
    print(f"\nreproduce with: {_command(seed, ordering_mode, subscription_type, shell)}")
    return not result.failures(expected)


def _command(seed: int, ordering_mode: str, subscription_type: str, shell: bool) -> str:
    return f"magnetar sim{' --shell' if shell else ''} --seed {seed} --mode {ordering_mode} --type {subscription_type}"


def report_sweep(
    modes: list[str],
    subscription_type: str,
    schedules: int,
    first_seed: int,
    processes: int | None,
    shell: bool = False,
) -> bool:
    """Sweep each mode and print one example per mode, then the table, last so that it stays on the screen;
    True when nothing unexpected. On a terminal a progress bar on stderr shows the schedules run."""
    results: list[tuple[SweepResult, float]] = []
    with SweepProgress(len(modes) * schedules) as progress:
        for mode in modes:
            progress.start_mode(mode)
            started = time.perf_counter()
            result = run_sweep(mode, subscription_type, schedules, first_seed, processes, shell, progress.advance)
            results.append((result, time.perf_counter() - started))
    ok = True
    for result, _seconds in results:
        print(f"=== {result.ordering_mode}: ", end="")
        if not result.examples:
            print("no violation in any schedule\n")
            continue
        unexpected = result.unexpected()
        kind = next(iter(sorted(unexpected))) if unexpected else next(iter(sorted(result.examples)))
        seed, text = result.examples[kind]
        label = "NEVER ALLOWED" if unexpected else "known behaviour of this mode"
        print(f"example of {kind} ({label})\n{text}")
        print(f"reproduce with: {_command(seed, result.ordering_mode, subscription_type, shell)}\n")
    print(f"{'type':<11} {'mode':<8} {'schedules':>9} {'steps':>10} {'seconds':>8}  violations (schedules)")
    for result, seconds in results:
        found = ", ".join(f"{kind}: {count}" for kind, count in sorted(result.violating_schedules.items())) or "none"
        print(
            f"{subscription_type:<11} {result.ordering_mode:<8} {result.schedules:>9} {result.steps:>10} "
            f"{seconds:>8.1f}  {found}"
        )
        ok &= not result.unexpected()
    return ok


class SweepProgress:
    """A bar on stderr while a sweep runs, when stderr is a terminal; nothing otherwise (a log or a pipe
    gets the report alone)."""

    def __init__(self, total: int) -> None:
        self._total = total
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> SweepProgress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("sim {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("schedules"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("", total=self._total)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def start_mode(self, mode: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=mode)

    def advance(self, schedules: int) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=schedules)
