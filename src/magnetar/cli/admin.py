"""`magnetar admin …`: pulsar-admin's verbs for clusters, tenants, namespaces, topics and schemas, over `/admin/v2`.

Owns: the commands, their options (named as pulsar-admin names them), and turning options into
Pulsar's REST requests: relative times (`10m`, `3h`) and sizes (`10M`) as pulsar-admin parses them,
message ids `ledger:entry`. Must not touch: the broker or storage (the broker answers everything,
including what is valid); HTTP details (rest.py); rendering (output.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from magnetar.cli.auth_options import AuthParams, AuthPlugin, Credentials, TlsAllowInsecure, TlsTrustCertPath
from magnetar.cli.help import SuggestingGroup
from magnetar.cli.output import Format, Output
from magnetar.cli.rest import (
    AdminClient,
    AdminError,
    decode_messages,
    namespace_path,
    schema_path,
    segment,
    topic_path,
)

__all__ = ["app", "parse_message_id", "parse_relative_time_s", "parse_size_bytes"]

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"
# Pulsar's "latest" subscription start, MessageId.latest: both fields Long.MAX_VALUE.
LATEST = {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1, "partitionIndex": -1}
EARLIEST = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}

# RelativeTimeUtil's units; a bare number is seconds.
_TIME_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_SIZE_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_MESSAGE_ID = re.compile(r"^(-?\d+):(-?\d+)$")


def parse_relative_time_s(text: str) -> int:
    """`90`, `10m`, `3h`, `2d`, `5w`, `1y` in seconds, as Pulsar's RelativeTimeUtil reads them."""
    match = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip().lower())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a time: use seconds or a unit suffix (100m, 3h, 2d, 5w)")
    return int(match.group(1)) * _TIME_UNITS_S[match.group(2) or "s"]


def parse_size_bytes(text: str) -> int:
    """`4096`, `10M`, `16G`, `3T` in bytes (k, m, g, t suffixes in either case); `-1` stays -1 (infinite)."""
    if text.strip() == "-1":
        return -1
    match = re.fullmatch(r"(\d+)([kmgt]?)", text.strip().lower())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a size: use bytes or a unit suffix (10M, 16G)")
    return int(match.group(1)) * _SIZE_UNITS.get(match.group(2), 1)


def parse_message_id(text: str) -> dict[str, int]:
    """`ledger:entry` as Pulsar's MessageId JSON."""
    match = _MESSAGE_ID.fullmatch(text.strip())
    if not match:
        raise typer.BadParameter(f"{text!r} is not a message id: expected ledgerId:entryId")
    return {"ledgerId": int(match.group(1)), "entryId": int(match.group(2)), "partitionIndex": -1}


def _split(values: str) -> list[str]:
    return [value.strip() for value in values.split(",") if value.strip()]


@dataclass
class Session:
    client: AdminClient
    out: Output


app = typer.Typer(
    name="admin",
    help="Administer a broker over its /admin/v2 API, as pulsar-admin does.",
    no_args_is_help=True,
    cls=SuggestingGroup,
)
clusters = typer.Typer(help="Clusters known to the broker.", no_args_is_help=True, cls=SuggestingGroup)
tenants = typer.Typer(help="Tenants: create, update, delete, list.", no_args_is_help=True, cls=SuggestingGroup)
namespaces = typer.Typer(help="Namespaces and their policies.", no_args_is_help=True, cls=SuggestingGroup)
topics = typer.Typer(
    help="Persistent topics, their subscriptions and messages.", no_args_is_help=True, cls=SuggestingGroup
)
schemas = typer.Typer(
    help="A topic's schema: get, upload, delete, test compatibility.", no_args_is_help=True, cls=SuggestingGroup
)
app.add_typer(clusters, name="clusters")
app.add_typer(tenants, name="tenants")
app.add_typer(namespaces, name="namespaces")
app.add_typer(topics, name="topics")
app.add_typer(schemas, name="schemas")


@app.callback()
def admin(
    ctx: typer.Context,
    admin_url: Annotated[
        str, typer.Option("--admin-url", envvar="MAGNETAR_ADMIN_URL", help="the broker's web service URL")
    ] = DEFAULT_ADMIN_URL,
    output: Annotated[
        Format | None,
        typer.Option("--output", "-o", help="json or table (default: json unless stdout is a terminal)"),
    ] = None,
    auth_plugin: AuthPlugin = None,
    auth_params: AuthParams = None,
    tls_trust_cert_path: TlsTrustCertPath = None,
    tls_allow_insecure: TlsAllowInsecure = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="tables show every item of a long list (key hash ranges)")
    ] = False,
) -> None:
    credentials = Credentials(auth_plugin, auth_params, tls_trust_cert_path, tls_allow_insecure)
    ctx.obj = Session(AdminClient(admin_url, credentials), Output(output, verbose))


def _session(ctx: typer.Context) -> Session:
    session = ctx.find_object(Session)
    assert session is not None, "the admin callback makes the session before any command runs"
    return session


