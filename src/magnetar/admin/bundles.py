"""Admin routes of a cluster's bundles: Pulsar's `/admin/v2/namespaces/{tenant}/{namespace}/bundles`, the
unloads and the split, and the redirect of a topic's admin request to the broker that owns it.

Owns: the bundle boundaries answered (a broker alone: one bundle, the whole range, as before), unloading
a bundle (here when this broker owns it, else a 307 to its owner, as PulsarWebResource redirects) and a
namespace (each bundle where it is owned), splitting a bundle (at its owner, which is found, or assigned,
as a lookup would), and `topic_owner_redirect`: the 307 a topic's admin request gets when another broker
owns the topic, with the lookup run first when nobody does.
Must not touch: what ownership means (broker/cluster/).
"""

from __future__ import annotations

import asyncio
import urllib.request
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from magnetar.admin.clusters import BundlesData, bundles_data, check_namespace
from magnetar.admin.errors import error_responses, precondition_failed
from magnetar.broker.cluster.bundles import Bundle
from magnetar.broker.cluster.ownership import BundleNotOwnedError
from magnetar.broker.config import RANGE_EQUALLY_DIVIDE
from magnetar.broker.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.cluster.service import ClusterService
    from magnetar.broker.context import BrokerContext

__all__ = ["redirect_to_owners", "router", "topic_owner_redirect"]

router = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"])

_NO_CONTENT: dict[int | str, dict[str, Any]] = {204: {"description": "Done"}}
# Seconds an unload forwarded to a bundle's owner may take.
_FORWARD_TIMEOUT_S = 30
# The split algorithms magnetar has (Pulsar's supportedNamespaceBundleSplitAlgorithms).
_SPLIT_ALGORITHMS = [RANGE_EQUALLY_DIVIDE]
# Topic admin paths that are not about one topic's data: served by any broker, as Pulsar serves them.
_ANY_BROKER_SUFFIXES = ("/partitions", "/partitioned-stats", "/partitioned-internalStats")


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


def _redirect(request: Request, web_url: str) -> RedirectResponse:
    """The same request at another broker's web service: Pulsar's temporaryRedirect."""
    target = urlsplit(web_url)
    url = request.url.replace(scheme=target.scheme, netloc=target.netloc)
    return RedirectResponse(str(url), status_code=307)


@router.get("/{tenant}/{namespace}/bundles", response_model=BundlesData, responses=error_responses(404, 412))
async def get_bundles_data(request: Request, tenant: str, namespace: str) -> BundlesData:
    context = _context(request)
    return await bundles_data(context, check_namespace(context, tenant, namespace))


@router.put(
    "/{tenant}/{namespace}/unload",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
    response_model=None,
)
async def unload_namespace(request: Request, tenant: str, namespace: str) -> Response:
    """Every bundle of the namespace, unloaded by its owner (this broker asks the others)."""
    context = _context(request)
    name = check_namespace(context, tenant, namespace)
    cluster = context.cluster
    if cluster is None:
        for loaded in context.operations.loaded_topics():
            if loaded.namespace_name == name:
                await context.operations.unload_topic(loaded)
        return Response(status_code=204)
    for bundle in (await cluster.bundles.bundles(name)).bundles:
        await _unload_anywhere(request, cluster, bundle)
    return Response(status_code=204)


async def _unload_anywhere(request: Request, cluster: ClusterService, bundle: Bundle) -> None:
    if cluster.ownership.owns(bundle):
        await cluster.unload_bundle(bundle)
        return
    owner = await cluster.ownership.owner(bundle)
    if owner is None:
        return
    url = f"{owner.http_url}/admin/v2/namespaces/{bundle.namespace}/{bundle.range}/unload"
    forwarded = urllib.request.Request(url, method="PUT")
    authorization = request.headers.get("authorization")
    if authorization:
        forwarded.add_header("Authorization", authorization)
    await asyncio.to_thread(_send, forwarded)


def _send(forwarded: urllib.request.Request) -> None:
    with urllib.request.urlopen(forwarded, timeout=_FORWARD_TIMEOUT_S):
        pass


@router.put(
    "/{tenant}/{namespace}/{bundle}/unload",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412) | {307: {"description": "Owned by another broker"}},
    response_model=None,
)
async def unload_namespace_bundle(request: Request, tenant: str, namespace: str, bundle: str) -> Response:
    context = _context(request)
    name = check_namespace(context, tenant, namespace)
    cluster = context.cluster
    if cluster is None:
        return await unload_namespace(request, tenant, namespace)
    target = await _bundle_of(cluster, name, bundle)
    if cluster.ownership.owns(target):
        await cluster.unload_bundle(target)
        return Response(status_code=204)
    owner = await cluster.ownership.owner(target)
    if owner is None:
        # Nobody serves it: already unloaded, as Pulsar answers.
        return Response(status_code=204)
    return _redirect(request, owner.http_url)


