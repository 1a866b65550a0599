"""Cluster metadata: the `MetadataStore` interface (store.py) and its stores: ZooKeeper (zookeeper.py, on
kazoo with kazoo_ext.py), SQLite (sqlite.py, the embedded default) and memory (memory.py), and the URL
that names one (urls.py: `open_metadata_store`)."""
