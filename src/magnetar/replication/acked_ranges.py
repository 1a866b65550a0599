"""Replicating a subscription's individually acknowledged ranges (magnetar beyond PIP-33, Pulsar #10054),
as pure state: which entry of one cluster is which entry of another, and what a subscription's
acknowledgements become in another cluster's positions.

Owns:
- `ReplicatedPositions`: where each entry a replicator sent landed in the remote topic, learned from the
  remote's SEND_RECEIPTs, as runs of consecutive positions (bounded, oldest forgotten first);
- `subscription_acked_ranges`: what a subscription acknowledged, as open-closed ranges;
- `acked_ranges_to_send`: the ACKED_RANGES marker's content for that, in every cluster's positions;
- `ranges_to_acknowledge`: what a receiving cluster acknowledges on its subscription of the same name.
Must not touch: asyncio, storage, sockets or the clock. The replicator records receipts, the topic's
controller writes the marker, the subscription acknowledges what `ranges_to_acknowledge` returns.

Why receipts rather than snapshots: a receipt names exactly the remote entry a local one became, so a
translation through receipts is exact entry by entry (a message acknowledged is skipped, one not
acknowledged never is), while the snapshots' correspondence holds only between whole snapshot intervals,
and the holes of a Shared subscription acking out of order lie inside them (docs/replication.md).

Guarantee of the translation, for a subscription of cluster S and a receiving cluster R:
- an entry published in S that S's subscription acknowledged becomes R's copy of it, if S's replicator
  to R holds the receipt for it;
- an entry published in R that S's subscription acknowledged (S's copy of it) becomes R's original, if
  R's replicator to S holds the receipt for it;
- nothing else: a position is only ever translated through a receipt, so R acknowledges only copies of
  what S acknowledged. Entries of a third cluster, and entries whose receipt was forgotten (the bound,
  a restart, a connection lost before the receipt came), are not translated: at most duplicates.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from operator import lt

from magnetar.positions import Position
from magnetar.protocol.commands import signed_id
from magnetar.protocol.pulsar_markers_pb2 import MarkersMessageIdData, ReplicatedSubscriptionsAckedRanges

__all__ = [
    "ACKED_RANGES_MAX",
    "AckedRangesContent",
    "RUNS_MAX",
    "ReplicatedPositions",
    "acked_ranges_to_send",
    "marker_content",
    "positions_in",
    "ranges_to_acknowledge",
    "uncovered",
    "subscription_acked_ranges",
]

Range = tuple[Position, Position]
# An ACKED_RANGES marker's ranges: cluster name -> open-closed ranges in that cluster's positions.
AckedRangesContent = dict[str, list[Range]]

# Ranges per cluster in one ACKED_RANGES marker: a subscription acking every other message has one range
# per acknowledged message, and the marker must stay far below the 5 MB message size (10,000 ranges are
# about 300 KB). The lowest ranges go first; the rest wait for the holes below them to close. Pulsar
# persists as many ranges of a cursor (managedLedgerMaxUnackedRangesToPersist).
ACKED_RANGES_MAX = 10_000
# Runs of positions one replicator remembers (each about 100 bytes). A run breaks where the remote stored
# something else between two entries (its own traffic, another cluster's markers) or a ledger rolled, so
# one-way traffic needs few runs and two-way traffic about one per remote entry in between.
RUNS_MAX = 100_000


class ReplicatedPositions:
    """Where a replicator's entries landed in the remote topic: runs of local entries `(ledger, e)`,
    `(ledger, e + 1)`, ... stored remotely as `(remote ledger, f)`, `(remote ledger, f + 1)`, ...

    Invariants: runs are ordered, strictly increasing both by local and by remote position, never
    overlapping in either; each run holds at least one entry; at most `runs_max` runs.
    """

    def __init__(self, runs_max: int = RUNS_MAX) -> None:
        if runs_max < 1:
            raise ValueError(f"runs_max must be >= 1, not {runs_max}")
        self.runs_max = runs_max
        # Parallel lists, one item per run: its first local and first remote position, and its length.
        self._local: list[Position] = []
        self._remote: list[Position] = []
        self._count: list[int] = []

    def __len__(self) -> int:
        return len(self._count)

    def record(self, local: Sequence[tuple[int, int]], remote: Sequence[tuple[int, int]]) -> None:
        """The remote stored `local[i]` at `remote[i]` (receipts, in send order). A receipt without a
        position (a duplicate the remote dropped: (-1, -1)) or not above the last one recorded on both
        sides (the remote topic was recreated) teaches nothing and is left out."""
        local_starts, remote_starts, counts = self._local, self._remote, self._count
        if self._record_run(local, remote):
            return
        for (local_ledger, local_entry), (remote_ledger, remote_entry) in zip(local, remote):
            if remote_ledger < 0 or remote_entry < 0:
                continue
            if counts:
                count = counts[-1]
                last_local, last_remote = local_starts[-1], remote_starts[-1]
                end_local = (last_local[0], last_local[1] + count - 1)
                end_remote = (last_remote[0], last_remote[1] + count - 1)
                if (local_ledger, local_entry) <= end_local or (remote_ledger, remote_entry) <= end_remote:
                    continue
                if (
                    local_ledger == end_local[0]
                    and local_entry == end_local[1] + 1
                    and remote_ledger == end_remote[0]
                    and remote_entry == end_remote[1] + 1
                ):
                    counts[-1] = count + 1
                    continue
            local_starts.append(Position(local_ledger, local_entry))
            remote_starts.append(Position(remote_ledger, remote_entry))
            counts.append(1)
        if len(counts) > self.runs_max:
            # Trimmed a tenth below the bound, so that trimming is not a list shift per receipt.
            self._drop_first(len(counts) - self.runs_max + self.runs_max // 10)

    def _record_run(self, local: Sequence[tuple[int, int]], remote: Sequence[tuple[int, int]]) -> bool:
        """`record` of one socket read's receipts in O(1), for the usual case: consecutive entries on both
        sides (one ledger each, no duplicate dropped), after everything recorded. False for anything
        else, which `record` then goes through receipt by receipt. Local positions only rise (the
        replicator's send order); n remote positions that rise within one ledger and span n - 1 entry
        ids are consecutive (a dropped duplicate, (-1, -1), or a remote topic recreated breaks the rise)."""
        n = len(local)
        if not n or n != len(remote):
            return False
        first_local, last_local = local[0], local[-1]
        first_remote, last_remote = remote[0], remote[-1]
        if (
            first_local[0] != last_local[0]
            or last_local[1] - first_local[1] != n - 1
            or first_remote[0] != last_remote[0]
            or last_remote[1] - first_remote[1] != n - 1
            or first_remote[1] < 0
            or first_remote[0] < 0
            or not all(map(lt, remote, islice(remote, 1, None)))
        ):
            return False
        counts = self._count
        if counts:
            count = counts[-1]
            last_run_local, last_run_remote = self._local[-1], self._remote[-1]
            end_local = (last_run_local[0], last_run_local[1] + count - 1)
            end_remote = (last_run_remote[0], last_run_remote[1] + count - 1)
            if tuple(first_local) <= end_local or tuple(first_remote) <= end_remote:
                return False
            if (
                first_local[0] == end_local[0]
                and first_local[1] == end_local[1] + 1
                and first_remote[0] == end_remote[0]
                and first_remote[1] == end_remote[1] + 1
            ):
                counts[-1] = count + n
                return True
        self._local.append(Position(*first_local))
        self._remote.append(Position(*first_remote))
        counts.append(n)
        if len(counts) > self.runs_max:
            self._drop_first(len(counts) - self.runs_max + self.runs_max // 10)
        return True

    def forget_up_to(self, local: Position) -> None:
        """No local entry at or below `local` needs translating any more."""
        index = bisect_right(self._local, local)
        if index and self._local_end(index - 1) > local:
            index -= 1  # the run holds entries above `local` too
        self._drop_first(index)

    def _drop_first(self, runs: int) -> None:
        del self._local[:runs]
        del self._remote[:runs]
        del self._count[:runs]

    def _local_end(self, index: int) -> Position:
        start = self._local[index]
        return Position(start[0], start[1] + self._count[index] - 1)

    def to_remote(self, ranges: Iterable[Range]) -> list[Range]:
        """The remote positions of the entries in local open-closed `ranges`, as remote ranges."""
        return _translate(ranges, self._local, self._remote, self._count)

    def to_local(self, ranges: Iterable[Range]) -> list[Range]:
        """The local positions of the entries whose remote positions lie in `ranges`, as local ranges."""
        return _translate(ranges, self._remote, self._local, self._count)


def _translate(
    ranges: Iterable[Range], starts: list[Position], targets: list[Position], counts: list[int]
) -> list[Range]:
    """Each open-closed range of positions on the `starts` side, cut by the runs, on the `targets` side
    (ordered as the ranges are when they are ordered; consecutive results that touch are merged)."""
    out: list[Range] = []
    for lower, upper in ranges:
        # The first run that may hold an entry above `lower`: the one starting at or before it, if it
        # reaches past it, else the next.
        index = max(bisect_right(starts, lower) - 1, 0)
        while index < len(starts):
            start = starts[index]
            if start > upper:
                break
            count = counts[index]
            ledger, first = start
            # Entry ids of this run inside (lower, upper]: the run is one ledger's entries first..last.
            last = first + count - 1
            low = first if (ledger, first) > lower else (lower[1] + 1 if lower[0] == ledger else last + 1)
            high = last if (ledger, last) <= upper else (upper[1] if upper[0] == ledger else first - 1)
            if low <= high:
                target_ledger, target_first = targets[index]
                target_lower = Position(target_ledger, target_first + low - first - 1)
                target_upper = Position(target_ledger, target_first + high - first)
                if out and out[-1][1] == target_lower:
                    out[-1] = (out[-1][0], target_upper)
                else:
                    out.append((target_lower, target_upper))
            index += 1
    return out


def subscription_acked_ranges(
    mark_delete: Position,
    individually_deleted: Iterable[tuple[tuple[int, int], tuple[int, int]]],
    floor: Position,
    ranges_max: int = ACKED_RANGES_MAX,
) -> list[Range]:
    """What a subscription acknowledged above `floor`, as ordered open-closed ranges: `(floor,
    mark_delete]` and the individually deleted ranges above the mark-delete position. `floor` is where
    the other clusters' subscriptions already are (the REQUEST of the snapshot its last UPDATE carried,
    EARLIEST before one): what lies below it is Pulsar's UPDATE's business. At most `ranges_max`
    ranges, the lowest (a marker carries no more)."""
    ranges: list[Range] = []
    if floor < mark_delete:
        ranges.append((Position(*floor), Position(*mark_delete)))
    for lower, upper in islice(individually_deleted, ranges_max):
        lower, upper = Position(*lower), Position(*upper)
        if upper <= floor:
            continue
        lower = max(lower, Position(*floor))
        if ranges and ranges[-1][1] >= lower:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], upper))
        else:
            ranges.append((lower, upper))
    return ranges[:ranges_max]


def acked_ranges_to_send(
    local_cluster: str,
    acked: Sequence[Range],
    replicators: Mapping[str, ReplicatedPositions],
    ranges_max: int = ACKED_RANGES_MAX,
) -> dict[str, list[Range]]:
    """The content of an ACKED_RANGES marker for a subscription that acknowledged `acked`: for each remote
    cluster, where the local entries it acknowledged landed there (through that cluster's replicator);
    and under the local cluster's own name, `acked` itself, which each receiver translates back through
    its own replicator to learn which of its entries this subscription acknowledged. At most `ranges_max`
    ranges per cluster, the lowest; clusters with nothing translated are left out."""
    content: AckedRangesContent = {}
    own = list(acked[:ranges_max])
    if own:
        content[local_cluster] = own
    for cluster, positions in replicators.items():
        translated = positions.to_remote(own)[:ranges_max]
        if translated:
            content[cluster] = translated
    return content


def ranges_to_acknowledge(
    local_cluster: str,
    source_cluster: str,
    content: Mapping[str, Sequence[Range]],
    to_source: ReplicatedPositions | None,
) -> list[Range]:
    """What this cluster acknowledges on its subscription when `source_cluster`'s ACKED_RANGES says
    `content`: the copies of the source's entries (given in this cluster's positions) and this cluster's
    own entries whose copies the source acknowledged (translated through `to_source`, this cluster's
    replicator to the source, None when there is none). Ordered, merged open-closed ranges."""
    found = [(Position(*lower), Position(*upper)) for lower, upper in content.get(local_cluster, ())]
    source = content.get(source_cluster, ())
    if to_source is not None and source and source_cluster != local_cluster:
        found.extend(to_source.to_local((Position(*lower), Position(*upper)) for lower, upper in source))
    found.sort()
    merged: list[Range] = []
    for lower, upper in found:
        if not lower < upper:
            continue
        if merged and merged[-1][1] >= lower:
            merged[-1] = (merged[-1][0], max(merged[-1][1], upper))
        else:
            merged.append((lower, upper))
    return merged


def marker_content(body: ReplicatedSubscriptionsAckedRanges) -> tuple[str, str, AckedRangesContent]:
    """(subscription name, source cluster, ranges by cluster) of an ACKED_RANGES marker's payload."""
    content = {item.cluster: [(_position(r.lower), _position(r.upper)) for r in item.ranges] for item in body.clusters}
    return body.subscription_name, body.source_cluster, content