Topic = Annotated[str, typer.Argument(help="persistent://tenant/namespace/topic, tenant/namespace/topic or topic")]
Namespace = Annotated[str, typer.Argument(help="tenant/namespace")]
Subscription = Annotated[str, typer.Option("--subscription", "-s", help="subscription name")]
Force = Annotated[bool, typer.Option("--force", "-f", help="also when it is in use")]


# ----------------------------------------------------------------------------------------- clusters


@clusters.command("list")
def clusters_list(ctx: typer.Context) -> None:
    """List the clusters."""
    s = _session(ctx)
    s.out.show(s.client.get("/admin/v2/clusters"), "clusters")


@clusters.command("get")
def clusters_get(ctx: typer.Context, cluster: str) -> None:
    """Show one cluster's configuration."""
    s = _session(ctx)
    s.out.show(s.client.get(f"/admin/v2/clusters/{segment(cluster)}"), cluster)


BrokerUrl = Annotated[str | None, typer.Option("--broker-url", "-b", help="the cluster's pulsar://host:port")]
ServiceUrl = Annotated[str | None, typer.Option("--url", "-u", help="the cluster's http://host:port (admin API)")]


def _cluster_data(url: str | None, broker_url: str | None) -> dict[str, str]:
    return {key: value for key, value in (("serviceUrl", url), ("brokerServiceUrl", broker_url)) if value}


@clusters.command("create")
def clusters_create(ctx: typer.Context, cluster: str, url: ServiceUrl = None, broker_url: BrokerUrl = None) -> None:
    """Register a cluster: where its admin API and its brokers are (replicators connect to --broker-url)."""
    s = _session(ctx)
    s.client.put(f"/admin/v2/clusters/{segment(cluster)}", _cluster_data(url, broker_url))
    s.out.done(f"created cluster {cluster}")


@clusters.command("update")
def clusters_update(ctx: typer.Context, cluster: str, url: ServiceUrl = None, broker_url: BrokerUrl = None) -> None:
    """Change where a cluster's admin API or brokers are."""
    s = _session(ctx)
    s.client.post(f"/admin/v2/clusters/{segment(cluster)}", _cluster_data(url, broker_url))
    s.out.done(f"updated cluster {cluster}")


@clusters.command("delete")
def clusters_delete(ctx: typer.Context, cluster: str) -> None:
    """Delete a cluster's registration (namespaces and tenants that name it keep naming it, as in Pulsar)."""
    s = _session(ctx)
    s.client.delete(f"/admin/v2/clusters/{segment(cluster)}")
    s.out.done(f"deleted cluster {cluster}")


# ------------------------------------------------------------------------------------------ tenants

AdminRoles = Annotated[str | None, typer.Option("--admin-roles", "-r", help="comma-separated admin roles")]
AllowedClusters = Annotated[
    str | None, typer.Option("--allowed-clusters", "-c", help="comma-separated clusters the tenant may use")
]


@tenants.command("list")
def tenants_list(ctx: typer.Context) -> None:
    """List the tenants."""
    s = _session(ctx)
    s.out.show(s.client.get("/admin/v2/tenants"), "tenants")


