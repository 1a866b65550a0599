"""The admin HTTP calls the data source makes: a topic's internal stats and its deduplication in force.

Owns: building Pulsar's `/admin/v2` paths for a topic name and reading their JSON answers with the
standard library (the planner processes Spark starts should not need an HTTP client package), over
HTTPS and with credentials when the options give them (`pulsar.admin.*`, options.py).
Must not touch: the binary protocol (wire.py) or planning decisions (offsets.py, reader.py).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.client.security import ClientSecurity

__all__ = ["AdminError", "TopicMissing", "deduplication_in_force", "internal_stats"]


class AdminError(Exception):
    """The admin API could not be reached or answered an error."""


class TopicMissing(AdminError):
    """404: the topic does not exist."""


def _topic_path(topic: str) -> str:
    domain, _, rest = topic.partition("://")
    tenant, namespace, local = rest.split("/", 2)
    quote = urllib.parse.quote
    return f"/admin/v2/{domain}/{quote(tenant)}/{quote(namespace)}/{quote(local, safe='')}"


def _get(admin_url: str, path: str, timeout_s: float, security: ClientSecurity | None) -> Any:
    url = admin_url.rstrip("/") + path
    security = security or ClientSecurity()
    try:
        authorization = security.http_authorization()
        context = security.ssl_context() if url.startswith("https:") else None
    except (OSError, ValueError) as error:
        raise AdminError(f"GET {url}: no credentials (options pulsar.admin.*): {error}") from error
    request = urllib.request.Request(url, headers={} if authorization is None else {"Authorization": authorization})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        reason = error.read().decode(errors="replace")
        if error.code == 404:
            raise TopicMissing(reason) from error
        raise AdminError(f"GET {url} answered {error.code}: {reason}") from error
    except (urllib.error.URLError, OSError) as error:
        raise AdminError(f"cannot reach the admin API at {admin_url} (option adminUrl): {error}") from error
    return json.loads(body) if body else None


def internal_stats(
    admin_url: str, topic: str, timeout_s: float = 30.0, security: ClientSecurity | None = None
) -> dict[str, Any]:
    """Pulsar's internalStats of one topic (or partition): ledgers, last confirmed entry, counters."""
    return _get(admin_url, _topic_path(topic) + "/internalStats", timeout_s, security)


def deduplication_in_force(
    admin_url: str, topic: str, timeout_s: float = 30.0, security: ClientSecurity | None = None
) -> bool:
    """Whether the broker drops resent sequence ids on `topic` (topic policy, else namespace's, else
    brokerDeduplicationEnabled), as `pulsar-admin topics get-deduplication --applied` asks."""
    return bool(_get(admin_url, _topic_path(topic) + "/deduplicationEnabled?applied=true", timeout_s, security))
