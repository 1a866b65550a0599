"""Permissions: Pulsar's grant, revoke and list endpoints for namespaces, topics and subscriptions.

Owns: `/admin/v2/namespaces/{t}/{ns}/permissions[/{role}]`, `.../permissions/subscription[/{sub}]`,
`.../permissions/{sub}/{role}` and `/admin/v2/{domain}/{t}/{ns}/{topic}/permissions[/{role}]`. Changes go
to the namespace's `auth_policies` (where Pulsar keeps them, topic grants included); a revocation closes
the producers and consumers that lost their permission, whose clients then reconnect and are refused.
Must not touch: the rules themselves (broker/authorization.py) or who may call these (admin/security.py).
"""

from __future__ import annotations

import logging
from typing import Annotated, Literal

from fastapi import APIRouter, Body, Request, Response

from magnetar.admin.clusters import check_namespace
from magnetar.admin.errors import Responses, error_responses, not_found, precondition_failed
from magnetar.broker.authorization import granted
from magnetar.broker.context import BrokerContext
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.storage.metadata import NotFoundError

__all__ = ["router"]

log = logging.getLogger(__name__)

router = APIRouter(prefix="/admin/v2")

Action = Literal["produce", "consume", "functions", "sources", "sinks", "packages"]
_NO_CONTENT: Responses = {204: {"description": "Operation successful"}}


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


async def _change(context: BrokerContext, namespace: str, policies: dict) -> None:
    try:
        await context.operations.set_namespace_policies(namespace, {"auth_policies": policies})
    except NotFoundError as error:  # deleted meanwhile
        raise not_found("Namespace does not exist") from error
    _close_unauthorized(context, namespace)


def _close_unauthorized(context: BrokerContext, namespace: str) -> None:
    """Producers and consumers whose role may no longer use their topic are closed by the broker."""
    authorization = context.authorization
    if not authorization.enabled:
        return
    for topic in [t for t in context.registry.topics.values() if t.name.namespace_name == namespace]:
        for producer in list(topic.producers.values()):
            if not authorization.can_produce(topic.name, producer.connection.auth.role):
                log.info("Closing producer %s on %s: its permission was revoked", producer.name, topic.name)
                producer.close_by_broker()
        for subscription in list(topic.subscriptions.values()):
            for consumer in list(subscription.consumers.values()):
                if not authorization.can_consume(topic.name, consumer.connection.auth.role, subscription.name):
                    log.info("Closing consumer %s on %s: its permission was revoked", consumer.name, topic.name)
                    consumer.close_by_broker()


# ------------------------------------------------------------------------------- namespaces


@router.get(
    "/namespaces/{tenant}/{namespace}/permissions",
    tags=["namespaces"],
    response_model=dict[str, list[str]],
    responses=error_responses(401, 403, 404, 412),
)
async def get_namespace_permissions(request: Request, tenant: str, namespace: str) -> dict[str, list[str]]:
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    return context.authorization.auth_policies(full)["namespace_auth"]


@router.post(
    "/namespaces/{tenant}/{namespace}/permissions/{role}",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(401, 403, 404, 412),
)
async def grant_namespace_permission(
    request: Request, tenant: str, namespace: str, role: str, actions: Annotated[list[Action], Body()]
) -> Response:
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    await _change(context, full, granted(context.authorization.auth_policies(full), None, role, list(actions)))
    return Response(status_code=204)


@router.delete(
    "/namespaces/{tenant}/{namespace}/permissions/{role}",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(401, 403, 404, 412),
)
async def revoke_namespace_permission(request: Request, tenant: str, namespace: str, role: str) -> Response:
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    await _change(context, full, granted(context.authorization.auth_policies(full), None, role, None))
    return Response(status_code=204)


@router.get(
    "/namespaces/{tenant}/{namespace}/permissions/subscription",
    tags=["namespaces"],
    response_model=dict[str, list[str]],
    responses=error_responses(401, 403, 404, 412),
)
async def get_subscription_permissions(request: Request, tenant: str, namespace: str) -> dict[str, list[str]]:
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    return context.authorization.auth_policies(full)["subscription_auth_roles"]