@tenants.command("get")
def tenants_get(ctx: typer.Context, tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    s = _session(ctx)
    s.out.show(s.client.get(f"/admin/v2/tenants/{segment(tenant)}"), tenant)


@tenants.command("create")
def tenants_create(
    ctx: typer.Context, tenant: str, admin_roles: AdminRoles = None, allowed_clusters: AllowedClusters = None
) -> None:
    """Create a tenant; without --allowed-clusters it may use every cluster (as pulsar-admin does)."""
    s = _session(ctx)
    clusters_allowed = _split(allowed_clusters) if allowed_clusters else s.client.get("/admin/v2/clusters")
    body = {"adminRoles": _split(admin_roles or ""), "allowedClusters": clusters_allowed}
    s.client.put(f"/admin/v2/tenants/{segment(tenant)}", body)
    s.out.done(f"created tenant {tenant}")


@tenants.command("update")
def tenants_update(
    ctx: typer.Context, tenant: str, admin_roles: AdminRoles = None, allowed_clusters: AllowedClusters = None
) -> None:
    """Change a tenant's admin roles or allowed clusters; what is not given stays as it is."""
    s = _session(ctx)
    path = f"/admin/v2/tenants/{segment(tenant)}"
    current = s.client.get(path)
    body = {
        "adminRoles": _split(admin_roles) if admin_roles is not None else current.get("adminRoles", []),
        "allowedClusters": (
            _split(allowed_clusters) if allowed_clusters is not None else current.get("allowedClusters", [])
        ),
    }
    s.client.post(path, body)
    s.out.done(f"updated tenant {tenant}")


@tenants.command("delete")
def tenants_delete(ctx: typer.Context, tenant: str, force: Force = False) -> None:
    """Delete a tenant (with --force, also its namespaces and topics)."""
    s = _session(ctx)
    s.client.delete(f"/admin/v2/tenants/{segment(tenant)}", {"force": force})
    s.out.done(f"deleted tenant {tenant}")


# --------------------------------------------------------------------------------------- namespaces

Clusters = Annotated[str, typer.Option("--clusters", "-c", help="comma-separated cluster names")]


@namespaces.command("list")
def namespaces_list(ctx: typer.Context, tenant: str) -> None:
    """List a tenant's namespaces."""
    s = _session(ctx)
    s.out.show(s.client.get(f"/admin/v2/namespaces/{segment(tenant)}"), "namespaces")


@namespaces.command("create")
def namespaces_create(
    ctx: typer.Context,
    namespace: Namespace,
    clusters_option: Annotated[
        str | None, typer.Option("--clusters", "-c", help="comma-separated replication clusters")
    ] = None,
) -> None:
    """Create a namespace."""
    s = _session(ctx)
    body = {"replication_clusters": _split(clusters_option)} if clusters_option else None
    s.client.put(f"/admin/v2/namespaces/{namespace_path(namespace)}", body)
    s.out.done(f"created namespace {namespace}")


@namespaces.command("delete")
def namespaces_delete(ctx: typer.Context, namespace: Namespace, force: Force = False) -> None:
    """Delete a namespace (with --force, also its topics)."""
    s = _session(ctx)
    s.client.delete(f"/admin/v2/namespaces/{namespace_path(namespace)}", {"force": force})
    s.out.done(f"deleted namespace {namespace}")


@namespaces.command("policies")
def namespaces_policies(ctx: typer.Context, namespace: Namespace) -> None:
    """Show all of a namespace's policies."""
    s = _session(ctx)
    s.out.show(s.client.get(f"/admin/v2/namespaces/{namespace_path(namespace)}"), namespace)


@namespaces.command("split-bundle")
def namespaces_split_bundle(
    ctx: typer.Context,
    namespace: Namespace,
    bundle: Annotated[str, typer.Option("--bundle", "-b", help="the bundle's range, 0x00000000_0x40000000")],
    unload: Annotated[
        bool, typer.Option("--unload", "-u", help="unload the two halves, so that they can be placed elsewhere")
    ] = False,
    split_algorithm_name: Annotated[
        str | None, typer.Option("--split-algorithm-name", "-san", help="range_equally_divide (the one offered)")
    ] = None,
) -> None:
    """Split a bundle in two halves of its hash range, at the broker that owns it."""
    s = _session(ctx)
    params: dict[str, object] = {"unload": unload}
    if split_algorithm_name:
        params["splitAlgorithmName"] = split_algorithm_name
    s.client.put(f"/admin/v2/namespaces/{namespace_path(namespace)}/{segment(bundle)}/split", None, params)
    s.out.done(f"split bundle {namespace}/{bundle}")


def _policy(namespace: str, name: str) -> str:
    return f"/admin/v2/namespaces/{namespace_path(namespace)}/{name}"


@namespaces.command("set-retention")
def namespaces_set_retention(
    ctx: typer.Context,
    namespace: Namespace,
    size: Annotated[str, typer.Option("--size", "-s", help="size limit: 4096, 10M, 16G, 3T; -1 infinite")],
    time_limit: Annotated[str, typer.Option("--time", "-t", help="time limit: 120 (s), 100m, 3h, 2d, 5w; -1 infinite")],
) -> None:
    """Keep acknowledged messages up to a time and size (both required, as pulsar-admin asks)."""
    s = _session(ctx)
    size_bytes = parse_size_bytes(size)
    seconds = -1 if time_limit.strip() == "-1" else parse_relative_time_s(time_limit)
    body = {
        "retentionTimeInMinutes": seconds if seconds < 0 else seconds // 60,
        "retentionSizeInMB": size_bytes if size_bytes < 0 else size_bytes // (1 << 20),
    }
    s.client.post(_policy(namespace, "retention"), body)
    s.out.done(f"set retention of {namespace}")


@namespaces.command("get-retention")
def namespaces_get_retention(ctx: typer.Context, namespace: Namespace) -> None:
    """Show a namespace's retention."""
    s = _session(ctx)
    s.out.show(s.client.get(_policy(namespace, "retention")), "retention")


@namespaces.command("set-message-ttl")
def namespaces_set_message_ttl(
    ctx: typer.Context,
    namespace: Namespace,
    ttl: Annotated[str, typer.Option("--messageTTL", "-ttl", help="seconds, or 100m, 3h, 2d, 5w; 0 disables")],
) -> None:
    """Expire unacknowledged messages after a time."""
    s = _session(ctx)
    s.client.post(_policy(namespace, "messageTTL"), parse_relative_time_s(ttl))
    s.out.done(f"set message TTL of {namespace}")


@namespaces.command("get-message-ttl")
def namespaces_get_message_ttl(ctx: typer.Context, namespace: Namespace) -> None:
    """Show a namespace's message TTL in seconds."""
    s = _session(ctx)
    s.out.show(s.client.get(_policy(namespace, "messageTTL")), "messageTTL")


@namespaces.command("set-deduplication")
def namespaces_set_deduplication(
    ctx: typer.Context,
    namespace: Namespace,
    enable: Annotated[bool, typer.Option("--enable", "-e", help="turn deduplication on")] = False,
    disable: Annotated[bool, typer.Option("--disable", "-d", help="turn deduplication off")] = False,
) -> None:
    """Turn message deduplication on or off for a namespace's topics."""
    if enable == disable:
        raise typer.BadParameter("give exactly one of --enable or --disable")
    s = _session(ctx)
    s.client.post(_policy(namespace, "deduplication"), enable)
    s.out.done(f"{'enabled' if enable else 'disabled'} deduplication on {namespace}")


@namespaces.command("get-deduplication")
def namespaces_get_deduplication(ctx: typer.Context, namespace: Namespace) -> None:
    """Show whether deduplication is set on a namespace."""
    s = _session(ctx)
    s.out.show(s.client.get(_policy(namespace, "deduplication")), "deduplication")


@namespaces.command("set-clusters")
def namespaces_set_clusters(ctx: typer.Context, namespace: Namespace, clusters_option: Clusters) -> None:
    """Set the clusters a namespace replicates to."""
    s = _session(ctx)
    s.client.post(_policy(namespace, "replication"), _split(clusters_option))
    s.out.done(f"set replication clusters of {namespace}")


@namespaces.command("get-clusters")
def namespaces_get_clusters(ctx: typer.Context, namespace: Namespace) -> None:
    """Show the clusters a namespace replicates to."""
    s = _session(ctx)
    s.out.show(s.client.get(_policy(namespace, "replication")), "clusters")


@namespaces.command("set-subscription-types-enabled")
def namespaces_set_subscription_types_enabled(
    ctx: typer.Context,
    namespace: Namespace,
    types: Annotated[
        str, typer.Option("--types", "-t", help="comma-separated: Exclusive, Shared, Failover, Key_Shared")
    ],
) -> None:
    """Allow only these subscription types on a namespace's topics."""
    s = _session(ctx)
    s.client.post(_policy(namespace, "subscriptionTypesEnabled"), _split(types))
    s.out.done(f"set subscription types enabled on {namespace}")


@namespaces.command("get-subscription-types-enabled")
def namespaces_get_subscription_types_enabled(ctx: typer.Context, namespace: Namespace) -> None:
    """Show the subscription types allowed on a namespace."""
    s = _session(ctx)
    s.out.show(s.client.get(_policy(namespace, "subscriptionTypesEnabled")), "subscriptionTypesEnabled")


Role = Annotated[str, typer.Option("--role", help="the role (a token's subject, a user, a certificate's CN)")]
Actions = Annotated[str, typer.Option("--actions", help="comma-separated: produce, consume, functions, …")]


@namespaces.command("permissions")
def namespaces_permissions(ctx: typer.Context, namespace: Namespace) -> None:
    """Show the roles a namespace grants actions to."""
    s = _session(ctx)
    s.out.show(s.client.get(_policy(namespace, "permissions")), "permissions")


@namespaces.command("grant-permission")
def namespaces_grant_permission(ctx: typer.Context, namespace: Namespace, role: Role, actions: Actions) -> None:
    """Grant a role actions on every topic of a namespace (replacing what it had)."""
    s = _session(ctx)
    s.client.post(_policy(namespace, f"permissions/{segment(role)}"), _split(actions))
    s.out.done(f"granted {actions} on {namespace} to {role}")


@namespaces.command("revoke-permission")
def namespaces_revoke_permission(ctx: typer.Context, namespace: Namespace, role: Role) -> None:
    """Take a role's actions on a namespace away; its producers and consumers there are closed."""
    s = _session(ctx)
    s.client.delete(_policy(namespace, f"permissions/{segment(role)}"))
    s.out.done(f"revoked the permissions of {role} on {namespace}")


@namespaces.command("grant-subscription-permission")
def namespaces_grant_subscription_permission(
    ctx: typer.Context,
    namespace: Namespace,
    subscription: Annotated[str, typer.Option("--subscription", help="subscription name")],
    roles: Annotated[str, typer.Option("--roles", help="comma-separated roles")],
) -> None:
    """Let only these roles consume from a subscription (with their consume permission)."""
    s = _session(ctx)
    s.client.post(_policy(namespace, f"permissions/subscription/{segment(subscription)}"), _split(roles))
    s.out.done(f"subscription {subscription} of {namespace} is for {roles}")


@namespaces.command("revoke-subscription-permission")
def namespaces_revoke_subscription_permission(
    ctx: typer.Context,
    namespace: Namespace,
    subscription: Annotated[str, typer.Option("--subscription", help="subscription name")],
    role: Role,
) -> None:
    """Take a role off a subscription's list."""
    s = _session(ctx)
    s.client.delete(_policy(namespace, f"permissions/{segment(subscription)}/{segment(role)}"))
    s.out.done(f"revoked {role} on subscription {subscription} of {namespace}")


# ------------------------------------------------------------------------------------------- topics

Partitions = Annotated[int, typer.Option("--partitions", "-p", help="number of partitions")]


@topics.command("permissions")
def topics_permissions(ctx: typer.Context, topic: Topic) -> None:
    """Show the roles granted actions on a topic (its namespace's grants included)."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/permissions"), "permissions")


@topics.command("grant-permission")
def topics_grant_permission(ctx: typer.Context, topic: Topic, role: Role, actions: Actions) -> None:
    """Grant a role actions on one topic (a partitioned topic's partitions included)."""
    s = _session(ctx)
    s.client.post(f"{topic_path(topic)}/permissions/{segment(role)}", _split(actions))
    s.out.done(f"granted {actions} on {topic} to {role}")


@topics.command("revoke-permission")
def topics_revoke_permission(ctx: typer.Context, topic: Topic, role: Role) -> None:
    """Take away what a role was granted on one topic."""
    s = _session(ctx)
    s.client.delete(f"{topic_path(topic)}/permissions/{segment(role)}")
    s.out.done(f"revoked the permissions of {role} on {topic}")


@topics.command("list")
def topics_list(ctx: typer.Context, namespace: Namespace) -> None:
    """List a namespace's persistent topics (partitions of partitioned topics included)."""
    s = _session(ctx)
    s.out.show(s.client.get(f"/admin/v2/persistent/{namespace_path(namespace)}"), "topics")


@topics.command("list-partitioned-topics")
def topics_list_partitioned(ctx: typer.Context, namespace: Namespace) -> None:
    """List a namespace's partitioned topics."""
    s = _session(ctx)
    s.out.show(s.client.get(f"/admin/v2/persistent/{namespace_path(namespace)}/partitioned"), "partitioned topics")


@topics.command("create")
def topics_create(ctx: typer.Context, topic: Topic) -> None:
    """Create a non-partitioned topic."""
    s = _session(ctx)
    s.client.put(topic_path(topic))
    s.out.done(f"created {topic}")


@topics.command("delete")
def topics_delete(ctx: typer.Context, topic: Topic, force: Force = False) -> None:
    """Delete a topic (with --force, even with producers or consumers connected)."""
    s = _session(ctx)
    s.client.delete(topic_path(topic), {"force": force})
    s.out.done(f"deleted {topic}")


@topics.command("create-partitioned-topic")
def topics_create_partitioned(ctx: typer.Context, topic: Topic, partitions: Partitions) -> None:
    """Create a partitioned topic, served as TOPIC-partition-0 … TOPIC-partition-(N-1)."""
    s = _session(ctx)
    s.client.put(f"{topic_path(topic)}/partitions", partitions)
    s.out.done(f"created {topic} with {partitions} partitions")


@topics.command("update-partitioned-topic")
def topics_update_partitioned(ctx: typer.Context, topic: Topic, partitions: Partitions) -> None:
    """Raise the number of partitions of a partitioned topic."""
    s = _session(ctx)
    s.client.post(f"{topic_path(topic)}/partitions", partitions)
    s.out.done(f"updated {topic} to {partitions} partitions")


@topics.command("delete-partitioned-topic")
def topics_delete_partitioned(ctx: typer.Context, topic: Topic, force: Force = False) -> None:
    """Delete a partitioned topic and its partitions."""
    s = _session(ctx)
    s.client.delete(f"{topic_path(topic)}/partitions", {"force": force})
    s.out.done(f"deleted {topic}")


@topics.command("get-partitioned-topic-metadata")
def topics_partitioned_metadata(ctx: typer.Context, topic: Topic) -> None:
    """Show how many partitions a topic has (0: not partitioned)."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/partitions"), topic)


@topics.command("set-replication-clusters")
def topics_set_replication_clusters(ctx: typer.Context, topic: Topic, clusters_option: Clusters) -> None:
    """Set the clusters a topic replicates to (it overrides its namespace's)."""
    s = _session(ctx)
    s.client.post(f"{topic_path(topic)}/replication", _split(clusters_option))
    s.out.done(f"set replication clusters of {topic}")


@topics.command("get-replication-clusters")
def topics_get_replication_clusters(ctx: typer.Context, topic: Topic) -> None:
    """Show the clusters a topic replicates to, its own policy or else its namespace's."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/replication", params={"applied": "true"}), "clusters")


@topics.command("remove-replication-clusters")
def topics_remove_replication_clusters(ctx: typer.Context, topic: Topic) -> None:
    """Remove a topic's own replication clusters: its namespace's apply again."""
    s = _session(ctx)
    s.client.delete(f"{topic_path(topic)}/replication")
    s.out.done(f"removed replication clusters of {topic}")


@topics.command("set-deduplication")
def topics_set_deduplication(
    ctx: typer.Context,
    topic: Topic,
    enable: Annotated[bool, typer.Option("--enable", "-e", help="turn deduplication on")] = False,
    disable: Annotated[bool, typer.Option("--disable", "-d", help="turn deduplication off")] = False,
) -> None:
    """Turn message deduplication on or off for one topic (it overrides its namespace's)."""
    if enable == disable:
        raise typer.BadParameter("give exactly one of --enable or --disable")
    s = _session(ctx)
    s.client.post(f"{topic_path(topic)}/deduplicationEnabled", enable)
    s.out.done(f"{'enabled' if enable else 'disabled'} deduplication on {topic}")


@topics.command("get-deduplication")
def topics_get_deduplication(
    ctx: typer.Context,
    topic: Topic,
    applied: Annotated[
        bool,
        typer.Option("--applied", "-ap", help="the policy in force: the topic's, else its namespace's or broker's"),
    ] = False,
) -> None:
    """Show whether deduplication is set on a topic (nothing when the topic sets none), or with --applied in force."""
    s = _session(ctx)
    params = {"applied": "true"} if applied else None
    s.out.show(s.client.get(f"{topic_path(topic)}/deduplicationEnabled", params=params), "deduplication")


@topics.command("compact")
def topics_compact(ctx: typer.Context, topic: Topic) -> None:
    """Start compacting a topic: the latest value of each key (docs/compaction.md)."""
    s = _session(ctx)
    s.client.put(f"{topic_path(topic)}/compaction")
    s.out.done(f"compaction of {topic} started")


@topics.command("compaction-status")
def topics_compaction_status(ctx: typer.Context, topic: Topic) -> None:
    """Show the status of a topic's last compaction: NOT_RUN, RUNNING, SUCCESS or ERROR."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/compaction"), topic)


@topics.command("stats")
def topics_stats(ctx: typer.Context, topic: Topic) -> None:
    """Rates, backlog, publishers, subscriptions and consumers of a topic (Pulsar's TopicStats)."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/stats"), topic)


@topics.command("internal-stats")
def topics_internal_stats(ctx: typer.Context, topic: Topic) -> None:
    """Ledgers and cursors of a topic (Pulsar's ManagedLedgerInternalStats)."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/internalStats"), topic)


@topics.command("partitioned-stats")
def topics_partitioned_stats(
    ctx: typer.Context,
    topic: Topic,
    per_partition: Annotated[bool, typer.Option("--per-partition", help="also each partition's stats")] = False,
) -> None:
    """Stats of a partitioned topic, summed over its partitions."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/partitioned-stats", {"perPartition": per_partition}), topic)


@topics.command("subscriptions")
def topics_subscriptions(ctx: typer.Context, topic: Topic) -> None:
    """List a topic's subscriptions."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/subscriptions"), "subscriptions")


def _subscription_path(topic: str, subscription: str) -> str:
    return f"{topic_path(topic)}/subscription/{segment(subscription)}"


@topics.command("create-subscription")
def topics_create_subscription(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    message_id: Annotated[
        str, typer.Option("--messageId", "-m", help="where it starts: latest, earliest or ledgerId:entryId")
    ] = "latest",
    replicated: Annotated[
        bool, typer.Option("--replicated", "-r", help="replicate its position to the other clusters (PIP-33)")
    ] = False,
) -> None:
    """Create a durable subscription starting at a message id."""
    s = _session(ctx)
    start = {"latest": LATEST, "earliest": EARLIEST}.get(message_id.lower()) or parse_message_id(message_id)
    s.client.put(_subscription_path(topic, subscription), start, {"replicated": True} if replicated else None)
    s.out.done(f"created subscription {subscription} on {topic}")


@topics.command("set-replicated-subscription-status")
def topics_set_replicated_subscription_status(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    enable: Annotated[bool, typer.Option("--enable", "-e", help="replicate the subscription")] = False,
    disable: Annotated[bool, typer.Option("--disable", "-d", help="stop replicating it")] = False,
) -> None:
    """Make a subscription replicated (PIP-33), or no longer, in this cluster (every partition)."""
    if enable == disable:
        raise typer.BadParameter("give exactly one of --enable or --disable")
    s = _session(ctx)
    s.client.post(f"{_subscription_path(topic, subscription)}/replicatedSubscriptionStatus", enable)
    s.out.done(f"{'enabled' if enable else 'disabled'} replication of subscription {subscription} on {topic}")


@topics.command("get-replicated-subscription-status")
def topics_get_replicated_subscription_status(ctx: typer.Context, topic: Topic, subscription: Subscription) -> None:
    """Whether a subscription is replicated, per topic or partition."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{_subscription_path(topic, subscription)}/replicatedSubscriptionStatus"), subscription)


@topics.command("unsubscribe")
def topics_unsubscribe(ctx: typer.Context, topic: Topic, subscription: Subscription, force: Force = False) -> None:
    """Delete a subscription (with --force, disconnecting its consumers)."""
    s = _session(ctx)
    s.client.delete(_subscription_path(topic, subscription), {"force": force})
    s.out.done(f"deleted subscription {subscription} on {topic}")


@topics.command("reset-cursor")
def topics_reset_cursor(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    time_back: Annotated[
        str | None, typer.Option("--time", "-t", help="go back this long: 120 (s), 10m, 3h, 2d, 5w")
    ] = None,
    message_id: Annotated[str | None, typer.Option("--messageId", "-m", help="go to ledgerId:entryId")] = None,
    exclude: Annotated[
        bool, typer.Option("--exclude-message", "-e", help="start after the message id, not at it")
    ] = False,
) -> None:
    """Move a subscription back or forward, by time or to a message id."""
    if (time_back is None) == (message_id is None):
        raise typer.BadParameter("give exactly one of --time or --messageId")
    s = _session(ctx)
    path = f"{_subscription_path(topic, subscription)}/resetcursor"
    if time_back is not None:
        timestamp_ms = int(time.time() * 1000) - parse_relative_time_s(time_back) * 1000
        s.client.post(f"{path}/{timestamp_ms}")
    elif message_id is not None:
        s.client.post(path, parse_message_id(message_id) | {"isExcluded": exclude})
    s.out.done(f"reset subscription {subscription} on {topic}")


@topics.command("skip")
def topics_skip(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    count: Annotated[int, typer.Option("--count", "-n", help="how many messages to skip")],
) -> None:
    """Skip (acknowledge) the next messages of a subscription."""
    s = _session(ctx)
    s.client.post(f"{_subscription_path(topic, subscription)}/skip/{count}")
    s.out.done(f"skipped {count} messages of {subscription} on {topic}")


@topics.command("skip-all")
def topics_skip_all(ctx: typer.Context, topic: Topic, subscription: Subscription) -> None:
    """Skip a subscription's whole backlog."""
    s = _session(ctx)
    s.client.post(f"{_subscription_path(topic, subscription)}/skip_all")
    s.out.done(f"cleared the backlog of {subscription} on {topic}")


@topics.command("expire-messages")
def topics_expire_messages(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    expire_time: Annotated[str, typer.Option("--expireTime", "-t", help="older than: seconds, or 100m, 3h, 2d, 5w")],
) -> None:
    """Skip a subscription's messages published longer ago than a time."""
    s = _session(ctx)
    seconds = parse_relative_time_s(expire_time)
    s.client.post(f"{_subscription_path(topic, subscription)}/expireMessages/{seconds}")
    s.out.done(f"expired messages older than {seconds} s of {subscription} on {topic}")


def _messages_view(messages: Any) -> Any:
    """One row per message; the producer, sequence id and encoding stay in the JSON."""
    if not isinstance(messages, list):
        return messages
    return [
        {
            "message": m.get("messageId"),
            "published": m.get("publishTime"),
            "key": m.get("key"),
            "properties": ", ".join(f"{k}={v}" for k, v in (m.get("properties") or {}).items()) or None,
            "payload": m.get("payload") if m.get("encoding") == "utf-8" else f"(base64) {m.get('payload')}",
        }
        for m in messages
        if isinstance(m, dict)
    ]


@topics.command("peek-messages")
def topics_peek_messages(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    count: Annotated[int, typer.Option("--count", "-n", help="how many messages")] = 1,
) -> None:
    """Show the next messages of a subscription without consuming them."""
    s = _session(ctx)
    path = f"{_subscription_path(topic, subscription)}/position"
    messages: list[dict[str, Any]] = []
    position = 1
    while len(messages) < count:
        try:
            headers, body = s.client.get_raw(f"{path}/{position}")
        except AdminError as error:
            # Pulsar answers 404 "Message not found" past the backlog's end: the peek is over, as the
            # Java admin client decides; any other error (unknown topic or subscription) is the answer.
            if error.status == 404 and "message not found" in error.reason.lower():
                break
            raise
        messages.extend(decode_messages(headers, body)[: count - len(messages)])
        position += 1
    s.out.show(messages, "messages", _messages_view)


@topics.command("examine-message")
def topics_examine_message(
    ctx: typer.Context,
    topic: Topic,
    initial_position: Annotated[
        str, typer.Option("--initialPosition", "-i", help="count from the earliest or the latest message")
    ] = "latest",
    message_position: Annotated[
        int, typer.Option("--messagePosition", "-m", help="the n-th message from there (1 = that one)")
    ] = 1,
) -> None:
    """Show one message of a topic by its position from the earliest or latest."""
    s = _session(ctx)
    params = {"initialPosition": initial_position, "messagePosition": message_position}
    headers, body = s.client.get_raw(f"{topic_path(topic)}/examinemessage", params)
    s.out.show(decode_messages(headers, body), "messages", _messages_view)


@topics.command("last-message-id")
def topics_last_message_id(ctx: typer.Context, topic: Topic) -> None:
    """Show the id of a topic's last message."""
    s = _session(ctx)
    s.out.show(s.client.get(f"{topic_path(topic)}/lastMessageId"), "last message id")


@topics.command("unload")
def topics_unload(ctx: typer.Context, topic: Topic) -> None:
    """Close a topic's producers and consumers and reload it (they reconnect)."""
    s = _session(ctx)
    s.client.put(f"{topic_path(topic)}/unload")
    s.out.done(f"unloaded {topic}")


# What a person needs of one pending message, one row each under a short heading so that a row fits
# 80 columns; JSON keeps every field under Pulsar-style names.
_PENDING_COLUMNS = {
    "message": "messageId",
    "hash": "stickyKeyHash",
    "redelivered": "redeliveryCount",
    "unacked": "unackedMessages",
    "sent": "sentTime",
}


def _pending_rows(entries: Any) -> Any:
    if not isinstance(entries, list):
        return entries
    return [
        {heading: entry.get(field) for heading, field in _PENDING_COLUMNS.items()}
        for entry in entries
        if isinstance(entry, dict)
    ]


def _pending_acks_view(data: Any) -> Any:
    """Per consumer, named `name (id)`: its unacked count, then its pending messages as rows."""
    if not isinstance(data, dict) or not isinstance(data.get("consumers"), list):
        return data
    consumers = {
        f"{consumer.get('consumerName')} ({consumer.get('consumerId')})": {
            key: _pending_rows(value) if key == "pendingAcks" else value
            for key, value in consumer.items()
            if key not in ("consumerName", "consumerId")
        }
        for consumer in data["consumers"]
    }
    return {key: value for key, value in data.items() if key != "consumers"} | {"consumers": consumers}


def _explain_view(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    return {key: _pending_rows(value) if key == "pendingMessages" else value for key, value in data.items()}


@topics.command("pending-acks")
def topics_pending_acks(ctx: typer.Context, topic: Topic, subscription: Subscription) -> None:
    """Each consumer's pending messages: id, sticky hash, redelivery count, when sent (beyond Pulsar)."""
    s = _session(ctx)
    answer = s.client.get(f"{_subscription_path(topic, subscription)}/pendingAcks")
    s.out.show(answer, "pending acks", _pending_acks_view)


@topics.command("explain-key")
def topics_explain_key(
    ctx: typer.Context,
    topic: Topic,
    subscription: Subscription,
    key: Annotated[str | None, typer.Option("--key", "-k", help="a message key")] = None,
    hash_value: Annotated[int | None, typer.Option("--hash", help="a sticky key hash")] = None,
) -> None:
    """Why a key (or hash) is or is not flowing on a Key_Shared subscription (beyond Pulsar)."""
    if (key is None) == (hash_value is None):
        raise typer.BadParameter("give exactly one of --key or --hash")
    s = _session(ctx)
    base = _subscription_path(topic, subscription)
    path = f"{base}/keys/{segment(key)}" if key is not None else f"{base}/hashes/{hash_value}"
    s.out.show(s.client.get(path), f"key {key}" if key is not None else f"hash {hash_value}", _explain_view)


# ------------------------------------------------------------------------------------------ schemas

SchemaFile = Annotated[
    Path,
    typer.Option(
        "--filename",
        "-f",
        help='a schema definition file: {"type": "AVRO", "schema": "<definition>", "properties": {...}}',
        exists=True,
        dir_okay=False,
        readable=True,
    ),
]


def _schema_payload(filename: Path) -> Any:
    """The file's PostSchemaPayload, as pulsar-admin reads it; the broker judges the definition."""
    try:
        payload = json.loads(filename.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise AdminError(0, f"cannot read a schema definition from {filename}: {error}") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        raise AdminError(0, f'{filename}: expected {{"type": …, "schema": …, "properties": {{…}}}}')
    return payload


@schemas.command("get")
def schemas_get(
    ctx: typer.Context,
    topic: Topic,
    version: Annotated[int | None, typer.Option("--version", help="this version instead of the newest")] = None,
    all_version: Annotated[bool, typer.Option("--all-version", help="every version since the last deletion")] = False,
) -> None:
    """Show a topic's schema: the newest version, one version, or all of them."""
    if version is not None and all_version:
        raise typer.BadParameter("give at most one of --version or --all-version")
    s = _session(ctx)
    path = schema_path(topic)
    if all_version:
        s.out.show(s.client.get(f"{path}/schemas")["getSchemaResponses"], "schemas")
    else:
        s.out.show(s.client.get(f"{path}/schema" if version is None else f"{path}/schema/{version}"), "schema")


@schemas.command("upload")
def schemas_upload(ctx: typer.Context, topic: Topic, filename: SchemaFile) -> None:
    """Register a schema: its version if the topic has it already, else a new version once compatible."""
    s = _session(ctx)
    answer = s.client.post(f"{schema_path(topic)}/schema", _schema_payload(filename))
    s.out.show({"version": answer["version"]["version"]}, f"uploaded the schema of {topic}")


@schemas.command("delete")
def schemas_delete(ctx: typer.Context, topic: Topic, force: Force = False) -> None:
    """Delete a topic's schema (with --force every version goes, and the next schema is version 0 again)."""
    s = _session(ctx)
    s.client.delete(f"{schema_path(topic)}/schema", {"force": force})
    s.out.done(f"deleted the schema of {topic}")


@schemas.command("compatibility")
def schemas_compatibility(ctx: typer.Context, topic: Topic, filename: SchemaFile) -> None:
    """Whether a schema could be uploaded to a topic under its strategy (nothing is registered)."""
    s = _session(ctx)
    s.out.show(s.client.post(f"{schema_path(topic)}/compatibility", _schema_payload(filename)), "compatibility")
