"""Admin routes: clusters, tenants and namespaces with their policies, at Pulsar's `/admin/v2` paths.

Owns: validating what an operator asks (names, bodies, existence, the tenant's clusters) and answering
with Pulsar's JSON shapes, status codes and reasons. Must not touch: state, except through the broker
context's methods (`BrokerContext.create_tenant`, `set_namespace_policies`, ...); topics (topics.py).

A policy that was never set reads as 204 No Content, as Pulsar's handlers answer a null value. A change
answers 204, except where Pulsar 4.0.7 answers 200 with an empty body: creating and updating a cluster,
setting a namespace's replication clusters.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from fastapi import APIRouter, Body, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from magnetar.admin.errors import (
    UNSET_POLICY,
    Responses,
    RestError,
    bad_request,
    conflict,
    error_responses,
    not_found,
    precondition_failed,
    unset_policy,
)
from magnetar.broker.context import BrokerContext
from magnetar.broker.operations import NamespaceNotEmptyError
from magnetar.broker.registry import TOPIC_DOMAINS
from magnetar.storage.metadata import AlreadyExistsError, NotFoundError

__all__ = [
    "BundlesData",
    "ClusterData",
    "NamespacePolicies",
    "RetentionPolicies",
    "TenantInfo",
    "router",
    "bundles_data",
    "check_namespace",
    "check_replication_clusters",
    "check_tenant",
]

router = APIRouter(prefix="/admin/v2")

# Pulsar's NamedEntity rule for tenant, namespace and cluster names.
_NAME = re.compile(r"^[-=:.A-Za-z0-9_]+$")
SubscriptionType = Literal["Exclusive", "Shared", "Failover", "Key_Shared"]
# Jackson reads these into Java ints; larger numbers are unreadable bodies (400).
Int32 = Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]

_NO_CONTENT: Responses = {204: {"description": "Done"}}
# Pulsar's `Response.ok().build()`: 200, no body (routes that answer it use response_class=Response, so that
# the document declares no content for it).
_OK_EMPTY: Responses = {200: {"description": "Done (no body)"}}


def _context(request: Request) -> BrokerContext:
    return request.app.state.context


# ------------------------------------------------------------------------------------- models


class ClusterData(BaseModel):
    """Pulsar's ClusterData (the fields magnetar keeps); unknown fields are ignored, as Jackson does."""

    model_config = ConfigDict(extra="ignore")

    serviceUrl: str | None = None
    serviceUrlTls: str | None = None
    brokerServiceUrl: str | None = None
    brokerServiceUrlTls: str | None = None
    proxyServiceUrl: str | None = None
    proxyProtocol: str | None = None
    authenticationPlugin: str | None = None
    authenticationParameters: str | None = None
    listenerName: str | None = None
    peerClusterNames: list[str] | None = None
    brokerClientTlsEnabled: bool | None = Field(default=None, strict=True)
    tlsAllowInsecureConnection: bool | None = Field(default=None, strict=True)
    brokerClientTrustCertsFilePath: str | None = None


class TenantInfo(BaseModel):
    """Pulsar's TenantInfo. Jackson reads a null list as no list: the Go admin client sends
    `"adminRoles": null` for a tenant without roles, and a null is kept as an empty list."""

    model_config = ConfigDict(extra="ignore")

    adminRoles: list[str] | None = []
    allowedClusters: list[str] | None = []

    def stored(self) -> dict[str, list[str]]:
        return {"adminRoles": self.adminRoles or [], "allowedClusters": self.allowedClusters or []}


class RetentionPolicies(BaseModel):
    model_config = ConfigDict(extra="ignore")

    retentionTimeInMinutes: Int32 = 0
    retentionSizeInMB: Int64 = 0


class AuthPolicies(BaseModel):
    namespace_auth: dict[str, list[str]] = {}
    destination_auth: dict[str, dict[str, list[str]]] = {}
    subscription_auth_roles: dict[str, list[str]] = {}


class BundlesData(BaseModel):
    boundaries: list[str]
    numBundles: int


async def bundles_data(context: BrokerContext, namespace: str) -> BundlesData:
    """The namespace's bundles: in a cluster as its local policies hold them now (a split included), as
    Pulsar's namespace policies answer them; a broker alone has one, the whole range."""
    if context.cluster is None:
        return BundlesData(boundaries=["0x00000000", "0xffffffff"], numBundles=1)
    return BundlesData.model_validate((await context.cluster.bundles.bundles(namespace)).bundles_data())


