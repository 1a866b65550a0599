"""Replicators between clusters (geo-replication, PIP-33): each forwards one topic's entries to the same
topic on a remote cluster through a producer there, and moves its cursor only on the remote's receipts.

Owns: replicators (`replicator`) and the client producer they open on a remote cluster (`producer`).
Must not touch: storage files (entries come through the managed ledger and cursor APIs) or the broker's
objects; a remote cluster is known only through the Pulsar protocol (`magnetar.protocol`).
"""