def _position(message_id: MarkersMessageIdData) -> Position:
    """Ids as `markers.acked_ranges` wrote them (-1 as 2^64 - 1)."""
    return Position(signed_id(message_id.ledger_id), signed_id(message_id.entry_id))


def uncovered(
    ranges: Iterable[Range], covered: Iterable[tuple[tuple[int, int], tuple[int, int]]], above: Position
) -> list[Range]:
    """What of the ordered open-closed `ranges` lies above `above` and outside the ordered `covered`
    ranges (a cursor's mark-delete position and individually deleted ranges): what is left to
    acknowledge, so that a receiver does not walk again what it acknowledged before."""
    covered = iter(covered)
    current = next(covered, None)
    out: list[Range] = []
    for lower, upper in ranges:
        lower = max(lower, above)
        while lower < upper:
            while current is not None and current[1] <= lower:
                current = next(covered, None)
            if current is None or current[0] >= upper:
                out.append((lower, upper))
                break
            if current[0] > lower:
                out.append((lower, Position(*current[0])))
            lower = max(lower, Position(*current[1]))
    return out


def positions_in(lower: Position, upper: Position, entries_of: Mapping[int, int] | None = None) -> list[Position]:
    """The entries of the open-closed range `(lower, upper]` when it lies in one ledger; across ledgers,
    `entries_of` (ledger id -> its entry count) says where each ledger ends."""
    if lower[0] == upper[0]:
        return [Position(upper[0], entry) for entry in range(lower[1] + 1, upper[1] + 1)]
    if entries_of is None:
        raise ValueError(f"({lower}, {upper}] spans ledgers: their entry counts are needed")
    found: list[Position] = []
    for ledger in sorted(entries_of):
        if ledger < lower[0] or ledger > upper[0]:
            continue
        first = lower[1] + 1 if ledger == lower[0] else 0
        last = upper[1] if ledger == upper[0] else entries_of[ledger] - 1
        found.extend(Position(ledger, entry) for entry in range(max(first, 0), last + 1))
    return found