class NamespacePolicies(BaseModel):
    """Pulsar's Policies as magnetar answers them: the policies it has, with Pulsar's names and defaults."""

    auth_policies: AuthPolicies
    replication_clusters: list[str]
    bundles: BundlesData
    backlog_quota_map: dict[str, Any]
    clusterDispatchRate: dict[str, Any]
    topicDispatchRate: dict[str, Any]
    subscriptionDispatchRate: dict[str, Any]
    replicatorDispatchRate: dict[str, Any]
    clusterSubscribeRate: dict[str, Any]
    publishMaxMessageRate: dict[str, Any]
    latency_stats_sample_rate: dict[str, int]
    message_ttl_in_seconds: int | None = None
    retention_policies: RetentionPolicies | None = None
    deduplicationEnabled: bool | None = None
    deleted: bool
    encryption_required: bool
    subscription_auth_mode: str
    schema_compatibility_strategy: str
    schema_auto_update_compatibility_strategy: str
    schema_validation_enforced: bool
    is_allow_auto_update_schema: bool | None = None
    subscription_types_enabled: list[str]
    properties: dict[str, str]


class NamespaceCreation(BaseModel):
    """The Policies body of a namespace creation: the policies magnetar honours; others are ignored."""

    model_config = ConfigDict(extra="ignore")

    replication_clusters: list[str] | None = None
    message_ttl_in_seconds: Int32 | None = None
    retention_policies: RetentionPolicies | None = None
    deduplicationEnabled: bool | None = Field(default=None, strict=True)
    subscription_types_enabled: list[SubscriptionType] | None = None
    properties: dict[str, str] | None = None
    auth_policies: AuthPolicies | None = None


# ----------------------------------------------------------------------------------- checks


def _check_name(name: str, what: str) -> None:
    if not _NAME.match(name):
        raise precondition_failed(f"{what} name is not valid")


def check_tenant(context: BrokerContext, tenant: str) -> None:
    if tenant not in context.metadata.tenants():
        raise not_found("Tenant does not exist")


def check_namespace(context: BrokerContext, tenant: str, namespace: str) -> str:
    """The namespace `tenant/namespace`, which must exist: 412 for a name Pulsar would not parse, 404
    for a tenant or namespace that does not exist."""
    _check_name(tenant, "Namespace")
    _check_name(namespace, "Namespace")
    check_tenant(context, tenant)
    full = f"{tenant}/{namespace}"
    if not context.registry.namespace_exists(full):
        raise not_found("Namespace does not exist")
    return full


def _check_cluster_data(data: ClusterData) -> None:
    """ClusterData.checkPropertiesIfPresent: each URL given must use its scheme (400 otherwise)."""
    rules = (
        (data.serviceUrl, ("http",), "Illegal service url, example: http://pulsar.example.com:8080"),
        (data.serviceUrlTls, ("https",), "Illegal service tls url, example: https://pulsar.example.com:8443"),
        (data.brokerServiceUrl, ("pulsar",), "Illegal broker service url, example: pulsar://pulsar.example.com:6650"),
        (
            data.brokerServiceUrlTls,
            ("pulsar+ssl",),
            "Illegal broker service tls url, example: pulsar+ssl://pulsar.example.com:6651",
        ),
        (
            data.proxyServiceUrl,
            ("pulsar", "pulsar+ssl"),
            "Illegal proxy service url, example: pulsar+ssl://ats-proxy.example.com:4443 "
            "or pulsar://ats-proxy.example.com:4080",
        ),
    )
    for url, schemes, reason in rules:
        if url is not None:
            try:
                parts = urlsplit(url)
            except ValueError as error:
                raise RestError(400, reason) from error
            if parts.scheme not in schemes or not parts.netloc:
                raise RestError(400, reason)


def _check_allowed_clusters(context: BrokerContext, info: TenantInfo) -> None:
    allowed = info.allowedClusters or []
    clusters = [c for c in allowed if c.strip()]
    if not clusters or len(clusters) != len(allowed):
        raise precondition_failed("Clusters can not be empty")
    known = set(context.metadata.clusters())
    if any(c not in known and c != "global" for c in clusters):
        raise precondition_failed("Clusters do not exist")


