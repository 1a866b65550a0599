"""Position and PositionRangeSet, as Pulsar's RangeSetWrapper / OpenLongPairRangeSet tests use them.

Ranges are open-closed `(lower, upper]`; two ranges merge when they overlap or touch (one's upper
bound is the next one's lower bound). The property test checks the set against a plain Python set of
positions over a small universe, and the exact range layout against a list of intervals merged by hand.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.positions import EARLIEST, LATEST, Position, PositionRangeSet


def ranges(s: PositionRangeSet) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    return list(s.ranges())


# --- Position ----------------------------------------------------------------------------------------


def test_position_orders_by_ledger_then_entry() -> None:
    assert Position(3, 10) < Position(4, 0)
    assert Position(3, 9) < Position(3, 10)
    assert sorted([Position(4, 0), Position(3, 10), Position(3, 2)]) == [(3, 2), (3, 10), (4, 0)]
    assert EARLIEST < Position(0, 0) < LATEST


def test_position_equals_plain_tuple_and_hashes_alike() -> None:
    assert Position(3, 4) == (3, 4)
    assert {Position(3, 4): "x"}[(3, 4)] == "x"


def test_position_str_is_pulsars_ledger_colon_entry() -> None:
    assert str(Position(3, 4)) == "3:4"
    assert str(EARLIEST) == "-1:-1"


def test_previous_is_the_open_lower_bound_of_the_single_position_range() -> None:
    assert Position(3, 4).previous() == (3, 3)
    assert Position(3, 0).previous() == (3, -1)


# --- PositionRangeSet: examples ---------------------------------------------------------------------


def test_empty_set() -> None:
    s = PositionRangeSet()
    assert not s and len(s) == 0 and s.range_count() == 0
    assert s.first_range() is None
    assert s.to_string() == "[]"
    assert (3, 4) not in s
    s.check_invariants()


def test_add_single_position_is_an_open_closed_range() -> None:
    s = PositionRangeSet()
    s.add(Position(3, 5))
    assert ranges(s) == [((3, 4), (3, 5))]
    assert s.contains((3, 5))
    assert not s.contains((3, 4)) and not s.contains((3, 6))
    s.check_invariants()


def test_add_range_touching_ranges_merge() -> None:
    s = PositionRangeSet()
    s.add_range((3, 4), (3, 5))
    s.add_range((3, 5), (3, 8))  # lower bound equals the previous upper bound: they touch
    assert ranges(s) == [((3, 4), (3, 8))]
    s.add_range((3, 1), (3, 4))  # touches from below
    assert ranges(s) == [((3, 1), (3, 8))]
    s.check_invariants()


def test_add_consecutive_positions_merge_into_one_range() -> None:
    s = PositionRangeSet()
    for entry in (1, 3, 2):
        s.add((3, entry))
    assert ranges(s) == [((3, 0), (3, 3))]
    s.check_invariants()


def test_add_range_overlapping_ranges_merge() -> None:
    s = PositionRangeSet()
    s.add_range((3, 4), (3, 8))
    s.add_range((3, 6), (3, 12))
    assert ranges(s) == [((3, 4), (3, 12))]
    s.add_range((3, 5), (3, 7))  # inside: nothing changes
    assert ranges(s) == [((3, 4), (3, 12))]
    s.check_invariants()


def test_add_range_spanning_several_ranges_swallows_them() -> None:
    s = PositionRangeSet()
    for entry in (2, 5, 9, 20):
        s.add((3, entry))
    s.add_range((3, 3), (3, 10))
    assert ranges(s) == [((3, 1), (3, 2)), ((3, 3), (3, 10)), ((3, 19), (3, 20))]
    s.check_invariants()


def test_add_range_disjoint_ranges_stay_apart() -> None:
    s = PositionRangeSet()
    s.add_range((3, 7), (3, 10))
    s.add_range((3, 4), (3, 5))
    s.add_range((4, 0), (4, 2))
    assert ranges(s) == [((3, 4), (3, 5)), ((3, 7), (3, 10)), ((4, 0), (4, 2))]
    assert s.range_count() == len(s) == 3
    s.check_invariants()


def test_positions_in_different_ledgers_do_not_merge_by_entry_id() -> None:
    # (3:10] and (4:0] are not adjacent ranges: open-closed ranges know nothing about ledger ends.
    s = PositionRangeSet()
    s.add((3, 10))
    s.add((4, 0))
    assert ranges(s) == [((3, 9), (3, 10)), ((4, -1), (4, 0))]
    s.check_invariants()


def test_add_range_spanning_ledgers() -> None:
    s = PositionRangeSet()
    s.add_range((3, 8), (5, 2))
    assert s.contains((3, 9)) and s.contains((4, 0)) and s.contains((4, 10**6)) and s.contains((5, 2))
    assert not s.contains((3, 8)) and not s.contains((5, 3))


def test_add_range_rejects_empty_range() -> None:
    s = PositionRangeSet()
    with pytest.raises(ValueError):
        s.add_range((3, 5), (3, 5))
    with pytest.raises(ValueError):
        s.add_range((3, 6), (3, 5))
    assert not s


def test_contains_honours_open_lower_and_closed_upper_bound() -> None:
    s = PositionRangeSet()
    s.add_range((3, 4), (3, 5))
    s.add_range((3, 7), (3, 10))
    assert [e for e in range(0, 13) if (3, e) in s] == [5, 8, 9, 10]
    assert not s.contains((2, 5)) and not s.contains((4, 5))


def test_remove_up_to_drops_whole_ranges_and_cuts_a_partial_one() -> None:
    s = PositionRangeSet()
    s.add_range((3, 4), (3, 5))
    s.add_range((3, 7), (3, 10))
    s.add_range((4, 0), (4, 3))
    s.remove_up_to(Position(3, 8))
    assert ranges(s) == [((3, 8), (3, 10)), ((4, 0), (4, 3))]
    assert not s.contains((3, 8)) and s.contains((3, 9))
    s.check_invariants()


def test_remove_up_to_an_upper_bound_removes_that_range_exactly() -> None:
    s = PositionRangeSet()
    s.add_range((3, 4), (3, 5))
    s.add_range((3, 7), (3, 10))
    s.remove_up_to(Position(3, 5))
    assert ranges(s) == [((3, 7), (3, 10))]
    s.remove_up_to(Position(3, 6))  # between ranges: nothing changes
    assert ranges(s) == [((3, 7), (3, 10))]
    s.remove_up_to(Position(9, 0))
    assert not s
    s.check_invariants()


def test_remove_up_to_inside_a_range_spanning_ledgers() -> None:
    s = PositionRangeSet()
    s.add_range((3, 8), (5, 2))
    s.remove_up_to(Position(4, 7))
    assert ranges(s) == [((4, 7), (5, 2))]
    assert not s.contains((4, 7)) and s.contains((4, 8))


def test_to_string_is_pulsars_rendering_of_the_pip_282_example() -> None:
    # PIP-282 "Design & Implementation Details": read 3:1..3:10, send 3:1..3:3, 3:5 and 3:8..3:10.
    last_sent = Position(3, 3)
    sent = PositionRangeSet()
    for entry in (5, 8, 9, 10):
        sent.add((3, entry))
    assert sent.to_string() == "[(3:4..3:5],(3:7..3:10]]"
    # Send 3:7: (3:6..3:10] grows downwards.
    sent.add((3, 7))
    assert sent.to_string() == "[(3:4..3:5],(3:6..3:10]]"
    # Send 3:6: the two ranges touch and merge.
    sent.add((3, 6))
    assert sent.to_string() == "[(3:4..3:10]]"
    # Send 3:4: the first range now starts at the last sent position, which moves to its end.
    sent.add((3, 4))
    first = sent.first_range()
    assert first == ((3, 3), (3, 10)) and first[0] == last_sent
    last_sent = Position(*sent.pop_first_range()[1])
    assert last_sent == (3, 10)
    assert sent.to_string() == "[]"
    sent.check_invariants()


def test_to_string_with_another_separator() -> None:
    s = PositionRangeSet()
    s.add_range((3, 4), (3, 5))
    s.add_range((3, 7), (3, 10))
    assert s.to_string(", ") == "[(3:4, 3:5],(3:7, 3:10]]"
    # PIP-282's own text writes the individually sent positions this way.
    assert s.to_string(", ", ", ") == "[(3:4, 3:5], (3:7, 3:10]]"
    assert repr(s) == "PositionRangeSet([(3:4..3:5],(3:7..3:10]])"


def test_equality_and_clear() -> None:
    a, b = PositionRangeSet(), PositionRangeSet()
    a.add_range((3, 0), (3, 5))
    for entry in (2, 3, 4, 5):
        b.add((3, entry))  # (3:1..3:5]
    assert a != b
    b.add((3, 1))
    assert a == b
    a.clear()
    assert not a and a != b


def test_check_invariants_catches_touching_overlapping_and_empty_ranges() -> None:
    for lowers, uppers in (
        ([(3, 1), (3, 5)], [(3, 5), (3, 8)]),  # touching
        ([(3, 1), (3, 4)], [(3, 5), (3, 8)]),  # overlapping
        ([(3, 5)], [(3, 5)]),  # empty
        ([(3, 1)], [(3, 5), (3, 8)]),  # out of step
    ):
        s = PositionRangeSet()
        s._lowers, s._uppers = list(lowers), list(uppers)
        with pytest.raises(AssertionError):
            s.check_invariants()


# --- PositionRangeSet: property test against a set model --------------------------------------------

LEDGERS = range(0, 4)
ENTRIES = range(0, 8)
UNIVERSE = [(ledger, entry) for ledger in LEDGERS for entry in ENTRIES]

positions = st.tuples(st.sampled_from(LEDGERS), st.sampled_from(ENTRIES))
# Bounds of ranges may be a position or the "entry -1" lower bound `add` itself uses.
bounds = st.tuples(st.sampled_from(LEDGERS), st.integers(min_value=-1, max_value=max(ENTRIES)))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), positions),
        st.tuples(st.just("add_range"), st.tuples(bounds, bounds).filter(lambda b: b[0] != b[1]).map(sorted)),
        st.tuples(st.just("remove_up_to"), positions),
        st.tuples(st.just("contains"), positions),
    ),
    max_size=40,
)


Interval = tuple[tuple[int, int], tuple[int, int]]


def normalise(intervals: list[Interval]) -> list[Interval]:
    """Merge open-closed intervals that overlap or touch, by the textbook sweep."""
    merged: list[list[tuple[int, int]]] = []
    for lower, upper in sorted(intervals):
        if merged and lower <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], upper)
        else:
            merged.append([lower, upper])
    return [(lower, upper) for lower, upper in merged]


@settings(max_examples=300, deadline=None)
@given(operations)
def test_range_set_matches_a_set_model(ops: list) -> None:
    s = PositionRangeSet()
    model: set[tuple[int, int]] = set()  # which universe positions are in the set
    intervals: list[Interval] = []  # the exact ranges, merged by hand
    for op, arg in ops:
        if op == "add":
            assert s.add(Position(*arg)) == (arg not in model)
            model.add(arg)
            intervals = normalise(intervals + [((arg[0], arg[1] - 1), arg)])
        elif op == "add_range":
            lower, upper = arg
            s.add_range(lower, upper)
            model.update(p for p in UNIVERSE if lower < p <= upper)
            intervals = normalise(intervals + [(lower, upper)])
        elif op == "remove_up_to":
            s.remove_up_to(Position(*arg))
            model = {p for p in model if p > arg}
            intervals = [(max(lower, arg), upper) for lower, upper in intervals if upper > arg]
        else:
            assert s.contains(arg) == (arg in model)
        s.check_invariants()
        assert {p for p in UNIVERSE if p in s} == model
        assert ranges(s) == intervals
        assert s.range_count() == len(intervals)


def test_from_sorted_bounds_matches_adding_one_range_at_a_time() -> None:
    built = PositionRangeSet()
    for lower, upper in [((1, 2), (1, 5)), ((1, 7), (2, 0)), ((3, -1), (3, 4))]:
        built.add_range(lower, upper)
    lowers = [lo for lo, _hi in built.ranges()]
    uppers = [hi for _lo, hi in built.ranges()]
    loaded = PositionRangeSet.from_sorted_bounds(lowers, uppers)
    assert loaded == built
    loaded.check_invariants()


@pytest.mark.parametrize(
    ("lowers", "uppers"),
    [
        ([(1, 5)], [(1, 5)]),  # empty range
        ([(1, 5), (1, 1)], [(1, 6), (1, 3)]),  # unsorted
        ([(1, 1), (1, 3)], [(1, 3), (1, 6)]),  # touching: should have been merged
        ([(1, 1)], []),  # bounds out of step
    ],
)
def test_from_sorted_bounds_refuses_bounds_that_break_the_invariants(lowers, uppers) -> None:
    with pytest.raises(ValueError):
        PositionRangeSet.from_sorted_bounds(lowers, uppers)
