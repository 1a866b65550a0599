"""Admin routes for topic compaction, at Pulsar's paths: start a compaction and read its status
(`/admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction`), and the compactionThreshold policy
of a topic and of a namespace.

Owns: those routes' checks and answers. Must not touch: state, except through the broker's services
(BrokerContext policies, a topic's TopicCompaction).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response

from magnetar.admin.clusters import Int64, _policy, _set_policy
from magnetar.admin.errors import UNSET_POLICY, Responses, conflict, error_responses, precondition_failed, unset_policy
from magnetar.admin.topics import _context, _existing_namespace_topic, _policy_topic, _topic, _topics
from magnetar.broker.compactor import CompactionAlreadyRunning

__all__ = ["router"]

router = APIRouter(prefix="/admin/v2")

_NO_CONTENT: Responses = {204: {"description": "Done"}}
_TOPIC = "/persistent/{tenant}/{namespace}/{topic}"


@router.put(
    _TOPIC + "/compaction",
    tags=["persistent topic"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 409, 412),
)
async def trigger_compaction(request: Request, tenant: str, namespace: str, topic: str) -> Response:
    """Start compacting the topic (each partition of a partitioned topic); 409 while one runs."""
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    for loaded in await _topics(_context(request), name):
        try:
            loaded.compaction.trigger()
        except CompactionAlreadyRunning as error:
            raise conflict(str(error)) from error
    return Response(status_code=204)


@router.get(_TOPIC + "/compaction", tags=["persistent topic"], responses=error_responses(404, 412))
async def compaction_status(request: Request, tenant: str, namespace: str, topic: str) -> dict[str, str]:
    """Pulsar's LongRunningProcessStatus of the topic's last compaction since it was loaded."""
    name = _existing_namespace_topic(request, tenant, namespace, topic)
    loaded = await _topic(_context(request), name)
    return {"status": loaded.compaction.status, "lastError": loaded.compaction.last_error}


@router.get(
    _TOPIC + "/compactionThreshold",
    tags=["persistent topic"],
    response_model=Int64,
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_topic_threshold(request: Request, tenant: str, namespace: str, topic: str, applied: bool = False) -> Any:
    """The topic's own threshold; with `applied`, the one in force (topic, else namespace, else broker)."""
    context = _context(request)
    name = _policy_topic(request, tenant, namespace, topic)
    if applied:
        loaded = await _topics(context, name)
        if loaded:
            return context.policies.compaction_threshold(loaded[0].name)
        return int(context.config["brokerServiceCompactionThresholdInBytes"])
    threshold = context.policies.topic_policies(name).get("compactionThreshold")
    return unset_policy() if threshold is None else threshold


@router.post(
    _TOPIC + "/compactionThreshold",
    tags=["persistent topic"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_topic_threshold(
    request: Request, tenant: str, namespace: str, topic: str, threshold: Annotated[Int64, Body()]
) -> Response:
    if threshold < 0:
        raise precondition_failed("compactionThreshold must be 0 or more")
    context = _context(request)
    await context.operations.set_topic_policies(
        _policy_topic(request, tenant, namespace, topic), {"compactionThreshold": threshold}
    )
    return Response(status_code=204)


@router.delete(
    _TOPIC + "/compactionThreshold",
    tags=["persistent topic"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_topic_threshold(request: Request, tenant: str, namespace: str, topic: str) -> Response:
    context = _context(request)
    await context.operations.set_topic_policies(
        _policy_topic(request, tenant, namespace, topic), {"compactionThreshold": None}
    )
    return Response(status_code=204)


@router.get(
    "/namespaces/{tenant}/{namespace}/compactionThreshold",
    tags=["namespaces"],
    response_model=Int64,
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_namespace_threshold(request: Request, tenant: str, namespace: str) -> Any:
    threshold = _policy(request, tenant, namespace, "compaction_threshold")
    return unset_policy() if threshold is None else threshold


@router.put(
    "/namespaces/{tenant}/{namespace}/compactionThreshold",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_namespace_threshold(
    request: Request, tenant: str, namespace: str, threshold: Annotated[Int64, Body()]
) -> Response:
    if threshold < 0:
        raise precondition_failed("compactionThreshold must be 0 or more")
    return await _set_policy(request, tenant, namespace, "compaction_threshold", threshold)


@router.delete(
    "/namespaces/{tenant}/{namespace}/compactionThreshold",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_namespace_threshold(request: Request, tenant: str, namespace: str) -> Response:
    return await _set_policy(request, tenant, namespace, "compaction_threshold", None)
