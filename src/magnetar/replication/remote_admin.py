"""What a replicating cluster asks of another cluster's admin API: its partitioned topics.

Owns: creating a partitioned topic on a remote cluster, or raising its partition count, so that the
partitions a replicator sends to exist there (Pulsar 4.0's createTopicToRemoteClusterForReplication)
and a partitioned topic created or grown in one cluster is so in the others; over HTTPS and with the
credentials remote_cluster.py decides (a token or basic `Authorization` header, a client certificate).
Must not touch: anything local. One blocking HTTP request at a time, on a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request

from magnetar.client.security import ClientSecurity

__all__ = ["RemoteAdminError", "ensure_partitioned_topic"]

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0


class RemoteAdminError(Exception):
    """The remote admin API could not be reached, or refused."""


async def ensure_partitioned_topic(
    admin_url: str, topic: str, partitions: int, security: ClientSecurity | None = None
) -> None:
    """`topic` (persistent://tenant/namespace/name) has at least `partitions` partitions at `admin_url`:
    created when it has none, updated when it has fewer. `security`: TLS trust and credentials."""
    path = f"{admin_url.rstrip('/')}/admin/v2/persistent/{topic.split('://', 1)[1]}/partitions"
    security = security or ClientSecurity()
    remote = await _remote_partitions(path, security)
    if remote >= partitions:
        return
    status, body = await asyncio.to_thread(_request, "PUT" if remote == 0 else "POST", path, partitions, security)
    # Any 2xx is a success: the remote may be Pulsar (200 or 204) or magnetar. 409, as before: the topic
    # exists there already (PUT). 422 refuses fewer partitions than the remote has (POST, Pulsar 4.0.7 and
    # magnetar): no failure when another cluster gave it as many meanwhile.
    if not (200 <= status < 300 or status == 409) and not (
        status == 422 and await _remote_partitions(path, security) >= partitions
    ):
        raise RemoteAdminError(f"{admin_url} refused {partitions} partitions for {topic}: {status} {body[:200]!r}")
    log.info("[%s] Partitioned topic has %d partitions at %s", topic, partitions, admin_url)


async def _remote_partitions(path: str, security: ClientSecurity) -> int:
    """The number of partitions the remote has for the topic: 0 when it has none (or no such topic)."""
    status, body = await asyncio.to_thread(_request, "GET", path, None, security)
    return int(json.loads(body).get("partitions", 0)) if status == 200 else 0


def _request(method: str, url: str, body: object, security: ClientSecurity) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    try:
        authorization = security.http_authorization()
        context = security.ssl_context() if url.startswith("https:") else None
    except (OSError, ValueError) as error:
        raise RemoteAdminError(f"{method} {url}: no credentials: {error}") from error
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except (urllib.error.URLError, OSError) as error:
        raise RemoteAdminError(f"{method} {url}: {error}") from error
