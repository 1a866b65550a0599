"""Authentication and authorization of HTTP calls, as Pulsar's AuthenticationFilter and its web resources'
checks: one ASGI middleware in front of every route.

Owns: who makes a call (`Authorization: Bearer|Basic`, else on HTTPS the common name of a trusted client
certificate when AuthenticationProviderTls is on, else the anonymous role, else 401 "Authentication
required") and whether the role may make it, when authorizationEnabled is also set: super users anything;
a tenant's admins the tenant's calls (403 otherwise); lookups, and the partitions GET that is the HTTP
lookup of partitioned metadata, whoever may produce or consume the topic;
every other call (clusters, brokers, tenants' list and changes) super users only (401 "This operation
requires super-user access", Pulsar's status for it). `/metrics` stays open (Pulsar's
authenticateMetricsEndpoint=false), and so do the console's files (`/`, `/console/…`), which hold no data.
Must not touch: the routes' own checks and answers; the role is left in `request.state.role`.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, NamedTuple

from magnetar.admin.errors import error_page
from magnetar.broker.auth import AuthenticationError
from magnetar.broker.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.authorization import AuthorizationService
    from magnetar.broker.context import BrokerContext

__all__ = ["Refusal", "SecurityMiddleware", "refusal"]

_OPEN_PATHS = {"/metrics", "/ready", "/"}
# The console's files (admin/console): code the page runs, no broker data. Its calls to /admin/v2 carry
# the credentials typed into it and are checked here like any other.
_OPEN_PREFIXES = ("/console/",)
# Paths whose fourth part is a tenant: their calls are the tenant admins'.
_TENANT_AREAS = {"namespaces", "persistent", "non-persistent", "schemas"}
_NOT_TENANT_ADMIN = "Don't have permission to administrate resources on this tenant"
_NOT_SUPER_USER = "This operation requires super-user access"


class Refusal(NamedTuple):
    """Why a call is refused: the HTTP status and Pulsar's reason."""

    status: int
    reason: str


def refusal(authorization: AuthorizationService, method: str, path: str, role: str | None) -> Refusal | None:
    """The refusal when `role` may not make the call, None when it may."""
    if authorization.is_super_user(role):
        return None
    parts = [p for p in path.split("/") if p]
    if parts[:3] == ["lookup", "v2", "topic"] and len(parts) >= 7:
        try:
            name = TopicName.parse(f"{parts[3]}://{parts[4]}/{parts[5]}/{parts[6]}")
        except InvalidTopicName:
            return None  # the route answers 412
        return None if authorization.can_lookup(name, role) else Refusal(403, "Client is not authorized to Lookup")
    if _is_partitions_lookup(method, parts):
        # The HTTP lookup of partitions, which clients with an http:// service URL make before producing
        # or consuming: Pulsar checks TopicOperation.LOOKUP (tenant admins and whoever may produce or
        # consume), not the tenant's administration.
        try:
            name = TopicName.parse(f"{parts[2]}://{parts[3]}/{parts[4]}/{parts[5]}")
        except InvalidTopicName:
            return None  # the route answers 412
        if authorization.is_tenant_admin(name.tenant, role) or authorization.can_lookup(name, role):
            return None
        return Refusal(401, f"Unauthorized to validateTopicOperation for operation [LOOKUP] on topic [{name}]")
    if parts[:2] == ["admin", "v2"] and len(parts) >= 4:
        tenant_call = parts[2] in _TENANT_AREAS or (parts[2] == "tenants" and method == "GET")
        if tenant_call:
            return None if authorization.is_tenant_admin(parts[3], role) else Refusal(403, _NOT_TENANT_ADMIN)
    return Refusal(401, _NOT_SUPER_USER)


def _is_partitions_lookup(method: str, parts: list[str]) -> bool:
    """GET /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/partitions."""
    return (
        method == "GET"
        and len(parts) == 7
        and parts[:2] == ["admin", "v2"]
        and parts[2] in ("persistent", "non-persistent")
        and parts[6] == "partitions"
    )


class SecurityMiddleware:
    def __init__(self, app: Any, context: BrokerContext) -> None:
        self.app = app
        self.context = context

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        authentication = self.context.authentication
        if scope["type"] != "http" or not authentication.enabled or _open(scope["path"]):
            await self.app(scope, receive, send)
            return
        header = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"authorization"), None)
        # The HTTPS connection's TLS session (admin/app.py hands it over), for its client certificate.
        ssl_object = scope.get("state", {}).get("ssl_object")
        try:
            # Off the loop: an htpasswd check takes milliseconds to hundreds of them.
            authenticated = await asyncio.to_thread(authentication.authenticate_http, header, ssl_object)
        except AuthenticationError:
            await _answer_page(send, 401, "Authentication required", scope["path"])
            return
        role = authenticated.role
        if self.context.authorization.enabled:
            refused = refusal(self.context.authorization, scope["method"], scope["path"], role)
            if refused is not None:
                await _answer_json(send, refused.status, {"reason": refused.reason})
                return
        scope.setdefault("state", {})["role"] = role
        await self.app(scope, receive, send)


def _open(path: str) -> bool:
    return path in _OPEN_PATHS or path.startswith(_OPEN_PREFIXES)


async def _answer_json(send: Any, status: int, body: dict[str, str]) -> None:
    await _answer(send, status, json.dumps(body).encode(), b"application/json")


async def _answer_page(send: Any, status: int, message: str, path: str) -> None:
    """Pulsar's AuthenticationFilter answers with its web server's HTML error page."""
    await _answer(send, status, error_page(status, message, path).encode(), b"text/html;charset=utf-8")


async def _answer(send: Any, status: int, body: bytes, content_type: bytes) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
