"""The metadata store a URL names, in the forms of Pulsar's `metadataStoreUrl` and
`configurationMetadataStoreUrl`, and magnetar's own embedded and in-process ones.

Owns: `open_metadata_store` and the process-wide memory servers it names. Must not touch: any store's
semantics (each store's module has them).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from magnetar.clock import system_time_ms
from magnetar.metadata.memory import MemoryMetadataServer
from magnetar.metadata.sqlite import SqliteMetadataStore
from magnetar.metadata.store import MetadataStore
from magnetar.metadata.zookeeper import DEFAULT_SESSION_TIMEOUT_MS, ZKMetadataStore, parse_zookeeper_url

__all__ = ["ACCEPTED_FORMS", "memory_server", "open_metadata_store"]

ACCEPTED_FORMS = "zk:host1:2181,host2:2181/chroot, host1:2181 (deprecated), sqlite:<path> or memory:<name>"
# The deprecated bare form of Pulsar's zookeeperServers: host:port[,host:port...][/chroot].
_BARE_ZOOKEEPER = re.compile(r"[\w.\-]+:\d+(,[\w.\-]+:\d+)*(/.*)?")
# memory:<name>: one tree per name in this process, so several brokers of one test share it.
_MEMORY_SERVERS: dict[str, MemoryMetadataServer] = {}


def memory_server(name: str, time_ms: Callable[[], int] = system_time_ms) -> MemoryMetadataServer:
    """The process's memory server called `name`, made at its first use with `time_ms`."""
    if name not in _MEMORY_SERVERS:
        _MEMORY_SERVERS[name] = MemoryMetadataServer(time_ms)
    return _MEMORY_SERVERS[name]


async def open_metadata_store(
    url: str,
    *,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    time_ms: Callable[[], int] = system_time_ms,
    data_dir: Path | None = None,
) -> MetadataStore:
    """An open store for `url`; a relative `sqlite:` path is in `data_dir` (the working directory without one).
    `session_timeout_ms` is Pulsar's metadataStoreSessionTimeoutMillis (ZooKeeper's only)."""
    if url.startswith("zk:") or _BARE_ZOOKEEPER.fullmatch(url):
        hosts, chroot = parse_zookeeper_url(url)
        return await ZKMetadataStore.connect(hosts, chroot, session_timeout_ms)
    scheme, _, rest = url.partition(":")
    if scheme == "sqlite" and rest:
        path = Path(rest)
        if data_dir is not None and not path.is_absolute():
            path = data_dir / path
        return await SqliteMetadataStore.open(path, time_ms)
    if scheme == "memory" and rest:
        return memory_server(rest, time_ms).connect()
    raise ValueError(f"metadata store URL {url!r} is none of {ACCEPTED_FORMS}")
