"""Admin routes: the broker itself at Pulsar's `/admin/v2/brokers` paths.

Owns: health and readiness, the active brokers of the cluster and its leader (a broker of a cluster: the
broker registry's and the election's; a standalone is a cluster of one), the bundles a broker owns, and the listings of its configuration (the dynamic keys,
their overridden values, the whole runtime configuration) with Pulsar's JSON shapes.
Must not touch: state; the configuration is read, never changed (magnetar has no dynamic updates).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel

from magnetar.admin.errors import error_responses, not_found
from magnetar.broker.config import BROKER_KEYS
from magnetar.core.settings import PULSAR_KEYS

if TYPE_CHECKING:
    from magnetar.broker.cluster.service import ClusterService
    from magnetar.broker.context import BrokerContext

__all__ = ["BrokerInfo", "NamespaceOwnershipStatus", "router"]

router = APIRouter(prefix="/admin/v2/brokers", tags=["brokers"])

# A standalone broker owns each namespace whole: Pulsar's single bundle covering the hash range.
_FULL_BUNDLE = "0x00000000_0xffffffff"


class BrokerInfo(BaseModel):
    serviceUrl: str
    brokerId: str


class NamespaceOwnershipStatus(BaseModel):
    broker_assignment: str
    is_controlled: bool
    is_active: bool


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


def broker_id(context: BrokerContext) -> str:
    """Pulsar's broker id: the host and port of the broker's web service."""
    return urlsplit(context.config.advertised_web_url).netloc


def _java_string(value: Any) -> str:
    """A setting's value as Pulsar's String.valueOf prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@router.get("/health", response_class=PlainTextResponse, responses={503: {"description": "Starting"}})
async def health(request: Request, topicVersion: str | None = None) -> PlainTextResponse:
    """`ok` once the broker serves clients. `topicVersion` is accepted as Pulsar accepts it; magnetar
    has one way to serve a topic, so both versions answer alike."""
    if not request.app.state.is_ready():
        return PlainTextResponse("starting", status_code=503)
    return PlainTextResponse("ok")


@router.get("/ready", response_class=PlainTextResponse, responses={500: {"description": "Not ready"}})
async def ready(request: Request) -> PlainTextResponse:
    """Pulsar answers a broker that has not started with a bare 500."""
    if not request.app.state.is_ready():
        return PlainTextResponse("", status_code=500)
    return PlainTextResponse("ok")


async def _active_brokers(context: BrokerContext) -> list[str]:
    if context.cluster is None:
        return [broker_id(context)]
    return sorted(await context.cluster.registry.live_brokers())


@router.get("", response_model=list[str])
async def get_active_brokers_of_this_cluster(request: Request) -> list[str]:
    return await _active_brokers(_context(request))


@router.get("/leaderBroker", response_model=BrokerInfo, responses=error_responses(404))
async def get_leader_broker(request: Request) -> BrokerInfo:
    context = _context(request)
    if context.cluster is None:
        return BrokerInfo(serviceUrl=context.config.advertised_web_url, brokerId=broker_id(context))
    leader = context.cluster.leader.leader
    if leader is None:
        raise not_found("No leader broker is elected")
    return BrokerInfo(serviceUrl=leader["serviceUrl"], brokerId=leader.get("brokerId", ""))


@router.get("/configuration", response_model=list[str])
async def get_dynamic_configuration_names() -> list[str]:
    """The keys Pulsar lets an operator change at run time (those magnetar knows, flagged dynamic)."""
    names = {s.key for s in BROKER_KEYS if s.dynamic}
    names.update(key for key, _doc, dynamic in PULSAR_KEYS.values() if dynamic)
    return sorted(names)


@router.get("/configuration/values", response_model=dict[str, str])
async def get_all_dynamic_configurations() -> dict[str, str]:
    """The dynamic keys overridden at run time: none, since magnetar reads its settings at start."""
    return {}


@router.get("/configuration/runtime", response_model=dict[str, str])
async def get_runtime_configuration(request: Request) -> dict[str, str]:
    """Every setting in force, as strings, as Pulsar's getRuntimeConfiguration answers."""
    return {key: _java_string(value) for key, value in sorted(_context(request).config.values.items())}


@router.get("/{cluster}", response_model=list[str])
async def get_active_brokers(request: Request, cluster: str) -> list[str]:
    """Pulsar without authorization accepts any cluster name here and lists its own cluster's brokers."""
    return await _active_brokers(_context(request))


@router.get(
    "/{cluster}/{broker}/ownedNamespaces",
    response_model=dict[str, NamespaceOwnershipStatus],
    responses=error_responses(404),
)
async def get_owned_namespaces(
    request: Request, cluster: str, broker: str
) -> dict[str, NamespaceOwnershipStatus] | Response:
    """A broker alone: every namespace, whole. Pulsar redirects a request naming another broker to that
    broker; in a cluster of one there is no other broker to go to, so magnetar answers 404 instead of
    sending the client to an address that serves nothing. A broker of a cluster: the bundles it owns,
    and a 307 to the broker named when it is another live one."""
    context = _context(request)
    if context.cluster is not None:
        return await _owned_bundles(request, context.cluster, broker)
    if broker != broker_id(context):
        raise not_found(f"Broker {broker} is not a broker of this cluster: {broker_id(context)} is")
    owned = {}
    for tenant in context.metadata.tenants():
        for namespace in context.metadata.namespaces(tenant):
            owned[f"{namespace}/{_FULL_BUNDLE}"] = NamespaceOwnershipStatus(
                broker_assignment="shared", is_controlled=False, is_active=True
            )
    return owned


async def _owned_bundles(
    request: Request, cluster: ClusterService, broker: str
) -> dict[str, NamespaceOwnershipStatus] | Response:
    if broker != cluster.broker_id:
        target = (await cluster.registry.live_brokers()).get(broker)
        if target is None:
            raise not_found(f"Broker {broker} is not a live broker of this cluster")
        netloc = urlsplit(target.web_service_url)
        return RedirectResponse(str(request.url.replace(scheme=netloc.scheme, netloc=netloc.netloc)), status_code=307)
    return {
        str(bundle): NamespaceOwnershipStatus(broker_assignment="shared", is_controlled=False, is_active=True)
        for bundle in cluster.ownership.owned
    }
