"""Replicating individually acknowledged ranges, as pure state (replication/acked_ranges.py): receipts kept as
runs of positions, the marker's content, and what a receiving cluster acknowledges, checked against a
reference model of two clusters that publish, replicate to each other and lose some receipts."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.positions import EARLIEST, Position, PositionRangeSet
from magnetar.replication.acked_ranges import (
    ReplicatedPositions,
    acked_ranges_to_send,
    positions_in,
    ranges_to_acknowledge,
    subscription_acked_ranges,
    uncovered,
)

S, R = "s", "r"


@dataclass
class Topic:
    """One cluster's topic: entries by position, across ledgers."""

    ledger: int
    entry: int = 0
    entries_of: dict[int, int] = field(default_factory=dict)
    positions: list[Position] = field(default_factory=list)

    def append(self) -> Position:
        position = Position(self.ledger, self.entry)
        self.entry += 1
        self.entries_of[self.ledger] = self.entry
        self.positions.append(position)
        return position

    def roll(self, skip: int) -> None:
        """A new ledger (ledger ids are not consecutive: other topics take some)."""
        if self.entry:
            self.ledger += 1 + skip
            self.entry = 0


@dataclass
class World:
    """Clusters s and r publishing and replicating to each other. `copy_in_r[s position]` is r's copy of
    an entry published in s, `copy_in_s[r position]` s's copy of one published in r; `s_to_r` and `r_to_s`
    are what each replicator learned from the receipts that reached it."""

    s: Topic = field(default_factory=lambda: Topic(3))
    r: Topic = field(default_factory=lambda: Topic(70))
    copy_in_r: dict[Position, Position] = field(default_factory=dict)
    copy_in_s: dict[Position, Position] = field(default_factory=dict)
    s_to_r: ReplicatedPositions = field(default_factory=ReplicatedPositions)
    r_to_s: ReplicatedPositions = field(default_factory=ReplicatedPositions)
    receipted: set[Position] = field(default_factory=set)
    # s entries sent twice: the original -> the second copy, whose receipt came back.
    resent: dict[Position, Position] = field(default_factory=dict)
    r_receipted: set[Position] = field(default_factory=set)


# One step: who publishes (s, r; or a ledger rolls), whether the receipt reaches the sender, and how
# many ledger ids a roll skips.
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["s", "s", "s", "r", "r", "roll-s", "roll-r", "s-dup"]), st.booleans(), st.integers(0, 2)
    ),
    max_size=80,
)


def build(steps: list[tuple[str, bool, int]], runs_max: int = 1000) -> World:
    world = World(s_to_r=ReplicatedPositions(runs_max), r_to_s=ReplicatedPositions(runs_max))
    last_unreceipted: Position | None = None
    for kind, receipt, skip in steps:
        if kind == "roll-s":
            world.s.roll(skip)
        elif kind == "roll-r":
            world.r.roll(skip)
        elif kind == "s":
            original = world.s.append()
            copy = world.r.append()
            world.copy_in_r[original] = copy
            if receipt:
                # Receipts come in send order: one for this entry means an earlier one without its
                # receipt will not be resent (its resend was a duplicate the remote dropped).
                world.s_to_r.record([original], [copy])
                world.receipted.add(copy)
                last_unreceipted = None
            else:
                last_unreceipted = original
        elif kind == "s-dup" and last_unreceipted is not None:
            # The connection dropped before the receipt: the entry goes again, and r keeps both copies
            # (no deduplication); the receipt of the second one names the second copy.
            copy = world.r.append()
            world.s_to_r.record([last_unreceipted], [copy])
            world.resent[last_unreceipted] = copy
            last_unreceipted = None
        elif kind == "r":
            original = world.r.append()
            copy = world.s.append()
            world.copy_in_s[original] = copy
            if receipt:
                world.r_to_s.record([original], [copy])
                world.r_receipted.add(original)
    return world


def ranges_of(positions: set[Position]) -> list[tuple[Position, Position]]:
    acked = PositionRangeSet()
    for position in sorted(positions):
        acked.add(position)
    return [(Position(*lo), Position(*hi)) for lo, hi in acked.ranges()]


def expand(ranges: list[tuple[Position, Position]], topic: Topic) -> set[Position]:
    found: set[Position] = set()
    for lower, upper in ranges:
        found.update(positions_in(lower, upper, topic.entries_of))
    return found