@router.post(
    "/namespaces/{tenant}/{namespace}/permissions/subscription/{subscription}",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(401, 403, 404, 412),
)
async def grant_subscription_permission(
    request: Request, tenant: str, namespace: str, subscription: str, roles: Annotated[list[str], Body()]
) -> Response:
    """Only these roles may consume from the subscription (with their consume permission)."""
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    policies = context.authorization.auth_policies(full)
    policies["subscription_auth_roles"][subscription] = sorted(set(roles))
    await _change(context, full, policies)
    return Response(status_code=204)


@router.delete(
    "/namespaces/{tenant}/{namespace}/permissions/{subscription}/{role}",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(401, 403, 404, 412),
)
async def revoke_subscription_permission(
    request: Request, tenant: str, namespace: str, subscription: str, role: str
) -> Response:
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    policies = context.authorization.auth_policies(full)
    roles = policies["subscription_auth_roles"].get(subscription)
    if not roles or role not in roles:
        raise precondition_failed(f"Role {role} has no permission on subscription {subscription}")
    policies["subscription_auth_roles"][subscription] = [r for r in roles if r != role]
    if not policies["subscription_auth_roles"][subscription]:
        del policies["subscription_auth_roles"][subscription]
    await _change(context, full, policies)
    return Response(status_code=204)


# ----------------------------------------------------------------------------------- topics


def _topic(context: BrokerContext, domain: str, tenant: str, namespace: str, topic: str) -> TopicName:
    if domain not in ("persistent", "non-persistent"):
        raise not_found("Not found")
    try:
        name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
    except InvalidTopicName as error:
        raise precondition_failed("Topic name is not valid") from error
    check_namespace(context, tenant, namespace)
    return name


@router.get(
    "/{domain}/{tenant}/{namespace}/{topic}/permissions",
    tags=["persistent topic"],
    response_model=dict[str, list[str]],
    responses=error_responses(401, 403, 404, 412),
)
async def get_topic_permissions(
    request: Request, domain: str, tenant: str, namespace: str, topic: str
) -> dict[str, list[str]]:
    """The namespace's grants merged with the topic's own, as Pulsar lists a topic's permissions."""
    context = _context(request)
    name = _topic(context, domain, tenant, namespace, topic)
    policies = context.authorization.auth_policies(name.namespace_name)
    merged = {role: set(actions) for role, actions in policies["namespace_auth"].items()}
    for role, actions in policies["destination_auth"].get(str(name), {}).items():
        merged.setdefault(role, set()).update(actions)
    return {role: sorted(actions) for role, actions in merged.items()}


@router.post(
    "/{domain}/{tenant}/{namespace}/{topic}/permissions/{role}",
    tags=["persistent topic"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(401, 403, 404, 412),
)
async def grant_topic_permission(
    request: Request,
    domain: str,
    tenant: str,
    namespace: str,
    topic: str,
    role: str,
    actions: Annotated[list[Action], Body()],
) -> Response:
    context = _context(request)
    name = _topic(context, domain, tenant, namespace, topic)
    policies = context.authorization.auth_policies(name.namespace_name)
    await _change(context, name.namespace_name, granted(policies, str(name), role, list(actions)))
    return Response(status_code=204)


@router.delete(
    "/{domain}/{tenant}/{namespace}/{topic}/permissions/{role}",
    tags=["persistent topic"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(401, 403, 404, 412),
)
async def revoke_topic_permission(
    request: Request, domain: str, tenant: str, namespace: str, topic: str, role: str
) -> Response:
    context = _context(request)
    name = _topic(context, domain, tenant, namespace, topic)
    policies = context.authorization.auth_policies(name.namespace_name)
    if role not in policies["destination_auth"].get(str(name), {}):
        raise precondition_failed("Permissions are not set at the topic level")
    await _change(context, name.namespace_name, granted(policies, str(name), role, None))
    return Response(status_code=204)
