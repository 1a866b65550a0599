"""Running schedules: one seed, or a sweep of seeds across processes.

Owns: the safety phase / liveness phase of a schedule, turning exceptions into violations, and the
summary of a sweep (schedules run, violations by kind, one example of each).
Must not touch: what is checked (checkers.py) or how the world behaves (world.py).
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from magnetar.sim.checkers import ORDERING_KINDS, OrderingChecker, Violation, check_drained, check_state
from magnetar.sim.shell.world import SHELL_ORDERING_KINDS, ShellResult, run_shell_schedule
from magnetar.sim.world import SimOptions, World

__all__ = ["ScheduleResult", "SweepResult", "expected_kinds", "run_schedule", "run_sweep", "LIVENESS_STEPS_MAX"]

# Liveness must drain within this many steps; a schedule holds at most a few hundred messages, each
# needing a handful of steps (read, dispatch, receive, ack), so this is a generous bound, not a guess.
LIVENESS_STEPS_MAX = 20_000


@dataclass
class ScheduleResult:
    seed: int
    options: SimOptions
    steps: int
    deliveries: int
    violations: list[Violation]

    def failures(self, expected: frozenset[str] = frozenset()) -> list[Violation]:
        return [v for v in self.violations if v.kind not in expected]

    def header(self) -> str:
        return f"SEED={self.seed} {self.options}"


def expected_kinds(ordering_mode: str, subscription_type: str = "Key_Shared", shell: bool = False) -> frozenset[str]:
    """Violations a mode is known to produce: classic and pip282 break the one-consumer rule and
    per-key order (PIP-282 issue-1/issue-2, #23307); pip379 and the other types may show none."""
    if subscription_type == "Key_Shared" and ordering_mode in ("classic", "pip282"):
        return SHELL_ORDERING_KINDS if shell else ORDERING_KINDS
    return frozenset()


def run_schedule(
    seed: int,
    ordering_mode: str = "pip379",
    subscription_type: str = "Key_Shared",
    options: SimOptions | None = None,
) -> ScheduleResult:
    """Run one schedule: the options derive from the seed unless given; the same seed replays exactly.

    The run stops at the first violation the mode must never show; expected ones are recorded (one per
    kind) and the run goes on, so that a sweep counts how often each appears.
    """
    options = options or SimOptions.from_seed(seed, ordering_mode, subscription_type)
    expected = expected_kinds(options.ordering_mode, options.subscription_type)
    world = World(seed, options)
    checker = OrderingChecker(world)
    world.listeners.append(checker)

    def failed() -> bool:
        return any(v.kind not in expected for v in checker.violations)

    try:
        _run_phase(world, checker, options.safety_steps, failed, liveness=False)
        if not failed():
            world.prepare_liveness()
            check_state(world, checker)
            _run_phase(world, checker, LIVENESS_STEPS_MAX, failed, liveness=True)
            if not failed():
                check_drained(world, checker)
    except Exception as error:  # noqa: BLE001 - a raise inside the core is a finding, reported with its seed
        checker.fail(world, "invariant", "".join(traceback.format_exception(error)))
    return ScheduleResult(seed, options, world.steps, world.deliveries, checker.violations)


def _run_phase(
    world: World, checker: OrderingChecker, steps_max: int, failed: Callable[[], bool], *, liveness: bool
) -> None:
    """Step the world, checking the state after each step, until `steps_max` steps, a step that finds
    nothing to do, or a failure; the liveness phase also stops once the subscription is drained."""
    for _ in range(steps_max):
        if liveness and world.drained() and not world.dispatcher.awaiting_dispatch and world.pending_read is None:
            return
        if not world.step(liveness=liveness):
            return
        check_state(world, checker)
        if failed():
            return


@dataclass
class SweepResult:
    """A sweep of the core's simulation, or with `shell` of the shell simulator's (sim/shell)."""

    ordering_mode: str
    subscription_type: str
    shell: bool = False
    schedules: int = 0
    steps: int = 0
    deliveries: int = 0
    violating_schedules: Counter = field(default_factory=Counter)
    examples: dict[str, tuple[int, str]] = field(default_factory=dict)

    def add(self, result: ScheduleResult | ShellResult) -> None:
        self.schedules += 1
        self.steps += result.steps
        self.deliveries += result.deliveries
        for kind in {v.kind for v in result.violations}:
            self.violating_schedules[kind] += 1
            if kind not in self.examples:
                first = next(v for v in result.violations if v.kind == kind)
                self.examples[kind] = (result.seed, f"{result.header()}\n{first.report()}")

    def merge(self, other: SweepResult) -> None:
        self.schedules += other.schedules
        self.steps += other.steps
        self.deliveries += other.deliveries
        self.violating_schedules.update(other.violating_schedules)
        for kind, example in other.examples.items():
            if kind not in self.examples or example[0] < self.examples[kind][0]:
                self.examples[kind] = example

    def describe(self) -> str:
        """The counts by kind, then one example of each: what a failed sweep prints."""
        lines = [f"{self.ordering_mode}: {dict(self.violating_schedules)} in {self.schedules} schedules"]
        for kind, (_seed, text) in sorted(self.examples.items()):
            lines.append(f"--- {kind}\n{text}")
        return "\n".join(lines)

    def unexpected(self) -> dict[str, int]:
        """Violation kinds this mode must never show, with how many schedules showed each."""
        allowed = expected_kinds(self.ordering_mode, self.subscription_type, self.shell)
        return {k: n for k, n in self.violating_schedules.items() if k not in allowed}


def _sweep_chunk(args: tuple[str, str, int, int, bool]) -> SweepResult:
    ordering_mode, subscription_type, first, count, shell = args
    result = SweepResult(ordering_mode, subscription_type, shell)
    run = run_shell_schedule if shell else run_schedule
    for seed in range(first, first + count):
        result.add(run(seed, ordering_mode, subscription_type))
    return result


def run_sweep(
    ordering_mode: str,
    subscription_type: str = "Key_Shared",
    schedules: int = 1000,
    first_seed: int = 0,
    processes: int | None = None,
    shell: bool = False,
    on_progress: Callable[[int], None] | None = None,
) -> SweepResult:
    """Run `schedules` consecutive seeds, spread over `processes` worker processes (default: all cores);
    with `shell`, schedules of the shell simulator (the real broker) instead of the core's. `on_progress`
    hears how many schedules each finished chunk ran."""
    processes = processes or os.cpu_count() or 1
    chunk = max(1, min(250, schedules // (processes * 4) or 1))
    jobs = [
        (ordering_mode, subscription_type, seed, min(chunk, first_seed + schedules - seed), shell)
        for seed in range(first_seed, first_seed + schedules, chunk)
    ]
    total = SweepResult(ordering_mode, subscription_type, shell)
    if processes == 1:
        for job in jobs:
            total.merge(_sweep_chunk(job))
            if on_progress is not None:
                on_progress(job[3])
        return total
    # Spawned, not forked: a forked child inherits locks held by other threads of the parent (a test
    # process that ran the official client has its C++ threads) and can hang on them for ever.
    with ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("spawn")) as pool:
        for part in pool.map(_sweep_chunk, jobs):
            total.merge(part)
            if on_progress is not None:
                on_progress(part.schedules)
    return total
