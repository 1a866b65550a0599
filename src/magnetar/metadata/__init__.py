"""Cluster metadata: the `MetadataStore` interface (store.py) and its stores: in memory (memory.py), and
beside it SQLite (the embedded default) and ZooKeeper."""
