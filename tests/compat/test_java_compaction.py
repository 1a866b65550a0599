"""The official Java client 4.0.x (compat/java) and its PulsarAdmin against magnetar's topic compaction:
compaction triggered and polled, compacted readers and consumers, tombstones, batches, TableView, and
compaction started by a topic's or a namespace's threshold."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

# One broker for the module; its threshold monitor runs every second (Pulsar's default is 60 s).
SETTINGS = {"brokerServiceCompactionMonitorIntervalInSeconds": 1}

# What the scenarios send before compaction, in order: k0..k4, then k0 and k2 again, an unkeyed message
# and a tombstone of k1 (compat/java Compaction.BEFORE); after it: k0 again and a tombstone of k4.
COMPACTED = [["k3", "k3-v1"], ["k4", "k4-v1"], ["k0", "k0-v2"], ["k2", "k2-v2"]]
AFTER_HORIZON = [["k0", "k0-v3"], ["k4", None]]


@pytest.fixture(scope="module")
def java(java_compat, module_broker_factory) -> Callable[..., dict[str, Any]]:
    broker = module_broker_factory(**SETTINGS)

    def run(scenario: str, **args: Any) -> dict[str, Any]:
        return java_compat.run(scenario, serviceUrl=broker.url, httpUrl=broker.http_url, **args)

    return run


@pytest.mark.parametrize("batched", [False, True])
def test_compacted_reader_and_consumer_read_the_latest_value_per_key(java, topic, batched):
    seen = java("compaction_read", topic=topic, batched=batched)
    assert seen["statusBefore"] == "NOT_RUN"
    assert seen["status"] == "SUCCESS"
    assert seen["missingTopic"].startswith("NotFoundException")
    # Up to the horizon, each key's last value in the order of those messages, k1 deleted by its
    # tombstone and the unkeyed message dropped; after it, every message, tombstone included.
    assert seen["compactedReader"] == COMPACTED + AFTER_HORIZON
    assert seen["compactedConsumer"] == COMPACTED + AFTER_HORIZON
    assert len(seen["plainReader"]) == 11
    assert seen["plainReader"][-2:] == AFTER_HORIZON


@pytest.mark.parametrize("batched", [False, True])
def test_table_view_of_a_compacted_topic(java, topic, batched):
    seen = java("compaction_table_view", topic=topic, batched=batched)
    assert seen["status"] == "SUCCESS"
    assert seen["initial"] == {"k0": "k0-v2", "k2": "k2-v2", "k3": "k3-v1", "k4": "k4-v1"}
    assert seen["size"] == 4
    assert seen["containsK1"] is False
    # Listeners hear a tombstone as a null value, and the key leaves the view.
    assert seen["updates"] == [["k5", "k5-v1"], ["k0", None], ["k3", "k3-v2"]]
    assert seen["after"] == {"k2": "k2-v2", "k3": "k3-v2", "k4": "k4-v1", "k5": "k5-v1"}


@pytest.mark.parametrize("level", ["topic", "namespace"])
def test_threshold_compacts_the_topic_by_itself(java, level):
    namespace = f"public/cmp-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://{namespace if level == 'namespace' else 'public/default'}/t-{uuid.uuid4().hex[:8]}"
    seen = java("compaction_threshold", topic=topic, level=level, namespace=namespace)
    assert seen["statusBefore"] == "NOT_RUN"
    assert seen["threshold"] == 10
    assert seen["status"] == "SUCCESS"
    assert seen["compactedReader"] == COMPACTED
    # The __compaction subscription has read everything that was there.
    assert seen["backlog"] == {"__compaction": 0}
