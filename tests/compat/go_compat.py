"""The Go compatibility program (compat/go) as the tests drive it: one process per scenario, which prints
one JSON report of what the official Go client observed.

Built by `make compat` (which `make test` runs first); a missing build is an error, not a skip, because
the suite is part of what `make test` proves.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conftest import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "build" / "go" / "bin" / "compat-go"
# A scenario takes a few seconds (its longest waits are a 2 s delivery delay and 1.5 s quiet periods);
# two minutes means it is stuck.
SCENARIO_TIMEOUT_S = 120


class GoCompatError(AssertionError):
    """A scenario failed where the client must not fail; the message carries the client's own log."""


def run_scenario(
    scenario: str, service_url: str, admin_url: str, name: str, listener_name: str = "", remote_service_url: str = ""
) -> dict[str, Any]:
    """Run one scenario against a broker; its report, or GoCompatError with the report's error and stderr.
    `listener_name` is the advertised listener the scenario's client names, where it names one;
    `remote_service_url` the cluster the broker replicates to, for geo-replicate."""
    if not PROGRAM.exists():
        raise RuntimeError(f"{PROGRAM} is missing: run `make compat` (make test does) to build compat/go")
    args = [str(PROGRAM), "-service-url", service_url, "-admin-url", admin_url, "-name", name]
    args += ["-listener-name", listener_name, "-remote-service-url", remote_service_url, scenario]
    done = subprocess.run(args, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S)
    lines = done.stdout.strip().splitlines()
    report = json.loads(lines[-1]) if lines else {}
    if done.returncode != 0 or "error" in report:
        raise GoCompatError(
            f"compat-go {scenario} exited {done.returncode}: {report.get('error', done.stdout)}\n"
            f"--- client log ---\n{done.stderr[-4000:]}"
        )
    return report


def scenarios_against(broker: BrokerProcess) -> Callable[[str], dict[str, Any]]:
    """`run(scenario)`: a scenario against `broker`, under a name of its own so scenarios never share a topic."""

    def run(scenario: str) -> dict[str, Any]:
        return run_scenario(scenario, broker.url, broker.http_url, f"go-{uuid.uuid4().hex[:8]}")

    return run
