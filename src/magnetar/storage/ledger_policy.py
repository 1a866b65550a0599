"""When a managed ledger closes its current ledger (rollover) and which closed ledgers it deletes
(retention), as Pulsar decides both.

Owns: `RolloverPolicy`, the state of the current ledger's limits and age, read by the one rollover
check of the append path (`ManagedLedger._roll_if_full`); and `ledgers_to_trim`, which picks the
consumed ledgers retention lets go. Both read time from the factory's `Clock` only.
Must not touch: positions, pending appends, the engine; the managed ledger does what they decide.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Sequence
from itertools import accumulate

from magnetar.clock import Clock, TimerHandle
from magnetar.storage.config import StorageConfig

__all__ = ["RolloverPolicy", "ledgers_to_trim"]

MB = 1024 * 1024


class RolloverPolicy:
    """Whether the current ledger takes one more entry, as Pulsar's ManagedLedgerImpl decides: a
    ledger is full at `managedLedgerMaxEntriesPerLedger` entries or `managedLedgerMaxSizePerLedgerMbytes`,
    but rolls over only once it is `managedLedgerMinLedgerRolloverTimeMinutes` old; it rolls over at
    `managedLedgerMaxLedgerRolloverTimeMinutes` whatever it holds (checked by the factory's timer).

    The append path compares the next entry id and the assigned bytes with `check_entries_at` and
    `check_size_at` and asks `is_full` only when one is reached: the limits; 0 once a roll is
    requested; never (`sys.maxsize`) while the ledger is full but younger than the minimum time, so
    that such a ledger does not send every append to `is_full`, and a timer then requests the roll.

    Invariants: `roll_requested` implies `check_entries_at == 0`; a matured timer is pending only
    while the thresholds are `sys.maxsize`.
    """

    __slots__ = (
        "_clock",
        "_config",
        "_on_roll_requested",
        "entries_max",
        "size_bytes_max",
        "check_entries_at",
        "check_size_at",
        "roll_requested",
        "_created_monotonic",
        "_matured_handle",
    )

    def __init__(self, config: StorageConfig, clock: Clock) -> None:
        self._clock = clock
        self._config = config
        self.entries_max = config.managedLedgerMaxEntriesPerLedger
        self.size_bytes_max = config.managedLedgerMaxSizePerLedgerMbytes * MB
        self.check_entries_at = 0
        self.check_size_at = 0
        self.roll_requested = True  # no ledger yet
        self._created_monotonic = 0.0
        self._matured_handle: TimerHandle | None = None

    def started(self) -> None:
        """A new current ledger: its limits apply and its age counts from now."""
        self.roll_requested = False
        self.check_entries_at = self.entries_max
        self.check_size_at = self.size_bytes_max
        self.cancel()
        self._created_monotonic = self._clock.monotonic()

    def request_roll(self) -> None:
        """The next append opens a new ledger."""
        self.roll_requested = True
        self.check_entries_at = 0

    def is_full(self, entries: int, size: int) -> bool:
        """Whether the current ledger, holding `entries` entries and `size` bytes (durable or not),
        must roll before the next entry."""
        if self.roll_requested:
            return True
        if entries < self.entries_max and size < self.size_bytes_max:
            return False
        # Counts first: they are what usually decides, and reading the clock costs more than the rest.
        young_s = self._config.managedLedgerMinLedgerRolloverTimeMinutes * 60 - (
            self._clock.monotonic() - self._created_monotonic
        )
        if young_s <= 0:
            return True
        self.check_entries_at = self.check_size_at = sys.maxsize
        if self._matured_handle is None:
            self._matured_handle = self._clock.call_later(young_s, self._matured)
        return False

    def _matured(self) -> None:
        self._matured_handle = None
        self.request_roll()

    def roll_if_too_old(self, entries: int) -> None:
        """`managedLedgerMaxLedgerRolloverTimeMinutes`: a ledger with entries that old rolls over."""
        age_minutes = (self._clock.monotonic() - self._created_monotonic) / 60
        if entries and age_minutes >= self._config.managedLedgerMaxLedgerRolloverTimeMinutes:
            self.request_roll()

    def fitting_end(self, datas: Sequence[bytes], start: int, remaining_size: int, entries: int, size: int) -> int:
        """Where the run of `datas[start:]` that the current ledger (`entries`, `size` bytes) takes
        ends: as the check decides per entry, an entry goes in while the ledger has fewer than the
        maximum entries and bytes. `remaining_size`: the bytes of `datas[start:]`."""
        end = len(datas)
        room = self.entries_max - entries
        if room <= 0 or size >= self.size_bytes_max:
            return end  # full, but younger than managedLedgerMinLedgerRolloverTimeMinutes: no roll yet
        end = min(end, start + room)
        if size + remaining_size >= self.size_bytes_max:
            # sizes before each entry: the entry at index i goes in while that is below the maximum
            before = list(accumulate(map(len, datas[start:end]), initial=size))
            end = start + min(bisect_left(before, self.size_bytes_max), end - start)
        return end

    def cancel(self) -> None:
        if self._matured_handle is not None:
            self._matured_handle.cancel()
            self._matured_handle = None


def ledgers_to_trim(
    ledgers: Sequence[tuple[int, int, int, int]],
    deletable: Callable[[int], bool],
    slowest: tuple[int, int],
    retention: tuple[int, int],
    now_ms: int,
) -> list[int]:
    """The ids of the closed ledgers retention deletes, oldest first, as Pulsar's
    `ManagedLedgerImpl.internalTrimLedgers` picks them.

    `ledgers`: every ledger as (id, entries, size, timestamp_ms of its last entry), in id order;
    `deletable(id)`: false for the current ledger and one with appends still in a commit; `slowest`:
    the mark-delete position of the slowest durable cursor (a ledger is consumed once it is behind
    it); `retention`: (minutes, megabytes), -1 meaning unlimited. A consumed ledger goes while it is
    older than the time or the consumed ones beyond it exceed the size; the first that may not go
    stops the scan, so ledgers are deleted from the oldest on and never leave a hole.
    """
    time_minutes, size_mb = retention
    if time_minutes < 0 and size_mb < 0:
        return []
    total = sum(ledger[2] for ledger in ledgers)
    deleted_size = 0
    trimmed = []
    for ledger_id, entries, size, timestamp_ms in ledgers:
        if not deletable(ledger_id):
            break
        consumed = ledger_id < slowest[0] or (ledger_id == slowest[0] and slowest[1] >= entries - 1)
        if not consumed:
            break
        expired = time_minutes >= 0 and now_ms - timestamp_ms >= time_minutes * 60_000
        over_quota = size_mb >= 0 and total - deleted_size > size_mb * MB
        if not (expired or over_quota):
            break
        deleted_size += size
        trimmed.append(ledger_id)
    return trimmed
