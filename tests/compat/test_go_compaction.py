"""The official Go client (v0.19.0) and pulsaradmin against magnetar's topic compaction: compaction
triggered and polled, compacted readers and consumers, tombstones, batches, TableView, thresholds; and
the Go client reading what the Python client produced.

Each test runs one scenario of compat/go (compat/go/compaction.go) against one broker for the module,
whose threshold monitor runs every second.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from go_compat import run_scenario, scenarios_against

# Sent by the scenarios before compaction: k0..k4, k0 and k2 again, an unkeyed message and a tombstone
# of k1 (an empty payload: this client has no null value); after it, k0 again and a tombstone of k4.
COMPACTED = [["k3", "k3-v1"], ["k4", "k4-v1"], ["k0", "k0-v2"], ["k2", "k2-v2"]]
SENT = [
    ["k0", "k0-v1"],
    ["k1", "k1-v1"],
    ["k2", "k2-v1"],
    ["k3", "k3-v1"],
    ["k4", "k4-v1"],
    ["k0", "k0-v2"],
    ["", "no-key"],
    ["k2", "k2-v2"],
    ["k1", None],
]
AFTER_HORIZON = [["k0", "k0-v3"], ["k4", None]]


@pytest.fixture(scope="module")
def broker(module_broker_factory):
    return module_broker_factory(brokerServiceCompactionMonitorIntervalInSeconds=1)


@pytest.fixture(scope="module")
def go(broker) -> Callable[[str], dict[str, Any]]:
    return scenarios_against(broker)


@pytest.fixture(scope="module")
def compaction_read(go) -> dict[str, Any]:
    return go("compaction-read")


def test_compaction_is_triggered_and_polled_with_pulsaradmin(compaction_read) -> None:
    for batched in (False, True):
        seen = compaction_read[f"batched_{str(batched).lower()}"]
        assert seen["status_before"] == "NOT_RUN"
        assert seen["status"] == "SUCCESS"


def test_batched_compacted_reader_and_consumer_read_the_latest_value_per_key(compaction_read) -> None:
    seen = compaction_read["batched_true"]
    assert seen["compacted_reader"] == COMPACTED + AFTER_HORIZON
    assert seen["compacted_consumer"] == COMPACTED + AFTER_HORIZON
    assert seen["plain_reader"] == SENT + AFTER_HORIZON


def test_compacted_reader_and_consumer_without_batches(compaction_read) -> None:
    seen = compaction_read["batched_false"]
    # The Go client discards a message outside a batch with neither payload nor properties
    # ("Discarding corrupted message", BatchDeSerializeError), so it never shows its own tombstones
    # unless they are batched; the broker stored them (k1 is gone from the compacted view) and sends them.
    assert seen["compacted_reader"] == COMPACTED + AFTER_HORIZON[:1]
    assert seen["compacted_consumer"] == COMPACTED + AFTER_HORIZON[:1]
    assert seen["plain_reader"] == SENT[:-1] + AFTER_HORIZON[:1]


def test_table_view_of_a_compacted_topic(go) -> None:
    seen = go("compaction-table-view")
    assert seen["status"] == "SUCCESS"
    assert seen["initial"] == {"k0": "k0-v2", "k2": "k2-v2", "k3": "k3-v1", "k4": "k4-v1"}
    assert seen["contains_k1"] is False
    # A tombstone reaches the listener as a nil value and removes the key.
    assert seen["updates"] == [["k5", "k5-v1"], ["k0", None], ["k3", "k3-v2"]]
    assert seen["after"] == {"k2": "k2-v2", "k3": "k3-v2", "k4": "k4-v1", "k5": "k5-v1"}


def test_topic_and_namespace_thresholds_compact_by_themselves(go) -> None:
    seen = go("compaction-threshold")
    for level in ("topic", "namespace"):
        assert seen[level]["status_before"] == "NOT_RUN"
        assert seen[level]["threshold"] == 10
        assert seen[level]["status"] == "SUCCESS"
        assert seen[level]["compacted_reader"] == COMPACTED


def test_go_client_reads_what_the_python_client_produced(broker, client_factory) -> None:
    name = f"go-{uuid.uuid4().hex[:8]}"
    client = client_factory(broker.url)
    plain = client.create_producer(f"persistent://public/default/{name}-from-python", batching_enabled=False)
    for i in range(3):
        plain.send(f"plain-{i}".encode(), partition_key=f"k{i}", properties={"i": str(i)}, event_timestamp=1000 + i)
    plain.close()
    batched = client.create_producer(
        f"persistent://public/default/{name}-from-python",
        batching_enabled=True,
        batching_max_messages=3,
        batching_max_publish_delay_ms=60_000,
        compression_type=pulsar.CompressionType.ZLib,
    )
    for i in range(3):
        batched.send_async(f"batched-{i}".encode(), None, partition_key=f"b{i}", properties={"i": str(i)})
    batched.flush()
    batched.close()
    seen = run_scenario("read-python", broker.url, broker.http_url, name)
    assert [(m["value"], m["key"], m["properties"]) for m in seen["messages"]] == [
        *((f"plain-{i}", f"k{i}", {"i": str(i)}) for i in range(3)),
        *((f"batched-{i}", f"b{i}", {"i": str(i)}) for i in range(3)),
    ]
    # Three entries, then one batch of three (this client numbers a message outside a batch 0 too).
    entries = [m["entry_id"] for m in seen["messages"]]
    assert len(set(entries[:3])) == 3 and len(set(entries[3:])) == 1 and entries[3] > entries[2]
    assert [m["batch_index"] for m in seen["messages"]] == [0, 0, 0, 0, 1, 2]
    assert [m["event_time"] for m in seen["messages"][:3]] == [1000, 1001, 1002]