@settings(max_examples=300, deadline=None)
@given(STEPS, st.data())
def test_a_receiver_acknowledges_exactly_the_receipted_copies_of_what_the_sender_acknowledged(steps, data) -> None:
    world = build(steps)
    acked = set(data.draw(st.sets(st.sampled_from(world.s.positions))) if world.s.positions else set())
    content = acked_ranges_to_send(S, ranges_of(acked), {R: world.s_to_r})
    to_ack = expand(ranges_to_acknowledge(R, S, content, world.r_to_s), world.r)
    # Copies of s's entries r holds a receipt-backed position for, and r's own entries whose s copy
    # came back with a receipt: exactly those acknowledged in s.
    s_receipts = {copy: original for original, copy in world.copy_in_r.items() if copy in world.receipted}
    s_receipts.update({copy: original for original, copy in world.resent.items()})
    expected = set()
    for position in world.r.positions:
        if (position in s_receipts and s_receipts[position] in acked) or (
            position in world.r_receipted and world.copy_in_s[position] in acked
        ):
            expected.add(position)
    assert to_ack == expected


@settings(max_examples=300, deadline=None)
@given(STEPS, st.data(), st.integers(1, 4))
def test_forgetting_receipts_only_translates_less(steps, data, runs_max) -> None:
    """A bounded or pruned map never acknowledges anything the full one would not (no loss)."""
    full, bounded = build(steps), build(steps, runs_max)
    acked = set(data.draw(st.sets(st.sampled_from(full.s.positions))) if full.s.positions else set())
    if full.s.positions:
        bounded.s_to_r.forget_up_to(data.draw(st.sampled_from(full.s.positions)))
    assert len(bounded.s_to_r) <= runs_max
    ranges = ranges_of(acked)
    assert expand(bounded.s_to_r.to_remote(ranges), full.r) <= expand(full.s_to_r.to_remote(ranges), full.r)
    assert expand(bounded.r_to_s.to_local(ranges), full.r) <= expand(full.r_to_s.to_local(ranges), full.r)


@settings(max_examples=300, deadline=None)
@given(STEPS, st.data())
def test_forget_up_to_keeps_every_receipt_above_it(steps, data) -> None:
    world = build(steps)
    if not world.s.positions:
        return
    cut = data.draw(st.sampled_from(world.s.positions))
    above = [p for p in world.s.positions if p > cut]
    everything = [(cut, max(world.s.positions))]
    before = expand(world.s_to_r.to_remote(everything), world.r)
    world.s_to_r.forget_up_to(cut)
    assert expand(world.s_to_r.to_remote(everything), world.r) == before
    assert all(p > cut for p in above)


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 40)), st.integers(-1, 40), st.integers(-1, 40))
def test_the_acked_ranges_of_a_subscription(deleted, mark_delete, floor) -> None:
    """(floor, mark-delete] and the individually deleted entries above both, as a reference set says."""
    md, low = Position(5, mark_delete), Position(5, floor)
    individually = PositionRangeSet()
    for entry in sorted(deleted):
        if Position(5, entry) > md:
            individually.add(Position(5, entry))
    ranges = subscription_acked_ranges(md, individually.ranges(), low)
    expected = {e for e in range(41) if (floor < e <= mark_delete) or (e in deleted and e > mark_delete and e > floor)}
    assert expand(ranges, Topic(5, 41, {5: 41})) == {Position(5, e) for e in expected}
    assert all(lo < hi for lo, hi in ranges)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(ranges))


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(0, 40)), st.sets(st.integers(0, 40)), st.integers(-1, 40))
def test_uncovered_is_the_set_difference_above_a_position(wanted, covered, above) -> None:
    ranges = ranges_of({Position(9, e) for e in wanted})
    cover = ranges_of({Position(9, e) for e in covered})
    left = uncovered(ranges, cover, Position(9, above))
    topic = Topic(9, 41, {9: 41})
    assert expand(left, topic) == {Position(9, e) for e in wanted - covered if e > above}


