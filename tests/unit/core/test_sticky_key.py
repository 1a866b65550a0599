"""Sticky key resolution and hashing against Pulsar's golden vectors.

Vectors: pulsar-client-cpp's tests/HashTest.cc and Pulsar's ConsistentHashingStickyKeyConsumerSelectorTest
(testGetConsumerKeyHashRanges).
"""

from __future__ import annotations

import base64

import pytest

from magnetar.core.sticky_key import (
    HASH_RANGE_SIZE,
    NONE_KEY,
    STICKY_KEY_HASH_NOT_SET,
    consistent_hashing_slot,
    key_hash,
    range_slot,
    sticky_key,
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (b"k1", 2110152746),
        (b"k2", 1479966664),
        (b"key1", 462881061),
        (b"key2", 1936800180),
        (b"key01", 39696932),
        (b"key02", 751761803),
        (b"", 0),
        (b"hello", 613153351),
    ],
)
def test_key_hash_matches_pulsar_murmur3_vectors(key: bytes, expected: int) -> None:
    assert key_hash(key) == expected


@pytest.mark.parametrize(
    ("key", "consistent_slot", "range_slot_expected"),
    [
        (b"0", 4850, 49279),
        (b"1", 49322, 44179),
        (b"2", 58177, 57879),
        (b"key-1", 11858, 5536),
        (b"NONE_KEY", 56505, 48803),
    ],
)
def test_slots_match_selector_test_sample_hashes(key: bytes, consistent_slot: int, range_slot_expected: int) -> None:
    assert consistent_hashing_slot(key_hash(key)) == consistent_slot
    assert range_slot(key_hash(key)) == range_slot_expected


def test_key_hash_is_31_bits() -> None:
    # Half of all unsigned murmur values have the top bit set; the mask must clear it, nothing more.
    hashes = [key_hash(f"key-{i}".encode()) for i in range(2000)]
    assert all(0 <= h < 2**31 for h in hashes)
    assert max(hashes) >= 2**30  # the mask keeps the full 31-bit range, not a narrower one


def test_consistent_hashing_slot_range_is_1_to_65535() -> None:
    assert consistent_hashing_slot(0) == 1
    assert consistent_hashing_slot(65534) == 65535
    assert consistent_hashing_slot(65535) == 1
    assert consistent_hashing_slot(2**31 - 1) == (2**31 - 1) % 65535 + 1


def test_range_slot_maps_zero_to_one() -> None:
    assert range_slot(0) == 1
    assert range_slot(HASH_RANGE_SIZE) == 1
    assert range_slot(1) == 1
    assert range_slot(HASH_RANGE_SIZE - 1) == HASH_RANGE_SIZE - 1
    assert range_slot(HASH_RANGE_SIZE + 5) == 5


def test_no_slot_is_hash_not_set() -> None:
    for h in (0, 65535, 65536, 131070, 131072, 2**31 - 1):
        assert consistent_hashing_slot(h) != STICKY_KEY_HASH_NOT_SET
        assert range_slot(h) != STICKY_KEY_HASH_NOT_SET


class TestStickyKey:
    def test_ordering_key_wins(self) -> None:
        assert sticky_key(b"ok", "pk", False, "producer", 7) == b"ok"

    def test_empty_ordering_key_is_present(self) -> None:
        # proto2 `has_ordering_key` is true for an empty value; Pulsar routes by the empty key.
        assert sticky_key(b"", "pk", False, "producer", 7) == b""

    def test_partition_key_as_utf8(self) -> None:
        assert sticky_key(None, "clé", False, "producer", 7) == "clé".encode()

    def test_empty_partition_key_is_present(self) -> None:
        assert sticky_key(None, "", False, "producer", 7) == b""

    def test_partition_key_base64_decoded_when_flagged(self) -> None:
        raw = bytes(range(256))
        encoded = base64.b64encode(raw).decode()
        assert sticky_key(None, encoded, True, "producer", 7) == raw

    @pytest.mark.parametrize(
        ("encoded", "decoded"), [("YQ", b"a"), ("YWI", b"ab"), ("YQ==", b"a"), ("YWI=", b"ab"), ("", b"")]
    )
    def test_base64_padding_optional_as_in_java(self, encoded: str, decoded: bytes) -> None:
        assert sticky_key(None, encoded, True, None, None) == decoded

    @pytest.mark.parametrize("encoded", ["Y", "YQ=", "YWI==", "YWJj=", "=", "Y Q==", "YQ==YQ==", "a-b_", "YQ\n", "é"])
    def test_bad_base64_falls_back_to_none_key(self, encoded: str) -> None:
        assert sticky_key(None, encoded, True, "producer", 7) == NONE_KEY

    def test_producer_and_sequence_fallback(self) -> None:
        # Pulsar #23219 (4.0.0): key-less messages spread by producer name and sequence id.
        assert sticky_key(None, None, False, "standalone-0-3", 42) == b"standalone-0-3-42"
        assert sticky_key(None, None, True, "p", 0) == b"p-0"

    @pytest.mark.parametrize(("producer_name", "sequence_id"), [(None, None), ("p", None), (None, 3)])
    def test_none_key_when_nothing_known(self, producer_name: str | None, sequence_id: int | None) -> None:
        assert sticky_key(None, None, False, producer_name, sequence_id) == b"NONE_KEY"
