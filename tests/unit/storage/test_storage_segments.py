"""Segment encoding on the commit thread: one ledger's runs of one commit become segment rows that
respect the entry and byte limits exactly as the per-entry rule says, and decode back to every field."""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.storage import sqlite_engine
from magnetar.storage.sqlite_engine import ENTRY_KEY_SHIFT, Run, SqliteEngine

ENTRIES_MAX = 7
BYTES_MAX = 100


def expected_segments(lengths: list[int], first: int) -> list[tuple[int, int]]:
    """(first entry id, count) of each segment: an entry joins while the segment holds fewer than
    ENTRIES_MAX entries and fewer than BYTES_MAX bytes before it."""
    segments: list[tuple[int, int]] = []
    count = size = 0
    for index, length in enumerate(lengths):
        if count and (count >= ENTRIES_MAX or size >= BYTES_MAX):
            segments.append((first + index - count, count))
            count = size = 0
        count += 1
        size += length
    segments.append((first + len(lengths) - count, count))
    return segments


@settings(max_examples=200, deadline=None)
@given(
    run_lengths=st.lists(st.lists(st.integers(0, 45), min_size=1, max_size=12), min_size=1, max_size=6),
    first=st.integers(0, 1000),
    constant=st.booleans(),
)
def test_segments_follow_the_limits_per_entry_and_decode_to_every_field(tmp_path_factory, run_lengths, first, constant):
    """`constant`: one producer name and one message count per run, which the encoder packs as one
    repeated value."""
    runs = []
    entry_id = first
    for lengths in run_lengths:
        ids = range(entry_id, entry_id + len(lengths))
        runs.append(
            Run(
                9,
                entry_id,
                tuple(bytes([i % 251]) * length for i, length in zip(ids, lengths)),
                tuple(i * 7 - 50 for i in ids),
                tuple(len(lengths) if constant else i % 3 + 1 for i in ids),
                tuple(1_700_000_000_000 + i for i in ids),
                tuple(f"p{len(lengths)}" if constant else f"p{i % 2}" for i in ids),
                tuple(i * 11 for i in ids),
            )
        )
        entry_id += len(lengths)
    engine = SqliteEngine(str(tmp_path_factory.mktemp("unused")))
    rows: list = []
    with (
        mock.patch.object(sqlite_engine, "SEGMENT_ENTRIES_MAX", ENTRIES_MAX),
        mock.patch.object(sqlite_engine, "SEGMENT_BYTES_MAX", BYTES_MAX),
    ):
        count, size = sqlite_engine._encode_segments(9, runs, rows, engine._segment_crc)
    flat_lengths = [length for lengths in run_lengths for length in lengths]
    assert (count, size) == (len(flat_lengths), sum(flat_lengths))
    mask = (1 << ENTRY_KEY_SHIFT) - 1
    assert [(row[0] & mask, row[1]) for row in rows] == expected_segments(flat_lengths, first)
    decoded = [engine.decode_segment(row) for row in rows]
    for field in range(2, 8):
        assert [value for run in decoded for value in run[field]] == [value for run in runs for value in run[field]]
    assert [row[9] for row in rows] == [max(run.publish_times) for run in decoded]


def test_a_constant_name_and_message_count_are_stored_once_and_rows_that_repeat_them_still_decode(tmp_path):
    """One producer name and one message count for a whole segment are written once (bytes SQLite
    would write twice per entry); rows written before, with the value repeated per entry, decode to
    the same entries."""
    engine = SqliteEngine(str(tmp_path))
    count = 5
    run = Run(
        3,
        0,
        tuple(bytes([i]) * 10 for i in range(count)),
        tuple(range(count)),
        (2,) * count,
        tuple(range(100, 100 + count)),
        ("producer-1",) * count,
        tuple(range(7, 7 + count)),
    )
    rows: list = []
    sqlite_engine._encode_segments(3, [run], rows, engine._segment_crc)
    (row,) = rows
    assert (len(row[5]), row[8]) == (4, "producer-1")
    repeated = list(row)
    repeated[5] = row[5] * count
    repeated[8] = "\0".join(["producer-1"] * count)
    repeated[10] = engine._segment_crc(*repeated[2:9])
    for stored in (row, tuple(repeated)):
        decoded = engine.decode_segment(stored)
        assert [list(column) for column in decoded[2:]] == [list(column) for column in run[2:]]
