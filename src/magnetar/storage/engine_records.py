"""What a storage engine hands back at open and when it loads a topic (engine.py's `StorageEngine`).

Owns: the two records, and the roots of the metadata records' paths. Must not touch: anything; a leaf, so
that the engines and their interface import it without importing each other.
"""

from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["Catalog", "RECORD_ROOTS", "TopicState"]

# Every path under which the layers above keep metadata records (storage/metadata.py's MetadataStore): the
# admin records (clusters, tenants, namespaces, partitioned topics), the schemas (storage/schemas.py), the
# topic-level policies (broker/policies.py) and the topics that received delayed messages (broker/topic.py).
# An engine that keeps the records in a store shared with other things (BookKeeper's, in the cluster's
# ZooKeeper) loads these subtrees at open, and only these.
RECORD_ROOTS = ("/admin", "/schemas", "/topic-policies", "/delayed-delivery")


class Catalog(NamedTuple):
    """What an engine knows at open: the topic ids by name it can list (an engine whose topics live in a
    shared store lists none: a topic is loaded when its owner opens it) and the metadata records as
    (path, JSON, version)."""

    topic_ids: dict[str, int]
    metadata: list[tuple[str, str, int]]


class TopicState(NamedTuple):
    """A topic as `open_topic` loaded it: its id, its ledgers that hold entries as (id, entries, size,
    timestamp_ms) in id order, its cursors as (name, mark-delete ledger, mark-delete entry, acknowledged
    ranges decoded, batch_deleted JSON, properties JSON), and its count of entries retention deleted."""

    topic_id: int
    ledgers: list[tuple[int, int, int, int]]
    cursors: list[tuple[Any, ...]]
    entries_trimmed: int