def _not_allowed(cluster: str, tenant: str) -> RestError:
    """PulsarWebResource.validateClusterForTenant's refusal."""
    return RestError(403, f"Cluster [{cluster}] is not in the list of allowed clusters list for tenant [{tenant}]")


def check_replication_clusters(context: BrokerContext, tenant: str, clusters: list[str]) -> None:
    """The replication clusters of a namespace being created or of a topic: known clusters that the
    tenant allows."""
    if not clusters:
        raise precondition_failed("ClusterIds should not be null or empty")
    if "global" in clusters:
        raise precondition_failed("Cannot specify global in the list of replication clusters")
    known = set(context.metadata.clusters())
    allowed = set(context.metadata.tenant_info(tenant).get("allowedClusters", []))
    for cluster in clusters:
        if cluster not in known:
            raise RestError(403, f"Invalid cluster id: {cluster}")
        if cluster not in allowed:
            raise _not_allowed(cluster, tenant)


def _java_hash_set_order(names: list[str]) -> list[str]:
    """`names` in the order a `java.util.HashSet` built from them iterates (Guava's `Sets.newHashSet(list)`,
    i.e. `new HashSet<>(list)`): by bucket, then in insertion order within a bucket. The bucket is
    `String.hashCode()` spread as `HashMap.hash` does (`h ^ h >>> 16`), masked by the table's capacity:
    the power of two at least `max(size / 0.75 + 1, 16)`, which the set never outgrows. Pulsar checks a
    namespace's replication clusters in this order and prints the set in it, so the cluster a refusal
    names and a reason's `[a, b]` are Pulsar's."""
    capacity = 16
    while capacity < max(int(len(names) / 0.75) + 1, 16):
        capacity *= 2

    def bucket(name: str) -> int:
        code = 0
        units = name.encode("utf-16-be")  # Java hashes UTF-16 code units
        for i in range(0, len(units), 2):
            code = (31 * code + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
        return (code ^ (code >> 16)) & (capacity - 1)

    return sorted(dict.fromkeys(names), key=bucket)  # a stable sort keeps insertion order within a bucket


def _check_namespace_replication_clusters(
    context: BrokerContext, tenant: str, namespace: str, clusters: list[str] | None
) -> list[str]:
    """NamespacesBase.internalSetNamespaceReplicationClusters (Pulsar 4.0.7), in its order: 412 for no
    clusters or for `global`; 403 `Invalid cluster id` for the first unknown cluster; then, cluster by
    cluster, 409 when one of its peerClusterNames is in the list (validatePeerClusterConflict), 404 when
    the namespace does not exist, 403 when the tenant does not allow it. The clusters are taken in
    _java_hash_set_order, as Pulsar's HashSet holds them; the set's clusters are answered."""
    if not clusters:
        raise precondition_failed("ClusterIds should not be null or empty")
    ordered = _java_hash_set_order(clusters)
    if "global" in ordered:
        raise precondition_failed("Cannot specify global in the list of replication clusters")
    known = set(context.metadata.clusters())
    for cluster in ordered:
        if cluster not in known:
            raise RestError(403, f"Invalid cluster id: {cluster}")
    full = f"{tenant}/{namespace}"
    for cluster in ordered:
        record = context.metadata.get(f"/admin/clusters/{cluster}")
        peers = (record[0] if record else {}).get("peerClusterNames") or []
        in_list = [peer for peer in dict.fromkeys(peers) if peer in ordered]
        if in_list:
            raise conflict(
                f"{cluster}'s peer-clusters [{', '.join(in_list)}] can't be part of replication-clusters "
                f"[{', '.join(ordered)}]"
            )
        if not context.registry.namespace_exists(full):
            raise not_found("Namespace does not exist")
        if cluster not in context.metadata.tenant_info(tenant).get("allowedClusters", []):
            raise _not_allowed(cluster, tenant)
    return ordered


def _check_retention(retention: RetentionPolicies) -> None:
    """AdminResource.validateRetentionPolicies: its checkArgument failures answer 400."""
    minutes, size = retention.retentionTimeInMinutes, retention.retentionSizeInMB
    if size < -1:
        raise bad_request("Invalid retention policy: size limit must be >= -1")
    if minutes < -1:
        raise bad_request("Invalid retention policy: time limit must be >= -1")
    if (minutes == 0) != (size == 0):
        raise bad_request(
            "Invalid retention policy: Setting a single time or size limit to 0 is invalid when one of the "
            "limits has a non-zero value. Use the value of -1 instead of 0 to ignore a specific limit. "
            "To disable retention both limits must be set to 0."
        )


# --------------------------------------------------------------------------------- clusters


@router.get("/clusters", tags=["clusters"], response_model=list[str])
async def get_clusters(request: Request) -> list[str]:
    return _context(request).metadata.clusters()


@router.get(
    "/clusters/{cluster}",
    tags=["clusters"],
    response_model=ClusterData,
    response_model_exclude_none=True,
    responses=error_responses(404, 412),
)
async def get_cluster(request: Request, cluster: str) -> ClusterData:
    _check_name(cluster, "Cluster")
    context = _context(request)
    record = context.metadata.get(f"/admin/clusters/{cluster}")
    if record is None:
        raise not_found("Cluster does not exist")
    return ClusterData.model_validate(record[0])


@router.put(
    "/clusters/{cluster}",
    tags=["clusters"],
    status_code=200,
    response_class=Response,
    responses=_OK_EMPTY | error_responses(409, 412),
)
async def create_cluster(
    request: Request, cluster: str, data: Annotated[ClusterData | None, Body()] = None
) -> Response:
    data = data or ClusterData()
    _check_name(cluster, "Cluster")
    _check_cluster_data(data)
    try:
        await _context(request).operations.create_cluster(cluster, data.model_dump(exclude_none=True))
    except AlreadyExistsError as error:
        raise conflict("Cluster already exists") from error
    return Response(status_code=200)


@router.post(
    "/clusters/{cluster}",
    tags=["clusters"],
    status_code=200,
    response_class=Response,
    responses=_OK_EMPTY | error_responses(404, 412),
)
async def update_cluster(request: Request, cluster: str, data: ClusterData) -> Response:
    _check_name(cluster, "Cluster")
    context = _context(request)
    if context.metadata.get(f"/admin/clusters/{cluster}") is None:
        raise not_found("Cluster does not exist")
    _check_cluster_data(data)
    await context.operations.update_cluster(cluster, data.model_dump(exclude_none=True))
    return Response(status_code=200)


@router.delete("/clusters/{cluster}", tags=["clusters"], status_code=204, responses=_NO_CONTENT | error_responses(404))
async def delete_cluster(request: Request, cluster: str) -> Response:
    """ClustersBase.deleteCluster (Pulsar 4.0.7). Pulsar refuses with 412 `Cluster not empty` only while
    a namespace of the old `tenant/cluster/namespace` form or a namespace isolation policy is in the
    cluster; magnetar has neither, so it always deletes. As in Pulsar, tenants that allow the cluster and
    namespaces that replicate to it keep naming it (their replicators to it stop finding its URLs), the
    name is not checked (an invalid one is just not found), and the broker's own cluster may go too:
    the broker registers it again at its next start (Broker.create_defaults), as Pulsar standalone does."""
    try:
        await _context(request).operations.delete_cluster(cluster)
    except NotFoundError as error:
        raise not_found("Cluster does not exist") from error
    return Response(status_code=204)


# ---------------------------------------------------------------------------------- tenants


@router.get("/tenants", tags=["tenants"], response_model=list[str])
async def get_tenants(request: Request) -> list[str]:
    return _context(request).metadata.tenants()


@router.get("/tenants/{tenant}", tags=["tenants"], response_model=TenantInfo, responses=error_responses(404, 412))
async def get_tenant(request: Request, tenant: str) -> TenantInfo:
    _check_name(tenant, "Tenant")
    context = _context(request)
    check_tenant(context, tenant)
    return TenantInfo.model_validate(context.metadata.tenant_info(tenant))


@router.put("/tenants/{tenant}", tags=["tenants"], status_code=204, responses=_NO_CONTENT | error_responses(409, 412))
async def create_tenant(request: Request, tenant: str, info: Annotated[TenantInfo | None, Body()] = None) -> Response:
    context = _context(request)
    _check_allowed_clusters(context, info or TenantInfo())
    _check_name(tenant, "Tenant")
    try:
        await context.operations.create_tenant(tenant, (info or TenantInfo()).stored())
    except AlreadyExistsError as error:
        raise conflict("Tenant already exists") from error
    return Response(status_code=204)


@router.post(
    "/tenants/{tenant}", tags=["tenants"], status_code=204, responses=_NO_CONTENT | error_responses(404, 409, 412)
)
async def update_tenant(request: Request, tenant: str, info: TenantInfo) -> Response:
    context = _context(request)
    _check_allowed_clusters(context, info)
    _check_name(tenant, "Tenant")
    if tenant not in context.metadata.tenants():
        raise not_found(f"Tenant {tenant} not found")
    removed = set(context.metadata.tenant_info(tenant).get("allowedClusters", [])) - set(info.allowedClusters or [])
    for namespace in context.metadata.namespaces(tenant):
        used = removed & set(context.metadata.namespace_policies(namespace).get("replication_clusters", []))
        if used:
            raise conflict(f"Cluster {sorted(used)[0]} is used by namespace {namespace}")
    await context.operations.update_tenant(tenant, info.stored())
    return Response(status_code=204)


@router.delete(
    "/tenants/{tenant}", tags=["tenants"], status_code=204, responses=_NO_CONTENT | error_responses(404, 409, 412)
)
async def delete_tenant(request: Request, tenant: str, force: bool = False) -> Response:
    _check_name(tenant, "Tenant")
    context = _context(request)
    if tenant not in context.metadata.tenants():
        raise not_found("Tenant doesn't exist")
    try:
        await context.operations.delete_tenant(tenant, force)
    except NamespaceNotEmptyError as error:
        raise conflict(str(error)) from error
    return Response(status_code=204)


# ------------------------------------------------------------------------------- namespaces


@router.get("/namespaces/{tenant}", tags=["namespaces"], response_model=list[str], responses=error_responses(404, 412))
async def get_namespaces(request: Request, tenant: str) -> list[str]:
    _check_name(tenant, "Tenant")
    context = _context(request)
    check_tenant(context, tenant)
    return context.metadata.namespaces(tenant)


@router.put(
    "/namespaces/{tenant}/{namespace}",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(403, 404, 409, 412),
)
async def create_namespace(
    request: Request, tenant: str, namespace: str, policies: Annotated[NamespaceCreation | None, Body()] = None
) -> Response:
    _check_name(tenant, "Namespace")
    _check_name(namespace, "Namespace")
    context = _context(request)
    check_tenant(context, tenant)
    policies = policies or NamespaceCreation()
    stored: dict[str, Any] = {}
    clusters = policies.replication_clusters or [context.config["clusterName"]]
    check_replication_clusters(context, tenant, clusters)
    stored["replication_clusters"] = sorted(set(clusters))
    if policies.message_ttl_in_seconds is not None:
        if policies.message_ttl_in_seconds < 0:
            raise precondition_failed("Invalid value for message TTL, message TTL must >= 0")
        stored["message_ttl_in_seconds"] = policies.message_ttl_in_seconds
    if policies.retention_policies is not None:
        _check_retention(policies.retention_policies)
        stored["retention_policies"] = policies.retention_policies.model_dump()
    if policies.deduplicationEnabled is not None:
        stored["deduplicationEnabled"] = policies.deduplicationEnabled
    if policies.subscription_types_enabled:
        stored["subscription_types_enabled"] = sorted(set(policies.subscription_types_enabled))
    if policies.properties:
        stored["properties"] = policies.properties
    if policies.auth_policies is not None:
        stored["auth_policies"] = policies.auth_policies.model_dump()
    try:
        await context.operations.create_namespace(f"{tenant}/{namespace}", stored)
    except AlreadyExistsError as error:
        raise conflict("Namespace already exists") from error
    except NotFoundError as error:  # the tenant was deleted meanwhile
        raise not_found("Tenant does not exist") from error
    return Response(status_code=204)


@router.delete(
    "/namespaces/{tenant}/{namespace}",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 409, 412),
)
async def delete_namespace(request: Request, tenant: str, namespace: str, force: bool = False) -> Response:
    context = _context(request)
    full = check_namespace(context, tenant, namespace)
    try:
        await context.operations.delete_namespace(full, force)
    except NamespaceNotEmptyError as error:
        raise conflict(str(error)) from error
    return Response(status_code=204)


