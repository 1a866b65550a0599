"""Process-wide tuning of the standalone broker, in one place: the cyclic garbage collector and the
GIL switch interval, set by `magnetar standalone` once the broker has started (the `on_started` of
cli/standalone.py's `run_standalone`). Library code (storage, broker, admin) sets none of it, so a
test, a benchmark or a program that embeds magnetar runs with CPython's defaults unless it calls
`tune_process` itself.

Owns: the values and the reasons for them (measured in docs/broker.md, "The process"). Must not
touch: anything but the interpreter's process-wide settings.

Not here: storage's `gc_paused`, which holds the collector off only while a reader thread or the loop
makes thousands of entries at once and restores it after; it is part of how storage reads, measured
with storage's own benchmarks (docs/storage.md), not a setting of the process.
"""

from __future__ import annotations

import asyncio
import gc
import sys

__all__ = ["GC_THRESHOLDS", "GIL_SWITCH_INTERVAL_S", "YOUNG_COLLECTION_INTERVAL_S", "generation_due", "tune_process"]

# Generation thresholds for the cyclic collector (CPython's defaults: 700, 10, 10). A broker allocates
# a few objects per message; at tens of thousands of messages a second the default collects the young
# generation every few milliseconds and the oldest every few seconds.
GC_THRESHOLDS = (50_000, 20, 100)
# How long a thread that wants the GIL waits before asking its holder to let go (CPython's default:
# 5 ms). The group-commit thread needs the GIL back after every SQLite step and fsync; while the
# event loop thread is busy, each of those waits could last the whole interval, several times per
# commit; at 10,000 msg/s 1 ms took about a millisecond off the p99 (docs/broker.md, "The process").
GIL_SWITCH_INTERVAL_S = 0.001
# The young generation is collected on this timer as well as by allocation counts. A generation-0
# collection runs only after 50,000 more allocations than deallocations, and while acked messages
# are freed as fast as new ones arrive that took seconds: the collection then found the entry cache's
# runs of those seconds (40,000 objects, every payload tuple checked for untracking) and held the
# loop 25-60 ms. Every 100 ms it finds a tenth of a second's worth instead. Each tick collects the
# oldest generation that is due by the thresholds (`generation_due`): the middle one every 21 ticks,
# the oldest every 21 * 101.
YOUNG_COLLECTION_INTERVAL_S = 0.1


def tune_process() -> asyncio.Task[None]:
    """Apply the tuning; on the event loop, after start-up. What exists by then (modules, config,
    storage) lives for the whole process: frozen, the collector never walks it again, and young
    objects (per-message tuples, futures) build up longer between collections, which otherwise pause
    the loop for milliseconds at a time under load. Returns the task of the timed young collections,
    for the caller to cancel at shutdown."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    return asyncio.get_running_loop().create_task(_collect_on_timer())


async def _collect_on_timer() -> None:
    while True:
        await asyncio.sleep(YOUNG_COLLECTION_INTERVAL_S)
        gc.collect(generation_due())


def generation_due() -> int:
    """The oldest generation whose count of collections of the one below passed its threshold, as
    CPython's own allocation-triggered collection picks it. The timer's collections count (they are
    what gets the counts past the thresholds), but only an allocation-triggered collection would look
    at the counts, and below ~50,000 allocations in 100 ms none comes: a timer collecting only the
    young generation left every cycle that was alive at one of its collections (a closed connection
    and its handlers, a consumer, a subscription) uncollected for good, and a soak's memory grew with
    each client it restarted (docs/performance.md, "Soak")."""
    counts, thresholds = gc.get_count(), gc.get_threshold()
    for generation in (2, 1):
        if counts[generation] > thresholds[generation]:
            return generation
    return 0
