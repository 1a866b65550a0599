"""Random schedules of the ordering core, many seeds per mode.

`MAGNETAR_SIM_SCHEDULES` sets the count per Key_Shared mode (default 10,000; `make soak` runs 200,000);
the other subscription types run a fifth of it. Schedules are spread over every core. A failure prints
the seed, the options and a trace; `magnetar sim --seed N --mode M --type T` replays it exactly.
"""

from __future__ import annotations

import os

import pytest

from magnetar.sim.checkers import ORDERING_KINDS
from magnetar.sim.runner import run_sweep

SCHEDULES = int(os.environ.get("MAGNETAR_SIM_SCHEDULES", "10000"))
# Worker processes of each sweep: all cores unless MAGNETAR_SIM_PROCESSES says (make test gives the
# sweeps one core, beside the rest of the suite).
PROCESSES = int(os.environ.get("MAGNETAR_SIM_PROCESSES", "0")) or None


def test_pip379_never_violates() -> None:
    result = run_sweep("pip379", "Key_Shared", SCHEDULES, processes=PROCESSES)
    assert result.schedules == SCHEDULES
    assert not result.violating_schedules, result.describe()


@pytest.mark.parametrize("mode", ["pip282", "classic"])
def test_older_modes_only_break_ordering(mode: str) -> None:
    """classic and pip282 keep every safety and liveness property but the ordering ones, and the
    simulator finds their reorderings (PIP-282 issue-1/issue-2, #23307) among the seeds."""
    result = run_sweep(mode, "Key_Shared", SCHEDULES, processes=PROCESSES)
    assert result.schedules == SCHEDULES
    assert not result.unexpected(), result.describe()
    assert set(result.violating_schedules) & ORDERING_KINDS, f"{mode}: the simulator found no reordering"


@pytest.mark.parametrize("subscription_type", ["Shared", "Failover", "Exclusive"])
def test_other_subscription_types(subscription_type: str) -> None:
    schedules = max(SCHEDULES // 5, 1)
    result = run_sweep("pip379", subscription_type, schedules, processes=PROCESSES)
    assert result.schedules == schedules
    assert not result.violating_schedules, result.describe()


def test_same_seed_replays_exactly() -> None:
    from magnetar.sim.runner import run_schedule

    first, second = run_schedule(12345, "classic"), run_schedule(12345, "classic")
    assert (first.steps, first.deliveries) == (second.steps, second.deliveries)
    assert [v.report() for v in first.violations] == [v.report() for v in second.violations]