@router.get(
    "/namespaces/{tenant}/{namespace}",
    tags=["namespaces"],
    response_model=NamespacePolicies,
    response_model_exclude_none=True,
    responses=error_responses(404, 412),
)
async def get_policies(request: Request, tenant: str, namespace: str) -> NamespacePolicies:
    context = _context(request)
    name = check_namespace(context, tenant, namespace)
    stored = context.metadata.namespace_policies(name)
    return NamespacePolicies(
        auth_policies=AuthPolicies(**stored.get("auth_policies", {})),
        replication_clusters=stored.get("replication_clusters", []),
        bundles=await bundles_data(context, name),
        backlog_quota_map={},
        clusterDispatchRate={},
        topicDispatchRate={},
        subscriptionDispatchRate={},
        replicatorDispatchRate={},
        clusterSubscribeRate={},
        publishMaxMessageRate={},
        latency_stats_sample_rate={},
        message_ttl_in_seconds=stored.get("message_ttl_in_seconds"),
        retention_policies=stored.get("retention_policies"),
        deduplicationEnabled=stored.get("deduplicationEnabled"),
        deleted=False,
        encryption_required=False,
        subscription_auth_mode="None",
        schema_compatibility_strategy=stored.get("schema_compatibility_strategy", "UNDEFINED"),
        schema_auto_update_compatibility_strategy="Full",
        schema_validation_enforced=bool(stored.get("schema_validation_enforced", False)),
        is_allow_auto_update_schema=stored.get("is_allow_auto_update_schema"),
        subscription_types_enabled=stored.get("subscription_types_enabled", []),
        properties=stored.get("properties", {}),
    )


