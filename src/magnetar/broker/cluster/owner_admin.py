"""What the leader asks of the broker that owns a bundle, over that broker's admin API, as Pulsar's leader
does through its admin client: unload the bundle (load shedding), split it (a hot bundle).

Owns: the two requests, `PUT /admin/v2/namespaces/{tenant}/{namespace}/{bundle}/unload` and
`.../{bundle}/split?unload=...`, to the web service URL the owner's LocalBrokerData names (its https one
with brokerClientTlsEnabled), with the credentials and TLS trust the broker uses as a client (the
brokerClient* settings, replication/remote_cluster.py); one blocking request at a time, on a worker
thread. Must not touch: what to unload or split (load_manager.py).
"""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from typing import Any

from magnetar.broker.cluster.brokers import LocalBrokerData
from magnetar.broker.cluster.bundles import Bundle
from magnetar.client.security import ClientSecurity
from magnetar.replication.remote_cluster import remote_security

__all__ = ["OwnerAdmin", "OwnerAdminError"]

# Seconds an unload or a split may take at the owner: Pulsar's namespaceBundleUnloadingTimeoutMs is 60 s.
TIMEOUT_S = 60.0


class OwnerAdminError(Exception):
    """The owner could not be reached, or refused."""


class OwnerAdmin:
    def __init__(self, settings: Any) -> None:
        self._settings = settings

    async def unload(self, owner: LocalBrokerData, bundle: Bundle) -> None:
        await self._put(owner, f"{bundle}/unload")

    async def split(self, owner: LocalBrokerData, bundle: Bundle, unload: bool) -> None:
        await self._put(owner, f"{bundle}/split?unload={'true' if unload else 'false'}")

    async def _put(self, owner: LocalBrokerData, path: str) -> None:
        tls = self._settings["brokerClientTlsEnabled"] and owner.web_service_url_tls
        base = owner.web_service_url_tls if tls else owner.web_service_url
        url = f"{(base or '').rstrip('/')}/admin/v2/namespaces/{path}"
        try:
            security = remote_security({}, self._settings)
        except ValueError as error:
            raise OwnerAdminError(f"PUT {url}: no credentials: {error}") from error
        await asyncio.to_thread(_put, url, security)


def _put(url: str, security: ClientSecurity) -> None:
    headers = {}
    try:
        authorization = security.http_authorization()
        context = security.ssl_context() if url.startswith("https:") else None
    except (OSError, ValueError) as error:
        raise OwnerAdminError(f"PUT {url}: no credentials: {error}") from error
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url, method="PUT", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context):
            return
    except urllib.error.HTTPError as error:
        raise OwnerAdminError(f"PUT {url}: {error.code} {error.read()[:200]!r}") from error
    except (urllib.error.URLError, OSError) as error:
        raise OwnerAdminError(f"PUT {url}: {error}") from error