async def _bundle_of(cluster: ClusterService, namespace: str, bundle_range: str) -> Bundle:
    """The bundle `bundle_range` names; 412 when it is none of the namespace's bundles."""
    try:
        target = Bundle.parse(namespace, bundle_range)
    except ValueError as error:
        raise precondition_failed(f"Invalid bundle range {bundle_range}") from error
    if target not in (await cluster.bundles.bundles(namespace)).bundles:
        raise precondition_failed(f"Bundle {bundle_range} is not a bundle of {namespace}")
    return target


@router.put(
    "/{tenant}/{namespace}/{bundle}/split",
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412, 503) | {307: {"description": "Owned by another broker"}},
    response_model=None,
)
async def split_namespace_bundle(
    request: Request,
    tenant: str,
    namespace: str,
    bundle: str,
    authoritative: bool = False,
    unload: bool = False,
    split_algorithm_name: str = Query("", alias="splitAlgorithmName"),
) -> Response:
    """Split a bundle in two halves of its hash range (range_equally_divide) at its owner, which keeps
    both, or unloads them with `unload`; a 307 to the owner when it is another broker (assigned one as
    a lookup would when nobody owns it)."""
    context = _context(request)
    name = check_namespace(context, tenant, namespace)
    if split_algorithm_name and split_algorithm_name not in _SPLIT_ALGORITHMS:
        raise precondition_failed(
            f"Unsupported namespace bundle split algorithm, supported algorithms are {_SPLIT_ALGORITHMS}"
        )
    cluster = context.cluster
    if cluster is None:
        raise precondition_failed("Bundles are split by brokers of a cluster (metadataStoreUrl)")
    target = await _bundle_of(cluster, name, bundle)
    try:
        owner = await cluster.lookup_bundle(target, authoritative)
        if owner.http_url != context.config.advertised_web_url:
            target_url = urlsplit(owner.http_url)
            url = request.url.replace(scheme=target_url.scheme, netloc=target_url.netloc)
            flag = "true" if owner.authoritative and owner.redirect else "false"
            return RedirectResponse(str(url.include_query_params(authoritative=flag)), status_code=307)
        await cluster.split_bundle(target, unload)
    except BundleNotOwnedError as error:
        return JSONResponse({"reason": str(error)}, status_code=503)
    except ValueError as error:
        raise precondition_failed(str(error)) from error
    return Response(status_code=204)


async def topic_owner_redirect(request: Request, context: BrokerContext) -> Response | None:
    """The 307 to the owner's web service for a topic's admin request when another broker owns the
    topic (PulsarWebResource.validateTopicOwnership), assigning an owner first when it has none; None
    when this broker serves it, or the request is not about one topic."""
    cluster = context.cluster
    name = _topic_of(request.url.path)
    if cluster is None or name is None:
        return None
    authoritative = request.query_params.get("authoritative", "false") == "true"
    try:
        result = await cluster.lookup(name, authoritative)
    except BundleNotOwnedError as error:
        return JSONResponse({"reason": str(error)}, status_code=503)
    if result.http_url == context.config.advertised_web_url:
        return None
    url = request.url.replace(scheme=urlsplit(result.http_url).scheme, netloc=urlsplit(result.http_url).netloc)
    url = url.include_query_params(authoritative="true" if result.authoritative and result.redirect else "false")
    return RedirectResponse(str(url), status_code=307)


def redirect_to_owners(app: FastAPI, context: BrokerContext) -> None:
    """Send every topic admin request another broker owns there (topic_owner_redirect)."""

    @app.middleware("http")
    async def _to_the_owner(request: Request, call_next: Any) -> Response:
        redirect = await topic_owner_redirect(request, context)
        return redirect if redirect is not None else await call_next(request)


def _topic_of(path: str) -> TopicName | None:
    """The topic of `/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}[/...]`."""
    parts = path.split("/")
    if len(parts) < 7 or parts[1:3] not in (["admin", "v2"],) or parts[3] not in ("persistent", "non-persistent"):
        return None
    if path.endswith(_ANY_BROKER_SUFFIXES):
        return None
    try:
        return TopicName.parse(f"{parts[3]}://{parts[4]}/{parts[5]}/{parts[6]}")
    except InvalidTopicName:
        return None
