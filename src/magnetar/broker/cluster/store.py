"""Opening the cluster's metadata store from its URL (`metadataStoreUrl`), the one place the broker does.

Owns: the URL forms this build opens: `memory:<name>`, an in-memory store of the process that every
broker naming it shares (a cluster of brokers in one process, as Pulsar's memory store is). The ZooKeeper
(`zk:`) and SQLite (`sqlite:`) stores come with the metadata package's own factory, which replaces the
body of `open_metadata_store` and nothing else. Must not touch: what the brokers keep in the store.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.config import ConfigError
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.metadata.store import MetadataStore

__all__ = ["memory_server", "open_metadata_store"]

_MEMORY_SERVERS: dict[str, MemoryMetadataServer] = {}


def memory_server(name: str, time_ms: Callable[[], int] = lambda: 0) -> MemoryMetadataServer:
    """The process's in-memory store named `name`, made on first use."""
    server = _MEMORY_SERVERS.get(name)
    if server is None:
        server = _MEMORY_SERVERS[name] = MemoryMetadataServer(time_ms)
    return server


def open_metadata_store(
    url: str, *, session_timeout_ms: int = 30000, time_ms: Callable[[], int] = lambda: 0
) -> MetadataStore:
    """A client of the store at `url`, with a session of its own. ConfigError for a URL it cannot open."""
    scheme, sep, rest = url.partition(":")
    if sep and scheme == "memory" and rest:
        return memory_server(rest, time_ms).connect()
    raise ConfigError(
        f"metadataStoreUrl: cannot open {url!r} (session timeout {session_timeout_ms} ms): "
        "this build opens memory:<name> stores"
    )
