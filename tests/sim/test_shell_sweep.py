"""The shell simulator: the real broker's connections, consumers, subscriptions and storage, driven by
simulated official clients under churn, many seeds per mode.

`MAGNETAR_SHELL_SCHEDULES` sets the count per Key_Shared mode (default 300 for pip379, a third of it for
the other modes and for Shared, Failover and Exclusive; `make soak` runs more). A failure prints the seed, the options and a trace of
the clients and the subscription's events; `magnetar sim --shell --seed N --mode M --type T` replays it.
"""

from __future__ import annotations

import os

import pytest

from magnetar.sim.runner import run_sweep
from magnetar.sim.shell.world import SHELL_ORDERING_KINDS, run_shell_schedule

SCHEDULES = int(os.environ.get("MAGNETAR_SHELL_SCHEDULES", "300"))
# Worker processes of each sweep: all cores unless MAGNETAR_SIM_PROCESSES says (make test gives the
# sweeps one core, beside the rest of the suite).
PROCESSES = int(os.environ.get("MAGNETAR_SIM_PROCESSES", "0")) or None


def test_pip379_keeps_every_rule_under_churn() -> None:
    result = run_sweep("pip379", "Key_Shared", SCHEDULES, processes=PROCESSES, shell=True)
    assert result.schedules == SCHEDULES
    assert not result.violating_schedules, result.describe()


@pytest.mark.parametrize("mode", ["pip282", "classic"])
def test_older_modes_lose_nothing_and_only_reorder(mode: str) -> None:
    schedules = max(SCHEDULES // 3, 1)
    result = run_sweep(mode, "Key_Shared", schedules, processes=PROCESSES, shell=True)
    assert result.schedules == schedules
    assert not result.unexpected(), result.describe()
    assert set(result.violating_schedules) & SHELL_ORDERING_KINDS, f"{mode}: the simulator found no reordering"


@pytest.mark.parametrize("subscription_type", ["Shared", "Failover", "Exclusive"])
def test_other_types_lose_nothing_under_churn(subscription_type: str) -> None:
    """Failover and Exclusive also keep each consumer's order: a negative ack there asks for everything
    again with the next consumer epoch, and what was sent before is dropped by the client."""
    schedules = max(SCHEDULES // 3, 1)
    result = run_sweep("pip379", subscription_type, schedules, processes=PROCESSES, shell=True)
    assert result.schedules == schedules
    assert not result.violating_schedules, result.describe()


def test_same_seed_replays_exactly() -> None:
    first, second = run_shell_schedule(11, "classic"), run_shell_schedule(11, "classic")
    assert (first.steps, first.deliveries, first.incarnations, first.virtual_s) == (
        second.steps,
        second.deliveries,
        second.incarnations,
        second.virtual_s,
    )
    assert [v.report() for v in first.violations] == [v.report() for v in second.violations]
