"""Where entries go and what the answers of bookies prove: BookKeeper's round-robin distribution schedule.

Owns: `write_set` (`RoundRobinDistributionSchedule.getWriteSet`), `QuorumCoverageSet` (`RRQuorumCoverageSet`,
used by fencing and by reading the last add confirmed), `bookies_missing_entry_required` (the "entry absent"
rule of a recovery read, `ReadOpBase.requiredBookiesMissingEntryForRecovery`). Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum

__all__ = ["Answer", "QuorumCoverageSet", "bookies_missing_entry_required", "write_set"]


def write_set(entry_id: int, ensemble_size: int, write_quorum_size: int) -> tuple[int, ...]:
    """The ensemble indexes of the bookies that store `entry_id`: (entry_id + i) mod E for i < W."""
    return tuple((entry_id + i) % ensemble_size for i in range(write_quorum_size))


def bookies_missing_entry_required(write_quorum_size: int, ack_quorum_size: int) -> int:
    """How many bookies of an entry's write set must answer NoSuchEntry/NoSuchLedger before recovery may
    treat the entry as never written: W - A + 1. Fewer missing leaves A bookies that may hold it, and an
    entry on A bookies may have been acknowledged to the writer."""
    return write_quorum_size - ack_quorum_size + 1


class Answer(enum.Enum):
    """What a bookie's answer tells the coverage set."""

    # EOK, NoSuchEntry or NoSuchLedger: the bookie answered for what it holds (and is fenced, if asked to).
    KNOWN = "known"
    # Any other error: it may hold entries we cannot see.
    UNKNOWN = "unknown"


class QuorumCoverageSet:
    """Whether the bookies heard from cover every write quorum of an ensemble.

    Covered means: in no write quorum are A or more bookies still unknown (not answered, or answered with an
    error other than NoSuchEntry/NoSuchLedger). Then no entry can have been acknowledged by bookies we did
    not hear from alone, so fencing is complete and the highest last-add-confirmed seen is a safe start.

    Invariants: `_known[i]` is True only for a bookie whose latest answer was KNOWN.
    """

    __slots__ = ("_ack_quorum_size", "_ensemble_size", "_known", "_write_quorum_size")

    def __init__(self, ensemble_size: int, write_quorum_size: int, ack_quorum_size: int) -> None:
        self._ensemble_size = ensemble_size
        self._write_quorum_size = write_quorum_size
        self._ack_quorum_size = ack_quorum_size
        self._known = [False] * ensemble_size

    def add_bookie(self, bookie_index: int, answer: Answer) -> None:
        self._known[bookie_index] = answer is Answer.KNOWN

    def is_covered(self) -> bool:
        for first in range(self._ensemble_size):
            unknown = sum(
                1
                for offset in range(self._write_quorum_size)
                if not self._known[(first + offset) % self._ensemble_size]
            )
            if unknown >= self._ack_quorum_size:
                return False
        return True
