"""Ledger metadata in BookKeeper's format v3 and its ZooKeeper paths; the distribution schedule, the
coverage rule and the "entry absent" rule."""

from __future__ import annotations

import pytest

from magnetar.bookkeeper.digest import DigestType
from magnetar.bookkeeper.errors import MetadataSerializationError
from magnetar.bookkeeper.metadata import LedgerMetadata, State, ledger_path, parse, serialize
from magnetar.bookkeeper.schedule import Answer, QuorumCoverageSet, bookies_missing_entry_required, write_set

METADATA = LedgerMetadata(
    ensemble_size=3,
    write_quorum_size=3,
    ack_quorum_size=2,
    ensembles=((0, ("b1:3181", "b2:3181", "b3:3181")), (57, ("b1:3181", "b4:3181", "b3:3181"))),
    digest_type=DigestType.CRC32C,
    password=b"pw",
    ctime=1_700_000_000_000,
    custom_metadata={"application": b"pulsar", "component": b"managed-ledger"},
)


def test_format_v3_round_trip_and_header() -> None:
    data = serialize(METADATA)
    assert data.startswith(b"BookieMetadataFormatVersion\t3\n")
    # A varint length (here two bytes: 0x96 0x01 = 150), then the protobuf.
    header = len(b"BookieMetadataFormatVersion\t3\n")
    assert data[header : header + 2] == bytes([0x96, 0x01]) and len(data) == header + 2 + 150
    assert parse(data, 1) == METADATA
    closed = METADATA.closed_at(99, 4096)
    assert parse(serialize(closed), 1) == closed
    assert parse(serialize(METADATA.with_state(State.IN_RECOVERY)), 1).state is State.IN_RECOVERY


@pytest.mark.parametrize(
    "data",
    [b"", b"BookieMetadataFormatVersion\t2\nquorumSize: 2", b"BookieMetadataFormatVersion\t3", b"garbage"],
)
def test_unreadable_metadata_is_one_clear_error(data: bytes) -> None:
    with pytest.raises(MetadataSerializationError, match="ledger 9"):
        parse(data, 9)


def test_truncated_metadata_is_refused() -> None:
    with pytest.raises(MetadataSerializationError, match="corrupt"):
        parse(serialize(METADATA)[:-3], 9)


def test_ensembles_and_new_segments() -> None:
    assert METADATA.ensemble_at(56) == ("b1:3181", "b2:3181", "b3:3181")
    assert METADATA.ensemble_at(57)[1] == "b4:3181"
    replaced = METADATA.with_ensemble(57, ("b5:3181", "b4:3181", "b3:3181"))
    assert len(replaced.ensembles) == 2 and replaced.ensemble_at(60)[0] == "b5:3181"
    assert len(METADATA.with_ensemble(80, ("b5:3181", "b4:3181", "b3:3181")).ensembles) == 3
    with pytest.raises(ValueError, match="before the last one"):
        METADATA.with_ensemble(10, ("b5:3181", "b4:3181", "b3:3181"))
    with pytest.raises(ValueError, match="distinct"):
        METADATA.with_ensemble(80, ("b1:3181", "b1:3181", "b3:3181"))


def test_hierarchical_paths_short_and_long() -> None:
    assert ledger_path("/ledgers", 1) == "/ledgers/00/0000/L0001"
    assert ledger_path("/ledgers", 1234567890) == "/ledgers/12/3456/L7890"
    assert ledger_path("/ledgers", 2**31 - 2) == "/ledgers/21/4748/L3646"
    # From Integer.MAX_VALUE on, LongHierarchicalLedgerManager's 3-4-4-4-4 split of %019d.
    assert ledger_path("/ledgers", 2**31 - 1) == "/ledgers/000/0000/0021/4748/L3647"
    assert ledger_path("/ledgers", (1 << 32) | 5) == "/ledgers/000/0000/0042/9496/L7301"


def test_write_sets_are_round_robin() -> None:
    assert write_set(0, 3, 2) == (0, 1)
    assert write_set(2, 3, 2) == (2, 0)
    assert write_set(4, 5, 3) == (4, 0, 1)
    assert write_set(2**40 + 1, 3, 3) == ((2**40 + 1) % 3, (2**40 + 2) % 3, (2**40 + 3) % 3)


def covered(ensemble: int, write: int, ack: int, answers: dict[int, Answer]) -> bool:
    coverage = QuorumCoverageSet(ensemble, write, ack)
    for index, answer in answers.items():
        coverage.add_bookie(index, answer)
    return coverage.is_covered()


def test_coverage_rule() -> None:
    known, unknown = Answer.KNOWN, Answer.UNKNOWN
    # E=3 W=3 A=2: one bookie silent leaves 1 unknown per write quorum, fewer than A.
    assert covered(3, 3, 2, {0: known, 1: known})
    assert not covered(3, 3, 2, {0: known})
    assert covered(3, 3, 2, {0: known, 1: unknown, 2: known})
    assert not covered(3, 3, 2, {0: unknown, 1: unknown, 2: known})
    # E=3 W=2 A=2: quorums (0,1) (1,2) (2,0); any single answer leaves one quorum entirely unknown.
    assert not covered(3, 2, 2, {0: known})
    assert covered(3, 2, 2, {0: known, 1: known})
    # E=4 W=2 A=2: bookies 0 and 2 leave one unknown in each of (0,1) (1,2) (2,3) (3,0); 0 and 1 leave
    # (2,3) wholly unknown.
    assert covered(4, 2, 2, {0: known, 2: known})
    assert not covered(4, 2, 2, {0: known, 1: known})
    # A=1: one unknown bookie may alone have acknowledged an entry, so every bookie must answer.
    assert not covered(4, 2, 1, {0: known, 1: known, 2: known})
    assert covered(4, 2, 1, {0: known, 1: known, 2: known, 3: known})


def test_entry_absent_rule() -> None:
    assert bookies_missing_entry_required(3, 2) == 2
    assert bookies_missing_entry_required(2, 2) == 1
    assert bookies_missing_entry_required(3, 1) == 3
    assert bookies_missing_entry_required(5, 3) == 3
