"""The standalone broker's process-wide tuning (cli/tuning.py): applied by `tune_process`, in a child
process, since it changes the interpreter it runs in; and nowhere else (importing and running the
broker's and storage's modules leaves CPython's defaults alone); and the timer's collections reach the
older generations, where a cycle that was alive at a young collection ends up."""

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


COLLECTS_OLD_CYCLES = """
import gc, json, weakref
from magnetar.cli.tuning import GC_THRESHOLDS, generation_due

gc.disable()  # the timer's collections alone, as at a rate below the allocation threshold
gc.set_threshold(*GC_THRESHOLDS)


class Node:
    pass


def cycle():
    a, b = Node(), Node()
    a.b, b.a = b, a
    return a


old = cycle()
gc.collect(1)  # alive at a collection of the middle generation: into the oldest
middle = cycle()
gc.collect(0)  # alive at a young collection: into the middle generation
kept = [weakref.ref(old), weakref.ref(middle)]
del old, middle
ticks = {}
for tick in range(1, 30 * 110):
    gc.collect(generation_due())
    for name, ref in (("middle", kept[1]), ("old", kept[0])):
        if ref() is None and name not in ticks:
            ticks[name] = tick
print(json.dumps(ticks))
"""


def test_the_timers_collections_free_cycles_that_were_alive_at_an_earlier_collection():
    done = subprocess.run(
        [sys.executable, "-c", COLLECTS_OLD_CYCLES], capture_output=True, text=True, timeout=120, check=True
    )
    ticks = json.loads(done.stdout)
    # The middle generation is collected every 21 ticks (2.1 s), the oldest every 21 * 101 (3.5 min)
    # after its count's start, which the setup's collections moved by a few ticks.
    assert ticks["middle"] <= 21 and ticks["old"] <= 21 * 103, ticks
