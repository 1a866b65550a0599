"""Opening the cluster's metadata store from its URL (`metadataStoreUrl`, `configurationMetadataStoreUrl`),
the one place the broker does: the metadata package's factory (metadata/urls.py: `zk:`, the deprecated bare
`host:port`, `sqlite:`, `memory:<name>`), its refusal turned into the broker's ConfigError.

Owns: nothing but that translation. Must not touch: what the brokers keep in the store.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from magnetar.broker.config import ConfigError
from magnetar.clock import system_time_ms
from magnetar.metadata.store import MetadataStore
from magnetar.metadata.urls import memory_server
from magnetar.metadata.urls import open_metadata_store as open_store

__all__ = ["memory_server", "open_metadata_store"]


async def open_metadata_store(
    url: str,
    *,
    session_timeout_ms: int = 30000,
    time_ms: Callable[[], int] = system_time_ms,
    data_dir: Path | None = None,
) -> MetadataStore:
    """A client of the store at `url`, with a session of its own. ConfigError for a URL it cannot open."""
    try:
        return await open_store(url, session_timeout_ms=session_timeout_ms, time_ms=time_ms, data_dir=data_dir)
    except ValueError as refused:
        raise ConfigError(f"metadataStoreUrl: {refused}") from None
