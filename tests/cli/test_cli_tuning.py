"""The standalone broker's process-wide tuning (cli/tuning.py): applied by `tune_process`, in a child
process, since it changes the interpreter it runs in; and nowhere else (importing and running the
broker's and storage's modules leaves CPython's defaults alone)."""

from __future__ import annotations

import json
import subprocess
import sys

from magnetar.cli.tuning import GC_THRESHOLDS, GIL_SWITCH_INTERVAL_S

PROBE = """
import asyncio, gc, json, sys
import magnetar.broker.server, magnetar.storage
before = {"thresholds": gc.get_threshold(), "switch": sys.getswitchinterval(), "frozen": gc.get_freeze_count()}
if sys.argv[1] == "tune":
    from magnetar.cli.tuning import tune_process

    async def main():
        task = tune_process()
        task.cancel()

    asyncio.run(main())
after = {"thresholds": gc.get_threshold(), "switch": sys.getswitchinterval(), "frozen": gc.get_freeze_count()}
print(json.dumps([before, after]))
"""


def probe(mode: str) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(done.stdout)


def test_tune_process_sets_the_collector_and_the_switch_interval():
    before, after = probe("tune")
    assert tuple(after["thresholds"]) == GC_THRESHOLDS and after["switch"] == GIL_SWITCH_INTERVAL_S
    assert after["frozen"] > 0 and before["frozen"] == 0


def test_library_modules_leave_the_interpreter_alone():
    before, after = probe("import only")
    assert before == after and after["frozen"] == 0
    assert tuple(after["thresholds"]) != GC_THRESHOLDS and after["switch"] != GIL_SWITCH_INTERVAL_S