@router.get(
    "/namespaces/{tenant}/{namespace}/topics",
    tags=["namespaces"],
    response_model=list[str],
    responses=error_responses(404, 412),
)
async def get_topics(
    request: Request, tenant: str, namespace: str, mode: Literal["PERSISTENT", "NON_PERSISTENT", "ALL"] = "PERSISTENT"
) -> list[str]:
    """The namespace's topics of one domain or both, persistent ones unless asked (Pulsar's default)."""
    context = _context(request)
    domains = {"PERSISTENT": ("persistent",), "NON_PERSISTENT": ("non-persistent",), "ALL": TOPIC_DOMAINS}[mode]
    return context.registry.topics_of_namespace(check_namespace(context, tenant, namespace), domains)


# ------------------------------------------------------------------------- namespace policies


def _policy(request: Request, tenant: str, namespace: str, key: str) -> Any:
    context = _context(request)
    return context.metadata.namespace_policies(check_namespace(context, tenant, namespace)).get(key)


async def _set_policy(request: Request, tenant: str, namespace: str, key: str, value: Any) -> Response:
    context = _context(request)
    try:
        await context.operations.set_namespace_policies(check_namespace(context, tenant, namespace), {key: value})
    except NotFoundError as error:  # deleted meanwhile
        raise not_found("Namespace does not exist") from error
    return Response(status_code=204)