def test_receipts_of_consecutive_entries_make_one_run() -> None:
    positions = ReplicatedPositions()
    positions.record([(3, 0), (3, 1), (3, 2)], [(8, 10), (8, 11), (8, 12)])
    positions.record([(3, 3), (4, 0)], [(8, 14), (8, 15)])  # r stored one of its own at 8:13; s rolled
    assert len(positions) == 3
    assert positions.to_remote([(Position(3, 0), Position(4, 0))]) == [
        (Position(8, 10), Position(8, 12)),
        (Position(8, 13), Position(8, 15)),
    ]
    assert positions.to_local([(Position(8, 11), Position(8, 14))]) == [(Position(3, 1), Position(3, 3))]


def test_a_duplicate_receipt_and_a_receipt_going_back_teach_nothing() -> None:
    positions = ReplicatedPositions()
    positions.record([(3, 0), (3, 1), (3, 2), (3, 3)], [(8, 10), (-1, -1), (8, 9), (8, 11)])
    assert positions.to_remote([(EARLIEST, Position(3, 9))]) == [(Position(8, 9), Position(8, 11))]
    assert positions.to_local([(EARLIEST, Position(8, 20))]) == [
        (Position(3, -1), Position(3, 0)),
        (Position(3, 2), Position(3, 3)),
    ]


def test_the_marker_content_is_bounded_and_leaves_out_clusters_with_nothing() -> None:
    to_r = ReplicatedPositions()
    to_r.record([(3, e) for e in range(0, 10, 2)], [(8, e) for e in range(5)])
    acked = [(Position(3, e - 1), Position(3, e)) for e in range(0, 10, 2)]
    content = acked_ranges_to_send(S, acked, {R: to_r, "t": ReplicatedPositions()}, ranges_max=3)
    assert content == {S: acked[:3], R: [(Position(8, -1), Position(8, 2))]}


def test_positions_in_needs_ledger_sizes_across_ledgers() -> None:
    assert positions_in(Position(3, 1), Position(3, 3)) == [Position(3, 2), Position(3, 3)]
    assert positions_in(Position(3, 1), Position(5, 0), {3: 3, 4: 0, 5: 7}) == [Position(3, 2), Position(5, 0)]
    with pytest.raises(ValueError):
        positions_in(Position(3, 1), Position(5, 0))


class _ReceiptByReceipt(ReplicatedPositions):
    """`record` without its shortcut for a run of consecutive receipts."""

    def _record_run(self, local, remote) -> bool:  # type: ignore[no-untyped-def]
        return False


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_receipts_recorded_a_read_at_a_time_equal_one_at_a_time(data) -> None:
    """`record` takes a socket read's receipts at once, with a shortcut for consecutive ones: whatever the
    grouping, the runs are those of recording each receipt alone (gaps, ledger changes, duplicates and
    receipts going back included)."""
    steps = data.draw(
        st.lists(
            st.tuples(
                st.sampled_from(["next", "gap", "roll", "dup", "back"]), st.sampled_from(["next", "gap", "roll"])
            ),
            max_size=40,
        )
    )
    local, remote = Position(3, 0), Position(8, 10)
    receipts = []
    for remote_step, local_step in steps:
        local = {
            "next": Position(local[0], local[1] + 1),
            "gap": Position(local[0], local[1] + 3),
            "roll": Position(local[0] + 1, 0),
        }[local_step]
        if remote_step == "dup":
            receipts.append((local, (-1, -1)))
            continue
        if remote_step == "back":
            receipts.append((local, Position(remote[0], max(0, remote[1] - 2))))
            continue
        remote = {
            "next": Position(remote[0], remote[1] + 1),
            "gap": Position(remote[0], remote[1] + 2),
            "roll": Position(remote[0] + 1, 0),
        }[remote_step]
        receipts.append((local, remote))
    one_by_one, grouped = _ReceiptByReceipt(), ReplicatedPositions()
    for receipt_local, receipt_remote in receipts:
        one_by_one.record([receipt_local], [receipt_remote])
    cuts = sorted(data.draw(st.sets(st.integers(0, len(receipts)), max_size=8)) | {0, len(receipts)})
    for start, end in itertools.pairwise(cuts):
        group = receipts[start:end]
        grouped.record([r[0] for r in group], [r[1] for r in group])
    assert (grouped._local, grouped._remote, grouped._count) == (
        one_by_one._local,
        one_by_one._remote,
        one_by_one._count,
    )
