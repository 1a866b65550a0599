"""The cluster part of the broker: bundles, their ownership, the broker registry, the leader and the lookup
that redirects a client to a topic's owner, all kept in the metadata store (docs/cluster.md)."""