@router.get(
    "/namespaces/{tenant}/{namespace}/retention",
    tags=["namespaces"],
    response_model=RetentionPolicies,
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_retention(request: Request, tenant: str, namespace: str) -> Any:
    retention = _policy(request, tenant, namespace, "retention_policies")
    return unset_policy() if retention is None else RetentionPolicies.model_validate(retention)


async def _set_retention(
    request: Request, tenant: str, namespace: str, retention: RetentionPolicies | None
) -> Response:
    """NamespacesBase.internalSetRetention, which removing the policy also goes through (with null): the
    name (412), then the limits (400), then the namespace, whose tenant is not looked at (404 `Namespace
    policies does not exist`)."""
    _check_name(tenant, "Namespace")
    _check_name(namespace, "Namespace")
    if retention is not None:
        _check_retention(retention)
    context = _context(request)
    full = f"{tenant}/{namespace}"
    value = None if retention is None else retention.model_dump()
    try:
        if not context.registry.namespace_exists(full):
            raise NotFoundError(full)
        await context.operations.set_namespace_policies(full, {"retention_policies": value})
    except NotFoundError as error:  # also when deleted meanwhile
        raise not_found("Namespace policies does not exist") from error
    return Response(status_code=204)


@router.post(
    "/namespaces/{tenant}/{namespace}/retention",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_retention(
    request: Request, tenant: str, namespace: str, retention: Annotated[RetentionPolicies | None, Body()] = None
) -> Response:
    """No body (or `null`) removes the policy, as in Pulsar."""
    return await _set_retention(request, tenant, namespace, retention)


@router.delete(
    "/namespaces/{tenant}/{namespace}/retention",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_retention(request: Request, tenant: str, namespace: str) -> Response:
    return await _set_retention(request, tenant, namespace, None)


@router.get(
    "/namespaces/{tenant}/{namespace}/messageTTL",
    tags=["namespaces"],
    response_model=int,
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_message_ttl(request: Request, tenant: str, namespace: str) -> Any:
    ttl = _policy(request, tenant, namespace, "message_ttl_in_seconds")
    return unset_policy() if ttl is None else ttl


@router.post(
    "/namespaces/{tenant}/{namespace}/messageTTL",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_message_ttl(request: Request, tenant: str, namespace: str, ttl: Annotated[Int32, Body()]) -> Response:
    check_namespace(_context(request), tenant, namespace)
    if ttl < 0:
        raise precondition_failed("Invalid value for message TTL, message TTL must >= 0")
    return await _set_policy(request, tenant, namespace, "message_ttl_in_seconds", ttl)


@router.delete(
    "/namespaces/{tenant}/{namespace}/messageTTL",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_message_ttl(request: Request, tenant: str, namespace: str) -> Response:
    return await _set_policy(request, tenant, namespace, "message_ttl_in_seconds", None)


@router.get(
    "/namespaces/{tenant}/{namespace}/deduplication",
    tags=["namespaces"],
    response_model=bool,
    responses=error_responses(404, 412),
    openapi_extra=UNSET_POLICY,
)
async def get_deduplication(request: Request, tenant: str, namespace: str) -> Any:
    enabled = _policy(request, tenant, namespace, "deduplicationEnabled")
    return unset_policy() if enabled is None else enabled


@router.post(
    "/namespaces/{tenant}/{namespace}/deduplication",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_deduplication(
    request: Request, tenant: str, namespace: str, enabled: Annotated[bool, Body(strict=True)]
) -> Response:
    return await _set_policy(request, tenant, namespace, "deduplicationEnabled", enabled)


@router.delete(
    "/namespaces/{tenant}/{namespace}/deduplication",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_deduplication(request: Request, tenant: str, namespace: str) -> Response:
    return await _set_policy(request, tenant, namespace, "deduplicationEnabled", None)


@router.get(
    "/namespaces/{tenant}/{namespace}/replication",
    tags=["namespaces"],
    response_model=list[str],
    responses=error_responses(404, 412),
)
async def get_replication_clusters(request: Request, tenant: str, namespace: str) -> list[str]:
    return list(_policy(request, tenant, namespace, "replication_clusters") or [])


@router.post(
    "/namespaces/{tenant}/{namespace}/replication",
    tags=["namespaces"],
    status_code=200,
    response_class=Response,
    responses=_OK_EMPTY | error_responses(403, 404, 409, 412),
)
async def set_replication_clusters(
    request: Request, tenant: str, namespace: str, clusters: Annotated[list[str] | None, Body()] = None
) -> Response:
    """Pulsar answers 200 here (the other namespace policies answer 204); no body is no clusters (412)."""
    _check_name(tenant, "Namespace")
    _check_name(namespace, "Namespace")
    context = _context(request)
    chosen = _check_namespace_replication_clusters(context, tenant, namespace, clusters)
    try:
        await context.operations.set_namespace_policies(
            f"{tenant}/{namespace}", {"replication_clusters": sorted(chosen)}
        )
    except NotFoundError as error:  # deleted meanwhile
        raise not_found("Namespace does not exist") from error
    return Response(status_code=200)


@router.get(
    "/namespaces/{tenant}/{namespace}/subscriptionTypesEnabled",
    tags=["namespaces"],
    response_model=list[SubscriptionType],
    responses=error_responses(404, 412),
)
async def get_subscription_types_enabled(request: Request, tenant: str, namespace: str) -> list[str]:
    return list(_policy(request, tenant, namespace, "subscription_types_enabled") or [])


@router.post(
    "/namespaces/{tenant}/{namespace}/subscriptionTypesEnabled",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def set_subscription_types_enabled(
    request: Request, tenant: str, namespace: str, types: Annotated[list[SubscriptionType], Body()]
) -> Response:
    return await _set_policy(request, tenant, namespace, "subscription_types_enabled", sorted(set(types)) or None)


@router.delete(
    "/namespaces/{tenant}/{namespace}/subscriptionTypesEnabled",
    tags=["namespaces"],
    status_code=204,
    responses=_NO_CONTENT | error_responses(404, 412),
)
async def remove_subscription_types_enabled(request: Request, tenant: str, namespace: str) -> Response:
    return await _set_policy(request, tenant, namespace, "subscription_types_enabled", None)
